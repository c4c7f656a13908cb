"""Enroll and reconcile: a pure plan (desired vs actual, field by field), then apply.

:func:`plan` reads every node and port once and matches each inventory node to
an existing Ironic node by name, then BMC address, then MAC. Ports come from
the inventory's MACs or, for a Redfish node listed without any, from the MACs
its BMC reports (``discover``, :func:`redfish_macs`). For a match it
lists the fields that differ; passwords (which Ironic masks on read) are
compared through a credential fingerprint kept in the node's ``extra``
(:data:`constants.EXTRA_FINGERPRINT`). A node whose plan has no change makes
no API call at all, so a second run of the same file makes zero writes.

Ownership scope: every node a plan creates or updates is marked with its
inventory's scope (``extra.nodeforge_scope``, :data:`constants.EXTRA_SCOPE`).
A matched node marked with another scope is an error for that node (never
written): another inventory enrolled it. A matched node without a scope
(enrolled before scopes, or by hand) is taken into the inventory's scope; the
plan shows the mark being added.

:func:`apply` executes a plan with a bounded thread pool; each node's failure
is recorded on its own result and never stops the others.

python-ironicclient's bulk format adds chassis, port groups and ports with
their fields: :func:`plan_bulk` (called by :func:`plan`), :func:`apply_chassis`
and :func:`apply_members` (called by :func:`apply`); see their section below.
"""

from __future__ import annotations

import dataclasses
import threading
import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable

from nodeforge import plan as P
from nodeforge.ironic import constants as C
from nodeforge.ironic.errorkind import ErrorKind
from nodeforge.ironic.inventory import (ChassisSpec, CleanMode, Inventory, NodeSpec, PortGroupSpec, PortSpec,
                                       api_version_for, bmc_key, bmc_key_from_driver_info, normalize_mac)
from nodeforge.ironic.provisioner import IronicError, Provisioner
from nodeforge.plan import FieldChange
from nodeforge.redact import MASK, scrub

log = logging.getLogger(__name__)


# The shared plan kinds (nodeforge/plan.py); enroll plans these four, in this order.
Action = P.Kind
KINDS = (P.Kind.CREATE, P.Kind.UPDATE, P.Kind.NOOP, P.Kind.ERROR)


@dataclasses.dataclass
class NodePlan:
    spec: NodeSpec
    action: Action
    uuid: str | None = None
    matched_by: str | None = None
    changes: list[FieldChange] = dataclasses.field(default_factory=list)
    traits: list[str] | None = None      # set when traits change
    ports_to_add: list[str] = dataclasses.field(default_factory=list)
    macs_from_bmc: bool = False          # MACs read from the Redfish BMC (none in the inventory)
    error: str | None = None
    error_kind: ErrorKind = ErrorKind.CONFLICT   # why an ERROR plan is one (report.HINTS key)
    provision_state: str | None = None
    _patch: list[dict] = dataclasses.field(default_factory=list, repr=False)
    bulk: "MemberPlan | None" = None     # python-ironicclient format: port groups and ports with fields

    def to_change(self) -> P.Change:
        """This node's plan in the shared shape (nodeforge/plan.py)."""
        return P.Change(self.action, self.spec.name, tuple(self.changes), scrub(self.error) if self.error else None)

    def to_dict(self) -> dict:
        return {"name": self.spec.name, "action": self.action.value, "uuid": self.uuid,
                "matched_by": self.matched_by, "changes": [c.to_dict() for c in self.changes],
                "ports_to_add": self.ports_to_add, "macs_from_bmc": self.macs_from_bmc, "error": scrub(self.error) if self.error else None,
                "error_kind": str(self.error_kind) if self.action is Action.ERROR else None,
                "location": str(self.spec.location)}


@dataclasses.dataclass
class Plan:
    nodes: list[NodePlan]
    chassis: list["ChassisPlan"] = dataclasses.field(default_factory=list)
    chassis_applied: bool = False        # apply_chassis ran (once per plan)

    def counts(self) -> dict[str, int]:
        return P.counts(KINDS, (n.action for n in self.nodes))

    def to_dict(self) -> dict:
        # python-ironicclient format: each node's port groups and ports, and the chassis.
        nodes = [{**n.to_dict(), **({"members": n.bulk.to_dict()} if n.bulk else {})} for n in self.nodes]
        return {"summary": self.counts(), "nodes": nodes,
                **({"chassis": [c.to_dict() for c in self.chassis]} if self.chassis else {})}


