"""Resource exhaustion, end to end: a 1.3 KB inventory of nested YAML
aliases (46 s and 2.2 GB before) and a 200 MB file (72 s, 1.5 GB before) are
refused by ``baremetal validate`` with exit 2, the peak memory of the process
well under 100 MB. Memory is measured in a child process (its peak RSS,
``VmHWM``: ``getrusage``'s ``ru_maxrss`` would carry the parent's across fork + exec);
``timeout`` only bounds a regression, it is no timing assertion."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodeforge.ironic import inventory as inv

_RUN = r"""
import json, resource, sys
from nodeforge import cli
code = cli.main(sys.argv[1:])
sys.stderr.flush()
# VmHWM: the peak RSS of this process image; getrusage's ru_maxrss keeps the parent's across fork + exec
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"code": code, "maxrss_kb": hwm, "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

_BOMB = """\
version: 1
nodes:
  - name: n1
    bmc: {address: "fake://"}
    properties:
      a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
      a1: &a1 [*a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0]
      a2: &a2 [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]
      a3: &a3 [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]
      a4: &a4 [*a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3]
      a5: &a5 [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]
      a6: &a6 [*a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5]
      a7: &a7 [*a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6]
      a8: &a8 [*a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7]
"""


def _validate(tmp_path, path) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", _RUN, "baremetal", "validate", str(path)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_alias_bomb_inventory_is_refused_quickly_and_small(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(_BOMB)
    assert len(path.read_bytes()) < 1400
    result, err = _validate(tmp_path, path)
    assert result["code"] == 2, err
    assert f"{path}:" in err and "aliases are expanded" in err
    assert result["maxrss_kb"] < 100 * 1024, result


@pytest.mark.parametrize("name", ["big.yaml", "big.csv"])
def test_a_200_mb_inventory_is_refused_without_reading_it(tmp_path, name):
    path = tmp_path / name
    with open(path, "wb") as fh:
        fh.write(b"version: 1\nnodes:\n")
        fh.truncate(200 << 20)                  # sparse: 200 MB on no disk
    result, err = _validate(tmp_path, path)
    assert result["code"] == 2, err
    assert f"{path}: larger than {inv.LIMITS.max_bytes >> 20} MiB; not read" in err
    assert result["maxrss_kb"] < 100 * 1024, result


@pytest.mark.slow
def test_a_realistic_large_batch_is_admitted(tmp_path, monkeypatch):
    """10,000 nodes with two MACs each (the issue's realistic large batch) is within the
    inventory limits and reads valid (figures: bench/bench_inventory_load.py, docs/inventory.md)."""
    monkeypatch.setenv("NODEFORGE_SECRET_BIG_PW", "big-batch-pw-1234")
    lines = ["version: 1", "defaults:", "  bmc: {username: admin, password: 'env:NODEFORGE_SECRET_BIG_PW'}", "nodes:"]
    for i in range(10_000):
        m = f"{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
        lines += [f"  - name: node-{i:05d}", f"    bmc: {{address: 'ipmi://10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}'}}",
                  f"    macs: ['02:4e:{m}:00', '02:4e:{m}:01']", "    properties: {cpu_arch: x86_64, memory_mb: 262144}"]
    path = tmp_path / "batch.yaml"
    path.write_text("\n".join(lines) + "\n")
    batch = inv.load(path)
    assert len(batch.nodes) == 10_000 and sum(len(n.macs) for n in batch.nodes) == 20_000
    assert batch.nodes[9999].location.line == len(lines) - 3
