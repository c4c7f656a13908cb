"""Sizes a reader can hold in their head: no module in nodeforge/ over 800 lines, no function over
60 (physical lines, decorators and docstring included). At most three functions may stay over 60,
each listed in LONG with its length as a ceiling (it may only shrink) and named in
docs/architecture.md ("Sizes") with the reason; a new one over 60 fails."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nodeforge"
MAX_MODULE = 800
MAX_FUNCTION = 60

# The exceptions to MAX_FUNCTION, each with its length (a ceiling) and its reason in docs/architecture.md
# ("Sizes"): none since 2026-12-04 (the last ones were cut into named steps).
LONG: dict[tuple[str, str], int] = {}
MAX_LONG = 3
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                yield path.relative_to(PACKAGE).as_posix(), node.name, node.end_lineno - start + 1


def test_no_module_over_800_lines():
    over = [(p.relative_to(PACKAGE).as_posix(), n) for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE]
    assert not over, f"modules over {MAX_MODULE} lines (split them by what they do): {over}"


def test_no_new_function_over_60_lines_and_the_listed_ones_only_shrink():
    found = {(p, name): n for p, name, n in _functions() if n > MAX_FUNCTION}
    new = {k: n for k, n in found.items() if k not in LONG}
    grown = {k: (LONG[k], n) for k, n in found.items() if k in LONG and n > LONG[k]}
    assert not new, f"functions over {MAX_FUNCTION} lines (name its steps as functions): {new}"
    assert not grown, f"listed long functions grew (ceiling, now): {grown}"
    fixed = sorted(k for k in LONG if k not in found)
    assert not fixed, f"no longer over {MAX_FUNCTION} lines: drop them from LONG: {fixed}"


def test_the_long_functions_are_few_and_each_is_explained():
    assert len(LONG) <= MAX_LONG, f"at most {MAX_LONG} functions may stay over {MAX_FUNCTION} lines: {sorted(LONG)}"
    sizes = ARCHITECTURE.read_text().split("## Sizes", 1)[1].split("\n## ", 1)[0]
    unexplained = [k for k in LONG if k[0] not in sizes or k[1] not in sizes]
    assert not unexplained, f"name each in docs/architecture.md, \"Sizes\", with its reason: {unexplained}"
