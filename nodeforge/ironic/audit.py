"""The baseline audit: every node against its profile's baseline, and the nodes of one resource
class against each other.

Per node (its profile is the one whose ``resource_class`` the node has):

* the node's **view** (:class:`NodeView`): Ironic's (the BIOS settings and firmware components
  it cached at its last verify, cleaning or servicing, its ``raid_config``, its inspection
  data), or, for a Redfish node whose BMC the ``--inventory`` names, the BMC's own answer now
  (:mod:`nodeforge.ironic.bmcview`: BIOS, volumes, firmware), which also sees what was changed
  behind Ironic's back;
* the comparison is :func:`nodeforge.ironic.baseline.plan_node`'s: each item to change (current,
  wanted, Ironic's step) is **drift**; on an ``active`` node it is drift **deferred** until the
  node is free (nothing is ever changed by the audit); a baseline the node cannot take (a value
  outside its own registry, a RAID layout its disks cannot hold) is a **problem**;
* a node whose view cannot be read (an Ironic call refused, a BMC unreachable, no BIOS settings
  or firmware cached where the baseline pins some) is **unreadable**.

**Outliers**: within each resource class, the inspection data of its nodes (CPU model and
count, memory, disks, NIC speeds) is compared value by value; a node whose value differs from
the one most of the class has is an outlier for that fact (when no value has a majority, every
node's value is listed), so a difference no baseline lists is seen too.

Exit codes (:func:`exit_code`): 0 nothing found; :data:`DRIFT` (11) drift, deferred drift,
problems or outliers; 3 some nodes could not be read (whatever the others show); 1 none could.
"""

from __future__ import annotations

import collections
import dataclasses
from concurrent.futures import ThreadPoolExecutor

from nodeforge.errors import ExitCode
from nodeforge.ironic import baseline as bl
from nodeforge.ironic import classify as cl
from nodeforge.ironic import profiles as P
from nodeforge.ironic.provisioner import IronicError, Provisioner
from nodeforge.redact import scrub

DRIFT = int(ExitCode.DRIFT)   # the audit's own exit code: drift found (README "Exit codes")
GIB_SLACK = 1         # a live volume's size in GiB may differ from the baseline's by rounding

OK, DRIFTED, DEFERRED, PROBLEM, UNREADABLE, NO_BASELINE = "ok", "drift", "deferred", "problem", "unreadable", \
    "no-baseline"
STATUSES = (OK, DRIFTED, DEFERRED, PROBLEM, UNREADABLE, NO_BASELINE)


@dataclasses.dataclass
class NodeView:
    """What is known of one node: Ironic's shapes, whichever source filled them."""

    name: str
    uuid: str
    provision_state: str | None
    resource_class: str | None
    source: str = "ironic"                   # ironic | bmc
    bios: list[dict] | None = None
    disks: list[dict] | None = None          # the physical disks a RAID is built from, sizes in bytes
    raid_config: dict | None = None
    firmware: list[dict] | None = None
    root_device: dict | None = None          # the node's root device hints (a property)
    agent: bool = False                      # the node boots Ironic's agent (deploy images in driver_info)
    raid_interface: str | None = None
    facts: P.Facts | None = None
    error: str | None = None


@dataclasses.dataclass
class NodeAudit:
    view: NodeView
    profile: str | None
    status: str
    items: list[bl.Item] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        v = self.view
        return {"name": v.name, "uuid": v.uuid, "provision_state": v.provision_state,
                "resource_class": v.resource_class, "profile": self.profile, "source": v.source,
                "status": self.status, "items": [i.to_dict() for i in self.items], "problems": self.problems,
                "error": v.error}


@dataclasses.dataclass(frozen=True)
class Outlier:
    resource_class: str
    fact: str
    node: str
    value: object
    norm: object            # the value most of the class has (None: no value has a majority)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Audit:
    nodes: list[NodeAudit]
    outliers: list[Outlier]
    profiles_path: str
    scope: str | None = None
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        got = collections.Counter(n.status for n in self.nodes)
        return {s: got.get(s, 0) for s in STATUSES} | {"outliers": len(self.outliers)}

    def exit_code(self) -> int:
        return exit_code(self)

    def to_dict(self) -> dict:
        return {"profiles_file": self.profiles_path, "scope": self.scope, "skipped": dict(sorted(self.skipped.items())),
                "summary": self.counts(), "exit_code": int(self.exit_code()),
                "nodes": [n.to_dict() for n in self.nodes], "outliers": [o.to_dict() for o in self.outliers]}

    def rows(self) -> list[dict]:
        """One row per finding (and one per node without any), for the table."""
        out = []
        for n in self.nodes:
            base = {"node": n.view.name, "state": n.view.provision_state or "", "profile": n.profile or "",
                    "source": n.view.source}
            findings = [{"status": n.status, "item": i.item, "current": show(i.current), "wanted": show(i.wanted)}
                        for i in n.items]
            findings += [{"status": PROBLEM, "item": "", "current": "", "wanted": p} for p in n.problems]
            if n.view.error:
                findings.append({"status": UNREADABLE, "item": "", "current": "", "wanted": n.view.error})
            out += [base | f for f in findings] or [base | {"status": n.status, "item": "", "current": "",
                                                           "wanted": ""}]
        out += [{"node": o.node, "state": "", "profile": "", "source": "inspection", "status": "outlier",
                 "item": f"{o.resource_class}: {o.fact}", "current": show(o.value),
                 "wanted": show(o.norm) if o.norm is not None else "(no majority)"} for o in self.outliers]
        return out


