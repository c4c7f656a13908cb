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
