"""The fast path of the loader for large YAML files: libyaml's C parser (PyYAML) counts a text's
values, depth and aliases before the pure-Python round-trip parser sees it (:func:`prepass`), and
builds the round-trip tree from its events when the document is plain (:func:`build`: the same data
and line numbers as ruamel's, about 5x faster). Anything only the round-trip parser judges
(anchors, tags, timestamps, duplicate or complex keys) falls back to it.
"""

from __future__ import annotations

import functools
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from nodeforge.errors import ConfigError


def round_trip_parser() -> YAML:
    """ruamel's round-trip parser as every nodeforge file is read and rewritten with."""
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


class _Unsupported(Exception):
    """Something only the round-trip parser judges (anchors, tags, duplicate or complex keys, ...)."""


_NO_KEY = object()
_RT = None


def _rt():
    global _RT
    if _RT is None:
        _RT = round_trip_parser()
    return _RT


# A plain scalar starting with none of these (and not a word below) is a string to YAML 1.2's resolver.
_MAYBE_TYPED = frozenset("-+.0123456789~<=!&*nNtTfF")
_TYPED_WORDS = frozenset({"null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE"})


def _plain_scalar(value: str):
    """A plain scalar as the round-trip parser (YAML 1.2) reads it: its resolver decides the type."""
    if value and value[0] not in _MAYBE_TYPED:
        return value
    if value and value[0] in "nNtTfF" and value not in _TYPED_WORDS:
        return value
    return _typed_scalar(value)


@functools.lru_cache(maxsize=4096)
def _typed_scalar(value: str):
    from ruamel.yaml.nodes import ScalarNode

    y = _rt()
    tag = str(y.resolver.resolve(ScalarNode, value, (True, False))).rpartition(":")[2]
    if tag == "str":
        return value
    if tag == "null":
        return None
    if tag == "bool":
        return value.lower() == "true"
    if tag in ("int", "float"):
        number = getattr(y.constructor, f"construct_yaml_{tag}")(ScalarNode(f"tag:yaml.org,2002:{tag}", value))
        return int(number) if tag == "int" else float(number)
    raise _Unsupported(tag)            # a timestamp: the round-trip parser constructs it


class _Builder:
    """The round-trip tree (CommentedMap/CommentedSeq with their positions, plain scalars) of a
    plain YAML document, built from libyaml's events."""

    def __init__(self):
        self.stack: list[list] = []      # [container, pending key, key mark]
        self.root = None
        self.documents = 0

    def add(self, value, mark) -> None:
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        node = top[0]
        if isinstance(node, CommentedSeq):
            node.lc.add_kv_line_col(len(node), [mark.line, mark.column])
            node.append(value)
        elif top[1] is _NO_KEY:
            if isinstance(value, (dict, list)) or value in node or value == "<<":
                raise _Unsupported("key")    # complex, duplicate or merge key: the round-trip parser names it
            top[1], top[2] = value, mark
        else:
            node[top[1]] = value
            node.lc.add_kv_line_col(top[1], [top[2].line, top[2].column, mark.line, mark.column])
            top[1] = _NO_KEY

    def event(self, yaml, event) -> None:
        if getattr(event, "anchor", None) is not None or getattr(event, "tag", None) is not None:
            raise _Unsupported("anchor or tag")
        kind = type(event)
        if kind is yaml.ScalarEvent:
            self.add(_plain_scalar(event.value) if not event.style else event.value, event.start_mark)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            node = CommentedMap() if kind is yaml.MappingStartEvent else CommentedSeq()
            node._yaml_set_line_col(event.start_mark.line, event.start_mark.column)
            self.add(node, event.start_mark)
            self.stack.append([node, _NO_KEY, None])
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            self.stack.pop()
        elif kind is yaml.DocumentStartEvent:
            self.documents += 1
            if self.documents > 1 or event.version or event.tags:
                raise _Unsupported("document")
        elif kind is yaml.AliasEvent:
            raise _Unsupported("alias")


