"""SHA256SUMS and SHA512SUMS for a build directory, each file read once.

Every file is read once by :func:`nodeforge.base.fs.digest_file`, which feeds
both hashes from each block on two threads: the wall time is close to the
slower hash alone, not the sum of both (``bench/bench_checksums.py``).
The files are in ``sha256sum``/``sha512sum -c`` format (``<hex>  <name>``),
read and written by :mod:`nodeforge.base.sums`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

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


def verify_sums(directory: Path, *, error=sums.SumsError) -> list[str]:
    """Names whose content does not match SHA256SUMS/SHA512SUMS (empty: all good);
    a malformed line raises ``error`` (naming the file and line)."""
    directory = Path(directory)
    expected: dict[str, dict[str, str]] = {}
    for algo, sums_name in SUMS_FILES.items():
        for name, digest in sums.read_sums(directory / sums_name, error=error).items():
            expected.setdefault(name, {})[algo] = digest
    bad = []
    for name, want in sorted(expected.items()):
        path = directory / name
        if not path.is_file() or digest_file(path, want.keys()) != want:
            bad.append(name)
    return bad
