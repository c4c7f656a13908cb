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
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nodeforge.devcloud.upstream_mirror import MirrorServer
from nodeforge.imagebuild import build, contents
from nodeforge.oslock import lock as ol
from nodeforge.publish import diff as imgdiff
from tests.demo.fixture_artifacts import make_demo, write_sources
from tests.imagebuild.realbuild import ARTIFACT_CACHE
from tests.imagebuild.test_image_build import _root_fs
from tests.prereq import require, require_tools

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
MINOR = "1.36"


def _build(lock: Path, out: Path, **kw) -> tuple[Path, float]:
    """A real build into ``out``. The package base cache is the shared default one (as between CI
    runs); diskimage-builder's own cache (apt archives) is this test's, so a build another process
    runs at the same time never holds its apt lock."""
    kw.setdefault("package_base_cache", build.default_dib_cache() / "package-base")
    kw.setdefault("dib_cache", out.parent / "dib-cache")
    t = time.monotonic()
    build.build(build.BuildRequest(minor=MINOR, lockfile_path=lock, out=out, cache_dir=ARTIFACT_CACHE,
                                   work_dir=Path(os.environ.get(build.ENV_WORK_DIR) or "/var/tmp"),
                                   stream=lambda line: print(line, flush=True), **kw))
    return out, time.monotonic() - t


def _gpt(raw: Path) -> list[tuple[str, int, int]]:
    """[(region, start byte, end byte)] of a raw disk: the GPT areas and the three partitions."""
    out = subprocess.run(["sgdisk", "-p", str(raw)], capture_output=True, text=True, check=True).stdout
    names = {1: "bios-boot", 2: "esp", 3: "root"}
    regions = [("mbr+gpt", 0, 1 << 20)]
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s", line)
        if m and int(m[1]) in names:
            regions.append((names[int(m[1])], int(m[2]) * 512, (int(m[3]) + 1) * 512))
    size = raw.stat().st_size
    regions.append(("backup-gpt", size - (1 << 20), size))
    return regions


def _why(raw_a: Path, raw_b: Path, tmp: Path) -> dict:
    """Which files and metadata the differing blocks of two raw disks' root filesystems hold."""
    regions = _gpt(raw_a)
    cmp = imgdiff.compare_bytes(raw_a, raw_b, regions=regions, keep=100000)
    root = next(r for r in regions if r[0] == "root")
    fs_blocks = sorted({(blk * cmp["block"] - root[1]) // 4096 for blk in cmp["first_blocks"]
                        if root[1] <= blk * cmp["block"] < root[2]})
    owners: dict[str, int] = {}
    if fs_blocks:
        part = _root_fs(raw_a, tmp)
        icheck = subprocess.run(["debugfs", "-R", "icheck " + " ".join(map(str, fs_blocks[:2000])), str(part)],
                                capture_output=True, text=True).stdout
        inodes: dict[str, int] = {}
        for line in icheck.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                key = parts[1] if parts[1].isdigit() else "metadata (no inode: superblock, group descriptors, "\
                                                          "bitmaps, inode tables, journal)"
                inodes[key] = inodes.get(key, 0) + 1
        numbered = [i for i in inodes if i.isdigit()]
        names = {}
        if numbered:
            ncheck = subprocess.run(["debugfs", "-R", "ncheck " + " ".join(numbered), str(part)],
                                    capture_output=True, text=True).stdout
            for line in ncheck.splitlines()[1:]:
                parts = line.split(None, 1)
                if len(parts) == 2:
                    names[parts[0]] = parts[1].strip()
        for key, count in inodes.items():
            owners[names.get(key, f"inode {key}") if key.isdigit() else key] = count
        part.unlink()
    return {"regions": cmp["regions"], "root_fs_blocks": len(fs_blocks), "owners": owners,
            "differing_bytes": cmp["differing_bytes"], "differing_blocks": cmp["differing_blocks"]}


def _report(name: str, a: Path, b: Path, tmp: Path) -> dict:
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
        if image.endswith(".raw") and not cmp["identical"]:
            why = _why(a / image, b / mb["images"][variant], tmp)
            out["why"] = why
            print(f"== {name}: {image}: differing 4 KiB blocks per region: {why['regions']}")
            for owner, count in sorted(why["owners"].items(), key=lambda kv: -kv[1])[:40]:
                print(f"     {count:6d} block(s): {owner}")
    for d in (a, b):
        line = next((x for x in (d / "build.log").read_text().splitlines() if "per-file manifest:" in x), "")
        print(f"== {d.name}: {line.partition('per-file manifest: ')[2]}")
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
        result = _report("a vs b (shared package base)", a, b, tmp_path)
        if os.environ.get("NODEFORGE_REPRO_FRESH_BASE") == "1":
            c, tc = _build(lock, tmp_path / "c", package_base_cache=tmp_path / "fresh-package-base")
            print(f"\n== build c (fresh package base) {tc:.0f}s")
            _report("a vs c (fresh package base)", a, c, tmp_path)
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
