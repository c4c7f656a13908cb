"""The project speaks about itself, not about its own history: no tracker issue numbers and no
work-session numbers in the code, tests, benchmarks, docs, README or CI scripts (a reader
outside the team cannot place them). Upstream projects' issues (``magnum-cluster-api #381``)
are references, and stay: they do not say "issue"."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("nodeforge", "tests", "bench", "docs", "ci", "elements", "manifests", ".ci")
FILES = ("README.md", "Makefile", "pyproject.toml")
HISTORY = re.compile(r"\b(?:issue\s*#?\s*\d+|session\s+\d+)\b", re.IGNORECASE)


def _texts():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".md", ".yaml", ".yml", ".sh", ".j2", ".txt", "") \
                    and "__pycache__" not in path.parts:
                yield path
    for name in FILES:
        yield ROOT / name


def history_mentions(text: str) -> list[str]:
    return [m.group(0) for m in HISTORY.finditer(text)]


def test_no_issue_or_session_numbers_in_the_project():
    found = []
    for path in sorted(set(_texts()) - {Path(__file__).resolve()}):
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {hit}" for hit in history_mentions(line)]
    assert found == [], "\n".join(found)


def test_the_scan_finds_what_it_forbids():
    assert history_mentions("Bare-metal enrollment into Ironic (issue 7).") == ["issue 7"]
    assert history_mentions("measured at the end of Session 5") == ["Session 5"]
    assert history_mentions("see issue #12") == ["issue #12"]
    assert history_mentions("an issue with 3 nodes") == []
