"""Benchmark: single-pass SHA256SUMS + SHA512SUMS against the best same-machine alternative.

Writes a file of SIZE (default 2 GiB) of pseudo-random data in a temporary
directory, reads it once to warm the page cache (it stays cached for every
side), then runs ROUNDS rounds of:

* nodeforge: ``checksums.digest_file`` in this process (one read pass; each
  block feeds sha256 and sha512 on two threads, hashlib -- OpenSSL --
  releasing the GIL);
* peer: ``openssl dgst -sha256 FILE`` and ``openssl dgst -sha512 FILE``
  started together as two processes (the same OpenSSL code, one core each,
  two reads of the cached file), timed until both have exited;
* secondary: coreutils ``sha256sum FILE`` then ``sha512sum FILE`` (serial),
  and the two started together (parallel). coreutils links no crypto
  library here, so these are slower than OpenSSL; they are printed for
  reference, not as the yardstick.

nodeforge and the openssl peer run back to back in every round, their order
alternating (nodeforge first in rounds 1, 3, ..., the peer in rounds 2, 4, ...); the
two coreutils lines follow, their order alternating too. Every side's digests
are checked against nodeforge's. Prints each side's min and median, the
median of the per-round ratio nodeforge/peer, and the limit both are bound
by: the slower of the two digests on one core (each openssl process of the
parallel pair is timed on its own; the slower one is that limit). Goal:
nodeforge within 1.1x of the openssl-parallel peer (median of the per-round
ratios); the script exits 1 when the goal is missed.

The peer's times include two process starts (a few milliseconds); nodeforge's
do not, because nodeforge computes the digests inside the build process.

Run: .venv/bin/python bench/bench_checksums.py [--size-mib 2048] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from nodeforge.imagebuild.checksums import digest_file

GOAL = 1.1


def run_together(argvs: list[list[str]]) -> tuple[float, list[float], list[str]]:
    """Start every command at once; (wall seconds until all exited, each one's own wall seconds, each stdout)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for a in argvs]
    ends: list[float] = [0.0] * len(procs)

    def reap(i: int) -> None:
        procs[i].wait()
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=reap, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    outs = []
    for a, p in zip(argvs, procs):
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(a)} failed ({p.returncode}): {err.decode(errors='replace')[-500:]}")
        outs.append(out.decode())
    return wall, [e - t0 for e in ends], outs


def run_serial(argvs: list[list[str]]) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    outs = [subprocess.run(a, capture_output=True, text=True, check=True).stdout for a in argvs]
    return time.perf_counter() - t0, outs


def openssl_hex(out: str) -> str:
    # "SHA2-256(FILE)= <hex>" (OpenSSL 3) or "SHA256(FILE)= <hex>" (1.1)
    return out.rsplit("= ", 1)[1].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tool in ("openssl", "sha256sum", "sha512sum"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found")
    version = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="nodeforge-bench-sums."))
    try:
        f = tmp / "image.raw"
        rng = random.Random(1)
        block = rng.randbytes(64 << 20)
        with open(f, "wb") as fh:
            for i in range(args.size_mib // 64):
                fh.write(block[i % 7:] + block[: i % 7])
        with open(f, "rb") as fh:           # warm the page cache for every side
            while fh.read(64 << 20):
                pass
        expected = digest_file(f)           # also warms nodeforge's code path (untimed)
        path = str(f)

        def check(name: str, got: dict[str, str]) -> None:
            if got != expected:
                raise SystemExit(f"{name}: digests differ from nodeforge's ({got} != {expected})")

        def nodeforge() -> float:
            t = time.perf_counter()
            got = digest_file(f)
            seconds = time.perf_counter() - t
            check("nodeforge", got)
            return seconds

        per_digest: list[dict[str, float]] = []

        def openssl_parallel() -> float:
            wall, each, outs = run_together([["openssl", "dgst", "-sha256", path],
                                             ["openssl", "dgst", "-sha512", path]])
            check("openssl dgst", {"sha256": openssl_hex(outs[0]), "sha512": openssl_hex(outs[1])})
            per_digest.append({"sha256": each[0], "sha512": each[1]})
            return wall

        def coreutils_serial() -> float:
            wall, outs = run_serial([["sha256sum", path], ["sha512sum", path]])
            check("sha256sum then sha512sum", {"sha256": outs[0].split()[0], "sha512": outs[1].split()[0]})
            return wall

        def coreutils_parallel() -> float:
            wall, _, outs = run_together([["sha256sum", path], ["sha512sum", path]])
            check("sha256sum & sha512sum", {"sha256": outs[0].split()[0], "sha512": outs[1].split()[0]})
            return wall

        sides = {
            "nodeforge single pass (sha256+sha512, in process)": nodeforge,
            "PEER openssl dgst -sha256 & -sha512 (parallel)": openssl_parallel,
            "coreutils sha256sum then sha512sum (serial)": coreutils_serial,
            "coreutils sha256sum & sha512sum (parallel)": coreutils_parallel,
        }
        names = list(sides)
        times: dict[str, list[float]] = {n: [] for n in names}
        ratios: list[float] = []
        print(f"file: {args.size_mib} MiB in the page cache, {os.cpu_count()} CPUs, {args.rounds} rounds, {version}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        for r in range(args.rounds):
            pair = names[:2] if r % 2 == 0 else names[1::-1]
            rest = names[2:] if r % 2 == 0 else names[:1:-1]
            for n in pair + rest:
                times[n].append(sides[n]())
            ratios.append(times[names[0]][-1] / times[names[1]][-1])
            print(f"  round {r + 1} ({'nodeforge first' if r % 2 == 0 else 'peer first'}): "
                  + ", ".join(f"{n.split(' (')[0].removeprefix('PEER ')} {times[n][-1]:.2f}s" for n in names),
                  flush=True)
        print(f"{'':52} {'min':>7} {'median':>7}")
        for n in names:
            print(f"{n:52} {min(times[n]):6.2f}s {statistics.median(times[n]):6.2f}s")
        slow256 = statistics.median(d["sha256"] for d in per_digest)
        slow512 = statistics.median(d["sha512"] for d in per_digest)
        slower, slower_s = ("sha256", slow256) if slow256 >= slow512 else ("sha512", slow512)
        print(f"the limit for both sides is the slower digest on one core: openssl {slower} {slower_s:.2f}s median "
              f"(sha256 {slow256:.2f}s, sha512 {slow512:.2f}s: each openssl process of the peer timed on its own)")
        ours, peer = statistics.median(times[names[0]]), statistics.median(times[names[1]])
        ratio = statistics.median(ratios)
        print(f"nodeforge / openssl-parallel peer: {ratio:.2f}x median of per-round ratios "
              f"({ours / peer:.2f}x of medians); nodeforge / the slower digest on one core: {ours / slower_s:.2f}x")
        print(f"speed-up over coreutils: {statistics.median(times[names[2]]) / ours:.2f}x serial, "
              f"{statistics.median(times[names[3]]) / ours:.2f}x parallel (medians)")
        met = ratio <= GOAL
        print(f"load average now {os.getloadavg()[0]:.1f} (other work on the machine slows every side)")
        print(f"goal: nodeforge within {GOAL}x of the openssl-parallel peer: {'met' if met else 'NOT met'} "
              f"({ratio:.2f}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
