"""Round-trip YAML files: load with line numbers, dump unchanged, write atomically.

Data files nodeforge edits (the lockfile, mirror settings) are loaded with
ruamel.yaml's round-trip loader, so comments, key order and quoting survive a
rewrite, and every node knows the line it came from for error messages.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from nodeforge.errors import ConfigError


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


def load(path: Path, text: str | None = None):
    """Parse ``path`` (or ``text`` labelled as ``path``); syntax errors name file:line."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(path=str(path), detail="file not found") from None
        except OSError as exc:
            raise ConfigError(path=str(path), detail=exc.strerror or str(exc)) from None
    try:
        return _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(path=where, detail=f"invalid YAML: {exc.problem or exc.context}") from None
    except YAMLError as exc:
        raise ConfigError(path=str(path), detail=f"invalid YAML: {exc}") from None


def dumps(doc) -> str:
    buf = io.StringIO()
    _yaml().dump(doc, buf)
    return buf.getvalue()


def line_of(node, key=None) -> int | None:
    """1-based line of ``key`` in mapping/sequence ``node`` (or of the node itself)."""
    try:
        if key is None:
            return node.lc.line + 1
        if isinstance(node, CommentedSeq):
            return node.lc.item(key)[0] + 1
        if isinstance(node, CommentedMap):
            return node.lc.key(key)[0] + 1
    except (AttributeError, KeyError, IndexError, TypeError):
        pass
    return None


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never a mix.

    The new content goes to a temporary file in the same directory, is flushed
    to disk, then renamed over the target; a crash at any point leaves the old
    file intact (at worst a stray ``.<name>.*.tmp`` beside it)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
