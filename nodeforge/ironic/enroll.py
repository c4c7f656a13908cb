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
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable

from nodeforge.ironic import constants as C
from nodeforge.ironic.inventory import (CleanMode, Inventory, NodeSpec, bmc_key, bmc_key_from_driver_info,
                                       normalize_mac)
from nodeforge.ironic.provisioner import IronicError, Provisioner
from nodeforge.redact import MASK, is_secret_field, scrub, scrub_obj

log = logging.getLogger(__name__)


class Action(str, enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    NOOP = "no-op"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class FieldChange:
    field: str
    current: Any
    desired: Any

    def to_dict(self) -> dict:
        if is_secret_field(self.field):       # driver_info.ipmi_password: both sides masked by field
            return {"field": self.field, "current": MASK if self.current is not None else None,
                    "desired": self.desired if self.desired == "(rotated)" else MASK}
        return scrub_obj({"field": self.field, "current": self.current, "desired": self.desired})


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
    error_kind: str = "conflict"         # report.HINTS key for an ERROR plan
    provision_state: str | None = None
    _patch: list[dict] = dataclasses.field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"name": self.spec.name, "action": self.action.value, "uuid": self.uuid,
                "matched_by": self.matched_by, "changes": [c.to_dict() for c in self.changes],
                "ports_to_add": self.ports_to_add, "macs_from_bmc": self.macs_from_bmc, "error": scrub(self.error) if self.error else None,
                "error_kind": self.error_kind if self.action is Action.ERROR else None,
                "location": str(self.spec.location)}


@dataclasses.dataclass
class Plan:
    nodes: list[NodePlan]

    def counts(self) -> dict[str, int]:
        out = {a.value: 0 for a in Action}
        for n in self.nodes:
            out[n.action.value] += 1
        return out

    def to_dict(self) -> dict:
        return {"summary": self.counts(), "nodes": [n.to_dict() for n in self.nodes]}


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
    fp = spec.bmc.credential_fingerprint()
    if fp:
        extra[C.EXTRA_FINGERPRINT] = fp
    if spec.scope:
        extra[C.EXTRA_SCOPE] = spec.scope
    if extra:
        body["extra"] = extra
    for k in ("resource_class", "owner", "description"):
        if getattr(spec, k) is not None:
            body[k] = getattr(spec, k)
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
    return Plan(out)


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
            p, action=Action.ERROR, uuid=None, error_kind="scope",
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
    fp = spec.bmc.credential_fingerprint()
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


@dataclasses.dataclass
class EnrollResult:
    name: str
    action: Action
    uuid: str | None = None
    ok: bool = True
    error: str | None = None
    error_kind: str | None = None


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
        except IronicError as exc:
            return EnrollResult(p.spec.name, p.action, uuid, ok=False, error=scrub(str(exc)),
                                error_kind=exc.kind.value)
        return EnrollResult(p.spec.name, p.action, uuid)

    total = len(plan_.nodes)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, p) for p in plan_.nodes]
        if progress:
            for i, _ in enumerate(as_completed(futures), 1):
                progress(i, total)
        return [f.result() for f in futures]
