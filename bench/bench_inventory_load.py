"""Reading large and hostile inventories: seconds and peak memory, each in a
fresh process (peak RSS from /proc/self/status VmHWM).

* 10,000 nodes with ports, nodeforge YAML (2 MACs a node) and python-ironicclient bulk
  (a port group of 2 ports a node): read and validated by ``inventory.load``, against the
  peer measured in the same run, the same file through ruamel's round-trip parser (what
  every YAML file went through before the libyaml tree builder); the ratio is printed.
* Hostile files, each refused (exit 2 in ``baremetal validate``): just over the values
  limit, a value as long as the size limit, 200 MB (sparse), the 1.3 KB alias bomb.
* JSON and CSV inventories by size: the largest one the limits allow (the most nodes that fit
  both the size and the values limit), a tenth and a hundredth of it (growth: seconds and MB per
  1,000 nodes should stay flat), and 10x and 100x of it (refused, at a cost that does not grow).

    .venv/bin/python bench/bench_inventory_load.py [--nodes 10000] [--no-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, time
os.environ.setdefault("NODEFORGE_SECRET_BENCH_PW", "bench-pw-123456")
from nodeforge.ironic import inventory as inv
from nodeforge.schema import fastyaml
if sys.argv[2] == "roundtrip":            # the peer: no tree from libyaml's events
    fastyaml.build = lambda yaml, text: None
t = time.perf_counter()
try:
    i = inv.load(sys.argv[1])
    outcome = f"valid: {len(i.nodes)} nodes, {sum(len(n.ports) or len(n.macs) for n in i.nodes)} ports"
except Exception as exc:
    outcome = f"refused ({type(exc).__name__}): {str(exc).splitlines()[0][:110]}"
seconds = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_mb": hwm / 1024, "outcome": outcome}))
"""


def nodeforge_yaml(n: int) -> str:
    lines = ["version: 1", "defaults:", "  resource_class: baremetal-compute", "  bmc:", "    username: admin",
             "    password: env:NODEFORGE_SECRET_BENCH_PW", "nodes:"]
    for i in range(n):
        a, b = divmod(i, 250)
        m = f"{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
        lines += [f"  - name: node-{i:05d}", "    bmc:", f"      address: ipmi://10.{a // 250}.{a % 250}.{b + 1}:623",
                  f"    macs: ['02:4e:{m}:00', '02:4e:{m}:01']",
                  "    properties: {cpu_arch: x86_64, memory_mb: 262144, local_gb: 900, cpus: 64}",
                  "    traits: [CUSTOM_RACK_A1]"]
    return "\n".join(lines) + "\n"


def bulk_yaml(n: int) -> str:
    lines = ["nodes:"]
    for i in range(n):
        a, b = divmod(i, 250)
        m = f"{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
        lines += [f"  - name: node-{i:05d}", "    driver: ipmi", "    driver_info:",
                  f"      ipmi_address: 10.{a // 250}.{a % 250}.{b + 1}", "      ipmi_username: admin",
                  "      ipmi_password: env:NODEFORGE_SECRET_BENCH_PW", "    resource_class: baremetal-compute",
                  "    properties: {cpu_arch: x86_64, memory_mb: 262144, local_gb: 900, cpus: 64}",
                  "    portgroups:", f"      - name: node-{i:05d}-bond0", "        mode: 802.3ad", "        ports:",
                  f"          - {{address: '02:4e:{m}:00', pxe_enabled: true}}",
                  f"          - {{address: '02:4e:{m}:01', pxe_enabled: false}}"]
    return "\n".join(lines) + "\n"


def json_nodes(n: int) -> str:
    """``n`` nodes in nodeforge's JSON (one node a line, as a generator would write them)."""
    nodes = []
    for i in range(n):
        a, b = divmod(i, 250)
        m = f"{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
        nodes.append(json.dumps({"name": f"node-{i:06d}",
                                 "bmc": {"address": f"ipmi://10.{a // 250 % 250}.{a % 250}.{b + 1}:{623 + a // 62500}"},
                                 "macs": [f"02:4e:{m}:00", f"02:4e:{m}:01"],
                                 "properties": {"cpu_arch": "x86_64", "memory_mb": 262144, "cpus": 64}}))
    return ('{"version": 1, "defaults": {"resource_class": "baremetal-compute", "bmc": {"username": "admin", '
            '"password": "env:NODEFORGE_SECRET_BENCH_PW"}},\n "nodes": [\n' + ",\n".join(nodes) + "]}\n")


CSV_HEADER = "name,bmc_address,bmc_username,bmc_password,macs,resource_class,properties.cpu_arch,properties.memory_mb\n"


