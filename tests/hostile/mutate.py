"""Structure-aware and byte-level mutation of valid example files (hypothesis strategies).

A valid file is read into a tree whose mappings are lists of ``(key, value)``
pairs (so a mutation can duplicate a key), mutated, and written back out as
YAML or JSON by the small emitters here: they can write what no YAML library
emits on purpose (duplicate keys, unquoted implicit-typing traps such as
``yes``/``1.30``/``0o17``/``~``, alias chains, 20,000-deep nesting, NaN and
1e999). The bytes are then optionally mangled (truncated, random bytes, BOM,
CRLF, NUL, UTF-16, invalid UTF-8).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re

import yaml
from hypothesis import strategies as st


# ----------------------------------------------------------------------------- tree

@dataclasses.dataclass
class Map:
    pairs: list            # [(key, value)], keys may repeat


@dataclasses.dataclass
class Seq:
    items: list


@dataclasses.dataclass(frozen=True)
class Raw:
    """A scalar written verbatim (plain YAML / bare JSON token)."""

    text: str


@dataclasses.dataclass(frozen=True)
class AliasBomb:
    """``[&a0 [x, ...], &a1 [*a0, ...], ...]``: ``width ** levels`` leaves when expanded."""

    levels: int
    width: int


@dataclasses.dataclass(frozen=True)
class Deep:
    """Nesting ``depth`` levels deep, in flow (``[[[...]]]``) or block style."""

    depth: int
    flow: bool = True


def tree(value):
    if isinstance(value, dict):
        return Map([(k, tree(v)) for k, v in value.items()])
    if isinstance(value, list):
        return Seq([tree(v) for v in value])
    return value


def parse(text: str, kind: str):
    if kind == "json":
        return tree(json.loads(text))
    return tree(yaml.safe_load(text))


# ----------------------------------------------------------------------------- emitters

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _yaml_scalar(v) -> str:
    if isinstance(v, Raw):
        return v.text
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    if isinstance(v, AliasBomb):
        parts = ["[x" + ", x" * (v.width - 1) + "]"]
        for i in range(1, v.levels):
            parts.append("[" + ", ".join([f"*a{i - 1}"] * v.width) + "]")
        return "[" + ", ".join(f"&a{i} {p}" for i, p in enumerate(parts)) + "]"
    if isinstance(v, Deep):
        return "[" * v.depth + "]" * v.depth
    return json.dumps(str(v), ensure_ascii=False)


def _yaml_key(k) -> str:
    if isinstance(k, str) and _PLAIN_KEY.match(k) and k.lower() not in _YAML_WORDS:
        return k
    if isinstance(k, (Map, Seq)):
        return json.dumps(str(k))
    return _yaml_scalar(k)


def _block(node, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(node, Map):
        for k, v in node.pairs:
            if isinstance(v, Deep) and not v.flow:
                out.append(f"{pad}{_yaml_key(k)}:")
                out.extend(" " * (indent + 1 + i) + "a:" for i in range(v.depth))
            elif isinstance(v, (Map, Seq)) and _items(v):
                out.append(f"{pad}{_yaml_key(k)}:")
                _block(v, indent + 2, out)
            else:
                out.append(f"{pad}{_yaml_key(k)}: {_inline(v)}")
    elif isinstance(node, Seq):
        for v in node.items:
            if isinstance(v, (Map, Seq)) and _items(v):
                out.append(f"{pad}-")
                _block(v, indent + 2, out)
            else:
                out.append(f"{pad}- {_inline(v)}")
    else:
        out.append(pad + _inline(node))


def _items(node) -> list:
    return node.pairs if isinstance(node, Map) else node.items


def _inline(v) -> str:
    if isinstance(v, Map):
        return "{" + ", ".join(f"{_yaml_key(k)}: {_inline(x)}" for k, x in v.pairs) + "}"
    if isinstance(v, Seq):
        return "[" + ", ".join(_inline(x) for x in v.items) + "]"
    return _yaml_scalar(v)


def to_yaml(node) -> str:
    out: list[str] = []
    if isinstance(node, (Map, Seq)) and _items(node):
        _block(node, 0, out)
    else:
        out.append(_inline(node))
    return "\n".join(out) + "\n"


def _json_scalar(v) -> str:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, AliasBomb):
        return json.dumps([["x"] * v.width] * v.levels)
    if isinstance(v, Deep):
        return "[" * v.depth + "]" * v.depth
    return json.dumps(v, ensure_ascii=False)


def to_json(node) -> str:
    if isinstance(node, Map):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {to_json(v)}" for k, v in node.pairs) + "}"
    if isinstance(node, Seq):
        return "[" + ", ".join(to_json(v) for v in node.items) + "]"
    return _json_scalar(node)


def emit(node, kind: str) -> str:
    return to_json(node) if kind == "json" else to_yaml(node)


# ----------------------------------------------------------------------------- hostile values

LONG = "L" * 70_000
HOSTILE_SCALARS = [
    0, -1, -623, 65536, 2 ** 31, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, 0.5, -0.0, 1e308,
    float("nan"), float("inf"), float("-inf"), True, False, None,
    "", " ", "\t", "\n", "\r\n", "\x00", "\x07\x1b[31mred", "\u202egnp.exe", "\ufeffbom", "é", "名前", "😀" * 64,
    "\ud7ff\ue000", LONG, "a b", "../../../etc/passwd", "/dev/zero", "$(reboot)", "${HOME}", "%s%n%x",
    "{", "}", "{0}", "{name}", "{x.y}", "{0[0]}", "{!r}", "<script>", "'", '"', "\\", "*", "&", "!", "|", ">",
    "- a", "a: b", "#", "CUSTOM_", "custom_lower", "fake://", "http://", "https://u:p@", "ipmi://:0",
    Raw("yes"), Raw("no"), Raw("on"), Raw("off"), Raw("y"), Raw("n"), Raw("1.30"), Raw("1.3"), Raw("1.36"),
    Raw("0o17"), Raw("017"), Raw("0x1F"), Raw("0b101"), Raw("1_000"), Raw("1e400"), Raw("-1e400"), Raw("12:30:00"),
    Raw("2026-12-01"), Raw("2026-12-01T10:00:00Z"), Raw("~"), Raw("null"), Raw("Null"), Raw(".nan"), Raw(".NaN"),
    Raw(".inf"), Raw("-.Inf"), Raw("!!binary aGVsbG8="), Raw("!!set {a, b}"), Raw("!!python/name:os.system"),
    Raw("!!python/object/apply:os.system [echo hi]"), Raw("!!float 1"), Raw("!!int 1.5"), Raw("!!str"),
    Raw("!!timestamp 2001-12-14"), Raw("!!omap [a: 1]"), Raw("*undefined"), Raw("&anchor value"),
    Raw("'unterminated"), Raw('"unterminated'), Raw("[unbalanced"), Raw("{a: 1"), Raw("@reserved"), Raw("`tick"),
    Raw("%TAG"), Raw("? complex"), Raw("=merge"), Raw("<<"),
]

JSON_RAW = [Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999"), Raw("1" * 5000),
            Raw("0x10"), Raw("01"), Raw("[1,]"), Raw("{\"a\":1,}"), Raw("'single'"), Raw("undefined"), Raw("//c")]

scalars = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)


def json_scalars():
    return st.one_of(st.sampled_from([v for v in HOSTILE_SCALARS if not isinstance(v, Raw)] + JSON_RAW),
                     st.integers(), st.floats(), st.text(max_size=40))


def hostile_values(kind: str):
    base = json_scalars() if kind == "json" else scalars
    return st.one_of(
        base,
        base,
        st.just(Map([])), st.just(Seq([])),
        base.map(lambda v: Seq([v])),
        base.map(lambda v: Map([("k", v)])),
        st.builds(AliasBomb, st.integers(6, 10), st.integers(8, 12)),
        st.builds(Deep, st.sampled_from([65, 300, 5000, 20000]), st.booleans() if kind != "json" else st.just(True)),
    )


# ----------------------------------------------------------------------------- structural mutation

def _slots(node, path=()):
    """Every (parent, index) position in the tree, depth first."""
    out = []
    items = node.pairs if isinstance(node, Map) else node.items if isinstance(node, Seq) else None
    if items is None:
        return out
    for i, item in enumerate(items):
        out.append((node, i))
        child = item[1] if isinstance(node, Map) else item
        out.extend(_slots(child))
    return out


def _set(parent, i, value):
    if isinstance(parent, Map):
        k, _ = parent.pairs[i]
        parent.pairs[i] = (k, value)
    else:
        parent.items[i] = value


def _get(parent, i):
    return parent.pairs[i][1] if isinstance(parent, Map) else parent.items[i]


OPS = ("replace", "replace", "replace", "delete", "duplicate", "rename", "wrap", "swap_type", "whole")


@st.composite
def structural(draw, node, kind: str):
    """Apply 1-3 structure-aware mutations to a deep copy of ``node``."""
    import copy

    node = copy.deepcopy(node)
    values = hostile_values(kind)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(node)
        op = draw(st.sampled_from(OPS))
        if op == "whole" or not slots:
            node = draw(st.one_of(values, st.just(Raw("")), st.just(Seq([node])), st.just(Map([("x", node)]))))
            continue
        parent, i = slots[draw(st.integers(0, len(slots) - 1))]
        current = _get(parent, i)
        if op == "replace":
            _set(parent, i, draw(values))
        elif op == "delete":
            (parent.pairs if isinstance(parent, Map) else parent.items).pop(i)
        elif op == "duplicate":
            items = parent.pairs if isinstance(parent, Map) else parent.items
            items.insert(i + 1, copy.deepcopy(items[i]))
        elif op == "rename" and isinstance(parent, Map):
            key = draw(st.one_of(st.sampled_from([v for v in HOSTILE_SCALARS if not isinstance(v, float)]),
                                 st.text(max_size=20)))
            parent.pairs[i] = (key, current)
        elif op == "wrap":
            _set(parent, i, draw(st.sampled_from([Seq([current]), Map([("value", current)])])))
        elif op == "swap_type":
            swapped = {str: 7, int: "7", float: "0.5", bool: "true", type(None): Seq([])}
            if isinstance(current, Map):
                _set(parent, i, Seq([v for _, v in current.pairs]))
            elif isinstance(current, Seq):
                _set(parent, i, Map([(str(j), v) for j, v in enumerate(current.items)]))
            else:
                _set(parent, i, swapped.get(type(current), None))
    return node


# ----------------------------------------------------------------------------- byte-level mutation

BYTE_OPS = ("none", "none", "none", "truncate", "insert", "bom", "crlf", "nul", "badutf8", "utf16", "flip",
            "cr_only", "big")


# Byte operations that keep every URL in the file as written (or cut it at a line end):
# a file whose URLs are used (mirror settings) must not be turned into a URL of a
# routable address nobody answers, which is a network timeout, not bad input.
URL_SAFE_BYTE_OPS = ("none", "none", "none", "truncate", "bom", "crlf", "nul", "badutf8", "utf16", "cr_only", "big")


@st.composite
def byte_level(draw, data: bytes, ops=BYTE_OPS):
    op = draw(st.sampled_from(ops))
    n = len(data)
    pos = draw(st.integers(0, max(n, 1)))
    if ops is URL_SAFE_BYTE_OPS:
        ends = [i for i in range(n + 1) if i == n or data[i:i + 1] == b"\n"]
        pos = ends[draw(st.integers(0, len(ends) - 1))]
    if op == "truncate":
        return data[:pos]
    if op == "insert":
        return data[:pos] + draw(st.binary(min_size=1, max_size=16)) + data[pos:]
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "cr_only":
        return data.replace(b"\n", b"\r")
    if op == "nul":
        return data[:pos] + b"\x00" + data[pos:]
    if op == "badutf8":
        return data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])) + data[pos:]
    if op == "utf16":
        return data.decode("utf-8", "replace").encode("utf-16")
    if op == "flip" and n:
        i = min(pos, n - 1)
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if op == "big":
        # 12 MB: over any sane input-size limit, still cheap to write.
        return data + b"#" + b"x" * (12 * 1024 * 1024) + b"\n"
    return data


@st.composite
def mutated_file(draw, text: str, kind: str, byte_ops=BYTE_OPS):
    """Bytes of a hostile variant of the valid file ``text`` (``kind``: yaml or json)."""
    node = parse(text, kind)
    body = emit(draw(structural(node, kind)), kind) if draw(st.integers(0, 9)) else text
    return draw(byte_level(body.encode("utf-8", "surrogatepass"), byte_ops))


# ----------------------------------------------------------------------------- CSV

@st.composite
def mutated_csv(draw, text: str):
    """A hostile variant of a CSV inventory: cells replaced, columns deleted or duplicated, rows added."""
    lines = text.splitlines(keepends=True)
    comments = [line for line in lines if line.startswith("#")]
    rows = list(csv.reader(io.StringIO("".join(line for line in lines if not line.startswith("#")))))
    cell = st.one_of(st.sampled_from([str(v) if not isinstance(v, Raw) else v.text for v in HOSTILE_SCALARS]),
                     st.text(max_size=30))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("cell", "cell", "delcol", "dupcol", "addrow", "delrow", "header", "empty")))
        if not rows:
            break
        width = max(len(r) for r in rows)
        c = draw(st.integers(0, max(width - 1, 0)))
        r = draw(st.integers(0, len(rows) - 1))
        if op == "cell" and c < len(rows[r]):
            rows[r][c] = draw(cell)
        elif op == "delcol":
            rows = [row[:c] + row[c + 1:] for row in rows]
        elif op == "dupcol":
            rows = [row[:c + 1] + row[c:c + 1] + row[c + 1:] for row in rows]
        elif op == "addrow":
            rows.append(list(rows[-1]) if draw(st.booleans()) else [draw(cell)])
        elif op == "delrow":
            rows.pop(r)
        elif op == "header" and c < len(rows[0]):
            rows[0][c] = draw(cell)
        elif op == "empty":
            rows = []
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    body = "".join(comments) + buf.getvalue() if draw(st.integers(0, 9)) else text
    return draw(byte_level(body.encode("utf-8", "surrogatepass")))
