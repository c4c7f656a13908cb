"""Where the report tests keep what a reviewer looks at: a screenshot (PNG) and the PDF of each
page, in ``$NODEFORGE_TEST_ARTIFACTS/report/`` when that is set (a CI job's artefact directory),
else ``build/test-artifacts/report/`` in the checkout (git-ignored). The directory is emptied of
the previous run's files when the browser tests start, and named at the end of the run."""

from __future__ import annotations

import os
import time
from pathlib import Path

ARTIFACTS_ENV = "NODEFORGE_TEST_ARTIFACTS"
REPO = Path(__file__).resolve().parents[2]
_STARTED = time.time()


def artifacts_dir() -> Path:
    base = os.environ.get(ARTIFACTS_ENV)
    return (Path(base) if base else REPO / "build" / "test-artifacts") / "report"


def pytest_terminal_summary(terminalreporter):
    """Names the directory when this run wrote into it (also under xdist: the files are looked at,
    not the workers' state)."""
    where = artifacts_dir()
    try:
        fresh = [p for p in where.iterdir() if p.stat().st_mtime >= _STARTED]
    except OSError:
        return
    if fresh:
        terminalreporter.write_line(f"report pages' screenshots and PDFs ({len(fresh)} files): {where}")
