"""The nodeforge YAML/JSON format: ``{version, scope, defaults, nodes}``."""

from __future__ import annotations

from typing import Any

from nodeforge import schema
from nodeforge.ironic.inventory.declare import NodeforgeFile
from nodeforge.ironic.inventory.entries import Remap, _Entry, _Reader, _merge


def _nodeforge_entries(reader: _Reader, data: Any) -> list[_Entry] | None:
    if not isinstance(data, dict):
        reader.problem((), "the top level must be a mapping with 'version' and 'nodes'")
        return None
    nodes = data.get("nodes")
    reader.declared({**data, "nodes": []}, NodeforgeFile)     # the top level; nodes one by one below
    if not isinstance(nodes, list):
        if "nodes" in data:
            reader.problem(("nodes",), f"expected a list of nodes, got {schema.kind_of(nodes)}")
        return None
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}

    def remap_for(i: int, item: dict) -> Remap:
        def remap(kp: tuple) -> tuple:
            # A key the node does not set itself came from defaults.
            node, dflt = item, defaults
            for depth, part in enumerate(kp):
                if isinstance(node, dict) and part in node:
                    node, dflt = node[part], dflt.get(part) if isinstance(dflt, dict) else None
                    continue
                if isinstance(dflt, dict) and part in dflt:
                    return ("defaults", *kp)
                break
            return ("nodes", i, *kp)
        return remap

    entries = []
    for i, item in enumerate(nodes):
        if not isinstance(item, dict):
            reader.problem(("nodes", i), f"a node must be a mapping, got {schema.kind_of(item)}")
            continue
        entries.append(_Entry(_merge(defaults, item), remap_for(i, item), reader.location(("nodes", i))))
    return entries


# --- nodeforge CSV --------------------------------------------------------------------------

