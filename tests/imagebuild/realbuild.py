"""The session's real image build, booted once: shared by the boot tests and
the publish tests, so CI builds one image and verifies it once per run.

The build comes from ``tests/image_fixture.py`` (cached under .cache/images).
Tests work on hard-linked copies of its build directory: verify and publish
only ever read the images, and their own outputs (verify.json, console logs)
go into the copy.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from nodeforge.imagebuild import boottest

REPO = Path(__file__).resolve().parents[2]
ARTIFACT_CACHE = REPO / ".cache" / "artifacts"
BOOT_TIMEOUT = float(os.environ.get("NODEFORGE_VERIFY_TEST_TIMEOUT", "900"))


def linked_copy(src: Path, dest: Path, *, skip: tuple[str, ...] = (), with_verify: bool = False) -> Path:
    """``src`` with its files hard-linked into ``dest`` (a real copy across file
    systems); verify outputs are left out unless ``with_verify``."""
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if not f.is_file() or f.name in skip or (f.name.startswith("verify") and not with_verify):
            continue
        if f.name.startswith("verify"):
            shutil.copy2(f, dest / f.name)   # small, and rewritten by a later verify: never shared
            continue
        try:
            os.link(f, dest / f.name)
        except OSError:
            shutil.copy2(f, dest / f.name)
    return dest


def verify(build_dir: Path, **kw) -> list[boottest.VariantResult]:
    return boottest.verify(boottest.VerifyRequest(build_dir=build_dir, cache_dir=ARTIFACT_CACHE,
                                                  timeout=kw.pop("timeout", BOOT_TIMEOUT), **kw))


def verify_session_build(built_path: Path, dest: Path) -> tuple[Path, dict[str, boottest.VariantResult]]:
    d = linked_copy(built_path, dest / built_path.name)
    t = time.monotonic()
    results = verify(d)
    print(f"\nboot verification: {', '.join(f'{r.variant} {r.seconds}' for r in results)} "
          f"(wall {time.monotonic() - t:.0f} s)")
    return d, {r.variant: r for r in results}