def desired_automated_clean(spec: NodeSpec) -> bool:
    """Per-node cleaning policy -> Ironic's ``automated_clean``: only
    ``automated`` lets ``provide`` clean (see docs/inventory.md, "Cleaning")."""
    return spec.cleaning.mode is CleanMode.AUTOMATED


def create_body(spec: NodeSpec, *, reveal: bool) -> dict:
    body: dict[str, Any] = {"name": spec.name, "driver": spec.driver,
                            "driver_info": spec.driver_info(reveal=reveal),
                            "properties": dict(spec.properties),
                            "automated_clean": desired_automated_clean(spec),
                            **spec.all_interfaces()}
    extra = dict(spec.extra)
    fp = spec.credential_fingerprint()
    if fp:
        extra[C.EXTRA_FINGERPRINT] = fp
    if spec.scope:
        extra[C.EXTRA_SCOPE] = spec.scope
    if extra:
        body["extra"] = extra
    for k in ("resource_class", "owner", "description"):
        if getattr(spec, k) is not None:
            body[k] = getattr(spec, k)
    body.update(spec.ironic)                 # python-ironicclient format: uuid, conductor_group, ...
    if spec.chassis_uuid:
        body["chassis_uuid"] = spec.chassis_uuid
    return body


def _index(nodes: list[dict], ports: list[dict]):
    by_name = {n["name"]: n for n in nodes if n.get("name")}
    by_uuid = {n["uuid"]: n for n in nodes}
    by_bmc: dict[str, dict] = {}
    for n in nodes:
        key = bmc_key_from_driver_info(n.get("driver"), n.get("driver_info"))
        if key:
            by_bmc.setdefault(key, n)
    port_owner = {p["address"].lower(): p["node_uuid"] for p in ports}
    return by_name, by_uuid, by_bmc, port_owner


Discover = Callable[[NodeSpec], "list[str] | None"]


def redfish_macs(spec: NodeSpec) -> list[str] | None:
    """The NIC MACs the node's Redfish BMC reports (EthernetInterfaces), or
    None when the BMC cannot be read (manage will then report why)."""
    from nodeforge.ironic import preflight

    check = preflight.check_redfish(spec)
    if not check.ok:
        log.info("%s: no MACs from the BMC (%s)", spec.name, check.failure.value if check.failure else "?")
        return None
    return [m for m in (normalize_mac(x) for x in check.facts.get("macs") or []) if m] or None


def needs_discovery(spec: NodeSpec, by_name: dict, nodes_with_ports: set[str]) -> bool:
    """A Redfish node without MACs in the inventory whose Ironic node (if
    any) has no port yet: its ports come from the BMC."""
    if not spec.bmc.is_redfish or spec.macs:
        return False
    node = by_name.get(spec.name)
    return node is None or node["uuid"] not in nodes_with_ports


def plan(inventory: Inventory, provisioner: Provisioner, *, discover: Discover | None = None,
         jobs: int = 16) -> Plan:
    """Plan every node. With ``discover`` (e.g. :func:`redfish_macs`), Redfish
    nodes listed without MACs get ports for the MACs their BMC reports; a
    node that already has ports in Ironic is not asked again (so a re-run
    talks to no BMC)."""
    nodes = provisioner.list_nodes()
    ports = provisioner.list_ports()
    by_name, by_uuid, by_bmc, port_owner = _index(nodes, ports)
    specs = list(inventory.nodes)
    found: dict[str, list[str]] = {}
    if discover is not None:
        with_ports = {p["node_uuid"] for p in ports}
        wanted = [s for s in specs if needs_discovery(s, by_name, with_ports)]
        if wanted:
            with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(wanted)))) as pool:
                for s, macs in zip(wanted, pool.map(discover, wanted)):
                    if macs:
                        found[s.name] = list(macs)
    out = []
    for spec in specs:
        if spec.name in found:
            spec = dataclasses.replace(spec, macs=found[spec.name])
        p = _plan_node(spec, by_name, by_uuid, by_bmc, port_owner)
        p.macs_from_bmc = spec.name in found
        out.append(p)
    return Plan(out, chassis=plan_bulk(inventory, provisioner, out, nodes, ports))


