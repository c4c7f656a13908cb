"""``docs/schemas.md`` from the declarations: ``python -m nodeforge.schema.docs > docs/schemas.md``.

Every registered file kind (:func:`nodeforge.schema.register`) is written as
one table per declared section: field, type, required, default, constraint,
secret. ``tests/schema/test_docs.py`` fails when the committed file differs
from what the declarations generate, so the docs cannot drift.

The kinds register themselves when their module is imported; the generator
imports :data:`DOCUMENTED_MODULES` (by name, only when run: importing
:mod:`nodeforge.schema` imports no feature package).
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from nodeforge.schema.declare import FileKind, Rule, is_secret, kinds
from nodeforge.schema.loader import _size

# Modules that register file kinds (a module missing here is not documented;
# one that registers nothing costs nothing).
DOCUMENTED_MODULES = (
    "nodeforge.pins.lockfile",
    "nodeforge.pins.sources",
    "nodeforge.publish.retention",
    "nodeforge.imagebuild.manifest",
    "nodeforge.oslock.lock",
    "nodeforge.imageverify.verifyreport",
    "nodeforge.ironic.inventory",
    "nodeforge.ironic.profiles",
    "nodeforge.canary.policy",
    "nodeforge.compute.flavors",
    "nodeforge.magnum.templates",
)


def import_documented() -> None:
    for name in DOCUMENTED_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def _strip(annotation):
    """(base annotation, Annotated metadata list)."""
    meta = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        meta.extend(annotation.__metadata__)
        annotation = args[0]
    return annotation, meta


def type_name(annotation) -> str:
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (list, tuple, set, frozenset):
        inner = [a for a in args if a is not Ellipsis]
        return "list of " + (type_name(inner[0]) if inner else "values")
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}" if args else "mapping"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    if annotation is typing.Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def constraint(field) -> str:
    rules = []

    def collect(annotation, label=""):
        annotation, meta = _strip(annotation)
        rules.extend(label + m.text for m in meta if isinstance(m, Rule))
        for m in meta:
            rules.extend(label + t for t in _bound_text(m))
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is dict and len(args) == 2:
            collect(args[0], "keys: ")
            collect(args[1], "values: ")
        elif origin in (list, tuple, set, frozenset, typing.Union, types.UnionType):
            for arg in args:
                if arg is not Ellipsis:
                    collect(arg, "items: " if origin is not typing.Union and origin is not types.UnionType
                            else label)

    collect(field.annotation)
    rules.extend(m.text for m in field.metadata if isinstance(m, Rule))
    for m in field.metadata:
        rules.extend(_bound_text(m))
    seen = []
    for r in rules:
        if r not in seen:
            seen.append(r)
    return "; ".join(seen)


def _bound_text(meta) -> list[str]:
    out = []
    for attr, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >="),
                       ("max_length", "length <=")):
        value = getattr(meta, attr, None)
        if value is not None and type(meta).__module__.startswith("annotated_types"):
            out.append(f"{word} {value}")
    return out


def default(field) -> str:
    if field.is_required():
        return ""
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = field.default
    if value is PydanticUndefined:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, BaseModel):
        return "(defaults below)"
    try:
        return f"`{json.dumps(value)}`"
    except TypeError:
        return f"`{value}`"


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    out: list[type[BaseModel]] = []
    stack = [model]
    while stack:
        m = stack.pop(0)
        if m in out:
            continue
        out.append(m)
        for field in m.model_fields.values():
            stack.extend(_nested(field.annotation))
    return out


def _nested(annotation) -> list[type[BaseModel]]:
    annotation, _ = _strip(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) if a is not Ellipsis for m in _nested(a)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_kind(kind: FileKind) -> str:
    lines = [f"## {kind.title}", ""]
    facts = [f"Kind `{kind.name}`"]
    if kind.path:
        facts.append(f"usually `{kind.path}`")
    facts.append("format " + ", ".join(kind.formats))
    facts.append(f"at most {_size(kind.limits.max_bytes)}")
    lines += ["; ".join(facts) + ".", ""]
    if kind.description:
        lines += [kind.description.strip(), ""]
    for model in _models(kind.model):
        lines += [f"### {model.__name__}", ""]
        doc = (model.__doc__ or "").strip()
        if doc and model.__doc__ is not BaseModel.__doc__ and not doc.startswith("Base of every declared"):
            lines += [" ".join(doc.split()), ""]
        extra = model.model_config.get("extra")
        lines += ["| field | type | required | default | constraint | secret |",
                  "|---|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            text = "; ".join(t for t in (constraint(field), field.description or "") if t)
            lines.append(f"| `{key}` | {_cell(type_name(field.annotation))} | "
                         f"{'yes' if field.is_required() else 'no'} | {_cell(default(field))} | "
                         f"{_cell(text)} | {'**secret**' if is_secret(field) else ''} |")
        other = {"forbid": "refused (named in the error).", "allow": "kept as they are.", "ignore": "ignored."}
        lines += ["", "Other keys: " + other.get(extra or "ignore", f"{extra}."), ""]
    return "\n".join(lines)


HEADER = """# Input file schemas

