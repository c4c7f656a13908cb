"""Bring nodes to their profile's baseline through Ironic's manual cleaning.

The plan is the audit's (:func:`nodeforge.ironic.audit.run`: Ironic's view, or the BMCs' with an
inventory); per node (:class:`NodeApply`):

* ``no-op``: at its baseline (nothing written);
* ``apply``: its drift as one manual cleaning (``bios.apply_configuration`` with every BIOS
  setting to change; on a node that boots the agent also ``raid.delete_configuration`` /
  ``create_configuration`` from the layout set as its ``target_raid_config`` first, and
  ``firmware.update`` with images checked against their sha256 before any write); out of band
  (``disable_ramdisk``) unless a step needs the agent. Root device hints are a node PATCH, no
  cleaning. An ``available`` node is moved to ``manageable`` first and given back
  (``provide``) afterwards; a ``manageable`` one stays there. On a node that does not boot the
  agent, items whose steps need it on Redfish in Ironic 39 (RAID, firmware) are listed as
  ``pending`` and not applied;
* ``return``: cleaned by an earlier, interrupted run and still to be given back;
* ``deferred`` (active: serving a cluster, never touched), ``problem`` (the baseline cannot be
  applied to it), ``unreadable``, ``busy`` (in a state no cleaning can start from): not written.

Resumable: before an ``available`` node is moved, ``extra.nodeforge_baseline`` records the state
it goes back to; a run killed at any point is picked up by the next one (a node still cleaning is
waited for, one cleaned is given back, one whose cleaning failed is moved to ``manageable`` and
cleaned again), and the mark is removed when the node is back. A node at its baseline without the
mark costs no write: a second run after a complete one writes nothing.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from nodeforge.errors import ExitCode
from nodeforge.ironic import audit as au
from nodeforge.ironic import baseline as bl
from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import ProvisionState as S
from nodeforge.ironic.constants import Verb
from nodeforge.ironic.errorkind import ErrorKind
from nodeforge.ironic.provisioner import IronicError, Provisioner
from nodeforge.redact import scrub

NOOP, APPLY, RETURN, DEFERRED, PROBLEM, UNREADABLE, BUSY, NEEDS_AGENT = "no-op", "apply", "return", "deferred", \
    "problem", "unreadable", "busy", "needs-agent"
LIST_FIELDS = ["uuid", "name", "provision_state", "target_provision_state", "last_error", "extra"]
# The states a run picks a marked node up in (cleaning in progress, failed, or done and not given back).
RESUMABLE = (S.CLEANING, S.CLEAN_WAIT, S.CLEAN_FAILED)
# A run's stages between a node's first write and its end: the ones ``concurrency`` bounds.
IN_FLIGHT = ("manage", "clean", "provide")
DEFAULT_CONCURRENCY = 20
# Ironic's refusals for now (its concurrency limit, a node lock, a rate limit): the write is sent again.
TRANSIENT = (ErrorKind.UNAVAILABLE, ErrorKind.LOCKED, ErrorKind.RATE_LIMITED)


@dataclasses.dataclass
class NodeApply:
    name: str
    uuid: str
    state: str | None
    action: str
    items: list = dataclasses.field(default_factory=list)       # baseline.Item, applied by ``steps``
    pending: list = dataclasses.field(default_factory=list)     # items needing the agent: not applied
    steps: list[dict] = dataclasses.field(default_factory=list)
    return_to: str | None = None        # "available": provided again once cleaned
    detail: str | None = None
    stage: str = ""                     # queued | manage | clean | provide | done | failed (the run's progress)
    ok: bool | None = None
    error: str | None = None
    refusals: int = 0                   # writes Ironic refused for now and that were sent again
    properties: list[dict] = dataclasses.field(default_factory=list)   # node PATCH before cleaning
    raid: dict | None = None            # the target_raid_config set before cleaning
    prepared: bool = False              # properties and target RAID written

    @property
    def agent(self) -> bool:
        """The cleaning boots the agent (a RAID or firmware step among the steps it runs)."""
        return bool(self.steps) and any(i.needs_agent for i in self.items)

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "state": self.state, "action": self.action,
                "items": [i.to_dict() for i in self.items], "pending": [i.to_dict() for i in self.pending],
                "steps": self.steps, "return_to": self.return_to, "detail": self.detail, "stage": self.stage,
                "ok": self.ok, "error": self.error, "refusals": self.refusals, "agent": self.agent,
                "properties": self.properties, "raid": self.raid}


def _prepare(na: NodeApply, items: list, agent: bool) -> None:
    """What the node's cleaning runs: with the agent every item, else the out-of-band ones (the
    rest pending); the root device hints as a node PATCH, a RAID layout as the node's target."""
    na.items = [i for i in items if agent or not i.needs_agent]
    na.pending = [i for i in items if i.needs_agent and not agent]
    na.steps = bl.clean_steps(na.items)
    for i in na.items:
        if i.item == "root_device":
            na.properties = [{"op": "add", "path": "/properties/root_device", "value": i.wanted}]
        elif i.item == "raid":
            na.raid = {"logical_disks": [dict(d) for d in i.wanted]}


