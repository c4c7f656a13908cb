"""Reproducible content, with real builds (slow): two builds from the same lockfile and OS package lock.

Against the Debian mirror this machine's apt uses and the real
diskimage-builder: the demo lockfile (pinned Kubernetes fixture artifacts
served by a local mirror) with the committed OS package lock beside it is
built twice into two new build directories (the second build never sees the
first one's output; the package base cache is shared, as it is between CI
runs). Asserted: the per-file manifests and the SBOMs are identical, and
``image diff`` (:func:`nodeforge.publish.diff.diff_builds`) finds only the
build identity. Reported, not asserted: how many bytes and 4 KiB blocks of
each disk image differ, and where (``docs/image-build.md`` has the figures).

``NODEFORGE_REPRO_FRESH_BASE=1`` also makes a third build from a package base
built afresh in its own cache directory and compares it the same way
(reported only: a different package base run is also a different dpkg run).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from nodeforge.devcloud.upstream_mirror import MirrorServer
from nodeforge.imagebuild import build, contents
from nodeforge.oslock import lock as ol
from nodeforge.publish import diff as imgdiff
from tests.demo.fixture_artifacts import make_demo, write_sources
from tests.imagebuild.realbuild import ARTIFACT_CACHE
from tests.prereq import require, require_tools

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
MINOR = "1.36"


def _build(lock: Path, out: Path, **kw) -> tuple[Path, float]:
    t = time.monotonic()
    build.build(build.BuildRequest(minor=MINOR, lockfile_path=lock, out=out, cache_dir=ARTIFACT_CACHE,
                                   work_dir=Path(os.environ.get(build.ENV_WORK_DIR) or "/var/tmp"),
                                   stream=lambda line: print(line, flush=True), **kw))
    return out, time.monotonic() - t


def _report(name: str, a: Path, b: Path) -> dict:
    files = contents.diff(contents.load(a / contents.FILENAME), contents.load(b / contents.FILENAME))
    print(f"\n== {name}: per-file manifests: {len(files.added)} added, {len(files.removed)} removed, "
          f"{len(files.changed)} changed")
    for path in files.added[:50]:
        print(f"  + {path}")
    for path in files.removed[:50]:
        print(f"  - {path}")
    for item in files.changed[:50]:
        print(f"  ~ {item['path']}: {', '.join(item['fields'])}")
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    out = {"files": files.to_dict(limit=50), "images": {}}
    for variant, image in ma["images"].items():
        cmp = imgdiff.compare_bytes(a / image, b / mb["images"][variant])
        out["images"][variant] = cmp
        print(f"== {name}: {image}: {cmp['differing_bytes']} bytes differ in {cmp['differing_blocks']} of "
              f"{cmp['blocks']} 4 KiB blocks (sizes {cmp['size_a']} / {cmp['size_b']}); "
              f"first differing blocks: {cmp['first_blocks'][:12]}")
    print(f"== {name}: file manifest {ma['files']['entries']} entries, took "
          f"{ma.get('_seconds', {}).get('file_manifest', '?')}s; see build.log")
    return out


def test_two_builds_of_the_same_inputs_have_the_same_content(tmp_path):
    require(os.geteuid() == 0, "image builds run as root")
    require(shutil.which("disk-image-create") is not None or (Path(os.sys.prefix) / "bin/disk-image-create").exists(),
            "diskimage-builder not installed (make setup)")
    require_tools("debootstrap", "mkfs.ext4", "sgdisk", "qemu-img", "grub-mkimage", "mcopy")
    up, lock = make_demo(tmp_path / "demo")
    shutil.copyfile(REPO / "manifests" / ol.FILENAME, lock.parent / ol.FILENAME)
    with MirrorServer(up.root) as server:
        write_sources(lock, server)
        a, ta = _build(lock, tmp_path / "a")
        b, tb = _build(lock, tmp_path / "b")
        print(f"\n== build a {ta:.0f}s, build b {tb:.0f}s")
        result = _report("a vs b (shared package base)", a, b)
        if os.environ.get("NODEFORGE_REPRO_FRESH_BASE") == "1":
            c, tc = _build(lock, tmp_path / "c", package_base_cache=tmp_path / "fresh-package-base")
            print(f"\n== build c (fresh package base) {tc:.0f}s")
            _report("a vs c (fresh package base)", a, c)
            shutil.rmtree(c, ignore_errors=True)

    for d in (a, b):
        log = (d / "build.log").read_text()
        assert "per-file manifest:" in log and "SOURCE_DATE_EPOCH" in log
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert ma["reproducible"]["source_date_epoch"] == mb["reproducible"]["source_date_epoch"]
    assert ma["reproducible"]["inputs_sha256"] == mb["reproducible"]["inputs_sha256"]
    assert result["files"]["identical"], f"the per-file manifests differ: {json.dumps(result['files'])[:3000]}"
    assert ma["files"]["sha256"] == mb["files"]["sha256"]
    assert (a / "sbom.cdx.json").read_bytes() == (b / "sbom.cdx.json").read_bytes()
    # image diff: the same content; only the build identity differs.
    d = imgdiff.diff_builds(a, b)
    assert d.packages.identical and d.files is not None and d.files.identical
    assert not d.content_differs, d.to_dict()
    assert d.identity_changed["build_id"][0] != d.identity_changed["build_id"][1]
