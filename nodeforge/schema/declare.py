"""Declarations (pydantic v2) and the one :func:`validate` that turns
pydantic's errors into :class:`~nodeforge.schema.problems.Problem` s with lines.

A file kind is a :class:`Declared` model: every field declared once, with its
type (strict: YAML's implicit typing never silently changes a value: an
unquoted ``1.30`` is the number 1.3 and is refused with "quote it"), whether
it is required, its default, its constraint (a vocabulary type of
:mod:`nodeforge.schema.vocab`, or pydantic's ``ge``/``le``/...), whether it
is a secret (:data:`SECRET` in the ``Annotated`` metadata, or
``secret_field()``), and unknown keys refused with the key named.
:func:`register` records a model as a documented file kind
(``python -m nodeforge.schema.docs``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import types
import typing
from typing import Any, Iterable

import pydantic
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticUndefined

from nodeforge.schema.loader import DEFAULT_LIMITS, Document, Limits, load
from nodeforge.schema.problems import Problem, SchemaError


class Declared(BaseModel):
    """Base of every declared file (and section of one): strict types, unknown
    keys refused, immutable instances."""

    # hide_input_in_errors: a pydantic ValidationError printed anyway never shows a value (a secret).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              arbitrary_types_allowed=False, hide_input_in_errors=True)


@dataclasses.dataclass(frozen=True)
class Rule:
    """``Annotated`` metadata: the constraint of a type in words, for errors and docs."""

    text: str


@dataclasses.dataclass(frozen=True)
class _SecretMarker:
    def __repr__(self) -> str:
        return "SECRET"


# ``Annotated[str, SECRET]``: the field holds a secret (masked by field, documented as secret).
SECRET = _SecretMarker()


def secret_field(default: Any = PydanticUndefined, **kwargs) -> Any:
    """``Field(...)`` of a secret-bearing field (same as ``Annotated[..., SECRET]``)."""
    extra = dict(kwargs.pop("json_schema_extra", None) or {})
    extra["secret"] = True
    return Field(default, json_schema_extra=extra, **kwargs)


def is_secret(field: pydantic.fields.FieldInfo) -> bool:
    if any(isinstance(m, _SecretMarker) for m in field.metadata):
        return True
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get("secret"):
        return True
    return _annotation_has(field.annotation, _SecretMarker)


def _annotation_has(annotation, cls) -> bool:
    """True when ``annotation`` (or a member of its ``X | None`` union) carries ``cls`` metadata."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return any(isinstance(m, cls) for m in annotation.__metadata__) or \
            _annotation_has(typing.get_args(annotation)[0], cls)
    if origin in (typing.Union, types.UnionType):
        return any(_annotation_has(a, cls) for a in typing.get_args(annotation))
    return False


def secret_fields(model: type[BaseModel], prefix: tuple = ()) -> list[tuple]:
    """Key paths (with ``*`` for any key or index) of every secret field of ``model``."""
    out = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if is_secret(field):
            out.append((*prefix, key))
        for sub, wild in _nested_models(field.annotation):
            out.extend(secret_fields(sub, (*prefix, key, *wild)))
    return out


def _nested_models(annotation, wild: tuple = ()) -> list[tuple[type[BaseModel], tuple]]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _nested_models(typing.get_args(annotation)[0], wild)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, wild)]
    if origin in (list, tuple, set, frozenset):
        return [m for a in typing.get_args(annotation) if a is not Ellipsis for m in _nested_models(a, (*wild, "*"))]
    if origin is dict:
        args = typing.get_args(annotation)
        return _nested_models(args[1], (*wild, "*")) if len(args) == 2 else []
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _nested_models(a, wild)]
    return []


# --- validation -------------------------------------------------------------------

def validate(document: Document, model: type[BaseModel], *, context: dict | None = None,
             hint: str | None = None, checks=None):
    """``document.data`` as an instance of ``model``; every problem of the file
    (with its line) in one :class:`SchemaError`.

    ``checks(document, instance) -> iterable of Problem`` adds the rules a
    declaration cannot state (across entries, against a key): it runs once the
    declaration holds; use ``document.problem(keypath, detail)`` to build them."""
    try:
        instance = model.model_validate(document.data, context=context)
    except ValidationError as exc:
        raise SchemaError(document.path, problems_of(exc, document, model), hint=hint) from None
    if checks is not None:
        problems = sorted(checks(document, instance), key=lambda p: p.line or 0)
        if problems:
            raise SchemaError(document.path, problems, hint=hint)
    return instance


def validate_data(label: str, data: Any, model: type[BaseModel], *, context: dict | None = None,
                  hint: str | None = None):
    """Like :func:`validate` for data that is not a file (the environment, a
    command line): problems carry ``label`` and no line."""
    return validate(Document(label, "data", data, data), model, context=context, hint=hint)