def plan(result: au.Audit, nodes: dict[str, dict]) -> list[NodeApply]:
    """The apply plan from an audit (``nodes``: Ironic's node dicts by uuid, for their marks)."""
    out = []
    for n in result.nodes:
        v = n.view
        mark = ((nodes.get(v.uuid) or {}).get("extra") or {}).get(C.EXTRA_BASELINE)
        na = NodeApply(v.name, v.uuid, v.provision_state, NOOP, return_to=mark)
        state = S.parse(v.provision_state)
        if n.status == au.UNREADABLE:
            na.action, na.detail = UNREADABLE, v.error
        elif n.status == au.PROBLEM:
            na.action, na.detail = PROBLEM, "; ".join(n.problems)
        elif n.status == au.DEFERRED:
            na.action, na.items, na.detail = DEFERRED, n.items, "active: deferred until the node is free"
        elif n.status == au.DRIFTED or (mark and state in RESUMABLE):
            _prepare(na, n.items, v.agent)
            _decide(na, state, mark)
        elif mark and state in (S.MANAGEABLE, S.AVAILABLE):
            na.action = RETURN        # cleaned by an interrupted run: given back, its mark removed
        out.append(na)
    return out


def plan_from_ironic(prov: Provisioner, profiles, *, nodes: list[str] | None = None, scope: str | None = None,
                     inventory=None) -> list[NodeApply]:
    """The apply plan of the selected nodes: one node listing, handed to the audit (baseline only,
    no outliers: :func:`nodeforge.ironic.audit.run`), and :func:`plan` over it."""
    listed = prov.list_nodes()
    result = au.run(prov, profiles, nodes=nodes, scope=scope, inventory=inventory, listed=listed,
                    outliers_too=False)
    return plan(result, {n["uuid"]: n for n in listed})


def _decide(na: NodeApply, state: S | None, mark: str | None) -> None:
    if state in (S.CLEANING, S.CLEAN_WAIT) and mark:
        na.action, na.detail = APPLY, "an earlier run's cleaning: waited for"
    elif not na.steps and na.properties and not mark:
        na.action, na.detail = APPLY, "node properties only: no cleaning"
    elif not na.steps and not (mark and state is S.CLEAN_FAILED):
        na.action, na.detail = NEEDS_AGENT, "only items whose steps need the agent ramdisk, which this node " \
                                            "does not boot (no deploy images in its driver_info): not applied"
    elif state is S.AVAILABLE:
        na.action, na.return_to = APPLY, mark or S.AVAILABLE.value
    elif state is S.MANAGEABLE or (state is S.CLEAN_FAILED and mark):
        na.action = APPLY
    else:
        na.action, na.detail = BUSY, f"'{na.state}': cleaning starts from manageable or available only"