COLUMNS = ["node", "state", "profile", "source", "status", "item", "current", "wanted"]


def show(value) -> str:
    if isinstance(value, dict) and "component" in value:
        return f"{value.get('version')} ({value.get('match', 'minimum')})"
    if isinstance(value, (list, tuple)):
        return ", ".join(show(v) for v in value) or "none"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)


def exit_code(audit: Audit) -> int:
    unreadable = [n for n in audit.nodes if n.status == UNREADABLE]
    if unreadable:
        return int(ExitCode.FAILURE if len(unreadable) == len(audit.nodes) else ExitCode.PARTIAL)
    if audit.outliers or any(n.status in (DRIFTED, DEFERRED, PROBLEM) for n in audit.nodes):
        return DRIFT
    return int(ExitCode.OK)


# --- comparison (pure: views in, findings out) -----------------------------------------------

def judge(view: NodeView, profile: P.Profile | None) -> NodeAudit:
    """One node against its profile's baseline."""
    if view.error:
        return NodeAudit(view, profile.name if profile else None, UNREADABLE)
    if profile is None or profile.baseline is None:
        return NodeAudit(view, profile.name if profile else None, NO_BASELINE)
    b = profile.baseline
    raid = view.raid_config
    if b.raid and raid is not None:
        raid = live_raid_config(raid.get("volumes" if view.source == "bmc" else "logical_disks") or [], list(b.raid))
    plan = bl.plan_node(b, view.name, bios=view.bios if b.bios else None, disks=view.disks, raid_config=raid,
                        firmware=view.firmware if b.firmware else None, provision_state=view.provision_state,
                        root_device=view.root_device, raid_interface=view.raid_interface)
    status = PROBLEM if plan.problems else DEFERRED if plan.items and plan.deferred else \
        DRIFTED if plan.items else OK
    return NodeAudit(view, profile.name, status, plan.items, [str(p) for p in plan.problems])


def live_raid_config(volumes: list[dict], wanted: list[dict]) -> dict:
    """The volumes a BMC reports, or the logical disks of Ironic's ``raid_config`` (its Redfish RAID
    interface records each volume's size in GB and level, no root mark), as the baseline's
    ``raid_config`` would read, judged as far as Redfish shows: the
    level of each volume in order, and its size where the baseline names one (within
    :data:`GIB_SLACK`; ``MAX`` takes any size). Redfish does not mark the root volume: a volume
    of the level the baseline wants there is taken as it."""
    out = []
    for i, vol in enumerate(volumes):
        want = wanted[i] if i < len(wanted) else {}
        size = vol.get("size_gb")
        if want.get("size_gb") == "MAX" or (isinstance(want.get("size_gb"), int) and isinstance(size, int)
                                            and abs(size - want["size_gb"]) <= GIB_SLACK):
            size = want["size_gb"]
        same_level = str(vol.get("raid_level")) == str(want.get("raid_level"))
        out.append({"size_gb": size, "raid_level": vol.get("raid_level"),
                    "is_root_volume": bool(want.get("is_root_volume")) and same_level})
    return {"logical_disks": out}


def _fact_values(facts: P.Facts) -> dict[str, object]:
    disks = sorted(f"{d.kind or '?'} {d.size_gb} GB" for d in facts.disks or [])
    nics = sorted(f"{n.speed_gbps:g} Gb/s" if n.speed_gbps else "? Gb/s" for n in facts.nics or [])
    return {"cpu_model": facts.cpu_model, "cpu_count": facts.cpu_count, "memory_gib": facts.memory_gib,
            "disks": disks if facts.disks is not None else None, "nics": nics if facts.nics is not None else None}


def outliers(views: list[NodeView]) -> list[Outlier]:
    """Per resource class and fact, the nodes whose inspected value differs from the class's."""
    by_class: dict[str, list[NodeView]] = collections.defaultdict(list)
    for v in views:
        if v.resource_class and v.facts is not None and v.facts.source is P.Source.INSPECTION:
            by_class[v.resource_class].append(v)
    out = []
    for rc, members in sorted(by_class.items()):
        if len(members) < 2:
            continue
        values = {v.name: _fact_values(v.facts) for v in members}
        for fact in ("cpu_model", "cpu_count", "memory_gib", "disks", "nics"):
            known = {name: vals[fact] for name, vals in values.items() if vals[fact] is not None}
            counts = collections.Counter(repr(x) for x in known.values())
            if len(counts) < 2:
                continue
            top, n = counts.most_common(1)[0]
            norm = next(x for x in known.values() if repr(x) == top) if 2 * n > len(known) else None
            out += [Outlier(rc, fact, name, value, norm) for name, value in sorted(known.items())
                    if norm is None or repr(value) != top]
    return out


