"""Node lifecycle after enrollment: manage -> (inspect) -> (manual clean) -> provide.

One table, :data:`HANDLERS`, maps each :class:`NodeState` (derived from
Ironic's provision state) to a handler. Handlers only decide, making no API
call: they return an :class:`Outcome` (Continue, Complete, Failed, Retry, or
:class:`Act`: the writes they want, verb and arguments, then the outcome once
Ironic accepted them). One place makes the writes (:func:`perform`), records
them (:func:`settle`) and applies, logs and counts the outcome
(:func:`conclude`). :func:`run` drives a batch: one node listing per poll
(not one GET per node, only the fields a poll needs), every node's decision,
then all the round's writes at once from a thread pool (each node's in
order; in flight as many as the provisioner's pacer allows, see
``pacing.py``), so a round costs about one round trip, not one per node; a
per-stage concurrency limit on the verbs it issues, a per-stage timeout, and
the recovery policy for ``clean failed`` / ``inspect failed`` (retry
``max_recoveries`` times, else back to ``manageable`` in maintenance with
the reason).

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
from concurrent.futures import Future, ThreadPoolExecutor, wait as wait_futures
from typing import Callable

from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import ProvisionState as PS, Verb
from nodeforge.ironic.errorkind import ErrorKind
from nodeforge.ironic.inventory import NodeSpec
from nodeforge.ironic.pacing import Pacer
from nodeforge.ironic.provisioner import IronicError, Provisioner
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
    error_type: ErrorKind | str     # an ErrorKind; a parked node's kind is read back from Ironic (may be older)
    message: str


@dataclasses.dataclass(frozen=True)
class Retry:
    reason: str
    delay: float = 1.0


class OnError(str, enum.Enum):
    """How a refused :class:`Write` turns into the node's outcome (the writes after it are not made)."""
    API = "api"          # retriable: Retry; else Failed(ErrorKind.API)
    REJECT = "reject"    # a stage's verb: retriable: Retry (2 s); else Failed(ErrorKind.rejected(stage))
    RETRY = "retry"      # any refusal: Retry
    IGNORE = "ignore"    # logged; the Act's outcome stands


@dataclasses.dataclass(frozen=True)
class Write:
    """One write a handler wants made on its node: a provision ``verb`` (with
    ``clean_steps``/``disable_ramdisk``), a JSON ``patch``, or ``maintenance``
    (set, with that reason). ``stage``: the verb starts that stage (its
    bookkeeping and the ``NAME: VERB`` log line follow its acceptance).
    ``effect`` records the write on the :class:`Work` once Ironic accepted it."""

    verb: Verb | None = None
    clean_steps: tuple[dict, ...] | None = None
    disable_ramdisk: bool | None = None
    patch: tuple[dict, ...] | None = None
    maintenance: str | None = None
    stage: Stage | None = None
    on_error: OnError = OnError.API
    label: str = ""                      # for RETRY/IGNORE messages
    effect: Callable[["Work", float], None] | None = dataclasses.field(default=None, compare=False)

    def perform(self, provisioner: "Provisioner", uuid: str) -> None:
        if self.maintenance is not None:
            provisioner.set_maintenance(uuid, self.maintenance)
        elif self.patch is not None:
            provisioner.patch_node(uuid, list(self.patch))
        else:
            kw = {}
            if self.clean_steps is not None:
                kw["clean_steps"] = list(self.clean_steps)
            if self.disable_ramdisk is not None:
                kw["disable_ramdisk"] = self.disable_ramdisk
            provisioner.set_provision_state(uuid, self.verb, **kw)


@dataclasses.dataclass(frozen=True)
class Act:
    """The handler's decision to write: ``writes`` in order (one node's, made by
    one worker, concurrently with other nodes'), then ``then`` once all were accepted."""
    writes: tuple[Write, ...]
    then: "Outcome" = Continue()


Outcome = Continue | Complete | Failed | Retry | Act