def csv_nodes(n: int) -> str:
    rows = []
    for i in range(n):
        a, b = divmod(i, 250)
        m = f"{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
        rows.append(f"node-{i:06d},ipmi://10.{a // 250 % 250}.{a % 250}.{b + 1}:{623 + a // 62500},admin,"
                    f"env:NODEFORGE_SECRET_BENCH_PW,02:4e:{m}:00;02:4e:{m}:01,baremetal-compute,x86_64,262144")
    return CSV_HEADER + "\n".join(rows) + "\n"


def largest(make, limits) -> int:
    """The most nodes ``make`` can write within the size and values limits (a values estimate for
    JSON: objects, arrays, keys and scalars, as the loader counts them)."""
    lo, hi = 1, 1 << 20
    while lo < hi:
        mid = (lo + hi + 1) // 2
        text = make(mid)
        values = text.count(",") + text.count(":") + text.count("[") + text.count("{") + 1
        fits = len(text.encode()) <= limits.max_bytes and (make is csv_nodes or values <= limits.max_values)
        lo, hi = (mid, hi) if fits else (lo, mid - 1)
    return lo


def scale(d: Path, limits) -> None:
    for fmt, make in (("json", json_nodes), ("csv", csv_nodes)):
        top = largest(make, limits)
        rows = []
        for label, n in (("1/100", top // 100), ("1/10", top // 10), ("1x", top), ("10x", top * 10),
                         ("100x", top * 100)):
            path = d / f"inv.{fmt}"
            if n > top:                      # beyond the limits: the text repeated, not generated (memory)
                text = make(top)
                with open(path, "w") as fh:
                    for _ in range(n // top):
                        fh.write(text)
            else:
                path.write_text(make(n))
            size = path.stat().st_size
            r = measure(path)
            path.unlink()
            rows.append((label, n, size, r))
            per = f"{r['seconds'] / n * 1000:.3f} s and {r['peak_mb'] / n * 1000:.1f} MB per 1,000 nodes; " \
                if n <= top else ""
            print(f"{fmt}, {label} of the largest allowed ({n} nodes, {size / 1e6:.1f} MB): {r['seconds']:.2f} s, "
                  f"{r['peak_mb']:.0f} MB peak; {per}{r['outcome']}")
        tenth, full = rows[1], rows[2]
        print(f"{fmt}: 10x the nodes (a tenth of the largest, then the largest) took "
              f"{full[3]['seconds'] / tenth[3]['seconds']:.1f}x the time and {full[3]['peak_mb'] / tenth[3]['peak_mb']:.1f}x "
              f"the peak memory (linear: about 10x or less)")


def measure(path: Path, mode: str = "default") -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True,
                         timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--no-scale", action="store_true", help="skip the JSON/CSV size series")
    args = ap.parse_args()
    from nodeforge.ironic import inventory as inv

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; limits: "
          f"{inv.LIMITS.max_bytes >> 20} MiB, {inv.LIMITS.max_values} values")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, text in (("nodeforge", nodeforge_yaml(args.nodes)), ("ironicclient bulk", bulk_yaml(args.nodes))):
            path = d / f"{name.split()[0]}.yaml"
            path.write_text(text)
            ours, peer = measure(path), measure(path, "roundtrip")
            print(f"{name}, {args.nodes} nodes, {len(text) / 1e6:.1f} MB: {ours['seconds']:.1f} s, "
                  f"{ours['peak_mb']:.0f} MB peak; round-trip parser (peer): {peer['seconds']:.1f} s, "
                  f"{peer['peak_mb']:.0f} MB; {peer['seconds'] / ours['seconds']:.1f}x faster; {ours['outcome']}")
        n = inv.LIMITS.max_values
        hostile = {"values limit + 10": "version: 1\nnodes: [" + ",".join(["1"] * (n + 10)) + "]\n",
                   "one value of the size limit": "version: 1\nnodes:\n  - name: "
                                                  + "x" * (inv.LIMITS.max_bytes - 40) + "\n",
                   "alias bomb (1.3 KB)": "version: 1\nnodes:\n  - name: n1\n    bmc: {address: 'fake://'}\n"
                                          "    properties:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
                                          + "".join(f"      a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
                                                    for i in range(1, 9))}
        for name, text in hostile.items():
            path = d / "hostile.yaml"
            path.write_text(text)
            r = measure(path)
            print(f"hostile, {name} ({len(text) / 1e6:.2f} MB): {r['seconds']:.2f} s, {r['peak_mb']:.0f} MB peak: "
                  f"{r['outcome']}")
        big = d / "big.yaml"
        with open(big, "wb") as fh:
            fh.write(b"version: 1\nnodes:\n")
            fh.truncate(200 << 20)
        r = measure(big)
        print(f"hostile, 200 MB (sparse): {r['seconds']:.3f} s, {r['peak_mb']:.0f} MB peak: {r['outcome']}")
        if not args.no_scale:
            scale(d, inv.LIMITS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