def exit_code(plans: list[NodeApply], dry_run: bool) -> int:
    flagged = [p for p in plans if p.action in (PROBLEM, UNREADABLE, BUSY)]
    if dry_run:
        return int(ExitCode.PARTIAL if flagged else ExitCode.OK)
    tried = [p for p in plans if p.action in (APPLY, RETURN)]
    failed = [p for p in tried if not p.ok]
    if tried and len(failed) == len(tried) and not [p for p in plans if p.action == NOOP]:
        return int(ExitCode.FAILURE)
    return int(ExitCode.PARTIAL if failed or flagged else ExitCode.OK)


# --- the run: writes decided per node, one listing per round -------------------------------

def _fail(na: NodeApply, why: str) -> None:
    na.stage, na.ok, na.error = "failed", False, scrub(why)


def _write(na: NodeApply, fn: Callable[[], object]) -> bool:
    """One write; True when Ironic took it. A refusal for now (its limit of concurrent cleanings, a
    node lock: 503, 409 locked, 429) leaves the node's stage as it was, so the next round sends the
    same write again; any other refusal fails the node."""
    try:
        fn()
        return True
    except IronicError as exc:
        if ErrorKind.of(exc.kind) in TRANSIENT:
            na.refusals += 1
            na.detail = scrub(f"refused for now ({exc.kind}), sent again: {exc.detail}")
            return False
        _fail(na, str(exc))
        return False


def _start(na: NodeApply, prov: Provisioner) -> None:
    """The node's first write, from the state it was planned in; its stage moves only once Ironic
    took the write (a refusal for now leaves it ``queued``)."""
    state = S.parse(na.state)
    if na.action == APPLY and not na.prepared and (na.properties or na.raid):
        if not _write(na, lambda: _set_properties(na, prov)):
            return
        na.prepared = True
        if not na.steps:
            na.stage, na.ok = "done", True
            return
    if na.action == RETURN and state is S.AVAILABLE:
        if _write(na, lambda: prov.patch_node(na.uuid, [{"op": "remove", "path": f"/extra/{C.EXTRA_BASELINE}"}])):
            na.stage, na.ok = "done", True
    elif na.action == RETURN:
        if _write(na, lambda: prov.set_provision_state(na.uuid, Verb.PROVIDE)):
            na.stage = "provide"
    elif state in (S.CLEANING, S.CLEAN_WAIT):
        na.stage = "clean"
    elif state is S.MANAGEABLE:
        _clean(na, prov)
    else:                     # available (marked first) or clean failed: to manageable, then clean
        if state is S.AVAILABLE and not _write(na, lambda: prov.patch_node(na.uuid, [
                {"op": "add", "path": f"/extra/{C.EXTRA_BASELINE}", "value": na.return_to}])):
            return            # JSON patch 'add' replaces: sending it again is harmless
        if _write(na, lambda: prov.set_provision_state(na.uuid, Verb.MANAGE)):
            na.stage = "manage"


def _set_properties(na: NodeApply, prov: Provisioner) -> None:
    """The root device hints and the target RAID layout (sent again whole after a refusal for now:
    both are idempotent)."""
    if na.properties:
        prov.patch_node(na.uuid, na.properties)
    if na.raid:
        prov.set_target_raid_config(na.uuid, na.raid)


def _clean(na: NodeApply, prov: Provisioner) -> None:
    """Manual cleaning with the node's steps: out of band (``disable_ramdisk``) unless a step
    needs the agent (Redfish RAID and firmware steps in Ironic 39), which Ironic then boots."""
    ramdisk = None if na.agent else True
    if _write(na, lambda: prov.set_provision_state(na.uuid, Verb.CLEAN, clean_steps=na.steps,
                                                     disable_ramdisk=ramdisk)):
        na.stage = "clean"


