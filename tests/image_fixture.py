"""The image cache shared by the tests' one real build and bench/bench_boot.py.

The tests' build is made by the release pipeline (``tests/release_fixture.py``);
this module holds the cache key and :class:`BuiltImage`, and
:func:`build_demo_image`, the plain build the boot benchmark uses.

Build directories are cached under ``.cache/images/<key>/`` in the checkout
(git-ignored). The key digests every input: the lockfile, the rendered
element tree, the image-build code and the diskimage-builder version, so a
change to any of them builds afresh and an unchanged checkout reuses the image.
``NODEFORGE_IMAGE_FIXTURE_REBUILD=1`` forces a rebuild.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from nodeforge.demo.upstream_mirror import MirrorServer
from nodeforge.imagebuild import build, render
from nodeforge.pins import lockfile
from tests.demo.fixture_artifacts import make_demo, write_sources

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "images"
MINOR = "1.36"
_CODE = ("build.py", "disk.py", "manifest.py", "render.py", "checksums.py", "package_base.py", "contents.py",
         "reproducible.py")


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    path: Path            # the build directory
    lockfile: Path        # the demo lockfile it was built from
    manifest: dict
    key: str

    def image(self, variant: str) -> Path:
        return self.path / self.manifest["images"][variant]


def input_key(lock_path: Path, scratch: Path) -> str:
    h = hashlib.sha256()
    h.update(lock_path.read_bytes())
    h.update(render.render(lockfile.load(lock_path), MINOR, scratch / "render-for-key").digest.encode())
    for name in _CODE:
        h.update((REPO / "nodeforge" / "imagebuild" / name).read_bytes())
    h.update(build.dib_version("disk-image-create").encode())
    return h.hexdigest()[:16]


def build_demo_image(workdir: Path) -> BuiltImage:
    up, lock = make_demo(workdir / "demo")
    key = input_key(lock, workdir)
    out = CACHE / f"k8s-{MINOR}-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lockfh:
        fcntl.flock(lockfh, fcntl.LOCK_EX)   # one build at a time, others wait and reuse it
        if os.environ.get("NODEFORGE_IMAGE_FIXTURE_REBUILD") == "1" and out.exists():
            shutil.rmtree(out)
        if not (out / "manifest.json").is_file():
            # Keep the newest other build (a concurrent session may still be booting it).
            others = sorted((p for p in CACHE.glob("k8s-*") if p != out), key=lambda p: p.stat().st_mtime)
            for old in others[:-1]:
                shutil.rmtree(old, ignore_errors=True)
            with MirrorServer(up.root) as server:
                write_sources(lock, server)
                build.build(build.BuildRequest(
                    minor=MINOR, lockfile_path=lock, out=out, cache_dir=REPO / ".cache" / "artifacts",
                    work_dir=Path(os.environ.get(build.ENV_WORK_DIR) or "/var/tmp")))
    return BuiltImage(out, lock, json.loads((out / "manifest.json").read_text()), key)


def newest_cached_build() -> Path | None:
    """The newest finished build with a bare-metal image in the cache (a build in progress, by this
    or another session or worker, finishes first: the cache lock), else None."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lockfh:
        fcntl.flock(lockfh, fcntl.LOCK_EX)
        found = [p for p in CACHE.glob("k8s-*") if (p / "manifest.json").is_file()
                 and "baremetal" in json.loads((p / "manifest.json").read_text()).get("images", {})]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None
