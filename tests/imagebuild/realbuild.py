"""Helpers for tests that work on the test run's one real build
(``tests/release_fixture.py``): hard-linked copies of its build directory
(verify and publish only ever read the images; their own outputs, verify.json
and console logs, go into the copy) and a verify call with the tests' timeout.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodeforge.imageverify import boottest

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
