"""Node lifecycle after enrollment: manage -> (inspect) -> (manual clean) -> provide.

One table, :data:`HANDLERS`, maps each :class:`NodeState` (derived from
Ironic's provision state) to a handler. Handlers only decide: they return an
:class:`Outcome` (Continue, Complete, Failed, Retry); :func:`advance` applies
it, logs it and counts failures. :func:`run` drives a batch: one node listing
per poll (not one GET per node), a per-stage concurrency limit on the verbs it
issues, a per-stage timeout, and the recovery policy for ``clean failed`` /
``inspect failed`` (retry ``max_recoveries`` times, else back to
``manageable`` in maintenance with the reason).

Progress is Ironic's own provision state plus a checkpoint in ``extra``
(:data:`constants.EXTRA_CHECKPOINT`: ``inspected``, ``cleaned``), so a run
interrupted at any point resumes where each node stood; the recoveries spent
on a node are kept there too (:data:`constants.EXTRA_RETRIES`), so resuming
never grants more than ``max_recoveries``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from typing import Callable

from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import ProvisionState as PS, Verb
from nodeforge.ironic.inventory import CleanMode, NodeSpec
from nodeforge.ironic.provisioner import ErrorKind, IronicError, Provisioner
from nodeforge.redact import scrub

log = logging.getLogger(__name__)


PARKED_PREFIX = "nodeforge: "   # maintenance_reason of a node the recovery policy parked


class NodeState(str, enum.Enum):
    ENROLLED = "enrolled"
    VERIFYING = "verifying"
    MANAGEABLE = "manageable"
    INSPECTING = "inspecting"
    INSPECT_FAILED = "inspect-failed"
    CLEANING = "cleaning"
    CLEAN_FAILED = "clean-failed"
    AVAILABLE = "available"
    IN_USE = "in-use"
    UNKNOWN = "unknown"


_FROM_IRONIC = {
    PS.ENROLL: NodeState.ENROLLED, PS.VERIFYING: NodeState.VERIFYING, PS.MANAGEABLE: NodeState.MANAGEABLE,
    PS.INSPECTING: NodeState.INSPECTING, PS.INSPECT_WAIT: NodeState.INSPECTING,
    PS.INSPECT_FAILED: NodeState.INSPECT_FAILED, PS.CLEANING: NodeState.CLEANING,
    PS.CLEAN_WAIT: NodeState.CLEANING, PS.CLEAN_FAILED: NodeState.CLEAN_FAILED,
    PS.AVAILABLE: NodeState.AVAILABLE, PS.ACTIVE: NodeState.IN_USE, PS.DEPLOYING: NodeState.IN_USE,
    PS.DEPLOY_WAIT: NodeState.IN_USE, PS.DEPLOY_FAILED: NodeState.IN_USE,
}


def node_state(node: dict) -> NodeState:
    ps = C.ProvisionState.parse(node.get("provision_state"))
    return _FROM_IRONIC.get(ps, NodeState.UNKNOWN) if ps else NodeState.UNKNOWN


class Stage(str, enum.Enum):
    MANAGE = "manage"
    INSPECT = "inspect"
    CLEAN = "clean"
    PROVIDE = "provide"
    DONE = "done"


# -- outcomes ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Continue:
    """Nothing to do now (waiting on Ironic, or on a concurrency slot)."""


@dataclasses.dataclass(frozen=True)
class Complete:
    """The node reached a final state."""
    state: NodeState


@dataclasses.dataclass(frozen=True)
class Failed:
    error_type: str
    message: str


@dataclasses.dataclass(frozen=True)
class Retry:
    reason: str
    delay: float = 1.0


Outcome = Continue | Complete | Failed | Retry


@dataclasses.dataclass
class Policy:
    concurrency: dict[Stage, int] = dataclasses.field(default_factory=lambda: {
        Stage.MANAGE: 20, Stage.INSPECT: 10, Stage.CLEAN: 10, Stage.PROVIDE: 10})
    timeouts: dict[Stage, float] = dataclasses.field(default_factory=lambda: {
        Stage.MANAGE: 180.0, Stage.INSPECT: 600.0, Stage.CLEAN: 1800.0, Stage.PROVIDE: 1800.0})
    max_recoveries: int = 1
    poll_interval: float = 1.0      # >= 0.5 s: the API shares its process with the conductor
    overall_timeout: float = 3600.0


@dataclasses.dataclass
class Work:
    """One node's progress through the lifecycle (the per-node report row)."""

    spec: NodeSpec
    uuid: str
    stage: Stage = Stage.MANAGE
    issued: Verb | None = None
    issued_at: float | None = None
    not_before: float = 0.0
    recoveries: int = 0
    recovery_pending: bool = False   # counted on the node, its manage not accepted yet
    failures: int = 0
    result: NodeState | None = None
    error_type: str | None = None
    error: str | None = None
    node: dict = dataclasses.field(default_factory=dict)
    stage_seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.result is not None or self.error_type is not None

    @property
    def checkpoint(self) -> str | None:
        return (self.node.get("extra") or {}).get(C.EXTRA_CHECKPOINT)