def prepass(path: str, text: str, limits: Any) -> tuple[bool, Any]:
    """Walk the text's events with libyaml's C parser (PyYAML) before the
    round-trip parser (pure Python, ~0.1 ms and ~1 KiB per value) sees it:
    nesting deeper than ``max_depth``, more than ``max_values`` values or more
    than ``max_aliases`` aliases is refused at the event, with its line.
    ``(read, tree)``: ``read`` when libyaml read the whole text (False when it is not
    installed, the text is small, or libyaml (YAML 1.1) stopped on something the
    real parse will judge with its line); ``tree`` the round-trip tree built from the
    events when the document is plain (no anchors, aliases, tags, timestamps,
    duplicate or complex keys, one document), else None."""
    if len(text) < COUNT_FROM and text.count("*") <= limits.max_aliases:
        return False, None
    events = _events()
    if events is None:
        return False, None
    yaml = events
    try:
        plain_doc = _count_events(yaml, path, text, limits)
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):     # libyaml's own bound (deeper than any limit here)
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else None
            raise ConfigError(path=f"{path}:{line}" if line else path,
                              detail=f"nested more than {limits.max_depth} levels deep") from None
        return False, None
    except Exception:  # noqa: BLE001 - libyaml's YAML 1.1 differs; the real parse decides
        return False, None
    # libyaml counts NEL, LS and PS as line breaks (YAML 1.1), ruamel does not: its lines would differ.
    plain_doc = plain_doc and not any(c in text for c in "\x85\u2028\u2029")
    return True, (build(yaml, text) if plain_doc else None)


def _count_events(yaml, path: str, text: str, limits: Any) -> bool:
    """Count the text's events against the limits, refusing (:class:`ConfigError`, with its
    line) at the first one over; whether the document is plain (no anchor, alias or tag)."""
    starts = {yaml.MappingStartEvent, yaml.SequenceStartEvent}
    ends = {yaml.MappingEndEvent, yaml.SequenceEndEvent}
    scalar, alias = yaml.ScalarEvent, yaml.AliasEvent
    values = aliases = depth = 0
    plain_doc = True           # no anchor, alias or tag: the tree can be built from libyaml's events

    def refuse(event, detail):
        line = event.start_mark.line + 1 if getattr(event, "start_mark", None) else None
        raise ConfigError(path=f"{path}:{line}" if line else path, detail=detail)

    # Counting only (a refused file costs no tree): ~1 us an event.
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        kind = type(event)
        if kind is scalar:
            values += 1
            if plain_doc and (event.anchor is not None or event.tag is not None):
                plain_doc = False
        elif kind in ends:
            depth -= 1
            continue
        elif kind in starts:
            values += 1
            depth += 1
            if depth > limits.max_depth:
                refuse(event, f"nested more than {limits.max_depth} levels deep")
            if plain_doc and (event.anchor is not None or event.tag is not None):
                plain_doc = False
        elif kind is alias:
            values += 1
            aliases += 1
            plain_doc = False
            if aliases > limits.max_aliases:
                refuse(event, f"more than {limits.max_aliases} YAML aliases (*name); not expanded")
        else:
            continue
        if values > limits.max_values:
            refuse(event, f"more than {limits.max_values} values (mappings, lists, scalars); not read "
                          "(the limit for this kind of file)")
    return plain_doc


def build(yaml, text: str):
    """The round-trip tree from libyaml's events (a second C parse), or None when the document
    holds something only the round-trip parser judges."""
    if any(c in text for c in "\x85\u2028\u2029"):
        return None
    builder = _Builder()
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            builder.event(yaml, event)
    except Exception:  # noqa: BLE001 - _Unsupported, or anything the round-trip parser will name
        return None
    return builder.root if builder.documents == 1 and isinstance(builder.root, (CommentedMap, CommentedSeq)) \
        else None


# Texts shorter than this are parsed without counting first (a few thousand values at most).
COUNT_FROM = 32 << 10


def _events():
    """PyYAML when it has libyaml's C parser, else None."""
    try:
        import yaml
    except ImportError:
        return None
    return yaml if getattr(yaml, "__with_libyaml__", False) else None
