"""One canary deploy per resource class of the policy, through Ironic's own API.

For each class: take a node with an allocation in nodeforge's name (only among the nodes
:func:`select.candidates` allows), give it the image from Glance (``instance_info``) and a config
drive (:mod:`node_data`), deploy, wait for ``active``, wait for the node's own report on the
phone-home channel, judge it, then undeploy and wait for cleaning to bring the node back to
``available``, and give the allocation back. Whatever happens after the node was taken, the node
is brought back (undeployed and cleaned) and the allocation deleted; a node that failed
``maintenance_after`` canaries in a row is put in maintenance with the reason instead.

Resumable: the allocation is named per scope and class (:func:`select.allocation_name`). A run
that finds one from a killed run takes its node back through undeploy/cleaning first (the dead
run's report channel is gone), then deploys again.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid
from typing import Callable

from nodeforge.canary import node_data, select
from nodeforge.canary.phonehome import Listener
from nodeforge.canary.policy import CanaryPolicy
from nodeforge.errors import NodeforgeError
from nodeforge.imageverify import verifychecks as vc
from nodeforge.ironic.constants import ProvisionState as S
from nodeforge.ironic.constants import Verb
from nodeforge.ironic.provisioner import Provisioner
from nodeforge.redact import scrub

FAILED_STATES = {S.DEPLOY_FAILED.value, S.CLEAN_FAILED.value, S.ERROR.value, S.INSPECT_FAILED.value}


class CanaryError(NodeforgeError):
    message = "canary on {resource_class}: {detail}"


@dataclasses.dataclass
class ClassResult:
    resource_class: str
    passed: bool
    node: str | None = None
    reason: str | None = None               # why it failed (the first failed check, Ironic's last_error, ...)
    checks: list[dict] = dataclasses.field(default_factory=list)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    node_state: str | None = None           # where the node was left
    maintenance: bool = False
    resumed: bool = False

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["summary"] = vc.summary(self.checks) if self.checks else None
        return d


@dataclasses.dataclass(frozen=True)
class ClassPlan:
    resource_class: str
    required: bool
    allocation: dict | None                 # an allocation a killed run left: resumed
    candidates: list[str]                   # node names (or uuids), the first is preferred
    refused: list[select.Refusal]
    candidate_ids: list[str] = dataclasses.field(default_factory=list)   # the same nodes' uuids

    @property
    def problem(self) -> str | None:
        if self.allocation is None and not self.candidates:
            why = "; ".join(f"{r.node}: {r.reason}" for r in self.refused[:5]) or "no node has this resource class"
            return f"no node can be a canary ({why})"
        return None


@dataclasses.dataclass
class Request:
    image_id: str
    scope: str
    policy: CanaryPolicy
    expectations: vc.Expectations | None    # the image's own checks (None: the deploy-only checks)
    facts: dict | None
    poll: float = 5.0
    say: Callable[[str], None] = lambda _msg: None


def plan(prov: Provisioner, policy: CanaryPolicy, scope: str) -> list[ClassPlan]:
    """Per class of the policy: the allocation to resume, or the nodes that may be taken. Writes nothing."""
    nodes = prov.list_nodes()
    out = []
    for c in policy.classes:
        existing = prov.get_allocation(select.allocation_name(scope, c.resource_class))
        ok, refused = select.candidates(nodes, c.resource_class, policy.lessee)
        out.append(ClassPlan(c.resource_class, c.required, existing,
                             [n.get("name") or n["uuid"] for n in ok], refused, [n["uuid"] for n in ok]))
    return out


class _Clock:
    def __init__(self):
        self.t0 = time.monotonic()
        self.seconds: dict[str, float] = {}

    def lap(self, name: str, since: float) -> float:
        self.seconds[name] = round(time.monotonic() - since, 1)
        return time.monotonic()


def _wait_state(prov: Provisioner, node: str, want: set[str], timeout: float, poll: float,
                what: str, resource_class: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        n = prov.get_node(node)
        state = n.get("provision_state")
        if state in want and not n.get("target_provision_state"):
            return n
        if state in FAILED_STATES:
            raise CanaryError(resource_class=resource_class,
                              detail=f"{what}: node {n.get('name') or node} went to {state!r}: "
                                     f"{scrub(str(n.get('last_error') or 'no last_error'))}")
        if time.monotonic() > deadline:
            raise CanaryError(resource_class=resource_class,
                              detail=f"{what}: node {n.get('name') or node} still {state!r} after {timeout:.0f} s")
        time.sleep(poll)


def _allocate(prov: Provisioner, req: Request, cp: ClassPlan) -> tuple[dict, bool]:
    """(the allocation, whether it was resumed), once it holds a node. Ironic picks at random
    among an allocation's candidates, so each is offered alone, in the plan's order (fewest
    earlier failures first); one taken meanwhile by someone else is skipped."""
    name = select.allocation_name(req.scope, cp.resource_class)
    if cp.allocation is not None:
        alloc = _settled(prov, req, name, cp.allocation)
        if alloc.get("state") == "active" and alloc.get("node_uuid"):
            return alloc, True
        prov.delete_allocation(name)
    if not cp.candidates:
        raise CanaryError(resource_class=cp.resource_class, detail=cp.problem)
    errors = []
    for ident in (cp.candidate_ids or cp.candidates):
        alloc = _settled(prov, req, name, prov.create_allocation({
            "name": name, "resource_class": cp.resource_class, "candidate_nodes": [ident],
            "extra": {select.STATE_KEY: {"image": req.image_id, "scope": req.scope}}}))
        if alloc.get("state") == "active" and alloc.get("node_uuid"):
            return alloc, False
        errors.append(scrub(str(alloc.get("last_error") or alloc.get("state"))))
        prov.delete_allocation(name)
    raise CanaryError(resource_class=cp.resource_class, detail=f"no allocation succeeded: {'; '.join(errors[:3])}")


def _settled(prov: Provisioner, req: Request, name: str, alloc: dict) -> dict:
    deadline = time.monotonic() + req.policy.timeouts.allocation
    while alloc.get("state") == "allocating" and time.monotonic() < deadline:
        time.sleep(min(req.poll, 1.0))
        alloc = prov.get_allocation(name) or {}
    return alloc


def _bring_back(prov: Provisioner, req: Request, node: str, rc: str) -> dict:
    """Undeploy (when deployed or failed) and wait for cleaning to end in ``available``."""
    n = prov.get_node(node)
    state = n.get("provision_state")
    if state in (S.ACTIVE.value, S.DEPLOY_FAILED.value, S.DEPLOY_WAIT.value, S.ERROR.value):
        prov.set_provision_state(node, Verb.UNDEPLOY)
    elif state == S.CLEAN_FAILED.value:
        raise CanaryError(resource_class=rc, detail=f"cleaning failed: {scrub(str(n.get('last_error')))}")
    return _wait_state(prov, node, {S.AVAILABLE.value}, req.policy.timeouts.clean, req.poll, "cleaning", rc)


def run_class(prov: Provisioner, req: Request, cp: ClassPlan, listener: Listener) -> ClassResult:
    """One class's canary: allocate a node, deploy and judge it, give it back whatever happened."""
    rc, clock = cp.resource_class, _Clock()
    result = ClassResult(rc, False)
    t = time.monotonic()
    try:
        alloc, result.resumed = _allocate(prov, req, cp)
    except CanaryError as exc:
        result.reason = str(exc)
        return result
    node_id = alloc["node_uuid"]
    node = prov.get_node(node_id)
    result.node = node.get("name") or node_id
    clock.lap("allocate", t)
    failure: str | None = None
    try:
        identity, token = _deploy(prov, req, rc, node_id, node, result, listener, clock)
        failure = _judge(prov, req, rc, node_id, identity, token, result, listener, clock)
    except CanaryError as exc:
        failure = str(exc)
    except NodeforgeError as exc:           # an Ironic answer refused: the node is still brought back
        failure = f"canary on {rc}: {scrub(str(exc))}"
    failure = _give_back(prov, req, rc, node_id, result, clock, failure)
    prov.delete_allocation(select.allocation_name(req.scope, rc))
    result.passed, result.reason = failure is None, failure
    if not result.maintenance:
        _record_failure(prov, req, node_id, result, failure) if failure else _reset_failures(prov, node_id, node)
    result.seconds = clock.seconds
    return result