@dataclasses.dataclass
class Ctx:
    provisioner: Provisioner
    policy: Policy
    busy: dict[Stage, int]
    now: float


Handler = Callable[[Work, Ctx], Outcome]


def _issue(w: Work, ctx: Ctx, stage: Stage, verb: Verb, **kw) -> Outcome:
    if ctx.busy.get(stage, 0) >= ctx.policy.concurrency.get(stage, 10):
        return Continue()
    try:
        ctx.provisioner.set_provision_state(w.uuid, verb, **kw)
    except IronicError as exc:
        if exc.kind.retriable:
            return Retry(f"{verb.value}: {exc.kind.value}", delay=2.0)
        return Failed(f"{stage.value}-rejected", str(exc))
    if w.stage is not stage:
        w.stage_seconds[w.stage.value] = round(ctx.now - (w.issued_at or ctx.now), 2)
    w.stage, w.issued, w.issued_at = stage, verb, ctx.now
    ctx.busy[stage] = ctx.busy.get(stage, 0) + 1
    log.info("%s: %s", w.spec.name, verb.value)
    return Continue()


def _checkpoint(w: Work, ctx: Ctx, value: str) -> None:
    ctx.provisioner.patch_node(w.uuid, [{"op": "add", "path": f"/extra/{C.EXTRA_CHECKPOINT}", "value": value}])
    w.node.setdefault("extra", {})[C.EXTRA_CHECKPOINT] = value


def _timed_out(w: Work, ctx: Ctx) -> bool:
    return w.issued_at is not None and ctx.now - w.issued_at > ctx.policy.timeouts.get(w.stage, 600)


def on_enrolled(w: Work, ctx: Ctx) -> Outcome:
    if w.issued is Verb.MANAGE and w.node.get("last_error"):
        # Ironic sent it back: power credentials or BMC unreachable.
        return Failed("power-credentials", w.node["last_error"])
    if w.issued is Verb.MANAGE and not _timed_out(w, ctx):
        return Continue()  # the API answered before the state moved
    return _issue(w, ctx, Stage.MANAGE, Verb.MANAGE)


def on_transient(w: Work, ctx: Ctx) -> Outcome:
    if _timed_out(w, ctx):
        state = w.node.get("provision_state")
        if state in (PS.CLEAN_WAIT.value, PS.INSPECT_WAIT.value):
            try:
                ctx.provisioner.set_provision_state(w.uuid, Verb.ABORT)
            except IronicError:
                pass
        return Failed(f"{w.stage.value}-timeout",
                      f"still '{state}' after {ctx.policy.timeouts.get(w.stage):.0f}s")
    return Continue()


