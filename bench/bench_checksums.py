"""Benchmark: single-pass SHA256SUMS + SHA512SUMS vs `sha256sum` then `sha512sum`.

Writes a file of SIZE (default 2 GiB) of pseudo-random data in a temporary
directory, reads it once to warm the page cache, then times ROUNDS runs of:

* nodeforge: ``checksums.digest_file`` (one read pass; each block feeds
  sha256 and sha512 on two threads, hashlib releasing the GIL);
* baseline: ``sha256sum FILE`` then ``sha512sum FILE`` (coreutils, two passes).

Checks both produce the same digests, prints the best times and the speed-up
(goal: >= 1.6x). The temporary directory is removed at the end.

Run: .venv/bin/python bench/bench_checksums.py [--size-mib 2048] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from nodeforge.imagebuild.checksums import digest_file


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nodeforge-bench-sums."))
    try:
        f = tmp / "image.raw"
        rng = random.Random(1)
        block = rng.randbytes(64 << 20)
        with open(f, "wb") as fh:
            for i in range(args.size_mib // 64):
                fh.write(block[i % 7:] + block[: i % 7])
        with open(f, "rb") as fh:           # warm the page cache for both sides
            while fh.read(64 << 20):
                pass
        ours, theirs = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            mine = digest_file(f)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            a = subprocess.run(["sha256sum", str(f)], capture_output=True, text=True, check=True).stdout.split()[0]
            b = subprocess.run(["sha512sum", str(f)], capture_output=True, text=True, check=True).stdout.split()[0]
            theirs.append(time.perf_counter() - t)
            assert mine == {"sha256": a, "sha512": b}, "digests differ"
        best_ours, best_theirs = min(ours), min(theirs)
        print(f"file: {args.size_mib} MiB, {os.cpu_count()} CPUs, best of {args.rounds}")
        print(f"nodeforge single pass (sha256+sha512): {best_ours:6.2f} s")
        print(f"sha256sum then sha512sum:             {best_theirs:6.2f} s")
        print(f"speed-up: {best_theirs / best_ours:.2f}x (goal >= 1.6x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