def _plan_node(spec: NodeSpec, by_name, by_uuid, by_bmc, port_owner) -> NodePlan:
    key = bmc_key(spec.bmc)
    node, matched = by_name.get(spec.name), "name"
    if node is None and key:
        node, matched = by_bmc.get(key), "bmc"
    if node is None:
        for mac in spec.macs:
            if mac in port_owner:
                node, matched = by_uuid.get(port_owner[mac]), "mac"
                break
    if node is None:
        p = NodePlan(spec, Action.CREATE, changes=[FieldChange("node", None, "new")])
        taken = [m for m in spec.macs if m in port_owner]
        if taken:
            owner = by_uuid.get(port_owner[taken[0]], {})
            p.action = Action.ERROR
            p.error = f"MAC {taken[0]} already belongs to Ironic node {owner.get('name') or port_owner[taken[0]]}"
        p.ports_to_add = list(spec.macs)
        return p
    p = NodePlan(spec, Action.NOOP, uuid=node["uuid"], matched_by=matched,
                 provision_state=node.get("provision_state"))
    owner = (node.get("extra") or {}).get(C.EXTRA_SCOPE)
    if spec.scope and owner and owner != spec.scope:
        return dataclasses.replace(
            p, action=Action.ERROR, uuid=None, error_kind=ErrorKind.SCOPE,
            error=f"Ironic node {node.get('name') or node['uuid']} (matched by {matched}) belongs to scope "
                  f"'{owner}' (extra.{C.EXTRA_SCOPE}), not this inventory's '{spec.scope}': another inventory "
                  "enrolled it; not touched")
    if matched != "name" and node.get("name"):
        # Matching by BMC or MAC adopts unnamed nodes; a named one is someone else's.
        what = f"BMC {spec.bmc.address}" if matched == "bmc" else "MAC " + next(
            m for m in spec.macs if port_owner.get(m) == node["uuid"])
        return dataclasses.replace(p, action=Action.ERROR, uuid=None,
                                   error=f"{what} already belongs to Ironic node {node['name']}")
    # The BMC must not be another node's.
    if key and key in by_bmc and by_bmc[key]["uuid"] != node["uuid"]:
        other = by_bmc[key]
        return dataclasses.replace(p, action=Action.ERROR,
                                   error=f"BMC {spec.bmc.address} is already enrolled as node "
                                         f"{other.get('name') or other['uuid']}")
    for mac in spec.macs:
        owner = port_owner.get(mac)
        if owner is None:
            p.ports_to_add.append(mac)
        elif owner != node["uuid"]:
            other = by_uuid.get(owner, {})
            return dataclasses.replace(p, action=Action.ERROR, ports_to_add=[],
                                       error=f"MAC {mac} already belongs to Ironic node "
                                             f"{other.get('name') or owner}")
    _diff(spec, node, p)
    if p.changes or p.ports_to_add:
        p.action = Action.UPDATE
    if p.action is Action.UPDATE and C.ProvisionState.parse(node.get("provision_state")) in C.IN_USE_STATES:
        rc = [c for c in p.changes if c.field == "resource_class"]
        if rc:
            p.action = Action.ERROR
            p.error = (f"node is {node.get('provision_state')}: Ironic forbids changing the resource class "
                       "of a deployed node")
    return p


def _diff(spec: NodeSpec, node: dict, p: NodePlan) -> None:
    def change(field: str, path: str, current, desired, value=None):
        p.changes.append(FieldChange(field, current, desired))
        p._patch.append({"op": "add", "path": path, "value": desired if value is None else value})

    if node.get("name") != spec.name:
        change("name", "/name", node.get("name"), spec.name)
    if node.get("driver") != spec.driver:
        change("driver", "/driver", node.get("driver"), spec.driver)
    for k, v in spec.all_interfaces().items():
        if node.get(k) != v:
            change(k, f"/{k}", node.get(k), v)
    current_info = node.get("driver_info") or {}
    desired_info = spec.driver_info(reveal=True)
    for k, v in spec.driver_info().items():
        if k in C.SECRET_DRIVER_INFO_KEYS:
            continue
        if current_info.get(k) != v:
            change(f"driver_info.{k}", f"/driver_info/{k}", current_info.get(k), v)
    fp = spec.credential_fingerprint()
    extra = node.get("extra") or {}
    if fp and extra.get(C.EXTRA_FINGERPRINT) != fp:
        for k in desired_info:
            if k in C.SECRET_DRIVER_INFO_KEYS:
                # Desired shown masked; the patch carries the real value.
                change(f"driver_info.{k}", f"/driver_info/{k}", MASK if k in current_info else None,
                       "(rotated)" if extra.get(C.EXTRA_FINGERPRINT) else MASK, value=desired_info[k])
        change(f"extra.{C.EXTRA_FINGERPRINT}", f"/extra/{C.EXTRA_FINGERPRINT}",
               extra.get(C.EXTRA_FINGERPRINT), fp)
    props = node.get("properties") or {}
    for k, v in spec.properties.items():
        if props.get(k) != v:
            change(f"properties.{k}", f"/properties/{k}", props.get(k), v)
    for k, v in spec.extra.items():
        if extra.get(k) != v:
            change(f"extra.{k}", f"/extra/{k}", extra.get(k), v)
    if spec.scope and extra.get(C.EXTRA_SCOPE) != spec.scope:
        change(f"extra.{C.EXTRA_SCOPE}", f"/extra/{C.EXTRA_SCOPE}", extra.get(C.EXTRA_SCOPE), spec.scope)
    for k in ("resource_class", "owner", "description"):
        v = getattr(spec, k)
        if v is not None and node.get(k) != v:
            change(k, f"/{k}", node.get(k), v)
    ac = desired_automated_clean(spec)
    if node.get("automated_clean") != ac:
        change("automated_clean", "/automated_clean", node.get("automated_clean"), ac)
    if spec.traits is not None and sorted(node.get("traits") or []) != spec.traits:
        p.changes.append(FieldChange("traits", sorted(node.get("traits") or []), spec.traits))
        p.traits = spec.traits
    for mac in p.ports_to_add:
        p.changes.append(FieldChange("port", None, mac))


