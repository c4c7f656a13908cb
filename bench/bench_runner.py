"""Benchmark: the cost of nodeforge.base.runner.run over a bare subprocess.run.

Every host tool nodeforge starts goes through :func:`nodeforge.base.runner.run`
(argv check, scrubbed debug line, stdin from /dev/null, the error built on
failure). The boot test alone starts debugfs hundreds of times per image, so
the wrapper must cost nothing next to the process start. ROUNDS rounds of N
starts of ``true`` each: nodeforge (``runner.run``) and the peer
(``subprocess.run(argv, capture_output=True, text=True)``, what the call
sites did before), back to back, order alternating. Prints each side's
median per start and the median of the per-round ratio nodeforge/peer.
Goal: within 1.1x; exits 1 when missed.

    .venv/bin/python bench/bench_runner.py [--starts N] [--rounds ROUNDS]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

from nodeforge.base import runner


def main(n: int = 200, rounds: int = 5) -> int:
    true = shutil.which("true")

    def ours():
        for _ in range(n):
            runner.run([true])

    def peer():
        for _ in range(n):
            subprocess.run([true], capture_output=True, text=True, check=True)

    times = {"nodeforge": [], "peer": []}
    ratios = []
    for r in range(rounds):
        order = [("nodeforge", ours), ("peer", peer)]
        if r % 2:
            order.reverse()
        got = {}
        for name, fn in order:
            t = time.perf_counter()
            fn()
            got[name] = (time.perf_counter() - t) / n
            times[name].append(got[name])
        ratios.append(got["nodeforge"] / got["peer"])
    for name, ts in times.items():
        print(f"{name:10s} median {statistics.median(ts) * 1e3:.3f} ms per start (min {min(ts) * 1e3:.3f})")
    ratio = statistics.median(ratios)
    print(f"ratio nodeforge/peer (median of {rounds} rounds of {n}): {ratio:.3f}x  (goal <= 1.1x)")
    return 0 if ratio <= 1.1 else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=200, help="starts of `true` per side and round (default 200)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, order alternating (default 5)")
    args = ap.parse_args()
    sys.exit(main(args.starts, args.rounds))
