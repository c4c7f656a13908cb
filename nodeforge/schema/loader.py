"""The one safe loader for files people write: YAML, JSON, CSV, with limits.

Every limit is enforced before or while parsing, never after the damage:

* **kind**: only a regular file is read (a FIFO would hang the open, a
  device never ends);
* **size**: the file is stat'ed and read with a cap (:attr:`Limits.max_bytes`,
  default 4 MiB, per kind overridable): a 200 MB file is refused after
  reading at most the cap plus one byte;
* **text**: UTF-8 only (a byte-order mark dropped); a NUL byte or invalid
  UTF-8 is refused with its line (:func:`decode`);
* **nesting**: flow collections (``[``/``{``, JSON) deeper than
  :data:`MAX_DEPTH` are refused by a scan of the text before the parser sees
  it (ruamel's scanner is quadratic in flow depth), block nesting after
  composing;
* **values**: a YAML text of more than :attr:`Limits.max_values` values is
  refused after counting them with libyaml's C parser (PyYAML), before the
  pure-Python round-trip parser spends ~0.1 ms and ~1 KiB on each; a large
  text (32 KiB or more) without anchors, aliases, tags, timestamps, duplicate,
  complex or merge keys has its round-trip tree (CommentedMap/CommentedSeq with
  the same positions, scalars typed by ruamel's own YAML 1.2 resolver) built
  from libyaml's events instead (:mod:`nodeforge.schema.fastyaml`; ~5x faster);
* **aliases**: YAML anchors/aliases are kept shared by the parser (cheap), but
  anything that walks the tree (validation, ``json.dumps``, a copy) expands
  them; the expanded size of the document is computed in linear time over the
  distinct nodes, and more than :attr:`Limits.max_nodes` values added by the
  expansion, or more than :attr:`Limits.max_aliases` aliases, is refused: the
  1.3 KB "billion laughs" is refused in milliseconds.

:func:`load` returns a :class:`Document`: the round-trip tree (``doc``, for
edits that keep comments), the plain data (``data``: dict/list/str/int/float/
bool/None, aliases expanded, what declarations validate) and :meth:`Document.line`
mapping a key path such as ``("nodes", 3, "driver_info", "ipmi_port")`` to its
1-based line.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import gc
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from nodeforge.errors import ConfigError
from nodeforge.schema import fastyaml
from nodeforge.schema.problems import Problem, SchemaError

# Deeper nesting than any nodeforge file needs is refused.
MAX_DEPTH = 64
DEFAULT_MAX_BYTES = 4 << 20
DEFAULT_MAX_NODES = 200_000
DEFAULT_MAX_ALIASES = 1_000
DEFAULT_MAX_VALUES = 80_000
# A JSON file's problems get lines (a second, positional parse) up to this size.
JSON_LINES_MAX = 256 << 10


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one file may cost to read. A file kind may pass its own."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = MAX_DEPTH
    # Values (mappings, lists, scalars) that expanding YAML aliases may add to the
    # document; a file without aliases is bounded by max_bytes and max_values.
    max_nodes: int = DEFAULT_MAX_NODES
    max_aliases: int = DEFAULT_MAX_ALIASES
    # Values as written (counted by libyaml before the slow round-trip parse): 80,000 cost
    # the round-trip parser about 7 s and 85 MB on a loaded 2-core machine.
    max_values: int = DEFAULT_MAX_VALUES


DEFAULT_LIMITS = Limits()


def _yaml() -> YAML:
    return fastyaml.round_trip_parser()


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector off for a large read (its full passes over every object made
    reading grow faster than the input), back on after, as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --- bytes and text ---------------------------------------------------------------

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


def _too_big(path, limit: int) -> ConfigError:
    return ConfigError(path=str(path), detail=f"larger than {_size(limit)}; not read (the limit for this kind of file)")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def read_bytes(path, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The bytes of ``path``, at most ``limits.max_bytes`` (checked before and
    while reading); missing, a directory, unreadable or too large is a ConfigError."""
    path = Path(path)
    try:
        # A FIFO would block the open (a hang), a device never ends: only regular files are read.
        if not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode):
            raise ConfigError(path=str(path), detail="not a regular file (a pipe, socket or device); "
                                                     "save the content to a file")
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > limits.max_bytes:
                raise _too_big(path, limits.max_bytes)
            data = fh.read(limits.max_bytes + 1)     # a file that grows while read is still capped
    except FileNotFoundError:
        raise ConfigError(path=str(path), detail="file not found") from None
    except IsADirectoryError:
        raise ConfigError(path=str(path), detail="is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(path=str(path), detail=exc.strerror or str(exc)) from None
    if len(data) > limits.max_bytes:
        raise _too_big(path, limits.max_bytes)
    return data


def read_text(path, limits: Limits = DEFAULT_LIMITS) -> str:
    """The text of a file a person wrote (:func:`read_bytes`, then :func:`decode`)."""
    return decode(path, read_bytes(path, limits))


# --- the document -----------------------------------------------------------------

@dataclasses.dataclass
class Document:
    """A parsed file: ``doc`` (round-trip tree for YAML; the plain data for JSON
    and CSV), ``data`` (plain Python data, what declarations validate) and the
    key path -> line map (:meth:`line`)."""

    path: str
    format: str                 # "yaml" | "json" | "csv"
    doc: Any
    data: Any
    text: str = dataclasses.field(default="", repr=False)
    _json_tree: Any = dataclasses.field(default=None, repr=False)
    _csv_lines: list | None = dataclasses.field(default=None, repr=False)

    def line(self, keypath: Iterable = ()) -> int | None:
        """1-based line of the value at ``keypath`` (of the nearest ancestor
        that exists, for a missing key), or None when unknown."""
        keypath = tuple(keypath)
        if self.format == "csv":
            if keypath and isinstance(keypath[0], int) and self._csv_lines and 0 <= keypath[0] < len(self._csv_lines):
                return self._csv_lines[keypath[0]]
            return 1 if self._csv_lines is not None else None
        tree = self.doc
        if self.format == "json":
            if self._json_tree is None:
                self._json_tree = False
                if len(self.text) <= JSON_LINES_MAX:
                    try:   # JSON is YAML: positions from ruamel, only when a problem needs one
                        self._json_tree = _yaml().load(self.text)
                    except Exception:  # noqa: BLE001 - no line then
                        pass
            tree = self._json_tree or None
        return tree_line(tree, keypath)

    def problem(self, keypath: Iterable, detail: str) -> Problem:
        keypath = tuple(keypath)
        return Problem(self.path, self.line(keypath), keypath, detail)

    def source_text(self, keypath: Iterable, *, key: bool = False) -> str | None:
        """The value at ``keypath`` (with ``key``: the last key itself) as written
        in the file (YAML plain scalars: ``1.30`` where the data holds the float
        1.3), or None."""
        if self.format != "yaml":
            return None
        keypath = tuple(keypath)
        if not keypath:
            return None
        parent = _walk(self.doc, keypath[:-1])
        last = keypath[-1]
        if isinstance(parent, CommentedMap):   # the tree's own key (plain data converted ScalarFloat etc.)
            last = next((k for k in parent if k == last), last)
        try:
            if isinstance(parent, CommentedMap) and key:
                line, col = parent.lc.key(last)
            elif isinstance(parent, CommentedMap):
                line, col = parent.lc.value(last)
            elif isinstance(parent, CommentedSeq):
                line, col = parent.lc.item(last)
            else:
                return None
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        lines = self.text.splitlines()
        if line >= len(lines):
            return None
        rest = lines[line][col:]
        for stop in ((": ", " #", ",", "]", "}") if key else (" #", ",", "]", "}")):
            if stop in rest:
                rest = rest[:rest.index(stop)]
        rest = rest.strip()
        if key and rest.endswith(":"):
            rest = rest[:-1]
        return rest or None


def _walk(tree, keypath):
    node = tree
    for part in keypath:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def tree_line(tree, keypath: Iterable) -> int | None:
    """1-based line of ``keypath`` in a ruamel round-trip ``tree`` (the deepest
    existing ancestor's line when the path does not exist)."""
    node = tree
    best = line_of(tree)
    for part in tuple(keypath):
        here = line_of(node, part)
        if here is None:
            break
        best = here
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
    return best


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


# --- parsing ----------------------------------------------------------------------

def load(path, text: str | None = None, *, format: str | None = None,
         limits: Limits = DEFAULT_LIMITS) -> Document:
    """Read and parse ``path`` (or ``text`` labelled as ``path``) within ``limits``.
    ``format``: "yaml" (default; also reads JSON), "json" or "csv" (default from
    the suffix: .json, .csv, else YAML)."""
    path_s = str(path)
    if format is None:
        suffix = Path(path_s).suffix.lower()
        format = {".json": "json", ".csv": "csv"}.get(suffix, "yaml")
    if text is None:
        text = read_text(path, limits)
    else:
        if len(text) > limits.max_bytes or len(text.encode("utf-8", errors="surrogatepass")) > limits.max_bytes:
            raise _too_big(path_s, limits.max_bytes)
        text = text.removeprefix("\ufeff")
    if format == "yaml":
        if text.lstrip()[:1] in ("{", "["):
            # JSON text (a YAML file may hold JSON) is read as JSON: the same data gets the same
            # verdict in either syntax (YAML refuses some characters JSON strings may hold raw).
            document = _try_json(path_s, text, limits)
            if document is not None:
                return document
        return _load_yaml(path_s, text, limits)
    if format == "json":
        return _load_json(path_s, text, limits)
    if format == "csv":
        return _load_csv(path_s, text)
    raise ValueError(f"unknown format {format!r}")


def read_json(path, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The plain data of a JSON file nodeforge wrote or was given (a run record, a report), read
    by the same bounded path as every other file: regular file, size, UTF-8, values, depth, numbers.
    A ConfigError names the file (and line)."""
    return load(path, format="json", limits=limits).data


def parse_json(label: str, data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The plain data of JSON that came from somewhere other than a file (a payload from a
    service, an envelope or a guest's report) under the same limits as a file's: size, UTF-8,
    values, depth, numbers. A ConfigError names ``label`` (and line)."""
    if len(data) > limits.max_bytes:
        raise _too_big(label, limits.max_bytes)
    text = decode(label, data) if isinstance(data, (bytes, bytearray)) else data
    return load(label, text, format="json", limits=limits).data


def load_yaml_tree(path, text: str | None = None, limits: Limits = DEFAULT_LIMITS):
    """Only the round-trip tree of a YAML file (what a round-trip rewrite needs)."""
    return load(path, text, format="yaml", limits=limits).doc


def _depth_error(path, line) -> ConfigError:
    return ConfigError(path=f"{path}:{line}" if line else str(path), detail=f"nested more than {MAX_DEPTH} levels deep")


_DUP_KEY = re.compile(r'found duplicate key "([^"]*)"')


def _load_yaml(path: str, text: str, limits: Limits) -> Document:
    read, built = fastyaml.prepass(path, text, limits)
    if built is not None:
        # libyaml built the tree (a large plain file): the same data and positions as the
        # round-trip parser's, ~20x faster (10,000 inventory nodes: docs/inventory.md).
        check_tree(path, built, limits)
        document = Document(path, "yaml", built, plain(built), text)
        check_scalars(document)
        return document
    if not read:
        # Without libyaml's verdict: the pure-Python scan (only when there are enough brackets to matter).
        if text.count("[") + text.count("{") > limits.max_depth:
            check_flow_depth(path, text, limits.max_depth)
    try:
        doc = _yaml().load(text)
    except DuplicateKeyError as exc:
        # ruamel's own message quotes both values: a duplicated password would be printed twice.
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        first = exc.context_mark.line + 1 if exc.context_mark else None
        key = _DUP_KEY.search(exc.problem or "")
        detail = (f"duplicate key {key.group(1)!r}" if key else "duplicate key") + \
            (f" (in the mapping that starts at line {first})" if first else "") + "; keep one"
        raise ConfigError(path=where, detail=detail) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(path=where, detail=f"invalid YAML: {exc.problem or exc.context}") from None
    except ReaderError as exc:      # a character YAML does not allow in a file (a control character)
        line = text[:exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        what = (f"character U+{exc.character:04X}" if isinstance(exc.character, int)
                else f"byte {exc.character!r}")
        raise ConfigError(path=f"{path}:{line}" if line else str(path),
                          detail=f"invalid YAML: {what} is not allowed in a YAML file ({exc.reason}); "
                                 "write it as an escape in a double-quoted string") from None
    except YAMLError as exc:
        raise ConfigError(path=str(path), detail=f"invalid YAML: {exc}") from None
    except RecursionError:
        raise _depth_error(path, None) from None
    except TypeError:
        # ruamel hashing a complex key (``? {a: [1]}``) that holds a mapping or list
        raise ConfigError(path=str(path), detail=_COMPLEX_KEY) from None
    except (ValueError, OverflowError, IndexError) as exc:
        # a scalar ruamel cannot construct: a date 2024-13-45, '!!int x', '-_' (resolved as an int)
        raise ConfigError(path=str(path), detail=f"invalid YAML: a value cannot be read ({exc}); "
                                                 "quote it if it is text") from None
    check_tree(path, doc, limits)
    document = Document(path, "yaml", doc, plain(doc), text)
    if isinstance(document.data, (dict, list)):
        check_scalars(document)
    return document


_COMPLEX_KEY = "a mapping key must be a plain value (text or a number), not a list or mapping ('? ...' key)"
_KEY_TYPES = (str, int, float, bool, type(None), datetime.date)
_TAGGED = ("a YAML tag (!!binary, !!set, !name, ...) is not supported in nodeforge files; "
           "write a plain value (quote it if it is text)")


def _tagged(node) -> bool:
    tag = getattr(node, "tag", None)
    return getattr(tag, "value", None) is not None


_NUMBER = ("a number out of range (more than 64 bits, or infinite / not a number); no nodeforge field takes "
           "one: quote it if it is text")


def _out_of_range(value) -> bool:
    if isinstance(value, int):
        return value.bit_length() > 64
    return value != value or value in (float("inf"), float("-inf"))


_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE = "a lone surrogate (\\ud800-\\udfff escape) is not a character; write the character itself"


def check_scalars(document: "Document") -> None:
    """Refuse a number no nodeforge field can hold (wider than 64 bits, infinite, not a number) and
    text holding a lone surrogate (an escape such as ``"\\ud800"``: no character, unprintable and
    unwritable as UTF-8), the same for YAML and JSON, named ``file:line: key.path`` (a SchemaError,
    exit 2)."""
    problems = []
    stack = [(document.data, ())]
    while stack and len(problems) < 20:
        node, keypath = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, (*keypath, key)))
            elif isinstance(child, (int, float)) and not isinstance(child, bool) and _out_of_range(child):
                problems.append(document.problem((*keypath, key), _NUMBER))
            elif isinstance(child, str) and _SURROGATE.search(child):
                problems.append(document.problem((*keypath, key), _LONE))
            if isinstance(key, str) and _SURROGATE.search(key):
                problems.append(document.problem(keypath, "a key holds " + _LONE))
    if problems:
        raise SchemaError(document.path, sorted(problems, key=lambda p: p.line or 0))


def check_tree(path: str, doc, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse a tree nested deeper than ``max_depth`` or larger than ``max_nodes``
    once aliases are expanded. Linear in the distinct nodes: a node shared
    through aliases is counted (not walked) again; no recursion."""
    # Depth: walk each distinct node at the greatest depth it is reached from (bounded by max_depth).
    stack = [(doc, 0)]
    seen: dict[int, int] = {}
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        if depth >= limits.max_depth:
            raise _depth_error(path, line_of(node))
        if _tagged(node):
            line = line_of(node)
            raise ConfigError(path=f"{path}:{line}" if line else path, detail=_TAGGED)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(node, dict) and not isinstance(key, _KEY_TYPES):
                line = line_of(node, key) or line_of(node)
                raise ConfigError(path=f"{path}:{line}" if line else path, detail=_COMPLEX_KEY)
            if not isinstance(child, (dict, list, *_KEY_TYPES)):
                line = line_of(node, key) or line_of(node)
                raise ConfigError(path=f"{path}:{line}" if line else path, detail=_TAGGED)
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    # Expanded size: post-order over distinct nodes, memoised by id (aliases make a DAG;
    # the sizes are plain integers, so a bomb costs no more to count than its text).
    size: dict[int, int] = {}
    distinct = 0
    order = [(doc, False)]
    while order:
        node, done = order.pop()
        if not isinstance(node, (dict, list)) or id(node) in size:
            continue
        children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else list(node)
        if not done:
            order.append((node, True))
            order.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in size)
            continue
        size[id(node)] = 1 + sum(size.get(id(c), 1) if isinstance(c, (dict, list)) else 1 for c in children)
        distinct += 1 + sum(1 for c in children if not isinstance(c, (dict, list)))
    added = (size.get(id(doc), 1) if isinstance(doc, (dict, list)) else 1) - max(distinct, 1)
    if added > limits.max_nodes:
        # Name the anchor whose expansion is the largest (the bomb's top).
        worst = max((n for n in _containers(doc)), key=lambda n: size.get(id(n), 0), default=doc)
        line = line_of(worst)
        raise ConfigError(path=f"{path}:{line}" if line else path,
                          detail=f"more than {limits.max_nodes} values added once YAML aliases are expanded "
                                 "(an alias bomb?); not read")


def _containers(doc):
    """The distinct mappings and lists of ``doc`` except ``doc`` itself, each once."""
    seen: set[int] = {id(doc)}
    stack = [doc]
    while stack:
        node = stack.pop()
        for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()):
            if isinstance(child, (dict, list)) and id(child) not in seen:
                seen.add(id(child))
                yield child
                stack.append(child)


def plain(node):
    """The round-trip tree as plain data: dict/list/str/int/float/bool/None (and
    datetime.date/datetime for YAML timestamps), ruamel's scalar subclasses
    converted, aliases expanded (call :func:`check_tree` first)."""
    if isinstance(node, dict):
        return {_plain_key(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        return node
    return node


def _plain_key(key):
    key = plain(key)
    return str(key) if isinstance(key, (dict, list)) else key


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def strict_json(text: str | bytes, *, constants: bool = False) -> tuple[Any, list[str]]:
    """``json.loads`` as nodeforge reads JSON: NaN/Infinity refused (ValueError; with ``constants``
    read as floats, for :func:`check_scalars` to name by key path, as YAML's ``.nan``), and the keys
    given twice in one object returned beside the data (JSON keeps only the last value)."""
    duplicates: list[str] = []

    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                duplicates.append(k)
            out[k] = v
        return out

    return json.loads(text, object_pairs_hook=pairs, parse_constant=float if constants else _no_constant), \
        duplicates


_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _json_values(path: str, text: str, limits: Limits) -> None:
    """Refuse a JSON text of more than ``limits.max_values`` values before it is parsed (the same
    limit as YAML's, counted the same way: each container, key and scalar is one value). Linear and
    at C speed: strings are cut to ``""`` (JSON strings hold no raw line break, so lines keep their
    numbers), then separators and openers are counted."""
    if len(text) <= limits.max_values:       # fewer characters than the limit: cannot hold more values
        return
    bare = _JSON_STRING.sub('""', text)

    def count(s: str) -> int:
        return s.count(",") + s.count(":") + s.count("[") + s.count("{") + 1

    if count(bare) <= limits.max_values:
        return
    lo, hi = 0, len(bare)                     # the first prefix holding more than the limit: its line
    while lo < hi:
        mid = (lo + hi) // 2
        if count(bare[:mid]) > limits.max_values:
            hi = mid
        else:
            lo = mid + 1
    line = bare[:lo].count("\n") + 1
    raise ConfigError(path=f"{path}:{line}", detail=f"more than {limits.max_values} values (objects, arrays, keys, "
                                                    "scalars); not read (the limit for this kind of file)")


def _try_json(path: str, text: str, limits: Limits) -> Document | None:
    """``text`` read as JSON when it is JSON; None when it is not (YAML flow style: the YAML parser's)."""
    _json_values(path, text, limits)
    try:
        parsed = strict_json(text, constants=True)
    except (ValueError, RecursionError):
        return None
    return _json_document(path, text, limits, *parsed)


def _json_depth_line(text: str, max_depth: int) -> int | None:
    """The line where JSON ``text`` first nests deeper than ``max_depth`` (for the refusal's message)."""
    depth, line = 0, 1
    for m in re.finditer(r'[\[\]{}\n]', _JSON_STRING.sub('""', text)):
        ch = m.group()
        if ch == "\n":
            line += 1
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return line
        else:
            depth -= 1
    return None


def _load_json(path: str, text: str, limits: Limits) -> Document:
    # Depth: json's C scanner recurses (a RecursionError past ~1000 levels, caught below);
    # anything deeper than max_depth is refused by check_tree after parsing. Values: counted first.
    _json_values(path, text, limits)
    try:
        data, problems = strict_json(text, constants=True)     # NaN, Infinity: refused by check_scalars
    except json.JSONDecodeError as exc:
        raise ConfigError(path=f"{path}:{exc.lineno}", detail=f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:
        raise ConfigError(path=path, detail=f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _depth_error(path, _json_depth_line(text, limits.max_depth)) from None
    return _json_document(path, text, limits, data, problems)


def _json_document(path: str, text: str, limits: Limits, data, problems: list[str]) -> Document:
    """Parsed JSON as a document, once its duplicate keys, depth, size and scalars are judged."""
    document = Document(path, "json", data, data, text)
    if problems:
        raise SchemaError(path, [Problem(path, None, (k,), "duplicate key (JSON keeps only the last)")
                                 for k in problems])
    try:
        check_tree(path, data, limits)
    except ConfigError as exc:
        if "nested more than" not in str(exc):
            raise
        raise _depth_error(path, _json_depth_line(text, limits.max_depth)) from None
    if isinstance(data, (dict, list)):
        check_scalars(document)
    return document


def _load_csv(path: str, text: str) -> Document:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise ConfigError(path=f"{path}:1", detail="empty CSV file (expected a header line)")
        names = [h.strip() for h in header]
        dupes = sorted({n for n in names if names.count(n) > 1 and n})
        if dupes:
            raise ConfigError(path=f"{path}:1", detail=f"duplicate column(s) {', '.join(dupes)} in the header")
        rows, lines = [], []
        while True:
            start = reader.line_num + 1
            row = next(reader, None)
            if row is None:
                break
            if not any(c.strip() for c in row):
                continue
            if len(row) > len(names):
                raise ConfigError(path=f"{path}:{start}", detail=f"{len(row)} fields, the header has {len(names)}")
            rows.append({n: (row[i] if i < len(row) else "") for i, n in enumerate(names) if n})
            lines.append(start)
    except csv.Error as exc:
        raise ConfigError(path=f"{path}:{reader.line_num}", detail=f"invalid CSV: {exc}") from None
    if not rows:
        raise ConfigError(path=path, detail="no data rows below the CSV header")
    return Document(path, "csv", rows, rows, text, _csv_lines=lines)


_SCALAR_START = set(":-?,[{")


def check_flow_depth(path, text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse flow collections (``[``/``{``, JSON) nested deeper than
    ``max_depth`` before parsing: ruamel.yaml's scanner takes quadratic time in
    the flow depth (20,000 levels: minutes). A quick scan of the text that skips
    quoted scalars and comments; block nesting is checked after parsing."""
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
            if depth > max_depth:
                raise _depth_error(path, line)
            prev = ch
        elif ch in "]}" and depth > 0:
            depth -= 1
            prev = "x"
        elif ch in ":-?" and text[i + 1:i + 2] not in (" ", "\t", "\r", "\n", ""):
            prev = "x"     # part of a plain scalar (a-b, a:b), not an indicator
        else:
            prev = ch
        i += 1


# --- writing ----------------------------------------------------------------------

def dumps(doc) -> str:
    """A round-trip tree as YAML text (comments, order and quoting kept)."""
    buf = io.StringIO()
    _yaml().dump(doc, buf)
    return buf.getvalue()