def load_file(path, model: type[BaseModel], text: str | None = None, *, format: str | None = None,
              limits: Limits | None = None, context: dict | None = None):
    """:func:`~nodeforge.schema.loader.load` then :func:`validate`: ``(document, instance)``.
    The limits default to the registered kind's (see :func:`register`)."""
    if limits is None:
        limits = next((k.limits for k in _REGISTRY.values() if k.model is model), DEFAULT_LIMITS)
    document = load(path, text, format=format, limits=limits)
    return document, validate(document, model, context=context)


def _spelled(value) -> str:
    """A scalar as a file would spell it (``true``, not Python's ``True``) when its text is not known."""
    if isinstance(value, (bool, int, float)) or value is None:
        return json.dumps(value)
    return str(value)


def problems_of(exc: ValidationError, document: Document, model: type[BaseModel] | None = None) -> list[Problem]:
    out: list[Problem] = []
    seen = set()
    errors = [(err, *_document_path(document.data, err["loc"], err["type"])) for err in exc.errors(include_url=False)]
    # An optional field (X | None) with a bad value: the "or null" member's error adds nothing.
    typed = {kp for err, kp, _ in errors if err["type"] != "none_required"}
    for err, keypath, on_key in errors:
        if err["type"] == "none_required" and keypath in typed:
            continue
        detail = _detail(err, document, keypath, model, on_key)
        problem = Problem(document.path, document.line(keypath) if document.format != "data" else None,
                          keypath, detail)
        if (problem.keypath, problem.detail) not in seen:
            seen.add((problem.keypath, problem.detail))
            out.append(problem)
    out.sort(key=lambda p: (p.line or 0))
    return out


def _document_path(data, loc: tuple, kind: str) -> tuple[tuple, bool]:
    """pydantic's ``loc`` reduced to the parts that exist in the document
    (union members, validator names and ``[key]`` dropped)."""
    out = []
    node = data
    on_key = False
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if part == "[key]":
            on_key = True
            continue
        if isinstance(node, dict) and not _has_key(node, part):
            part = next((k for k in node if isinstance(part, str) and str(k) == part), part)
        if isinstance(node, dict) and _has_key(node, part):
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif last and kind == "missing" and isinstance(node, dict):
            out.append(part)
        elif last and isinstance(node, dict) and isinstance(part, str) and part.isidentifier() and \
                part not in _TYPE_TAGS and (kind == "value_error" or kind.startswith("nodeforge_")):
            out.append(part)      # a validator of a field the file leaves out (validate_default)
        elif isinstance(node, dict) and isinstance(part, str) and kind == "missing" and \
                all(not isinstance(p, int) for p in loc[i:]):
            out.append(part)
            node = None
        # else: a union member / validator tag: not a key of the document
    return tuple(out), on_key


# pydantic's loc tags of union members (never a key of the document).
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "set", "frozenset", "none",
                        "bytes", "date", "datetime", "any"})


def _has_key(node: dict, part) -> bool:
    try:
        return part in node
    except TypeError:
        return False


_TYPE_WORDS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
               "bool_type": "true or false", "dict_type": "a mapping", "list_type": "a list",
               "model_type": "a mapping", "model_attributes_type": "a mapping", "tuple_type": "a list",
               "int_parsing": "an integer", "float_parsing": "a number", "bool_parsing": "true or false",
               "set_type": "a list", "frozen_set_type": "a list", "none_required": "nothing (null)"}


def vocab_shown(value: str) -> str:
    """A string as errors show it: cut to 60 characters when longer (see vocab.shown)."""
    return f"{value[:60]!r}... ({len(value)} characters)" if len(value) > 80 else repr(value)


def kind_of(value) -> str:
    """How a value read from a file is described in an error."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {vocab_shown(value)}"
    if isinstance(value, datetime.datetime):
        return f"the timestamp {value.isoformat()}"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def kind_word(value) -> str:
    """What kind of value it is, without the value (for a secret field)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, datetime.date):
        return "a date"
    if isinstance(value, str):
        return "a string"
    return kind_of(value) if value is None or isinstance(value, (dict, list)) else type(value).__name__


def _allowed_keys(model, keypath: tuple, data) -> list[str] | None:
    if model is None:
        return None
    current = model
    node = data
    for part in keypath[:-1]:
        node = node[part] if isinstance(node, (dict, list)) else None
        if isinstance(part, int) or (isinstance(current, _Container)):
            current = current.inner if isinstance(current, _Container) else None
            if current is None:
                return None
            continue
        fields = getattr(current, "model_fields", None)
        if not fields:
            return None
        field = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        current = _step(field.annotation)
    while isinstance(current, _Container):
        current = current.inner
    fields = getattr(current, "model_fields", None)
    return [f.alias or n for n, f in fields.items()] if fields else None


def _field_at(model, keypath: tuple):
    """The FieldInfo declaring the value at ``keypath`` (None when unknown)."""
    current, field = model, None
    for part in keypath:
        if isinstance(current, _Container):
            current = current.inner
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or isinstance(part, int):
            return None
        field = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        current = _step(field.annotation)
    return field


