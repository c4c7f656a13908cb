"""Enroll a batch, end to end: plan, apply, lifecycle, one report.

What ``nodeforge baremetal enroll`` does, callable without click:
:func:`plan` (:func:`nodeforge.ironic.enroll.plan`, with the BMC's MACs for
Redfish nodes listed without any), then :func:`apply`: create/update the
nodes (:func:`nodeforge.ironic.enroll.apply`), drive the ones that were
written or already matched through manage -> (inspect) -> (clean) -> provide
(:func:`nodeforge.ironic.lifecycle.run`) and merge both into one
:class:`~nodeforge.ironic.report.Report` (one row per node: the action the
plan took, the stage it reached, its state, the last error with its
:class:`~nodeforge.ironic.errorkind.ErrorKind` and hint). The report's
:meth:`~nodeforge.ironic.report.Report.exit_code` is the command's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from nodeforge.errors import NodeforgeError
from nodeforge.ironic import constants as C, enroll as enroll_mod, lifecycle
from nodeforge.ironic.inventory import Inventory
from nodeforge.ironic.provisioner import Provisioner
from nodeforge.ironic.report import NodeReport, Report

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The knobs of a run (the command's options, same defaults)."""

    jobs: int = enroll_mod.DEFAULT_JOBS     # most create/update calls at once (the pacer's ceiling)
    lifecycle: bool = True                  # False: only create/update nodes, leave them in their state
    concurrency: int = 100                  # most nodes at once in each of inspect, clean and provide
    max_recoveries: int = 1
    timeout: float = 3600.0                 # the whole run's, seconds
    macs_from_bmc: bool = True              # Redfish nodes without MACs: ports for the MACs their BMC reports
    history: bool = True                    # each node's newest history events in its report row (reads)

    def policy(self) -> lifecycle.Policy:
        policy = lifecycle.Policy(max_recoveries=self.max_recoveries, overall_timeout=self.timeout)
        for stage in (lifecycle.Stage.INSPECT, lifecycle.Stage.CLEAN, lifecycle.Stage.PROVIDE):
            policy.concurrency[stage] = self.concurrency
        return policy


class Progress:
    """What :func:`apply` reports as it goes (nodeforge/ironic/progress.py's
    Progress fits): ``created(done, total)`` per node written, ``update(works)``
    per lifecycle round. This one ignores both."""

    def created(self, done: int, total: int) -> None:
        pass

    def update(self, works) -> None:
        pass


def provisioner(conn, settings: Settings = Settings()):
    """The Ironic client of a run: one pacer for the whole run (creates,
    ports, verbs, polls); ``jobs`` above the pacer's default ceiling raises
    the ceiling."""
    from nodeforge.ironic.pacing import Bounds, Pacer
    from nodeforge.ironic.provisioner import SdkProvisioner

    return SdkProvisioner(conn, pacer=Pacer(Bounds(max_inflight=max(Bounds.max_inflight, settings.jobs))))


def plan(inventory: Inventory, prov: Provisioner, settings: Settings = Settings()) -> enroll_mod.Plan:
    """The enroll plan (pure: reads Ironic, and the BMC of a Redfish node
    listed without MACs; writes nothing)."""
    return enroll_mod.plan(inventory, prov, discover=enroll_mod.redfish_macs if settings.macs_from_bmc else None)


def plan_rows(plan_: enroll_mod.Plan) -> list[dict]:
    """The dry run's table: one row per node (secrets masked in the changes)."""
    return [{"name": p.spec.name, "action": p.action.value, "matched_by": p.matched_by,
             "changes": "; ".join(str(c) for c in p.changes) + (" (MACs from the BMC)" if p.macs_from_bmc else ""),
             "error": p.error} for p in plan_.nodes]