# --------------------------------------------------------------------------- python-ironicclient bulk format
#
# Chassis, port groups and ports with their fields (docs/inventory.md, "python-ironicclient bulk
# format"). Planned after the nodes (:func:`plan_bulk`), applied by :func:`apply_chassis` (before
# any node, so a new node is created in its chassis) and :func:`apply_members` (a node's port groups,
# then its ports, attached to their groups). Chassis have no name: a chassis is found again by its
# ``uuid`` when the file gives one, else by its ``description`` among the chassis marked with the
# inventory's scope (``extra.nodeforge_scope``), else an unmarked one with that description (taken
# into the scope, like an unmarked node). Port groups are found by name, else address, else uuid;
# ports by MAC. Only fields the file gives are compared, so a re-run of the same file writes nothing.


@dataclasses.dataclass
class ChassisPlan:
    spec: ChassisSpec
    action: Action
    uuid: str | None = None
    matched_by: str | None = None
    changes: list[FieldChange] = dataclasses.field(default_factory=list)
    error: str | None = None
    _patch: list[dict] = dataclasses.field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"chassis": self.spec.description or self.spec.uuid, "key": self.spec.key,
                "action": self.action.value, "uuid": self.uuid, "matched_by": self.matched_by,
                "changes": [c.to_dict() for c in self.changes], "error": scrub(self.error) if self.error else None,
                "location": str(self.spec.location)}


@dataclasses.dataclass
class MemberPlan:
    """A node's port groups and ports: what to create and what to patch."""

    groups_create: list[PortGroupSpec] = dataclasses.field(default_factory=list)
    groups_patch: list[tuple[str, list[dict]]] = dataclasses.field(default_factory=list)   # (uuid, patch)
    group_uuids: dict[str, str] = dataclasses.field(default_factory=dict)    # key -> uuid of an existing group
    ports_create: list[PortSpec] = dataclasses.field(default_factory=list)
    ports_patch: list[tuple[str, list[dict]]] = dataclasses.field(default_factory=list)    # (uuid, patch)
    changes: list[FieldChange] = dataclasses.field(default_factory=list)
    node_patch: list[dict] = dataclasses.field(default_factory=list)   # fields of a newer API (IC_NEWER_API)

    def empty(self) -> bool:
        return not (self.groups_create or self.groups_patch or self.ports_create or self.ports_patch
                    or self.node_patch)

    def to_dict(self) -> dict:
        return {"portgroups_to_add": [g.key for g in self.groups_create],
                "portgroups_to_update": [u for u, _ in self.groups_patch],
                "ports_to_add": [p.address for p in self.ports_create],
                "ports_to_update": [u for u, _ in self.ports_patch]}


def needs_bulk(inventory: Inventory) -> bool:
    return bool(inventory.chassis) or any(s.ports or s.portgroups or s.ironic or s.ironic_newer or s.chassis_uuid
                                          or s.chassis for s in inventory.nodes)


def chassis_body(spec: ChassisSpec) -> dict:
    body: dict[str, Any] = {"extra": {**spec.extra, **({C.EXTRA_SCOPE: spec.scope} if spec.scope else {})}}
    if spec.description is not None:
        body["description"] = spec.description
    if spec.uuid:
        body["uuid"] = spec.uuid
    return body


