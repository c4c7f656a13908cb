"""One inventory being read (:class:`_Reader`: its document, problems, warnings) and its
nodes as nodeforge entries (:class:`_Entry`), shared by the format readers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from nodeforge import schema
from nodeforge.base import secrets as secrets_mod
from nodeforge.errors import ConfigError
from nodeforge.schema import Document, Problem
from nodeforge.ironic.inventory.model import ChassisSpec, Format, Location


# --------------------------------------------------------------------------- loading

def detect_format(path: Path, doc: Any) -> Format:
    if path.suffix.lower() == ".csv":
        return Format.CSV
    if isinstance(doc, dict):
        if "version" in doc or "defaults" in doc:
            return Format.NODEFORGE
        if "nodes" in doc or "chassis" in doc:
            nodes = doc.get("nodes") or []
            if isinstance(nodes, list) and nodes and isinstance(nodes[0], dict) and "bmc" in nodes[0]:
                return Format.NODEFORGE
            return Format.IRONICCLIENT
        if doc and all(isinstance(v, dict) for v in doc.values()):
            return Format.BIFROST
    raise ConfigError(path=str(path), detail="cannot tell the inventory format (nodeforge YAML needs "
                                             "'version: 1'); pass --format")


Remap = Callable[[tuple], tuple]


@dataclasses.dataclass
class _Entry:
    """One node in nodeforge terms (:class:`NodeEntry`'s mapping), how its key paths map back
    to the file, where it was read, and the format-specific parts built already."""

    data: dict
    remap: Remap
    location: Location
    bulk: dict = dataclasses.field(default_factory=dict)


class _Reader:
    """One inventory being read: its document, problems and warnings."""

    def __init__(self, document: Document, resolver: secrets_mod.Resolver):
        self.document = document
        self.resolver = resolver
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.chassis: list[ChassisSpec] = []

    def problem(self, keypath: tuple, detail: str, *, warning: bool = False) -> None:
        (self.warnings if warning else self.problems).append(self.document.problem(keypath, detail))

    def declared(self, data: Any, model, remap: Remap = lambda kp: kp, context: dict | None = None):
        """``data`` as ``model`` or None; its problems, at their key paths in the file (``remap``)."""
        try:
            return model.model_validate(data, context=context)
        except ValidationError as exc:
            local = Document(self.document.path, "data", data, data)
            for p in schema.problems_of(exc, local, model):
                self.problem(remap(p.keypath), p.detail)
            return None

    def location(self, keypath: tuple, row: int | None = None) -> Location:
        return Location(self.document.path, self.document.line(keypath), row)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.keypath, p.detail) not in seen:
            seen.add((p.keypath, p.detail))
            out.append(p)
    return out


# --- nodeforge YAML/JSON ------------------------------------------------------------------

def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