@dataclasses.dataclass
class Policy:
    concurrency: dict[Stage, int] = dataclasses.field(default_factory=lambda: {
        Stage.MANAGE: 100, Stage.INSPECT: 100, Stage.CLEAN: 100, Stage.PROVIDE: 100})
    timeouts: dict[Stage, float] = dataclasses.field(default_factory=lambda: {
        Stage.MANAGE: 180.0, Stage.INSPECT: 600.0, Stage.CLEAN: 1800.0, Stage.PROVIDE: 1800.0})
    max_recoveries: int = 1
    poll_interval: float = 0.5      # the shortest poll interval; the pacer stretches it (pacing.py)
    overall_timeout: float = 3600.0
    workers: int = 32               # threads making writes; Ironic's pace is the pacer's limit


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
    error_type: ErrorKind | str | None = None
    error: str | None = None
    error_seen: bool = False         # a poll showed the node with a last_error (Ironic recorded an event)
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


def _started(stage: Stage, verb: Verb):
    def effect(w: Work, now: float) -> None:
        if w.stage is not stage:
            w.stage_seconds[w.stage.value] = round(now - (w.issued_at or now), 2)
        w.stage, w.issued, w.issued_at = stage, verb, now
        log.info("%s: %s", w.spec.name, verb.value)
    return effect


def _issue(w: Work, ctx: Ctx, stage: Stage, verb: Verb, *, clean_steps: list[dict] | None = None,
           disable_ramdisk: bool | None = None) -> Outcome:
    """Start ``stage`` with ``verb`` if the stage has a free slot (reserved now)."""
    if ctx.busy.get(stage, 0) >= ctx.policy.concurrency.get(stage, 10):
        return Continue()
    ctx.busy[stage] = ctx.busy.get(stage, 0) + 1
    return Act((Write(verb, tuple(clean_steps) if clean_steps is not None else None, disable_ramdisk,
                      stage=stage, on_error=OnError.REJECT, effect=_started(stage, verb)),))


def _set_extra(key: str, value):
    def effect(w: Work, now: float) -> None:
        w.node.setdefault("extra", {})[key] = value
    return effect


def _checkpoint(value: str) -> Write:
    def effect(w: Work, now: float) -> None:
        _set_extra(C.EXTRA_CHECKPOINT, value)(w, now)
        w.issued = None
    return Write(patch=({"op": "add", "path": f"/extra/{C.EXTRA_CHECKPOINT}", "value": value},), effect=effect)


def _then(writes: list[Write], outcome: Outcome) -> Outcome:
    """``writes`` first, then ``outcome`` (itself maybe an :class:`Act`)."""
    if not writes:
        return outcome
    if isinstance(outcome, Act):
        return Act(tuple(writes) + outcome.writes, outcome.then)
    return Act(tuple(writes), outcome)


def _timed_out(w: Work, ctx: Ctx) -> bool:
    return w.issued_at is not None and ctx.now - w.issued_at > ctx.policy.timeouts.get(w.stage, 600)


def on_enrolled(w: Work, ctx: Ctx) -> Outcome:
    if w.issued is Verb.MANAGE and w.node.get("last_error"):
        # Ironic sent it back: power credentials or BMC unreachable.
        return Failed(ErrorKind.POWER_CREDENTIALS, w.node["last_error"])
    if w.issued is Verb.MANAGE and not _timed_out(w, ctx):
        return Continue()  # the API answered before the state moved
    return _issue(w, ctx, Stage.MANAGE, Verb.MANAGE)


def on_transient(w: Work, ctx: Ctx) -> Outcome:
    if _timed_out(w, ctx):
        state = w.node.get("provision_state")
        failed = Failed(ErrorKind.timeout(w.stage), f"still '{state}' after {ctx.policy.timeouts.get(w.stage):.0f}s")
        if state in (PS.CLEAN_WAIT.value, PS.INSPECT_WAIT.value):
            return Act((Write(Verb.ABORT, on_error=OnError.IGNORE),), failed)
        return failed
    return Continue()


