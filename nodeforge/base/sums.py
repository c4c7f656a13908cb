"""SHA256SUMS / SHA512SUMS files (``sha256sum -c`` format): the one reader
and writer.

A line is ``<hex>  <name>`` (``<hex> *<name>`` in binary mode). :func:`parse`
is strict by default (a bad line is an error naming the file and line, and
so is a name that is not a plain file name beside the SUMS file: no path);
``strict=False`` skips lines that are not checksum lines (upstream files mix
in comments or other algorithms). :func:`write_sums` writes each file
atomically (:func:`nodeforge.base.fs.atomic_write`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from nodeforge.base import fs
from nodeforge.base.fs import atomic_write
from nodeforge.errors import ConfigError, NodeforgeError

SUMS_FILES = {"sha256": "SHA256SUMS", "sha512": "SHA512SUMS"}
MAX_BYTES = 1 << 20          # a build's SUMS files list a handful of files
LINE = re.compile(r"^(?P<hex>[0-9a-fA-F]+) [ *](?P<name>.+)$")
# Upstream files (strict=False): any run of blanks, an optional binary-mode '*'.
LOOSE = re.compile(r"^(?P<hex>[0-9a-fA-F]+)\s+\*?(?P<name>\S.*)$")


class SumsError(ConfigError):
    """A line of a SUMS file is not ``<hex>  <name>``: ``{path}: line N ...``."""


def parse(text: str, *, source: str = "<SUMS>", strict: bool = True,
          error: type[NodeforgeError] = SumsError) -> dict[str, str]:
    """``{name: lower-case hex}`` in file order (the name as written, without
    the binary-mode ``*``; a name listed twice: its first digest)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = (LINE if strict else LOOSE).match(line.strip())
        if not m:
            if strict:
                raise error(path=source, detail=f"line {lineno} is not '<hex>  <file>'")
            continue
        name = m["name"]
        if strict and fs.plain_name_problem(name):
            raise error(path=source, detail=f"line {lineno}: {name!r} is not a file name in this directory "
                                            "(a SUMS file lists files beside it, never a path)")
        out.setdefault(name, m["hex"].lower())
    return out


def read_sums(path: Path | str, *, missing_ok: bool = False, error: type[NodeforgeError] = SumsError,
              ) -> dict[str, str]:
    """:func:`parse` of a file; ``{}`` for a missing file when ``missing_ok``."""
    path = Path(path)
    if missing_ok and not path.exists():
        return {}
    if not path.is_file():
        raise error(path=str(path), detail="not a regular file")
    if path.stat().st_size > MAX_BYTES:
        raise error(path=str(path), detail=f"{path.stat().st_size} bytes; a SUMS file has at most {MAX_BYTES}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(path=str(path), detail=f"not UTF-8 text (byte {exc.start})") from None
    return parse(text, source=str(path), error=error)


def format_sums(digests: Mapping[str, str]) -> str:
    """``<hex>  <name>`` lines for ``{name: hex}``, in the mapping's order."""
    return "".join(f"{digest}  {name}\n" for name, digest in digests.items())


def write_sums(directory: Path | str, files: Mapping[str, Mapping[str, str]]) -> dict[str, Path]:
    """Write SHA256SUMS and SHA512SUMS in ``directory`` from
    ``{name: {"sha256": hex, "sha512": hex}}`` (names sorted); returns the paths."""
    directory = Path(directory)
    written = {}
    for algo, fname in SUMS_FILES.items():
        text = format_sums({name: d[algo] for name, d in sorted(files.items())})
        written[algo] = atomic_write(directory / fname, text)
    return written