def on_manageable(w: Work, ctx: Ctx) -> Outcome:
    if w.issued is Verb.INSPECT:
        _checkpoint(w, ctx, "inspected")
        w.issued = None
    elif w.issued is Verb.CLEAN:
        _checkpoint(w, ctx, "cleaned")
        w.issued = None
    elif w.issued is Verb.PROVIDE:
        return Continue() if not _timed_out(w, ctx) else Failed("provide-timeout", "node stayed manageable")
    cp = w.checkpoint
    if w.spec.inspect and cp not in ("inspected", "cleaned"):
        return _issue(w, ctx, Stage.INSPECT, Verb.INSPECT)
    cleaning = w.spec.cleaning
    if cleaning.mode is CleanMode.MANUAL and cp != "cleaned":
        return _issue(w, ctx, Stage.CLEAN, Verb.CLEAN, clean_steps=[s.to_dict() for s in cleaning.steps],
                      disable_ramdisk=True if cleaning.disable_ramdisk else None)
    return _issue(w, ctx, Stage.PROVIDE, Verb.PROVIDE)


def persisted_recoveries(node: dict) -> int:
    """Recoveries already spent on this node, by this run or an earlier one
    (:data:`constants.EXTRA_RETRIES` in ``extra``)."""
    try:
        return max(0, int((node.get("extra") or {}).get(C.EXTRA_RETRIES) or 0))
    except (TypeError, ValueError):
        return 0


def on_failed(w: Work, ctx: Ctx) -> Outcome:
    """``clean failed`` / ``inspect failed``: the documented recovery policy.

    The count is kept on the node (``extra.nodeforge_retries``) and written
    *before* the recovery is issued, so a run killed and started again (any
    number of times) never grants a node more than ``max_recoveries``."""
    reason = scrub(w.node.get("last_error") or w.node.get("provision_state") or "")
    kind = "clean-failed" if node_state(w.node) is NodeState.CLEAN_FAILED else "inspect-failed"
    w.recoveries = max(w.recoveries, persisted_recoveries(w.node))
    if w.issued is Verb.MANAGE and not _timed_out(w, ctx):
        return Continue()  # the recovery's manage is issued; wait for it to land
    if w.recovery_pending or w.recoveries < ctx.policy.max_recoveries:
        if not w.recovery_pending:
            # Spend the recovery on the node first: a kill after this line
            # costs a recovery, never grants an extra one.
            ctx.provisioner.patch_node(w.uuid, [{"op": "add", "path": f"/extra/{C.EXTRA_RETRIES}",
                                                 "value": w.recoveries + 1}])
            w.node.setdefault("extra", {})[C.EXTRA_RETRIES] = w.recoveries + 1
            w.recoveries += 1
            w.recovery_pending = True
        try:
            ctx.provisioner.set_provision_state(w.uuid, Verb.MANAGE)
        except IronicError as exc:
            return Retry(f"manage after {kind}: {exc.kind.value}")
        w.recovery_pending = False
        w.issued, w.issued_at = Verb.MANAGE, ctx.now
        return Retry(f"{kind}; recovery {w.recoveries}/{ctx.policy.max_recoveries}: {reason}")
    try:
        # Maintenance first: a run killed in between still finds the node parked.
        ctx.provisioner.set_maintenance(w.uuid, f"{PARKED_PREFIX}{kind}: {reason}"[:255])
        ctx.provisioner.set_provision_state(w.uuid, Verb.MANAGE)
    except IronicError as exc:
        log.warning("%s: could not park the node in maintenance: %s", w.spec.name, exc)
    return Failed(kind, reason)


def on_available(w: Work, ctx: Ctx) -> Outcome:
    if C.EXTRA_RETRIES in (w.node.get("extra") or {}):
        # Recovered: the next failure (another run, months later) gets the full policy again.
        ctx.provisioner.patch_node(w.uuid, [{"op": "remove", "path": f"/extra/{C.EXTRA_RETRIES}"}])
        w.node["extra"].pop(C.EXTRA_RETRIES, None)
    return Complete(NodeState.AVAILABLE)


def on_in_use(w: Work, ctx: Ctx) -> Outcome:
    return Complete(NodeState.IN_USE)