def on_manageable(w: Work, ctx: Ctx) -> Outcome:
    first: list[Write] = []
    cp = w.checkpoint
    if w.issued is Verb.INSPECT:
        first, cp = [_checkpoint("inspected")], "inspected"
    elif w.issued is Verb.CLEAN:
        first, cp = [_checkpoint("cleaned")], "cleaned"
    elif w.issued is Verb.PROVIDE:
        return Continue() if not _timed_out(w, ctx) else Failed(ErrorKind.PROVIDE_TIMEOUT, "node stayed manageable")
    if w.spec.inspect and cp not in ("inspected", "cleaned"):
        return _then(first, _issue(w, ctx, Stage.INSPECT, Verb.INSPECT))
    cleaning = w.spec.cleaning
    steps = cleaning.enrollment_steps()
    if steps and cp != "cleaned":
        return _then(first, _issue(w, ctx, Stage.CLEAN, Verb.CLEAN, clean_steps=steps,
                                   disable_ramdisk=True if cleaning.disable_ramdisk else None))
    return _then(first, _issue(w, ctx, Stage.PROVIDE, Verb.PROVIDE))


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
    *before* the recovery is issued (the writes of one :class:`Act` are made
    in order, the next only after Ironic accepted the previous), so a run
    killed and started again (any number of times) never grants a node more
    than ``max_recoveries``."""
    reason = scrub(w.node.get("last_error") or w.node.get("provision_state") or "")
    kind = ErrorKind.CLEAN_FAILED if node_state(w.node) is NodeState.CLEAN_FAILED else ErrorKind.INSPECT_FAILED
    w.recoveries = max(w.recoveries, persisted_recoveries(w.node))
    if w.issued is Verb.MANAGE and not _timed_out(w, ctx):
        return Continue()  # the recovery's manage is issued; wait for it to land
    if w.recovery_pending or w.recoveries < ctx.policy.max_recoveries:
        writes: list[Write] = []
        spent = w.recoveries
        if not w.recovery_pending:
            # Spend the recovery on the node first: a kill after this write
            # costs a recovery, never grants an extra one.
            spent = w.recoveries + 1

            def counted(w: Work, now: float, n=spent) -> None:
                _set_extra(C.EXTRA_RETRIES, n)(w, now)
                w.recoveries, w.recovery_pending = n, True
            writes.append(Write(patch=({"op": "add", "path": f"/extra/{C.EXTRA_RETRIES}", "value": spent},),
                                effect=counted))

        def reissued(w: Work, now: float) -> None:
            w.recovery_pending = False
            w.issued, w.issued_at = Verb.MANAGE, now
        writes.append(Write(Verb.MANAGE, on_error=OnError.RETRY, label=f"manage after {kind}", effect=reissued))
        return Act(tuple(writes), Retry(f"{kind}; recovery {spent}/{ctx.policy.max_recoveries}: {reason}"))
    # Maintenance first: a run killed in between still finds the node parked.
    return Act((Write(maintenance=f"{PARKED_PREFIX}{kind}: {reason}"[:255], on_error=OnError.IGNORE,
                      label="could not park the node in maintenance"),
                Write(Verb.MANAGE, on_error=OnError.IGNORE, label="could not park the node in maintenance")),
               Failed(kind, reason))


def on_available(w: Work, ctx: Ctx) -> Outcome:
    if C.EXTRA_RETRIES in (w.node.get("extra") or {}):
        # Recovered: the next failure (another run, months later) gets the full policy again.
        def cleared(w: Work, now: float) -> None:
            w.node["extra"].pop(C.EXTRA_RETRIES, None)
        return Act((Write(patch=({"op": "remove", "path": f"/extra/{C.EXTRA_RETRIES}"},), effect=cleared),),
                   Complete(NodeState.AVAILABLE))
    return Complete(NodeState.AVAILABLE)


def on_in_use(w: Work, ctx: Ctx) -> Outcome:
    return Complete(NodeState.IN_USE)


def on_unknown(w: Work, ctx: Ctx) -> Outcome:
    return Failed(ErrorKind.UNEXPECTED_STATE, f"provision state {w.node.get('provision_state')!r}")


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


def decide(w: Work, ctx: Ctx) -> Outcome:
    """The handler's decision for the node's current state (no API call)."""
    if ctx.now < w.not_before:
        return Continue()
    state = node_state(w.node)
    kind = parked(w.node)
    if kind and w.issued is None:
        kind = _known(kind)
        # Parked by an earlier run: left alone until an operator unsets maintenance.
        return Failed(kind, f"parked in maintenance by an earlier run: {w.node['maintenance_reason']}")
    try:
        return HANDLERS[state](w, ctx)
    except IronicError as exc:
        return _api_error(exc)


def _known(kind: str) -> ErrorKind | str:
    """A parked node's kind as an ErrorKind (kept as read when an older or hand-written reason names another)."""
    try:
        return ErrorKind(kind)
    except ValueError:
        return kind


def _api_error(exc: IronicError) -> Outcome:
    return Retry(f"{exc.kind.value}") if exc.kind.retriable else Failed(ErrorKind.API, str(exc))