def _advance(na: NodeApply, node: dict, prov: Provisioner) -> None:
    """One round of one node: what its listing says, and the next write (sent again next round if
    Ironic refused it for now: the stage only moves on once a write is taken)."""
    state, target = S.parse(node.get("provision_state")), node.get("target_provision_state")
    na.state = node.get("provision_state")
    if na.stage == "manage" and state is S.MANAGEABLE and not target:
        _clean(na, prov)
    elif na.stage == "clean" and state is S.CLEAN_FAILED:
        _fail(na, f"cleaning failed: {node.get('last_error') or 'no error recorded'}")
    elif na.stage == "clean" and state is S.MANAGEABLE and not target:
        if not na.return_to:
            na.stage, na.ok = "done", True
        elif _write(na, lambda: prov.set_provision_state(na.uuid, Verb.PROVIDE)):
            na.stage = "provide"
    elif na.stage == "provide" and state is S.AVAILABLE and not target:
        if _write(na, lambda: prov.patch_node(na.uuid, [{"op": "remove", "path": f"/extra/{C.EXTRA_BASELINE}"}])):
            na.stage, na.ok = "done", True
    elif state in (S.ENROLL, S.ERROR) or (na.stage != "clean" and state is S.CLEAN_FAILED):
        _fail(na, f"node went to '{na.state}': {node.get('last_error') or 'no error recorded'}")


def _in_flight(todo: list[NodeApply]) -> list[NodeApply]:
    return [p for p in todo if p.stage in IN_FLIGHT]


def _fill(queue: list[NodeApply], todo: list[NodeApply], prov: Provisioner, concurrency: int) -> None:
    """Start queued nodes while fewer than ``concurrency`` are in flight (one refused for now
    stays at the head of the queue: Ironic is at its limit, the next round tries again)."""
    while queue and len(_in_flight(todo)) < concurrency:
        na = queue[0]
        _start(na, prov)
        if na.stage == "queued":
            return
        queue.pop(0)


def _check_firmware(todo: list[NodeApply], fetch_image: Callable[[str, str], object]) -> None:
    """Every firmware image a node is to get, fetched and checked against the baseline's sha256
    before any write (Ironic's firmware step takes a URL only): a node whose image is unreachable or
    differs is failed, naming the image, and never touched."""
    found: dict[tuple[str, str], str | None] = {}
    for na in todo:
        for item in na.items:
            if not item.item.startswith("firmware."):
                continue
            key = (item.wanted["url"], item.wanted["sha256"])
            if key not in found:
                try:
                    fetch_image(*key)
                    found[key] = None
                except Exception as exc:  # noqa: BLE001 - any failure is the image's, named without secrets
                    found[key] = scrub(str(exc))
            if found[key] and na.stage == "queued":
                _fail(na, f"{item.item}: its update image was refused before any write: {found[key]}")


def run(plans: list[NodeApply], prov: Provisioner, *, timeout: float = 1800.0, poll: float = 2.0,
        concurrency: int = DEFAULT_CONCURRENCY, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        fetch_image: Callable[[str, str], object] | None = None) -> None:
    """Apply every ``apply`` and ``return`` node (outcomes in place: ``ok``, ``stage``, ``error``),
    at most ``concurrency`` of them between their first write and the end of their cleaning and
    giving back (Ironic refuses cleanings beyond ``[conductor] max_concurrent_clean``, 50 by
    default: a batch sent at once loses the rest)."""
    sleep = sleep or time.sleep
    todo = [p for p in plans if p.action in (APPLY, RETURN)]
    for na in todo:
        na.stage = "queued"
    if fetch_image is not None:
        _check_firmware(todo, fetch_image)
    queue = [p for p in todo if p.stage == "queued"]
    _fill(queue, todo, prov, concurrency)
    deadline = clock() + timeout
    while [p for p in todo if p.stage not in ("done", "failed")] and clock() < deadline:
        sleep(poll)
        listed = {n["uuid"]: n for n in prov.list_nodes(fields=LIST_FIELDS)}
        for na in _in_flight(todo):
            if na.uuid not in listed:
                _fail(na, "the node is gone from Ironic")
            else:
                _advance(na, listed[na.uuid], prov)
        _fill(queue, todo, prov, concurrency)
    for na in todo:
        if na.stage not in ("done", "failed"):
            _fail(na, f"timed out after {timeout:.0f} s in '{na.state}' (stage {na.stage}); the next run resumes it")