def plan_chassis(inventory: Inventory, existing: list[dict]) -> list[ChassisPlan]:
    out = []
    for spec in inventory.chassis:
        if spec.uuid:
            found = next((c for c in existing if c["uuid"] == spec.uuid), None)
            matched = "uuid"
        else:
            same = [c for c in existing if c.get("description") == spec.description]
            mine = [c for c in same if (c.get("extra") or {}).get(C.EXTRA_SCOPE) == spec.scope]
            unmarked = [c for c in same if not (c.get("extra") or {}).get(C.EXTRA_SCOPE)]
            found, matched = (mine[0] if mine else unmarked[0] if len(unmarked) == 1 else None), "description"
            if len(mine) > 1:
                out.append(ChassisPlan(spec, Action.ERROR, error=f"{len(mine)} chassis of scope '{spec.scope}' have "
                                       f"the description {spec.description!r}; give the chassis a uuid"))
                continue
        if found is None:
            out.append(ChassisPlan(spec, Action.CREATE, changes=[FieldChange("chassis", None, "new")]))
            continue
        cp = ChassisPlan(spec, Action.NOOP, uuid=found["uuid"], matched_by=matched)
        extra = found.get("extra") or {}
        owner = extra.get(C.EXTRA_SCOPE)
        if spec.scope and owner and owner != spec.scope:
            cp.action, cp.uuid = Action.ERROR, None
            cp.error = (f"Ironic chassis {found['uuid']} belongs to scope '{owner}' (extra.{C.EXTRA_SCOPE}), not "
                        f"this inventory's '{spec.scope}': not touched")
            out.append(cp)
            continue

        def change(field, path, current, desired):
            cp.changes.append(FieldChange(field, current, desired))
            cp._patch.append({"op": "add", "path": path, "value": desired})

        if spec.description is not None and found.get("description") != spec.description:
            change("description", "/description", found.get("description"), spec.description)
        for k, v in spec.extra.items():
            if extra.get(k) != v:
                change(f"extra.{k}", f"/extra/{k}", extra.get(k), v)
        if spec.scope and owner != spec.scope:
            change(f"extra.{C.EXTRA_SCOPE}", f"/extra/{C.EXTRA_SCOPE}", owner, spec.scope)
        if cp.changes:
            cp.action = Action.UPDATE
        out.append(cp)
    return out


def plan_bulk(inventory: Inventory, provisioner: Provisioner, plans: list[NodePlan], nodes: list[dict],
              ports: list[dict]) -> list[ChassisPlan]:
    """Add the bulk format's parts to the node plans (chassis membership,
    passthrough fields, port groups, ports); return the chassis plans. Reads
    chassis and port groups only when the inventory has any of these parts."""
    if not needs_bulk(inventory):
        return []
    chassis = plan_chassis(inventory, provisioner.list_chassis() if inventory.chassis else [])
    by_key = {c.spec.key: c for c in chassis}
    # Fields of a newer Ironic API are read (and written) at the version they need.
    gv = api_version_for("portgroup", {k for s in inventory.nodes for g in s.portgroups for k in g.fields})
    pv = api_version_for("port", {k for s in inventory.nodes for p in s.ports for k in p.fields})
    nv = api_version_for("node", {k for s in inventory.nodes for k in s.ironic_newer})
    groups = (provisioner.list_portgroups(gv if gv != C.API_VERSION else None)
              if any(s.portgroups or s.ports for s in inventory.nodes) else [])
    if pv != C.API_VERSION:
        ports = provisioner.list_ports_at(pv)
    newer_nodes = {n["uuid"]: n for n in provisioner.list_nodes_at(nv)} if nv != C.API_VERSION else {}
    by_uuid = {n["uuid"]: n for n in nodes}
    port_by_mac = {p["address"].lower(): p for p in ports}
    for i, p in enumerate(plans):
        if p.action is Action.ERROR:
            continue
        cp = by_key.get(p.spec.chassis) if p.spec.chassis else None
        if cp is not None and cp.action is Action.ERROR:
            plans[i] = dataclasses.replace(p, action=Action.ERROR, error=f"its chassis: {cp.error}")
            continue
        if cp is not None and cp.uuid:
            p.spec = dataclasses.replace(p.spec, chassis_uuid=cp.uuid)
        err = _plan_node_bulk(p, cp, by_uuid, groups, port_by_mac, newer_nodes)
        if err:
            plans[i] = dataclasses.replace(p, action=Action.ERROR, error=err)
        elif p.action is Action.NOOP and (p.changes or (p.bulk and not p.bulk.empty())):
            p.action = Action.UPDATE
    return chassis