@dataclasses.dataclass
class Performed:
    """What :func:`perform` got done of an :class:`Act`: the writes Ironic
    accepted, and the refused one with its error (the rest not attempted)."""
    act: Act
    accepted: int = 0
    error: IronicError | None = None


def perform(provisioner: Provisioner, uuid: str, act: Act) -> Performed:
    """Make an Act's writes in order, stopping at the first refusal (thread-safe: touches no Work)."""
    done = Performed(act)
    for write in act.writes:
        try:
            write.perform(provisioner, uuid)
        except IronicError as exc:
            done.error = exc
            return done
        done.accepted += 1
    return done


def settle(w: Work, ctx: Ctx, done: Performed) -> Outcome:
    """Record the accepted writes on the Work and turn a refusal into the node's outcome."""
    act = done.act
    for write in act.writes[:done.accepted]:
        if write.effect:
            write.effect(w, ctx.now)
    exc = done.error
    if exc is None:
        return act.then
    write = act.writes[done.accepted]
    if write.on_error is OnError.REJECT:
        if exc.kind.retriable:
            return Retry(f"{write.verb.value}: {exc.kind.value}", delay=2.0)
        return Failed(ErrorKind.rejected(write.stage), str(exc))
    if write.on_error is OnError.RETRY:
        return Retry(f"{write.label}: {exc.kind.value}")
    if write.on_error is OnError.IGNORE:
        if write.label:
            log.warning("%s: %s: %s", w.spec.name, write.label, exc)
        return act.then
    return _api_error(exc)


def conclude(w: Work, ctx: Ctx, outcome: Outcome) -> Outcome:
    """Apply a final outcome (not an Act) to the Work, log it and count failures."""
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


def advance(w: Work, ctx: Ctx) -> Outcome:
    """One node, serially: decide, make its writes, apply the outcome."""
    outcome = decide(w, ctx)
    if isinstance(outcome, Act):
        outcome = settle(w, ctx, perform(ctx.provisioner, w.uuid, outcome))
    return conclude(w, ctx, outcome)


# Fields a poll needs (a listing of only these is much cheaper than /nodes/detail).
POLL_FIELDS = ["uuid", "name", "provision_state", "target_provision_state", "last_error", "extra",
               "maintenance", "maintenance_reason"]

_TRANSIENT = (NodeState.VERIFYING, NodeState.INSPECTING, NodeState.CLEANING)
ROUND_WAIT = 4    # poll intervals a round waits for its writes' answers before the next listing


def run(provisioner: Provisioner, works: list[Work], policy: Policy | None = None, *,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
        progress: Callable[[list[Work]], None] | None = None, pacer: Pacer | None = None) -> list[Work]:
    """Drive every node to a final state (or a per-node failure).

    Each round: one node listing; every node's handler decides (serially, no
    API call); the writes decided are made concurrently (``policy.workers``
    threads; the provisioner's :class:`~nodeforge.ironic.pacing.Pacer` keeps
    as many in flight as Ironic answers well), each node's in order, and
    their outcomes applied as they are answered. The next listing comes a
    poll interval (the pacer's, at least ``policy.poll_interval``) after the
    round's writes were all answered, or after :data:`ROUND_WAIT` poll
    intervals of waiting for them: a few slow answers do not hold back the
    nodes whose writes were answered (a node with a write still in flight is
    not decided on)."""
    policy = policy or Policy()
    pacer = pacer or getattr(provisioner, "pacer", None) or Pacer(clock=clock)
    start = clock()
    by_uuid = {w.uuid: w for w in works}
    seen: dict[str, tuple] = {}
    inflight: dict[str, tuple[Work, Act, Future]] = {}
    with ThreadPoolExecutor(max_workers=max(1, policy.workers), thread_name_prefix="lifecycle") as pool:
        while True:
            _harvest(provisioner, policy, clock, inflight)
            pending = [w for w in works if not w.done]
            if not pending:
                break
            now = clock()
            if now - start > policy.overall_timeout:
                _harvest(provisioner, policy, clock, inflight, only_done=False)
                _time_out(works)
                break
            listed = _list_for_round(provisioner, policy, pacer, sleep)
            if listed is None:
                continue
            nodes = {n["uuid"]: n for n in listed if n["uuid"] in by_uuid}
            busy = _busy_in_flight(inflight)
            deciding = [w for w in pending if w.uuid not in inflight]
            moved = _observe(deciding, nodes, seen, busy, now)
            ctx = Ctx(provisioner, policy, busy, now)
            moved = _decide_round(deciding, nodes, ctx, inflight, pool) or moved
            interval = max(policy.poll_interval, pacer.poll_interval())
            answered = True
            if inflight:
                # Wait for this round's answers, at most a few poll intervals (real time).
                answered = not wait_futures([f for _, _, f in inflight.values()],
                                            timeout=ROUND_WAIT * interval).not_done
                _harvest(provisioner, policy, clock, inflight)
            if progress:
                progress(works)
            pacer.round_done(moved=moved)
            if answered and any(not w.done for w in works):
                sleep(max(policy.poll_interval, pacer.poll_interval()))
    return works


