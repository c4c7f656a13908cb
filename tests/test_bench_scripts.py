"""The benchmark scripts still run against the code they measure.

A refactor that moves a module or tightens a format breaks a benchmark
without failing any test (bench_publish's hand-written manifest was refused by
the typed manifest reader, and nobody knew until the benchmark was run).
Every ``bench/bench_*.py`` must answer ``--help`` (exit 0: its imports and
argument parser work), and the ones with a ``--dry-run`` must do it: that
path builds the inputs the timed part uses (bench_publish writes and loads its
build directory through the product's reader) and prints the plan, without a
cloud, a build or a boot.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHES = sorted(p.name for p in (REPO / "bench").glob("bench_*.py"))


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_there_are_benchmarks():
    assert len(BENCHES) >= 10, BENCHES


@pytest.mark.parametrize("bench", BENCHES)
def test_every_benchmark_answers_help(bench):
    proc = _run(f"bench/{bench}", "--help")
    assert proc.returncode == 0, f"{bench} --help exited {proc.returncode}: {proc.stderr[-2000:]}"
    assert "usage:" in proc.stdout


@pytest.mark.parametrize("argv, expect", [
    (("bench/bench_publish.py", "--size-mib", "2", "--rounds", "1"),
     "checksums ok, verify {'baremetal': 'passed'}; no upload"),
    (("bench/bench_build.py",), "builds, in order: r1-both (vm+baremetal"),
    (("bench/bench_security_latency.py",), "would start a private cloud"),
])
def test_a_dry_run_builds_its_inputs_and_prints_the_plan(argv, expect):
    proc = _run(*argv, "--dry-run")
    assert proc.returncode == 0, f"{' '.join(argv)} --dry-run exited {proc.returncode}: {proc.stderr[-3000:]}"
    assert expect in proc.stdout, proc.stdout[-2000:]


def _nodeforge_names(tree) -> list[tuple[int, str, str | None, str | None]]:
    """(line, module, name imported from it, attribute read off it) for every nodeforge import,
    also those inside functions (a benchmark imports lazily), and every ``alias.attr`` read off
    an imported nodeforge module."""
    import ast

    out, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nodeforge"):
            for a in node.names:
                out.append((node.lineno, node.module, a.name, None))
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
    # A name also bound by a plain import somewhere (``import openstack``, the SDK, beside
    # ``from nodeforge.devcloud import openstack``) is ambiguous per function: its reads are not judged.
    plain = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.value.id not in plain:
            out.append((node.lineno, modules[node.value.id], None, node.attr))
    return out


@pytest.mark.parametrize("bench", BENCHES)
def test_what_a_benchmark_imports_lazily_from_nodeforge_exists(bench):
    """``--help`` runs none of a benchmark's function bodies, where it imports what it measures:
    a module the code moved (``nodeforge.magnum.client`` into ``nodeforge.clients``) or a function
    renamed would break it only in a real run."""
    import ast
    import importlib

    missing = []
    for line, module, name, attr in _nodeforge_names(ast.parse((REPO / "bench" / bench).read_text())):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue                 # ``module`` is "package.name" for a name that is not a module
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{bench}:{line}: from {module} import {name}")
        if attr is not None and not hasattr(mod, attr):
            missing.append(f"{bench}:{line}: {module}.{attr}")
    assert not missing, missing