# --- reading the views ------------------------------------------------------------------------

def boots_agent(node: dict) -> bool:
    """Whether cleaning this node boots Ironic's agent: its driver_info names a deploy kernel and
    ramdisk (or an ISO) and its boot and deploy interfaces are real ones."""
    info = node.get("driver_info") or {}
    images = bool(info.get("deploy_kernel") and info.get("deploy_ramdisk")) or \
        bool(info.get("deploy_iso") or info.get("redfish_deploy_iso"))
    return images and "fake" not in (node.get("boot_interface"), node.get("deploy_interface"))


def read_view(node: dict, provisioner: Provisioner, profile: P.Profile | None, bmc_reader=None, *,
              facts: bool = True) -> NodeView:
    """The node's view from Ironic, then (``bmc_reader``: a callable giving a
    :class:`~nodeforge.ironic.bmcview.BmcView`, or None) from its BMC.

    The disks a RAID layout is judged against are the controller's physical drives: the BMC's
    when it is read, out-of-band inspection's otherwise. In-band inspection (the agent) lists the
    block devices the operating system sees, a RAID controller's volumes rather than its drives,
    so its disks are not used for that (Ironic's RAID step then judges the layout itself).
    ``facts=False``: the inspection data is read only where a RAID layout is judged by it (no
    outliers wanted: one read per node fewer)."""
    view = NodeView(node.get("name") or node["uuid"], node["uuid"], node.get("provision_state"),
                    node.get("resource_class"), raid_config=node.get("raid_config") or None,
                    root_device=(node.get("properties") or {}).get("root_device") or None, agent=boots_agent(node),
                    raid_interface=node.get("raid_interface"))
    b = profile.baseline if profile else None
    inband = node.get("inspect_interface") == "agent"
    try:
        data = provisioner.get_inventory(node["uuid"]) \
            if facts or (b is not None and b.raid and not inband and bmc_reader is None) else None
        if data and data.get("inventory"):
            view.facts = P.facts_from_inventory(data, node.get("properties") or {})
            if not inband:
                view.disks = list(data["inventory"].get("disks") or [])
        if b is not None and b.bios:
            view.bios = provisioner.get_bios(node["uuid"])
        if b is not None and b.firmware:
            view.firmware = provisioner.get_firmware(node["uuid"])
    except IronicError as exc:
        view.error = scrub(str(exc))
        return view
    if bmc_reader is not None and b is not None:
        from nodeforge.ironic.bmcview import BmcReadError

        try:
            live = bmc_reader()
        except BmcReadError as exc:
            view.error = str(exc)
            return view
        view.source, view.bios, view.firmware = "bmc", live.bios, live.firmware
        view.raid_config = {"volumes": live.volumes}
        if live.drives:
            view.disks = live.drives
    elif b is not None:
        missing = [what for what, pinned, got in (("BIOS settings", b.bios, view.bios),
                                                 ("firmware components", b.firmware, view.firmware))
                   if pinned and not got]
        if missing:
            view.error = (f"Ironic holds no {' and no '.join(missing)} for node {view.name} (its bios/firmware "
                          f"interface does not read them, or it was never verified or cleaned since enrollment)")
    return view


def run(provisioner: Provisioner, profiles: P.ProfileSet, *, nodes: list[str] | None = None,
        scope: str | None = None, inventory=None, jobs: int = 8, listed: list[dict] | None = None,
        outliers_too: bool = True) -> Audit:
    """Audit the selected nodes (``inventory``: an :class:`~nodeforge.ironic.inventory.Inventory`
    whose Redfish BMCs are read directly for the nodes it names; ``listed``: Ironic's node listing
    when the caller has one already; ``outliers_too=False``: the baseline only, no outliers, so no
    node's inspection data is read unless its RAID layout is judged by it)."""
    from nodeforge.ironic import bmcview

    listed = provisioner.list_nodes() if listed is None else listed
    selected, skipped = cl.in_scope(cl.select(listed, nodes), scope)
    by_rc = profiles.by_resource_class()
    specs = {s.name: s for s in inventory.nodes} if inventory is not None else {}

    def one(node: dict) -> NodeAudit:
        profile = by_rc.get(node.get("resource_class"))
        spec = specs.get(node.get("name"))
        reader = (lambda: bmcview.read(spec)) if spec is not None and spec.bmc.is_redfish else None
        return judge(read_view(node, provisioner, profile, reader, facts=outliers_too), profile)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        audited = list(pool.map(one, selected))
    found = outliers([a.view for a in audited]) if outliers_too else []
    return Audit(audited, found, profiles.path, scope, skipped)