def _harvest(provisioner: Provisioner, policy: Policy, clock: Callable[[], float],
             inflight: dict[str, tuple[Work, Act, Future]], only_done: bool = True) -> None:
    """Settle the answered Acts (all of them, waiting, with ``only_done`` false)."""
    ctx = Ctx(provisioner, policy, {}, clock())
    for uuid, (w, act, fut) in list(inflight.items()):
        if only_done and not fut.done():
            continue
        del inflight[uuid]
        conclude(w, ctx, settle(w, ctx, fut.result()))


def _time_out(works: list[Work]) -> None:
    """The run's overall timeout: every node not done fails at the stage it reached."""
    for w in works:
        if not w.done:
            w.error_type, w.error = ErrorKind.TIMEOUT, f"run timed out at stage {w.stage.value}"


def _list_for_round(provisioner: Provisioner, policy: Policy, pacer: Pacer,
                    sleep: Callable[[float], None]) -> list[dict] | None:
    """The round's node listing, or None when Ironic is too busy to list (its retries spent):
    the round is skipped and polls spaced out."""
    try:
        return provisioner.list_nodes(fields=POLL_FIELDS)
    except IronicError as exc:
        if not exc.kind.retriable:
            raise
        log.info("node listing refused (%s); polling later", exc.kind.value)
        pacer.round_done(moved=False, congested=True)
        sleep(max(policy.poll_interval, pacer.poll_interval()))
        return None


def _busy_in_flight(inflight: dict[str, tuple[Work, Act, Future]]) -> dict[Stage, int]:
    """How many writes still in flight start each stage."""
    busy: dict[Stage, int] = {}
    for _, act, _ in inflight.values():
        for write in act.writes:
            if write.stage:
                busy[write.stage] = busy.get(write.stage, 0) + 1
    return busy


def _observe(deciding: list[Work], nodes: dict[str, dict], seen: dict[str, tuple], busy: dict[Stage, int],
             now: float) -> bool:
    """Give each node deciding this round its listed state; count the nodes in a transient
    state into ``busy``. Whether any node's state moved since the last round."""
    moved = False
    for w in deciding:
        w.node = nodes.get(w.uuid, {"provision_state": None})
        w.error_seen = w.error_seen or bool(w.node.get("last_error"))
        st = node_state(w.node)
        key = (w.node.get("provision_state"), w.node.get("target_provision_state"))
        moved = moved or seen.get(w.uuid) != key
        seen[w.uuid] = key
        if w.issued_at is None and st in _TRANSIENT:
            w.issued_at = now  # resumed mid-stage: its timeout starts now
        if st in _TRANSIENT:
            busy[w.stage] = busy.get(w.stage, 0) + 1
    return moved


def _decide_round(deciding: list[Work], nodes: dict[str, dict], ctx: Ctx,
                  inflight: dict[str, tuple[Work, Act, Future]], pool: ThreadPoolExecutor) -> bool:
    """Each node's decision: its writes submitted to the pool, or its outcome applied.
    Whether any writes were submitted."""
    moved = False
    for w in deciding:
        if w.uuid not in nodes:
            w.error_type, w.error = ErrorKind.DELETED, "node disappeared from Ironic"
            continue
        outcome = decide(w, ctx)
        if isinstance(outcome, Act):
            inflight[w.uuid] = (w, outcome, pool.submit(perform, ctx.provisioner, w.uuid, outcome))
            moved = True
        else:
            conclude(w, ctx, outcome)
    return moved
