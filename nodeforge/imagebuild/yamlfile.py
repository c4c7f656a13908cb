"""Round-trip YAML files: load with line numbers, dump unchanged, write atomically.

Data files nodeforge edits (the lockfile, mirror settings) are loaded with
ruamel.yaml's round-trip loader, so comments, key order and quoting survive a
rewrite, and every node knows the line it came from for error messages.

Every file a person writes is read through :func:`read_text` (UTF-8, an
optional byte-order mark accepted; binary or non-UTF-8 content refused with the
line) and parsed by :func:`load`, which also refuses nesting deeper than
:data:`MAX_DEPTH`: bad input is a :class:`ConfigError` (exit 2), never a
traceback.
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


# Deeper nesting than any nodeforge file needs is refused (a hostile file of
# thousands of nested brackets would otherwise exhaust the parser's stack).
MAX_DEPTH = 64


def decode(path, data: bytes) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); a binary or
    non-UTF-8 file is a ConfigError naming ``path`` and the line."""
    if b"\0" in data:
        line = data[:data.index(b"\0")].count(b"\n") + 1
        raise ConfigError(path=f"{path}:{line}", detail="not a text file (NUL byte); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(path=f"{path}:{line}",
                          detail=f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                                 "save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def read_text(path: Path) -> str:
    """The text of a file a person wrote: see :func:`decode`; a missing or
    unreadable file is a ConfigError."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(path=str(path), detail="file not found") from None
    except IsADirectoryError:
        raise ConfigError(path=str(path), detail="is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(path=str(path), detail=exc.strerror or str(exc)) from None
    return decode(path, data)


def load(path: Path, text: str | None = None):
    """Parse ``path`` (or ``text`` labelled as ``path``); syntax errors name file:line."""
    if text is None:
        text = read_text(path)
    text = text.removeprefix("\ufeff")
    _check_flow_depth(path, text)
    try:
        doc = _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(path=where, detail=f"invalid YAML: {exc.problem or exc.context}") from None
    except YAMLError as exc:
        raise ConfigError(path=str(path), detail=f"invalid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(path=str(path), detail=f"nested more than {MAX_DEPTH} levels deep") from None
    _check_depth(path, doc)
    return doc


_SCALAR_START = set(":-?,[{")


def _check_flow_depth(path, text: str) -> None:
    """Refuse flow collections (``[``/``{``, JSON) nested deeper than MAX_DEPTH
    before parsing: ruamel.yaml's scanner takes quadratic time in the flow
    depth (20,000 levels: minutes). A quick scan of the text that skips quoted
    scalars and comments; block nesting is checked after parsing."""
    depth = 0
    line = 1
    prev = ""              # last significant character on this line ("" at a line start)
    quote = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            prev = ""
            if quote == "#":
                quote = None
        elif quote == "#":
            pass
        elif quote is not None:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                if quote == "'" and text[i + 1:i + 2] == "'":
                    i += 1
                else:
                    quote = None
                    prev = "x"
        elif ch in " \t\r":
            pass
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n"):
            quote = "#"
        elif ch in "'\"" and (prev == "" or prev in _SCALAR_START):
            quote = ch
        elif ch in "[{" and (depth > 0 or prev == "" or prev in _SCALAR_START):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError(path=f"{path}:{line}", detail=f"nested more than {MAX_DEPTH} levels deep")
            prev = ch
        elif ch in "]}" and depth > 0:
            depth -= 1
            prev = "x"
        elif ch in ":-?" and text[i + 1:i + 2] not in (" ", "\t", "\r", "\n", ""):
            prev = "x"     # part of a plain scalar (a-b, a:b), not an indicator
        else:
            prev = ch
        i += 1


def _check_depth(path, doc) -> None:
    """Refuse a document nested deeper than MAX_DEPTH (iteratively: no recursion).
    A node shared through YAML aliases is walked again only when reached deeper."""
    stack = [(doc, 0)]
    seen: dict[int, int] = {}
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = list(node)
        else:
            continue
        if depth >= MAX_DEPTH:
            line = line_of(node)
            raise ConfigError(path=f"{path}:{line}" if line else str(path),
                              detail=f"nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)


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
