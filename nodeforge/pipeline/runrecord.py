"""The run record: ``<runs>/<RUN_ID>/run.json`` plus a readable ``summary.md``.

Written atomically (``nodeforge.base.fs.atomic_write``) after every stage transition, so
a crash leaves the last consistent state; ``--resume`` reads it back. Format
in docs/pipeline.md (schema ``nodeforge-pipeline-run/1``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import secrets
import socket
from pathlib import Path

from nodeforge import schema
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.base.fs import atomic_write
from nodeforge.redact import scrub, scrub_obj

log = logging.getLogger(__name__)
SCHEMA = "nodeforge-pipeline-run/1"
# A run record lists its stages, attempts and the packages that moved: well under these.
LIMITS = schema.Limits(max_bytes=16 << 20, max_values=1_000_000)
RUN_JSON = "run.json"
SUMMARY = "summary.md"
GLOBAL_STAGES = ("check", "bump")
MINOR_STAGES = ("prefetch", "render", "build", "verify", "publish", "canary", "promote")
STAGES = GLOBAL_STAGES + MINOR_STAGES

PENDING, RUNNING, SUCCEEDED, FAILED, SKIPPED = "pending", "running", "succeeded", "failed", "skipped"


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def iso(t: datetime.datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z" if t else None


def parse_iso(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    text = text.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.datetime.strptime(text, fmt).replace(tzinfo=datetime.timezone.utc)


def new_run_id(t: datetime.datetime | None = None) -> str:
    return f"{(t or now()).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


class RunNotFound(NodeforgeError):
    message = "no pipeline run {run_id} under {runs_dir}"
    hint = "'nodeforge pipeline list' shows the recorded runs"


@dataclasses.dataclass
class StageRecord:
    name: str
    minor: str | None = None
    status: str = PENDING
    started: str | None = None
    finished: str | None = None
    seconds: float | None = None
    attempts: int = 0
    outputs: dict = dataclasses.field(default_factory=dict)
    error: dict | None = None

    @property
    def key(self) -> str:
        return f"{self.name}[{self.minor}]" if self.minor else self.name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class RunRecord:
    run_id: str
    root: Path                              # <runs>/<run_id>
    inputs: dict
    created: str = dataclasses.field(default_factory=lambda: iso(now()))
    status: str = RUNNING                   # running | succeeded | failed | nothing-to-do
    minors: list[str] = dataclasses.field(default_factory=list)
    stages: list[StageRecord] = dataclasses.field(default_factory=list)
    images: dict = dataclasses.field(default_factory=dict)      # minor -> variant -> candidate image id
    approved: dict = dataclasses.field(default_factory=dict)    # minor -> variant -> approved image id
    latency: dict = dataclasses.field(default_factory=dict)     # minor -> patch latency facts
    packages: list = dataclasses.field(default_factory=list)    # OS package changes bump made (watch.Change)
    attempts: list[dict] = dataclasses.field(default_factory=list)  # each start/resume: at, pid, host, from
    finished: str | None = None
    message: str | None = None

    # -- stages --------------------------------------------------------------------
    def stage(self, name: str, minor: str | None = None) -> StageRecord:
        for s in self.stages:
            if s.name == name and s.minor == minor:
                return s
        s = StageRecord(name, minor)
        self.stages.append(s)
        return s

    def find(self, name: str, minor: str | None = None) -> StageRecord | None:
        return next((s for s in self.stages if s.name == name and s.minor == minor), None)

    def outputs(self, minor: str | None) -> dict:
        """Every finished stage's outputs for ``minor`` (and the global ones), by stage name."""
        return {s.name: s.outputs for s in self.stages
                if s.status == SUCCEEDED and (s.minor is None or s.minor == minor)}

    @property
    def failed_stage(self) -> StageRecord | None:
        return next((s for s in self.stages if s.status == FAILED), None)

    # -- files ---------------------------------------------------------------------
    @property
    def json_path(self) -> Path:
        return self.root / RUN_JSON

    @property
    def summary_path(self) -> Path:
        return self.root / SUMMARY

    def to_dict(self) -> dict:
        return scrub_obj({
            "schema": SCHEMA, "run_id": self.run_id, "status": self.status, "created": self.created,
            "finished": self.finished, "message": self.message, "inputs": self.inputs, "minors": self.minors,
            "stages": [s.to_dict() for s in self.stages], "images": self.images, "approved": self.approved,
            "latency": self.latency, "packages": self.packages, "attempts": self.attempts, "record": str(self.json_path),
            "summary": str(self.summary_path)})

    def save(self) -> None:
        atomic_write(self.json_path, json.dumps(self.to_dict(), indent=2) + "\n")
        atomic_write(self.summary_path, summary_markdown(self))

    def start_attempt(self, from_stage: str | None) -> None:
        self.attempts.append({"at": iso(now()), "pid": os.getpid(), "host": socket.gethostname(),
                              "from": from_stage})

    @classmethod
    def load(cls, runs_dir: Path, run_id: str) -> "RunRecord":
        root = Path(runs_dir) / run_id
        path = root / RUN_JSON
        if "/" in run_id or run_id in ("", ".", "..") or not (path.exists() or path.is_symlink()):
            raise RunNotFound(run_id=run_id, runs_dir=runs_dir)
        doc = schema.read_json(path, LIMITS)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise ConfigError(path=path, detail=f"schema is {found!r}, expected {SCHEMA!r}")
        fields = {f.name for f in dataclasses.fields(StageRecord)}
        try:
            return cls(run_id=doc["run_id"], root=root, inputs=doc["inputs"], created=doc["created"],
                       status=doc["status"], minors=doc.get("minors", []),
                       stages=[StageRecord(**{k: v for k, v in s.items() if k in fields}) for s in doc["stages"]],
                       images=doc.get("images", {}), approved=doc.get("approved", {}),
                       latency=doc.get("latency", {}), packages=doc.get("packages", []),
                       attempts=doc.get("attempts", []), finished=doc.get("finished"), message=doc.get("message"))
        except KeyError as exc:
            raise ConfigError(path=path, detail=f"not a run record: no {exc.args[0]!r}") from None
        except (TypeError, AttributeError):
            raise ConfigError(path=path, detail="not a run record: stages must be a list of objects") from None