Generated from the declarations (`python -m nodeforge.schema.docs > docs/schemas.md`);
do not edit by hand: `tests/schema/test_docs.py` fails when this file differs from
what the declarations generate.

Every file below is read by one safe loader (`nodeforge.schema.loader`), the
same for YAML, JSON and CSV; its limits are checked before or while reading,
never after the damage:

| limit | default (a kind may set its own) | refused with |
|---|---|---|
| kind of file | regular files only (a FIFO would hang, a device never ends) | "not a regular file" |
| size | 4 MiB (inventories 8 MiB, manifests and verify reports 16 MiB), stat'ed, then read with a cap | "larger than N; not read" |
| text | UTF-8 (a byte-order mark dropped); no NUL byte; no lone surrogate (`"\\ud800"`) | the line, or the key path |
| values | 80,000 mappings, lists, keys and scalars (inventories 500,000), counted before parsing (YAML of 32 KiB or more by libyaml, JSON at C speed) | the line where the count passes the limit |
| nesting | 64 levels | the line |
| YAML aliases | 1,000 aliases, 200,000 values added by expanding them (an alias bomb is refused before it is walked) | the anchor's line |
| numbers | at most 64 bits; no infinity or NaN (YAML `.inf`/`.nan`, JSON `NaN`/`Infinity`, `1e999`) | the key path |

A YAML file that holds JSON text is read as JSON, so the same data gets the
same verdict in either syntax. Types are strict: YAML's implicit typing never
changes a value silently (an unquoted `1.30` is the number 1.3 and is refused
where a string is declared, with "quote it"; `yes`/`no`/`on` are strings, not
booleans). A name read from a file that stands for another file (a build's
image, its per-file manifest, a SUMS entry) is a plain name that stays inside
its directory, symlinks followed. Every problem is reported as
`file:line: key.path: detail`, all problems of a file at once, exit 2; with
`--output json` they are listed under `problems`.
A **secret** field holds a reference (`env:VAR`, `file:PATH`, `fernet:TOKEN`)
or is masked by field in every output.
"""


def render(selected: list[FileKind] | None = None) -> str:
    chosen = kinds() if selected is None else selected
    parts = [HEADER]
    if chosen:
        parts.append("Kinds: " + ", ".join(f"[{k.title}](#{_anchor(k.title)})" for k in chosen) + ".\n")
    parts.extend(render_kind(k) for k in chosen)
    return "\n".join(parts).rstrip("\n") + "\n"


def _anchor(title: str) -> str:
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def generate() -> str:
    """The text of ``docs/schemas.md``: every kind registered by a nodeforge module."""
    import_documented()
    return render([k for k in kinds() if k.model.__module__.startswith("nodeforge.")])


def main() -> int:
    sys.stdout.write(generate())
    return 0


if __name__ == "__main__":
    sys.exit(main())