def _deploy(prov: Provisioner, req: Request, rc: str, node_id: str, node: dict, result: ClassResult,
            listener: Listener, clock: "_Clock") -> tuple[node_data.NodeIdentity, str]:
    """Deploy the image with a config drive that tells the node where to report; until ``active``."""
    t = time.monotonic()
    if node.get("provision_state") != S.AVAILABLE.value:       # a killed run's deploy: start over
        req.say(f"{rc}: {result.node} was left {node.get('provision_state')!r} by an earlier run; cleaning it first")
        _bring_back(prov, req, node_id, rc)
    mac = next((p.get("address") for p in prov.list_ports() if p.get("node_uuid") == node_id), None)
    identity = node_data.NodeIdentity(instance_id=str(uuid.uuid4()),
                                      hostname=node_data.hostname_for(result.node, req.image_id),
                                      mac=(mac or "").lower() or None)
    token = listener.expect()
    probes = node_data.probes(req.expectations, report_url=listener.url(token), probe_id=identity.instance_id,
                              wait_seconds=int(req.policy.timeouts.first_boot * 0.6)) \
        if req.expectations else {"id": identity.instance_id, "report_url": listener.url(token),
                                  "poweroff": False, "late_commands": node_data.LATE_COMMANDS}
    prov.patch_node(node_id, [{"op": "add", "path": "/instance_info",
                               "value": {"image_source": req.image_id, "capabilities": {"boot_option": "local"},
                                         "display_name": identity.hostname}}])
    req.say(f"{rc}: deploying image {req.image_id} to {result.node}")
    prov.set_provision_state(node_id, Verb.DEPLOY, configdrive=node_data.config_drive(identity, probes))
    _wait_state(prov, node_id, {S.ACTIVE.value}, req.policy.timeouts.deploy, req.poll, "deploy", rc)
    clock.lap("deploy", t)
    return identity, token