def list_runs(runs_dir: Path) -> list[dict]:
    """One row per recorded run, newest first; a record that cannot be read is skipped with a warning
    naming it (``pipeline show`` says why)."""
    rows = []
    for path in sorted(Path(runs_dir).glob(f"*/{RUN_JSON}"), reverse=True):
        try:
            rec = RunRecord.load(runs_dir, path.parent.name)
        except (ConfigError, RunNotFound) as exc:
            log.warning("skipped %s: %s", path, exc)
            continue
        failed = next((s for s in rec.stages if s.status == FAILED), None)
        try:
            approved = ", ".join(str(i) for v in rec.approved.values() for i in v.values())
        except AttributeError:
            approved = ""
        rows.append({"run_id": rec.run_id, "status": rec.status, "created": rec.created,
                     "minors": ", ".join(str(m) for m in rec.minors or []),
                     "failed_stage": (f"{failed.name}[{failed.minor}]" if failed and failed.minor
                                      else failed.name if failed else ""),
                     "approved": approved, "packages": len(rec.packages or []),
                     "summary": str(path.parent / SUMMARY)})
    return rows


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return ""
    return f"{s:.1f}s" if s < 120 else f"{int(s // 60)}m{int(s % 60):02d}s"


def summary_markdown(run: RunRecord) -> str:
    lines = [f"# Pipeline run {run.run_id}", "",
             f"- status: **{run.status}**" + (f" — {scrub(run.message)}" if run.message else ""),
             f"- started: {run.created}" + (f", finished: {run.finished}" if run.finished else ""),
             f"- minors: {', '.join(run.minors) or '(none)'}"]
    inp = run.inputs
    lines.append(f"- lockfile: `{inp.get('lockfile')}`" + (" (fixture lockfile)" if inp.get("fixture") else ""))
    if inp.get("fixture"):
        lines.append(f"- artifacts: **fixture** — {inp['fixture']}; images are labelled "
                     "`nodeforge_fixture=true`")
    lines += ["", "| stage | minor | status | seconds | attempts | result |", "|---|---|---|---|---|---|"]
    for s in run.stages:
        result = ""
        if s.error:
            result = scrub(s.error.get("message", ""))
        elif s.outputs.get("summary"):
            result = scrub(str(s.outputs["summary"]))
        lines.append(f"| {s.name} | {s.minor or ''} | {s.status} | {_fmt_seconds(s.seconds)} | {s.attempts} | "
                     f"{result.replace('|', '/')} |")
    if run.approved:
        lines += ["", "## Approved images", ""]
        for minor, variants in run.approved.items():
            for variant, image_id in variants.items():
                lines.append(f"- Kubernetes {minor} {variant}: `{image_id}`")
    elif run.images:
        lines += ["", "## Candidate images (not promoted)", ""]
        for minor, variants in run.images.items():
            for variant, image_id in variants.items():
                lines.append(f"- Kubernetes {minor} {variant}: `{image_id}` (candidate)")
    if run.packages:
        lines += ["", "## OS package changes", "", "| package | arch | old | new | suite |", "|---|---|---|---|---|"]
        for c in run.packages:
            suite = f"**{c.get('suite')}** (security)" if c.get("security") else str(c.get("suite"))
            lines.append(f"| {c.get('name')} | {c.get('arch')} | {c.get('old_version') or '(new)'} | "
                         f"{c.get('new_version') or '(removed)'} | {suite} |")
    if run.latency:
        lines += ["", "## Latency", ""]
        for minor, lat in run.latency.items():
            pk = lat.get("packages")
            if lat.get("latency_seconds") is not None:
                lines.append(f"- {lat.get('version', minor)}: {_fmt_seconds(lat['latency_seconds'])} from the "
                             f"release on the mirror ({lat.get('published_at')}) to the approved image "
                             f"({lat.get('approved_at')})")
            elif not pk:
                lines.append(f"- {lat.get('version', minor)}: release time unknown (no Last-Modified); "
                             f"{_fmt_seconds(lat.get('run_seconds'))} from the start of the run to the approved image")
            if pk:
                when = (f"{_fmt_seconds(pk['latency_seconds'])} from the package update on the mirror "
                        f"({pk.get('published_at')})" if pk.get("latency_seconds") is not None
                        else "update time unknown")
                lines.append(f"- {lat.get('version', minor)}, OS package update ({pk.get('updates')} package(s), "
                             f"{pk.get('security')} security): {when} to the approved image ({lat.get('approved_at')})")
    failed = run.failed_stage
    if failed:
        lines += ["", "## Failure", "", f"Stage `{failed.key}` failed: {scrub(failed.error.get('message', ''))}"]
        if failed.error.get("hint"):
            lines.append(f"Hint: {scrub(failed.error['hint'])}")
        lines += ["", "Nothing was promoted. Resume from the failed stage with:", "",
                  f"    nodeforge pipeline run --resume {run.run_id}"]
    return "\n".join(lines) + "\n"
