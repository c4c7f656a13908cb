"""Which node a canary may take: pure functions over Ironic's node records.

A canary never takes a node a user could be about to use or is using: only ``available``
nodes of the resource class, not in maintenance, with no ``instance_uuid``, no allocation, and
no ``lessee`` other than the policy's. Ironic's allocation API then takes one of these
candidates in nodeforge's name (``candidate_nodes``), so no user's deploy can take it meanwhile.
"""

from __future__ import annotations

import dataclasses
import re

# An allocation name is an Ironic logical name: letters, digits and - . _ ~ (RFC 3986 unreserved).
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._~-]+")
FAILURES_KEY = "nodeforge_canary_failures"      # node extra: consecutive failed canaries on it
STATE_KEY = "nodeforge_canary"                  # allocation extra: the run it belongs to


def allocation_name(scope: str, resource_class: str) -> str:
    """One allocation per scope and resource class: a second run finds (and resumes) the first's."""
    return _NAME_UNSAFE.sub("-", f"nodeforge-canary-{scope}-{resource_class}")[:255]


@dataclasses.dataclass(frozen=True)
class Refusal:
    node: str
    reason: str


def refusal(node: dict, resource_class: str, lessee: str | None = None) -> str | None:
    """Why ``node`` cannot be a canary of ``resource_class`` (None: it can)."""
    if node.get("resource_class") != resource_class:
        return f"resource class {node.get('resource_class')!r}"
    if node.get("provision_state") != "available":
        return f"provision state {node.get('provision_state')!r}"
    if node.get("maintenance"):
        return "in maintenance"
    if node.get("instance_uuid"):
        return "has an instance"
    if node.get("allocation_uuid"):
        return "allocated"
    node_lessee = node.get("lessee")
    if node_lessee and node_lessee != lessee:
        return "leased to another project"
    return None


def candidates(nodes: list[dict], resource_class: str, lessee: str | None = None
               ) -> tuple[list[dict], list[Refusal]]:
    """(eligible nodes, fewest earlier canary failures first, then by name; the refused nodes of
    the class with their reason)."""
    ok, refused = [], []
    for node in nodes:
        if node.get("resource_class") != resource_class:
            continue
        why = refusal(node, resource_class, lessee)
        if why:
            refused.append(Refusal(node.get("name") or node["uuid"], why))
        else:
            ok.append(node)
    ok.sort(key=lambda n: (failures(n), n.get("name") or "", n["uuid"]))
    return ok, refused


def failures(node: dict) -> int:
    try:
        return int((node.get("extra") or {}).get(FAILURES_KEY, 0))
    except (TypeError, ValueError):
        return 0