def on_unknown(w: Work, ctx: Ctx) -> Outcome:
    return Failed("unexpected-state", f"provision state {w.node.get('provision_state')!r}")


HANDLERS: dict[NodeState, Handler] = {
    NodeState.ENROLLED: on_enrolled,
    NodeState.VERIFYING: on_transient,
    NodeState.MANAGEABLE: on_manageable,
    NodeState.INSPECTING: on_transient,
    NodeState.INSPECT_FAILED: on_failed,
    NodeState.CLEANING: on_transient,
    NodeState.CLEAN_FAILED: on_failed,
    NodeState.AVAILABLE: on_available,
    NodeState.IN_USE: on_in_use,
    NodeState.UNKNOWN: on_unknown,
}


def parked(node: dict) -> str | None:
    """The failure kind of a node nodeforge parked in maintenance, else None."""
    reason = node.get("maintenance_reason") or ""
    if node.get("maintenance") and reason.startswith(PARKED_PREFIX):
        return reason[len(PARKED_PREFIX):].split(":", 1)[0] or "parked"
    return None


def advance(w: Work, ctx: Ctx) -> Outcome:
    """Run the handler for the node's current state and apply its outcome."""
    if ctx.now < w.not_before:
        return Continue()
    state = node_state(w.node)
    kind = parked(w.node)
    try:
        if kind and w.issued is None:
            # Parked by an earlier run: left alone until an operator unsets maintenance.
            outcome: Outcome = Failed(kind, f"parked in maintenance by an earlier run: {w.node['maintenance_reason']}")
        else:
            outcome = HANDLERS[state](w, ctx)
    except IronicError as exc:
        outcome = Retry(f"{exc.kind.value}") if exc.kind.retriable else Failed("api", str(exc))
    if isinstance(outcome, Complete):
        w.result = outcome.state
        w.stage = Stage.DONE
        log.info("%s: %s", w.spec.name, outcome.state.value)
    elif isinstance(outcome, Failed):
        w.error_type, w.error = outcome.error_type, scrub(outcome.message)
        w.failures += 1
        log.warning("%s: failed at %s (%s): %s", w.spec.name, w.stage.value, outcome.error_type, w.error)
    elif isinstance(outcome, Retry):
        w.not_before = ctx.now + outcome.delay
        log.info("%s: retry (%s)", w.spec.name, scrub(outcome.reason))
    return outcome


def run(provisioner: Provisioner, works: list[Work], policy: Policy | None = None, *,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[list[Work]], None] | None = None) -> list[Work]:
    """Drive every node to a final state (or a per-node failure)."""
    policy = policy or Policy()
    start = clock()
    by_uuid = {w.uuid: w for w in works}
    while True:
        pending = [w for w in works if not w.done]
        if not pending:
            break
        now = clock()
        if now - start > policy.overall_timeout:
            for w in pending:
                w.error_type, w.error = "timeout", f"run timed out at stage {w.stage.value}"
            break
        nodes = {n["uuid"]: n for n in provisioner.list_nodes() if n["uuid"] in by_uuid}
        busy: dict[Stage, int] = {}
        for w in pending:
            w.node = nodes.get(w.uuid, {"provision_state": None})
            st = node_state(w.node)
            if w.issued_at is None and st in (NodeState.VERIFYING, NodeState.INSPECTING, NodeState.CLEANING):
                w.issued_at = now  # resumed mid-stage: its timeout starts now
            if st in (NodeState.VERIFYING, NodeState.INSPECTING, NodeState.CLEANING):
                busy[w.stage] = busy.get(w.stage, 0) + 1
        ctx = Ctx(provisioner, policy, busy, now)
        for w in pending:
            if w.uuid not in nodes:
                w.error_type, w.error = "deleted", "node disappeared from Ironic"
                continue
            advance(w, ctx)
        if progress:
            progress(works)
        if any(not w.done for w in works):
            sleep(policy.poll_interval)
    return works