def _plan_node_bulk(p: NodePlan, cp: ChassisPlan | None, nodes_by_uuid: dict, groups: list[dict],
                    port_by_mac: dict, newer_nodes: dict) -> str | None:
    """Fill ``p`` (and ``p.bulk``); the error that stops the node, if any."""
    spec = p.spec
    mp = MemberPlan()
    want_uuid = spec.ironic.get("uuid")
    if p.action is Action.CREATE:
        if want_uuid and want_uuid in nodes_by_uuid:
            other = nodes_by_uuid[want_uuid]
            return f"uuid {want_uuid} is already Ironic node {other.get('name') or want_uuid}"
        _plan_new_node_bulk(p, cp, mp)
        return None
    node = nodes_by_uuid.get(p.uuid) or {}
    if want_uuid and p.uuid != want_uuid:
        return f"the file gives uuid {want_uuid}, but the matched Ironic node is {p.uuid} (a uuid cannot change)"
    _plan_node_fields(p, cp, node)
    newer = newer_nodes.get(p.uuid) or {}
    for k, v in spec.ironic_newer.items():
        if newer.get(k) != v:
            mp.changes.append(FieldChange(k, newer.get(k), v))
            mp.node_patch.append({"op": "add", "path": f"/{k}", "value": v})
    error = _plan_portgroups(p, mp, groups, nodes_by_uuid)
    if error:
        return error
    _plan_ports(p, mp, port_by_mac)
    p.changes.extend(mp.changes)
    p.bulk = mp
    return None


def _plan_new_node_bulk(p: NodePlan, cp: ChassisPlan | None, mp: MemberPlan) -> None:
    """A node to create: its port groups and ports created with it, with their fields."""
    spec = p.spec
    if cp is not None and cp.action is Action.CREATE:
        p.changes.append(FieldChange("chassis_uuid", None, f"(new chassis {cp.spec.description or cp.spec.key})"))
    mp.groups_create = list(spec.portgroups)
    mp.ports_create = list(spec.ports)
    detailed = {x.address for x in spec.ports}
    p.ports_to_add = [m for m in p.ports_to_add if m not in detailed]   # created with their fields
    mp.changes = [FieldChange("portgroup", None, g.key) for g in spec.portgroups]
    mp.node_patch = [{"op": "add", "path": f"/{k}", "value": v} for k, v in spec.ironic_newer.items()]
    p.bulk = mp


def _plan_node_fields(p: NodePlan, cp: ChassisPlan | None, node: dict) -> None:
    """An existing node's chassis and Ironic fields: a change and a patch op each that differs."""
    spec = p.spec

    def change(field, path, current, desired, **marks):
        p.changes.append(FieldChange(field, current, desired))
        p._patch.append({"op": "add", "path": path, "value": desired, **marks})

    if cp is not None and cp.action is Action.CREATE:
        p.changes.append(FieldChange("chassis_uuid", node.get("chassis_uuid"),
                                     f"(new chassis {cp.spec.description or cp.spec.key})"))
        p._patch.append({"op": "add", "path": "/chassis_uuid", "value": None, "_chassis": cp.spec.key})
    elif spec.chassis_uuid and node.get("chassis_uuid") != spec.chassis_uuid:
        change("chassis_uuid", "/chassis_uuid", node.get("chassis_uuid"), spec.chassis_uuid)
    for k, v in spec.ironic.items():
        if k != "uuid" and node.get(k) != v:
            change(k, f"/{k}", node.get(k), v)


def _plan_portgroups(p: NodePlan, mp: MemberPlan, groups: list[dict], nodes_by_uuid: dict) -> str | None:
    """An existing node's port groups, found by key (name, address or uuid; unique in all of
    Ironic): created or patched; the error when one belongs to another node."""
    for g in p.spec.portgroups:
        found = next((x for x in groups if g.fields.get("name") and x.get("name") == g.fields["name"]), None) \
            or next((x for x in groups if g.fields.get("address") and x.get("address") == g.fields["address"]), None) \
            or next((x for x in groups if g.fields.get("uuid") and x["uuid"] == g.fields["uuid"]), None)
        if found is None:
            mp.groups_create.append(g)
            mp.changes.append(FieldChange("portgroup", None, g.key))
            continue
        if found.get("node_uuid") != p.uuid:
            other = nodes_by_uuid.get(found.get("node_uuid"), {})
            return f"port group {g.key} already belongs to Ironic node {other.get('name') or found.get('node_uuid')}"
        mp.group_uuids[g.key] = found["uuid"]
        patch = _member_diff(f"portgroup {g.key}", found, g.fields, mp.changes, skip=("uuid", "name"))
        if patch:
            mp.groups_patch.append((found["uuid"], patch))
    return None


