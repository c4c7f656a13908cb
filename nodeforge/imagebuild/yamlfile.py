"""Round-trip YAML files: load with line numbers, dump unchanged, write atomically.

Data files nodeforge edits (the lockfile, mirror settings) are loaded with
ruamel.yaml's round-trip loader, so comments, key order and quoting survive a
rewrite, and every node knows the line it came from for error messages.
"""

from __future__ import annotations

import io
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from nodeforge import fsutil
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
    """Replace ``path`` with ``text`` so readers see the old or the new file,
    never a mix (see :func:`nodeforge.fsutil.atomic_write`)."""
    fsutil.atomic_write(path, text)