def _secret_at(model, keypath: tuple) -> bool:
    """True when the value at ``keypath`` (or a section above it) is declared secret."""
    if model is None:
        return False
    return any((f := _field_at(model, keypath[:i])) is not None and is_secret(f) for i in range(1, len(keypath) + 1))


@dataclasses.dataclass
class _Container:
    inner: Any


def _step(annotation):
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _step(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _Container(_step(args[0])) if args else None
    if origin is dict:
        args = typing.get_args(annotation)
        return _Container(_step(args[1])) if len(args) == 2 else None
    if origin in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _step(models[0]) if len(models) == 1 else None
    return None


class _Hidden:
    """Stands for a secret field's value in a message."""


def _detail(err: dict, document: Document, keypath: tuple, model, on_key: bool) -> str:
    kind = err["type"]
    value = err.get("input")
    prefix = "key " if on_key else ""
    if not on_key and _secret_at(model, keypath) and kind not in ("missing", "extra_forbidden"):
        # A secret field: say what is wrong, never what the value is.
        if kind.startswith("nodeforge_"):
            return err.get("msg", "invalid")      # a nodeforge validator's own message (never holds the value)
        want = _TYPE_WORDS.get(kind)
        if kind == "string_type" and isinstance(value, (bool, int, float, datetime.date)):
            # YAML's implicit typing (0123, true, 1e3): the text as written is the secret, so only the hint.
            return f"expected a string, got {kind_word(value)}; quote it; the value is not shown (a secret field)"
        if want:
            return f"expected {want}; the value is not shown (a secret field)"
        msg = err.get("msg", "invalid")
        if kind in ("value_error", "assertion_error") and "not shown" in msg:
            return msg.split(", ", 1)[1] if msg.startswith(("Value error, ", "Assertion failed, ")) else msg
        return "invalid; the value is not shown (a secret field)"
    if kind == "missing":
        return f"missing key '{keypath[-1]}'" if keypath else "missing"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, keypath, document.data)
        return "unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
    if on_key and isinstance(value, (int, float, bool, datetime.date)):
        written = document.source_text(keypath, key=True)
        return f"key {kind_of(value)} must be a string; quote it: \"{written or _spelled(value)}\""
    if kind in _TYPE_WORDS:
        want = _TYPE_WORDS[kind]
        text = f"{prefix}expected {want}, got {kind_of(value)}"
        if kind == "string_type" and isinstance(value, (bool, int, float, datetime.date)):
            written = document.source_text(keypath) if not on_key else None
            text += f"; quote it: \"{written or _spelled(value)}\""
        elif kind in ("int_type", "float_type", "bool_type") and isinstance(value, str):
            text += " (write it without quotes)" if kind != "bool_type" else ""
        return text
    if kind == "enum":
        expected = (err.get("ctx") or {}).get("expected", "")
        return f"{prefix}got {kind_of(value)}, expected {expected}"
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        return f"{prefix}got {kind_of(value)}, expected {expected}"
    msg = err.get("msg", "invalid")
    for head in ("Value error, ", "Assertion failed, "):
        if msg.startswith(head):
            msg = msg[len(head):]
    if kind in ("value_error", "assertion_error") or kind.startswith("nodeforge_"):
        return prefix + msg
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than", "too_short", "too_long",
                "string_too_short", "string_too_long", "finite_number", "multiple_of", "string_pattern_mismatch"):
        return f"{prefix}{msg[0].lower() + msg[1:]}, got {kind_of(value)}".replace("input should", "must")
    return f"{prefix}{msg}"


# --- registry of file kinds -------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FileKind:
    """One documented kind of input file."""

    name: str                      # "lockfile"
    model: type[BaseModel]
    title: str                     # "Version lockfile"
    path: str = ""                 # where it usually lives: "manifests/versions.yaml"
    description: str = ""
    formats: tuple[str, ...] = ("yaml",)
    limits: Limits = DEFAULT_LIMITS


_REGISTRY: dict[str, FileKind] = {}


def register(name: str, model: type[BaseModel], *, title: str, path: str = "", description: str = "",
             formats: Iterable[str] = ("yaml",), limits: Limits = DEFAULT_LIMITS) -> FileKind:
    """Record ``model`` as the declaration of file kind ``name`` (documented in
    ``docs/schemas.md``). Registering the same name again replaces it (a module
    re-import)."""
    kind = FileKind(name, model, title, path, description, tuple(formats), limits)
    _REGISTRY[name] = kind
    return kind


def kinds() -> list[FileKind]:
    return sorted(_REGISTRY.values(), key=lambda k: k.name)


def kind(name: str) -> FileKind:
    return _REGISTRY[name]


def enum_values(cls: type[enum.Enum]) -> list:
    return [m.value for m in cls]