def _plan_ports(p: NodePlan, mp: MemberPlan, port_by_mac: dict) -> None:
    """An existing node's ports, found by MAC address: created, or patched (their group first)."""
    for port in p.spec.ports:
        found = port_by_mac.get(port.address)
        if found is None:
            mp.ports_create.append(port)
            if port.address in p.ports_to_add:
                p.ports_to_add.remove(port.address)     # created with its fields by apply_members
            continue
        desired = dict(port.fields)
        patch = _member_diff(f"port {port.address}", found, desired, mp.changes, skip=("uuid",))
        _plan_port_group_op(port, found, mp, patch)
        if patch:
            mp.ports_patch.append((found["uuid"], patch))


def _plan_port_group_op(port: PortSpec, found: dict, mp: MemberPlan, patch: list[dict]) -> None:
    """The port's /portgroup_uuid op, if its group changes, put FIRST in its patch: Ironic's port
    PATCH looks up the new group only when the patch's first op is on /portgroup_uuid
    (api/controllers/v1/utils.py, is_path_updated returns inside its loop); after another op it
    is silently ignored."""
    if port.portgroup is not None:
        gid = mp.group_uuids.get(port.portgroup)
        if gid is None:       # its group is created in this run
            mp.changes.append(FieldChange(f"port {port.address}.portgroup_uuid", found.get("portgroup_uuid"),
                                          f"(new port group {port.portgroup})"))
            patch.insert(0, {"op": "add", "path": "/portgroup_uuid", "value": None,
                             "_portgroup": port.portgroup})
        elif found.get("portgroup_uuid") != gid:
            mp.changes.append(FieldChange(f"port {port.address}.portgroup_uuid", found.get("portgroup_uuid"), gid))
            patch.insert(0, {"op": "add", "path": "/portgroup_uuid", "value": gid})
    elif port.portgroup_uuid and found.get("portgroup_uuid") != port.portgroup_uuid:
        mp.changes.append(FieldChange(f"port {port.address}.portgroup_uuid", found.get("portgroup_uuid"),
                                      port.portgroup_uuid))
        patch.insert(0, {"op": "add", "path": "/portgroup_uuid", "value": port.portgroup_uuid})


def _member_diff(label: str, current: dict, desired: dict, changes: list[FieldChange], *,
                 skip: tuple[str, ...] = ()) -> list[dict]:
    """JSON patch for the fields ``desired`` gives; mappings (properties,
    extra) compared key by key, local_link_connection as a whole."""
    patch = []
    for k, v in desired.items():
        if k in skip:
            continue
        cur = current.get(k)
        if isinstance(v, dict) and k in ("properties", "extra"):
            for kk, vv in v.items():
                if (cur or {}).get(kk) != vv:
                    changes.append(FieldChange(f"{label}.{k}.{kk}", (cur or {}).get(kk), vv))
                    patch.append({"op": "add", "path": f"/{k}/{kk}", "value": vv})
        elif cur != v:
            changes.append(FieldChange(f"{label}.{k}", cur, v))
            patch.append({"op": "add", "path": f"/{k}", "value": v})
    return patch


_CHASSIS_LOCK = threading.Lock()


def apply_chassis(plan_: Plan, provisioner: Provisioner) -> None:
    """Create or update the plan's chassis, then point the node plans at
    their uuids; a chassis that fails fails the nodes nested in it. Once per
    plan: every node's worker calls it first, the first one does the work
    while the others wait."""
    with _CHASSIS_LOCK:
        if plan_.chassis_applied:
            return
        _apply_chassis(plan_, provisioner)
        plan_.chassis_applied = True


def _apply_chassis(plan_: Plan, provisioner: Provisioner) -> None:
    for cp in plan_.chassis:
        try:
            if cp.action is Action.CREATE:
                cp.uuid = provisioner.create_chassis(chassis_body(cp.spec))["uuid"]
                log.info("created chassis %r (%s)", cp.spec.description or cp.spec.key, cp.uuid)
            elif cp.action is Action.UPDATE:
                provisioner.patch_chassis(cp.uuid, cp._patch)
        except IronicError as exc:
            cp.action, cp.error = Action.ERROR, scrub(str(exc))
        for p in plan_.nodes:
            if p.spec.chassis != cp.spec.key or p.action is Action.ERROR:
                continue
            if cp.action is Action.ERROR:
                p.action, p.uuid, p.error = Action.ERROR, None, f"its chassis: {cp.error}"
                continue
            p.spec = dataclasses.replace(p.spec, chassis_uuid=cp.uuid)
            for op in p._patch:
                if op.pop("_chassis", None) is not None:
                    op["value"] = cp.uuid