def apply(plan_: enroll_mod.Plan, inventory: Inventory, prov: Provisioner, settings: Settings = Settings(), *,
          progress: Progress | None = None, started: float | None = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Report:
    """Apply the plan, then the lifecycle (unless ``settings.lifecycle`` is
    False); one report row per node, in inventory order. ``started``: when
    the run began (the plan's time counts in the report's seconds)."""
    progress = progress or Progress()
    start = clock() if started is None else started
    results = enroll_mod.apply(plan_, prov, jobs=settings.jobs, progress=progress.created)
    reports = {r.name: NodeReport(r.name, r.uuid, r.action.value, "enroll", None, r.ok, r.error_kind, r.error)
               for r in results}
    specs = inventory.by_name()
    works = [lifecycle.Work(spec=specs[r.name], uuid=r.uuid) for r in results if r.ok and r.uuid]
    if works and settings.lifecycle:
        lifecycle.run(prov, works, settings.policy(), progress=progress.update, clock=clock, sleep=sleep)
        for w in works:
            rep = reports[w.spec.name]
            rep.stage = w.stage.value
            rep.state = w.node.get("provision_state")
            rep.ok = w.error_type is None
            rep.error_type, rep.error = (str(w.error_type) if w.error_type else None), w.error
    else:
        for w in works:
            reports[w.spec.name].state = "enroll"
    if settings.history:
        ran = {w.spec.name: w for w in works} if settings.lifecycle else {}
        attach_history(prov, [r for r in reports.values() if r.uuid and history_worth_reading(r, ran.get(r.name))])
    return Report("enroll", list(reports.values()), seconds=clock() - start, writes=prov.writes,
                  retried=dict(prov.retried), pacing=prov.pacer.stats.to_dict() if getattr(prov, "pacer", None) else None)


def history_worth_reading(rep: NodeReport, work: lifecycle.Work | None) -> bool:
    """Whether a node's history is read for its report row (``work``: the node's way through the
    lifecycle, None when it had none): a node that failed, or met an error on the way (a recovery,
    a failure, a last_error in a poll), and a node that existed before the run and was changed or
    moved on (its history holds earlier events). Ironic records a node's errors there (and a few
    warnings), so a node this run created and took through without one has none to read: at 200
    nodes behind a throttled Ironic those reads were 200 calls for empty lists. A node left as it
    was keeps the earlier run's report."""
    if not rep.ok or (work is not None and (work.recoveries or work.failures or work.error_seen)):
        return True
    if rep.action == enroll_mod.Action.CREATE.value:
        return False
    return rep.action != enroll_mod.Action.NOOP.value or (work is not None and work.issued is not None)


HISTORY_FIELDS = ("created_at", "severity", "event_type", "event")
# Histories read at once after a run: reads are not held back by the pacer, and more than a few at
# once meet a throttled Ironic's refusals (503) and their back-off.
HISTORY_JOBS = 4


def attach_history(prov: Provisioner, reports: list[NodeReport], jobs: int = HISTORY_JOBS) -> None:
    """Each node's newest :data:`C.HISTORY_EVENTS` history events onto its report row (what a
    report's node opens to; :func:`apply` reads the ones :func:`history_worth_reading` names),
    ``jobs`` nodes at a time; a
    history that cannot be read leaves the row's ``history`` None and the node's verdict unchanged."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rep: NodeReport) -> None:
        try:
            events = prov.node_history(rep.uuid)
        except NodeforgeError as exc:
            log.debug("history of %s not read: %s", rep.name, exc)
            return
        rep.history = [{k: e.get(k) for k in HISTORY_FIELDS} for e in events[-C.HISTORY_EVENTS:]]

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(reports) or 1))) as pool:
        list(pool.map(one, reports))


def preflight(inventory: Inventory, *, jobs: int = 16, clock: Callable[[], float] = time.monotonic):
    """Check every BMC (:func:`nodeforge.ironic.preflight.run`); the checks
    and their report (one row per node, its failure an ErrorKind)."""
    from nodeforge.ironic import preflight as preflight_mod

    start = clock()
    checks = preflight_mod.run(inventory, jobs=jobs)
    report = Report("preflight", [NodeReport(c.name, None, "preflight", "preflight", c.power_state, c.ok,
                                             c.failure, c.detail) for c in checks], seconds=clock() - start)
    return checks, report


def title(report: Report) -> str:
    return (f"enroll: {len(report.nodes) - len(report.failed)} ok, {len(report.failed)} failed, "
            f"{report.writes} writes, {report.seconds:.1f}s")
