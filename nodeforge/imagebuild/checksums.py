"""SHA256SUMS and SHA512SUMS for a build directory, each file read once.

Every file is read once by :func:`nodeforge.base.fs.digest_file`, which feeds
both hashes from each block on two threads: the wall time is close to the
slower hash alone, not the sum of both (``bench/bench_checksums.py``).
The files are in ``sha256sum``/``sha512sum -c`` format (``<hex>  <name>``),
read and written by :mod:`nodeforge.base.sums`.

:func:`verify_sums` reads the files side by side, and skips those the caller
names: :func:`unchanged_names`, the files whose :func:`fingerprints` (size,
mtime, ctime, inode, device, as ``git`` trusts its index) are still the ones
taken just after they were summed (the pipeline's verify stage right after its
build stage). Any write, ``chmod``, ``touch`` or replacement since
changes the ctime or the inode, and the file is read again.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

from nodeforge.base import sums
from nodeforge.base.fs import digest_file  # noqa: F401 - re-exported (the build's callers, the benchmark)
from nodeforge.base.sums import SUMS_FILES  # noqa: F401 - re-exported (boottest)

ALGORITHMS = ("sha256", "sha512")


def sum_files(directory: Path, names: Iterable[str],
              known: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Digest ``names`` (relative to ``directory``, each read once) and write
    SHA256SUMS and SHA512SUMS for them; returns ``{name: {"sha256": ..., "sha512": ...}}``.
    ``known``: digests the caller took of files it has just written (both algorithms), not read again."""
    directory = Path(directory)
    known = known or {}
    results = {name: dict(known[name]) if set(ALGORITHMS) <= set(known.get(name, ())) else digest_file(directory / name)
               for name in sorted(names)}
    sums.write_sums(directory, results)
    return results


def fingerprint(path: Path) -> list[int]:
    """What changes whenever ``path``'s content can have changed: size, mtime, ctime (set by the
    kernel on every write, ``chmod`` or ``utime``; not settable from user space), inode, device."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def fingerprints(directory: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """:func:`fingerprint` of ``names`` and of SHA256SUMS/SHA512SUMS in ``directory``."""
    directory = Path(directory)
    return {name: fingerprint(directory / name) for name in sorted({*names, *SUMS_FILES.values()})}


def verify_sums(directory: Path, *, error=sums.SumsError, skip: Collection[str] = ()) -> list[str]:
    """Names whose content does not match SHA256SUMS/SHA512SUMS (empty: all good);
    a malformed line raises ``error`` (naming the file and line). The files are read side by side;
    ``skip``: names not to read (:func:`unchanged_names`)."""
    directory = Path(directory)
    expected: dict[str, dict[str, str]] = {}
    for algo, sums_name in SUMS_FILES.items():
        for name, digest in sums.read_sums(directory / sums_name, error=error).items():
            expected.setdefault(name, {})[algo] = digest
    todo = [name for name in sorted(expected) if name not in skip]

    def digest(name: str) -> dict[str, str] | None:
        path = directory / name
        return digest_file(path, expected[name].keys()) if path.is_file() else None
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(todo), 2))) as pool:
        return [name for name, got in zip(todo, pool.map(digest, todo)) if got != expected[name]]


def unchanged_names(directory: Path, names: Iterable[str],
                    unchanged: Mapping[str, Sequence[int]] | None) -> list[str]:
    """Those of ``names`` whose :func:`fingerprint` is still the one in ``unchanged`` (taken right
    after they were summed), provided both sums files' are too (else none): need not be read again."""
    if not unchanged:
        return []

    def same(name: str) -> bool:
        try:
            return list(unchanged.get(name) or ()) == fingerprint(Path(directory) / name)
        except OSError:
            return False
    if not all(same(n) for n in SUMS_FILES.values()):
        return []
    return sorted(name for name in names if same(name))
