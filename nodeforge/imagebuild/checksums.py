"""SHA256SUMS and SHA512SUMS for a build directory, each file read once.

Every file is read in large blocks once; each block feeds both hashes. On
CPython, hashlib releases the GIL for updates over 2 KiB, so the two digests
run on two threads overlapped with the next read: the wall time is close to
the slower hash alone, not the sum of both (``bench/bench_checksums.py``).
The files are in ``sha256sum``/``sha512sum -c`` format (``<hex>  <name>``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
from pathlib import Path
from typing import Iterable

CHUNK = 8 << 20
ALGORITHMS = ("sha256", "sha512")
SUMS_FILES = {"sha256": "SHA256SUMS", "sha512": "SHA512SUMS"}


def digest_file(path: Path | str, algorithms: Iterable[str] = ALGORITHMS, *,
                chunk: int = CHUNK) -> dict[str, str]:
    """Hex digests of ``path`` for each algorithm, from one read pass."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hashers)) as pool, \
            open(path, "rb", buffering=0) as fh:
        pending: list[concurrent.futures.Future] = []
        while True:
            block = fh.read(chunk)
            # Wait for the previous block's updates (keeps order and bounds memory
            # to two blocks) while this one is already in memory.
            for fut in pending:
                fut.result()
            if not block:
                break
            pending = [pool.submit(h.update, block) for h in hashers.values()]
    return {name: h.hexdigest() for name, h in hashers.items()}


def write_sums(directory: Path, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Write SHA256SUMS and SHA512SUMS in ``directory`` for ``names`` (relative
    to it); returns ``{name: {"sha256": ..., "sha512": ...}}``."""
    directory = Path(directory)
    results = {name: digest_file(directory / name) for name in sorted(names)}
    for algo, sums_name in SUMS_FILES.items():
        text = "".join(f"{d[algo]}  {name}\n" for name, d in results.items())
        tmp = directory / f".{sums_name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, directory / sums_name)
    return results


def read_sums(path: Path) -> dict[str, str]:
    """``{name: hex}`` from a ``*SUMS`` file."""
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            digest, _, name = line.partition("  ")
            out[name.lstrip("*")] = digest
    return out


def verify_sums(directory: Path) -> list[str]:
    """Names whose content does not match SHA256SUMS/SHA512SUMS (empty: all good)."""
    directory = Path(directory)
    expected: dict[str, dict[str, str]] = {}
    for algo, sums_name in SUMS_FILES.items():
        for name, digest in read_sums(directory / sums_name).items():
            expected.setdefault(name, {})[algo] = digest
    bad = []
    for name, want in sorted(expected.items()):
        path = directory / name
        if not path.is_file() or digest_file(path, want.keys()) != want:
            bad.append(name)
    return bad
