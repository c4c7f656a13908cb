"""Orchestration: check -> bump -> (per minor) prefetch -> render -> build ->
verify -> publish, then promote -- only when every earlier stage of every
minor succeeded, so a failure anywhere promotes nothing and leaves Glance
with at most a few candidates (tag ``nodeforge-candidate``, private).

Each stage transition is written to the run record before and after the
stage runs. ``resume`` reloads a record and runs the stages that did not
succeed, in order, reusing the recorded outputs of the finished ones. One run
at a time per runs directory (:mod:`nodeforge.pipeline.lock`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Callable, Mapping

from nodeforge.errors import ExitCode, NodeforgeError, UsageError
from nodeforge.pipeline import runrecord as rr
from nodeforge.pipeline.lock import RunLock
from nodeforge.pipeline.stages import DEFAULT_STAGES, PipelineConfig, Stage, StageContext
from nodeforge.redact import scrub

log = logging.getLogger(__name__)
DEFAULT_RUNS_DIR = Path("runs")


class PipelineFailed(NodeforgeError):
    message = "pipeline run {run_id} failed at {stage}: {detail}"

    def __init__(self, *, exit_code: int = ExitCode.FAILURE, **kwargs):
        super().__init__(**kwargs)
        self.exit_code = ExitCode(exit_code) if exit_code in ExitCode._value2member_map_ else ExitCode.FAILURE


@dataclasses.dataclass
class Plan:
    """What a dry run found: the check, the bump diff, and the stages a run would do."""

    minors: list[str]
    check: dict
    bump: dict | None
    stages: list[dict]
    packages: list[dict] = dataclasses.field(default_factory=list)   # OS package changes the bump would make

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"dry_run": True}


class Pipeline:
    def __init__(self, config: PipelineConfig, *, runs_dir: Path = DEFAULT_RUNS_DIR,
                 stages: Mapping[str, Stage] | None = None, say: Callable[[str], None] | None = None):
        self.config = config
        self.runs_dir = Path(runs_dir)
        self.stages = dict(stages or DEFAULT_STAGES)
        missing = [s for s in rr.STAGES if s not in self.stages]
        if missing:
            raise UsageError(detail=f"pipeline stages missing: {', '.join(missing)}")
        self.say = say or (lambda line: log.info("%s", line))

    # -- entry points ----------------------------------------------------------------
    def run(self, minors: list[str] | None = None) -> rr.RunRecord:
        self.config.check()
        run_id = rr.new_run_id()
        with RunLock(self.runs_dir, run_id):
            run = rr.RunRecord(run_id, self.runs_dir / run_id,
                               inputs=self.config.to_dict() | {"minors": list(minors or [])})
            run.start_attempt(None)
            run.save()
            self.say(f"pipeline run {run_id}: record {run.json_path}")
            return self._execute(run)

    def resume(self, run_id: str) -> rr.RunRecord:
        run = rr.RunRecord.load(self.runs_dir, run_id)
        if run.status in (rr.SUCCEEDED, "nothing-to-do"):
            self.say(f"run {run_id} already finished ({run.status}); nothing to resume")
            return run
        # The recorded inputs win: a resumed run finishes the job it started.
        self.config = PipelineConfig.from_dict({k: v for k, v in run.inputs.items() if k != "minors"})
        self.config.check()
        with RunLock(self.runs_dir, run_id):
            run = rr.RunRecord.load(self.runs_dir, run_id)  # re-read under the lock
            # A failed stage, or one a killed process left 'running'.
            failed = run.failed_stage or next((s for s in run.stages if s.status == rr.RUNNING), None)
            run.start_attempt(failed.key if failed else None)
            run.status, run.finished, run.message = rr.RUNNING, None, None
            run.save()
            self.say(f"resuming run {run_id}" + (f" from {failed.key}" if failed else ""))
            return self._execute(run)

    def plan(self, minors: list[str] | None = None) -> Plan:
        """Dry run: check and bump read upstream (nothing downloaded or written); list the stages."""
        self.config.check()
        run = rr.RunRecord("dry-run", self.runs_dir / "dry-run", inputs=self.config.to_dict()
                           | {"minors": list(minors or [])})
        check_out = self.stages["check"](self._ctx(run, "check", None, dry_run=True))
        rec = run.stage("check")   # in memory only: the bump reads the check's outputs from the record
        rec.status, rec.outputs = rr.SUCCEEDED, check_out
        run.minors = list(check_out.get("minors", []))
        bump_out = None
        if run.minors:
            bump_out = self.stages["bump"](self._ctx(run, "bump", None, dry_run=True))
        stages = [{"stage": "check", "minor": None, "action": "run"},
                  {"stage": "bump", "minor": None, "action": "run" if run.minors else "skip"}]
        for phase in (rr.MINOR_STAGES[:-1], rr.MINOR_STAGES[-1:]):
            for minor in run.minors:
                stages += [{"stage": s, "minor": minor, "action": "run"} for s in phase]
        return Plan(run.minors, check_out, bump_out, stages, list((bump_out or {}).get("packages") or []))

    # -- the run -----------------------------------------------------------------------
    def _ctx(self, run: rr.RunRecord, stage: str, minor: str | None, *, dry_run: bool = False) -> StageContext:
        ctx = StageContext(self.config, run, stage, minor, dry_run=dry_run, say=self.say)
        ctx._conn = getattr(self, "_conn", None)
        return ctx

    def _execute(self, run: rr.RunRecord) -> rr.RunRecord:
        self._conn = None
        started = time.monotonic()
        try:
            self._step(run, "check", None)
            run.minors = list(run.find("check").outputs.get("minors", []))
            if not run.minors:
                run.status = "nothing-to-do"
                run.message = "nothing new upstream: every pinned minor is at its newest stable patch"
                if run.find("check").outputs.get("packages") is not None:
                    run.message += " and every locked OS package at the mirror's newest version"
                self.say(run.message)
                return run
            self._step(run, "bump", None)
            for minor in run.minors:                       # everything but promote, minor by minor
                for stage in rr.MINOR_STAGES[:-1]:
                    self._step(run, stage, minor)
            for minor in run.minors:                       # promote only once all of that succeeded
                self._step(run, "promote", minor)
                self._latency(run, minor)
            run.status = rr.SUCCEEDED
            run.message = f"approved images for {', '.join(run.minors)} in {time.monotonic() - started:.0f}s"
            return run
        except BaseException as exc:
            run.status = rr.FAILED
            failed = run.failed_stage
            where = failed.key if failed else "start"
            run.message = f"failed at {where}: {scrub(str(exc)) or type(exc).__name__}"
            if isinstance(exc, (NodeforgeError, Exception)) and not isinstance(exc, PipelineFailed):
                code = int(exc.exit_code) if isinstance(exc, NodeforgeError) else int(ExitCode.FAILURE)
                raise PipelineFailed(run_id=run.run_id, stage=where, detail=scrub(str(exc)) or type(exc).__name__,
                                     exit_code=code,
                                     hint=f"nothing was promoted; record {run.summary_path}; resume with "
                                          f"'nodeforge pipeline run --resume {run.run_id}'") from exc
            raise
        finally:
            run.finished = rr.iso(rr.now())
            run.save()

    def _step(self, run: rr.RunRecord, stage: str, minor: str | None) -> None:
        rec = run.stage(stage, minor)
        if rec.status == rr.SUCCEEDED:
            self.say(f"{rec.key}: done in an earlier attempt; skipped")
            return
        rec.status, rec.started, rec.finished, rec.seconds, rec.error = rr.RUNNING, rr.iso(rr.now()), None, None, None
        rec.attempts += 1
        run.save()
        self.say(f"{rec.key}: running")
        t0 = time.monotonic()
        ctx = self._ctx(run, stage, minor)
        try:
            outputs = self.stages[stage](ctx) or {}
        except BaseException as exc:
            rec.status = rr.FAILED
            rec.error = {"type": type(exc).__name__, "message": scrub(str(exc)) or type(exc).__name__,
                         "hint": scrub(getattr(exc, "hint", None) or "") or None,
                         "exit_code": int(getattr(exc, "exit_code", ExitCode.FAILURE))}
            self.say(f"{rec.key}: FAILED: {rec.error['message']}")
            raise
        finally:
            self._conn = ctx._conn
            rec.seconds = round(time.monotonic() - t0, 3)
            rec.finished = rr.iso(rr.now())
            run.save()
        rec.status, rec.outputs = rr.SUCCEEDED, outputs
        run.save()
        self.say(f"{rec.key}: succeeded in {rec.seconds:.1f}s")

    @staticmethod
    def _latency(run: rr.RunRecord, minor: str) -> None:
        """Patch latency (the release's Last-Modified on the mirror -> approved) and, when OS packages
        moved, package-update latency (the serving suite's signed InRelease Date -> approved)."""
        promote = run.find("promote", minor)
        checked = run.find("check").outputs
        released = (checked.get("released") or {}).get(minor) or {}
        approved_at = rr.parse_iso(promote.finished)
        pub = rr.parse_iso(released.get("published_at"))
        start = rr.parse_iso(run.created)
        run.latency[minor] = {
            "version": released.get("version"), "published_at": released.get("published_at"),
            "approved_at": promote.finished,
            "latency_seconds": round((approved_at - pub).total_seconds(), 1) if pub else None,
            "run_seconds": round((approved_at - start).total_seconds(), 1),
            "stage_seconds": {s.name: s.seconds for s in run.stages if s.minor in (None, minor)},
            "triggers": list(checked.get("triggers") or []),
        }
        pk = checked.get("packages") or {}
        if checked.get("packages_moved"):
            appeared = rr.parse_iso(pk.get("published_at"))
            run.latency[minor]["packages"] = {
                "published_at": pk.get("published_at"), "updates": len(pk.get("updates") or []),
                "security": pk.get("security", 0),
                "latency_seconds": round((approved_at - appeared).total_seconds(), 1) if appeared else None}