def _judge(prov: Provisioner, req: Request, rc: str, node_id: str, identity: node_data.NodeIdentity, token: str,
           result: ClassResult, listener: Listener, clock: "_Clock") -> str | None:
    """Wait for the node's report and check it; the failure (None: every check passed)."""
    t = time.monotonic()
    req.say(f"{rc}: {result.node} is active; waiting for its report on {listener.public_url()}")

    def alive() -> bool:
        return prov.get_node(node_id).get("provision_state") == S.ACTIVE.value

    guest = listener.wait(token, req.policy.timeouts.first_boot, poll=req.poll, alive=alive)
    t = clock.lap("first_boot", t)
    if guest is None:
        raise CanaryError(resource_class=rc, detail=f"no report from {result.node} within "
                                                    f"{req.policy.timeouts.first_boot:.0f} s of `active`")
    if req.expectations is not None:
        exp = dataclasses.replace(req.expectations, disk_bytes=(guest.get("rootfs") or {}).get("disk_bytes") or 0)
        result.checks = node_data.all_checks(exp, req.facts or {}, identity, guest)
    else:
        result.checks = node_data.evaluate(identity, guest)
    clock.lap("checks", t)
    failed = [c["id"] for c in result.checks if not c["passed"]]
    return f"checks failed on {result.node}: {', '.join(failed)}" if failed else None


def _give_back(prov: Provisioner, req: Request, rc: str, node_id: str, result: ClassResult, clock: "_Clock",
               failure: str | None) -> str | None:
    """Undeploy and clean the node back to ``available`` (maintenance when that fails itself);
    the canary's failure, or this one when there was none."""
    t = time.monotonic()
    try:
        back = _bring_back(prov, req, node_id, rc)
        result.node_state = back.get("provision_state")
    except (CanaryError, NodeforgeError) as exc:
        failure = failure or str(exc)
        result.node_state = prov.get_node(node_id).get("provision_state")
        _record_failure(prov, req, node_id, result, f"{exc}", force_maintenance=True)
    clock.lap("clean", t)
    return failure


def _reset_failures(prov: Provisioner, node_id: str, node: dict) -> None:
    if select.failures(node):
        prov.patch_node(node_id, [{"op": "remove", "path": f"/extra/{select.FAILURES_KEY}"}])


def _record_failure(prov: Provisioner, req: Request, node_id: str, result: ClassResult, reason: str,
                    force_maintenance: bool = False) -> None:
    node = prov.get_node(node_id)
    count = select.failures(node) + 1
    prov.patch_node(node_id, [{"op": "add", "path": f"/extra/{select.FAILURES_KEY}", "value": str(count)}])
    if force_maintenance or count >= req.policy.maintenance_after:
        prov.set_maintenance(node_id, f"nodeforge canary: {count} failed canary deploy(s); last: {reason}"[:250])
        result.maintenance = True


def property_value(result: ClassResult, now: datetime.datetime | None = None) -> str:
    """The verdict stored on the image (:func:`nodeforge.publish.glance.canary_property` names it)."""
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{'passed' if result.passed else 'failed'} {when} node={result.node}"[:255]