def apply_members(p: NodePlan, provisioner: Provisioner, node_uuid: str) -> None:
    """A node's port groups (created or patched), then its ports, attached
    to their groups. Raises IronicError (recorded on the node's result)."""
    mp = p.bulk
    if mp is None:
        return

    def version(kind: str, fields) -> str | None:
        v = api_version_for(kind, fields)
        return v if v != C.API_VERSION else None

    def patched(patch: list[dict]) -> list[str]:
        return [op["path"].strip("/").split("/")[0] for op in patch]

    if mp.node_patch:
        provisioner.patch_node_at(node_uuid, mp.node_patch, api_version_for("node", patched(mp.node_patch)))
    group_uuids = dict(mp.group_uuids)
    for g in mp.groups_create:
        group_uuids[g.key] = provisioner.create_portgroup({**g.fields, "node_uuid": node_uuid},
                                                          version("portgroup", g.fields))["uuid"]
    for uuid, patch in mp.groups_patch:
        provisioner.patch_portgroup(uuid, patch, version("portgroup", patched(patch)))
    for port in mp.ports_create:
        body = {**port.fields, "address": port.address, "node_uuid": node_uuid}
        group = group_uuids.get(port.portgroup) if port.portgroup else port.portgroup_uuid
        if group:
            body["portgroup_uuid"] = group
        provisioner.create_port_body(body, version("port", port.fields))
    for uuid, patch in mp.ports_patch:
        for op in patch:
            key = op.pop("_portgroup", None)
            if key is not None:
                op["value"] = group_uuids[key]
        provisioner.patch_port(uuid, patch, version("port", patched(patch)))


@dataclasses.dataclass
class EnrollResult:
    name: str
    action: Action
    uuid: str | None = None
    ok: bool = True
    error: str | None = None
    error_kind: ErrorKind | None = None

    def result(self) -> P.Result:
        """As the shared :class:`nodeforge.plan.Result`."""
        return P.result(self.name, self.action, ok=self.ok, error=self.error,
                        error_kind=str(self.error_kind) if self.error_kind else None)


DEFAULT_JOBS = 16


def apply(plan_: Plan, provisioner: Provisioner, *, jobs: int = DEFAULT_JOBS,
          progress: Callable[[int, int], None] | None = None) -> list[EnrollResult]:
    """Execute the plan; one result per node (in inventory order).

    ``jobs`` threads create/update nodes (each node's calls in order: node,
    traits, ports); how many calls are in flight at once is the provisioner's
    pacer's to say (``pacing.py``: it follows Ironic's latency and its
    409/503 answers), ``jobs`` is the upper bound. ``progress(done, total)``
    after each node."""
    def one(p: NodePlan) -> EnrollResult:
        apply_chassis(plan_, provisioner)       # once, before the first node (bulk format)
        if p.action is Action.ERROR:
            return EnrollResult(p.spec.name, p.action, p.uuid, ok=False, error=p.error, error_kind=p.error_kind)
        if p.action is Action.NOOP:
            return EnrollResult(p.spec.name, p.action, p.uuid)
        uuid = p.uuid
        try:
            if p.action is Action.CREATE:
                node = provisioner.create_node(create_body(p.spec, reveal=True))
                uuid = node["uuid"]
                log.info("created node %s (%s)", p.spec.name, uuid)
                if p.spec.traits:
                    provisioner.set_traits(uuid, p.spec.traits)
            else:
                if p._patch:
                    provisioner.patch_node(uuid, p._patch)
                if p.traits is not None:
                    provisioner.set_traits(uuid, p.traits)
                log.info("updated node %s: %s", p.spec.name, ", ".join(c.field for c in p.changes))
            for mac in p.ports_to_add:
                provisioner.create_port(uuid, mac)
            apply_members(p, provisioner, uuid)
        except IronicError as exc:
            return EnrollResult(p.spec.name, p.action, uuid, ok=False, error=scrub(str(exc)),
                                error_kind=ErrorKind.of(exc.kind))
        return EnrollResult(p.spec.name, p.action, uuid)

    total = len(plan_.nodes)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, p) for p in plan_.nodes]
        if progress:
            for i, _ in enumerate(as_completed(futures), 1):
                progress(i, total)
        return [f.result() for f in futures]
