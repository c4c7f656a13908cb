"""Prerequisites of a test: never a silent skip in CI.

Outside CI a missing prerequisite skips the test and the skip says exactly
what was not checked. With ``CI=true`` (what ``.ci/run`` runs under) the same
miss fails the test with its reason: a green CI run means every check ran.
"""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (outside CI) or fail (in CI) unless ``condition`` holds."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"prerequisite missing in CI: {reason}", pytrace=False)
    pytest.skip(f"not checked: {reason}")


def require_tools(*tools: str, why: str = "") -> dict[str, str]:
    found = {t: shutil.which(t, path=SBIN_PATH) for t in tools}
    missing = [t for t, p in found.items() if not p]
    require(not missing, f"host tool(s) {', '.join(missing)} not installed (make setup)"
            + (f"; {why}" if why else ""))
    return {t: p for t, p in found.items() if p}


def require_module(name: str, why: str = ""):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        require(False, f"Python module {name} not importable ({exc}; make setup)" + (f"; {why}" if why else ""))
