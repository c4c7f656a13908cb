"""Orchestration of the release pipeline with small stage callables: stage
order, the run record, resume from the failed stage, the run lock, and that
no failure ever reaches promote. Plus the real check and bump stages against
a local fixture mirror (nothing mocked there)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from nodeforge import cli
from nodeforge.demo.upstream_mirror import FixtureUpstream, MirrorServer
from nodeforge.errors import UsageError
from nodeforge.pins import lockfile as lf
from nodeforge.pins.lockfile import Component
from nodeforge.pins.sources import SourceName
from nodeforge.pipeline import runrecord as rr
from nodeforge.pipeline import stages as st
from nodeforge.pipeline.lock import PipelineLocked, RunLock
from nodeforge.pipeline.run import Pipeline, PipelineFailed

COMPANIONS = {Component.CNI_PLUGINS: "1.9.1", Component.CONTAINERD: "2.3.4", Component.RUNC: "1.4.3"}


class Recorder:
    """Stage callables that log their calls; ``fail`` maps stage key -> times to fail."""

    def __init__(self, minors=("1.36",), fail=None):
        self.minors = list(minors)
        self.calls: list[str] = []
        self.fail = dict(fail or {})

    def stage(self, name):
        def fn(ctx: st.StageContext):
            key = f"{name}[{ctx.minor}]" if ctx.minor else name
            self.calls.append(key)
            if self.fail.get(key):
                self.fail[key] -= 1
                raise RuntimeError(f"{key} broke")
            if name == "check":
                return {"minors": list(ctx.run.inputs.get("minors") or self.minors), "summary": "new patch"}
            if name == "build":
                return {"build_dir": f"/builds/{ctx.minor}"}
            if name == "publish":
                assert ctx.previous["build"]["build_dir"] == f"/builds/{ctx.minor}"  # outputs flow forward
                ctx.run.images[ctx.minor] = {"vm": f"img-{ctx.minor}"}
                return {"images": {"vm": f"img-{ctx.minor}"}}
            if name == "promote":
                ctx.run.approved[ctx.minor] = {"vm": f"img-{ctx.minor}"}
            return {"summary": f"{key} ok"}
        return fn

    def stages(self):
        return {name: self.stage(name) for name in rr.STAGES}


def _pipe(tmp_path, rec, **kw):
    cfg = st.PipelineConfig(lockfile=tmp_path / "versions.yaml")
    return Pipeline(cfg, runs_dir=tmp_path / "runs", stages=rec.stages(), **kw)


def test_stage_order_and_record(tmp_path):
    rec = Recorder(minors=["1.35", "1.36"])
    run = _pipe(tmp_path, rec).run()
    # Everything up to publish for every minor, then promote: nothing is approved before all passed.
    assert rec.calls == ["check", "bump",
                         *[f"{s}[1.35]" for s in rr.MINOR_STAGES[:-1]],
                         *[f"{s}[1.36]" for s in rr.MINOR_STAGES[:-1]],
                         "promote[1.35]", "promote[1.36]"]
    doc = json.loads((tmp_path / "runs" / run.run_id / "run.json").read_text())
    assert doc["schema"] == rr.SCHEMA and doc["status"] == "succeeded"
    assert doc["approved"] == {"1.35": {"vm": "img-1.35"}, "1.36": {"vm": "img-1.36"}}
    assert all(s["status"] == "succeeded" and s["seconds"] is not None and s["started"] and s["finished"]
               for s in doc["stages"])
    assert doc["inputs"]["lockfile"].endswith("versions.yaml")
    assert set(doc["latency"]) == {"1.35", "1.36"}
    summary = (tmp_path / "runs" / run.run_id / "summary.md").read_text()
    assert "succeeded" in summary and "img-1.36" in summary
    assert not list((tmp_path / "runs").glob("*/.*.tmp"))  # atomic writes leave no temporaries


def test_failed_stage_recorded_nothing_promoted_then_resume(tmp_path):
    rec = Recorder(minors=["1.35", "1.36"], fail={"verify[1.36]": 1})
    pipe = _pipe(tmp_path, rec)
    with pytest.raises(PipelineFailed) as err:
        pipe.run()
    assert "verify[1.36]" in str(err.value) and "--resume" in err.value.hint
    assert not [c for c in rec.calls if c.startswith("promote")]       # no promote at all, not even 1.35
    run_id = next((tmp_path / "runs").glob("*/run.json")).parent.name
    doc = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert doc["status"] == "failed" and doc["approved"] == {}
    failed = [s for s in doc["stages"] if s["status"] == "failed"]
    assert [(s["name"], s["minor"]) for s in failed] == [("verify", "1.36")]
    assert failed[0]["error"]["type"] == "RuntimeError" and "broke" in failed[0]["error"]["message"]
    assert "Nothing was promoted" in (tmp_path / "runs" / run_id / "summary.md").read_text()

    rec.calls.clear()
    run = _pipe(tmp_path, rec).resume(run_id)
    # Only the failed stage and what follows it ran again.
    assert rec.calls == ["verify[1.36]", "publish[1.36]", "canary[1.36]", "promote[1.35]", "promote[1.36]"]
    assert run.status == "succeeded" and run.find("verify", "1.36").attempts == 2
    assert run.find("build", "1.36").attempts == 1 and len(run.attempts) == 2
    assert run.attempts[1]["from"] == "verify[1.36]"
    # A finished run resumes to nothing.
    rec.calls.clear()
    assert _pipe(tmp_path, rec).resume(run_id).status == "succeeded" and rec.calls == []


def test_killed_run_resumes_from_the_running_stage(tmp_path):
    rec = Recorder(fail={"build[1.36]": 1})
    with pytest.raises(PipelineFailed):
        _pipe(tmp_path, rec).run()
    run_id = next((tmp_path / "runs").glob("*/run.json")).parent.name
    # What a kill -9 during the build leaves: the run and the stage still 'running'.
    doc = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    doc["status"] = "running"
    for s in doc["stages"]:
        if s["status"] == "failed":
            s["status"], s["error"] = "running", None
    (tmp_path / "runs" / run_id / "run.json").write_text(json.dumps(doc))
    rec.calls.clear()
    run = _pipe(tmp_path, rec).resume(run_id)
    assert rec.calls[0] == "build[1.36]" and run.status == "succeeded"
    assert run.attempts[-1]["from"] == "build[1.36]"


def test_promote_failure_recorded(tmp_path):
    rec = Recorder(fail={"promote[1.36]": 1})
    with pytest.raises(PipelineFailed):
        _pipe(tmp_path, rec).run()
    run = rr.RunRecord.load(tmp_path / "runs", next((tmp_path / "runs").glob("*/run.json")).parent.name)
    assert run.failed_stage.key == "promote[1.36]" and run.approved == {} and run.latency == {}


def test_nothing_new_does_nothing_and_says_so(tmp_path):
    rec = Recorder(minors=[])
    lines = []
    run = _pipe(tmp_path, rec, say=lines.append).run()
    assert rec.calls == ["check"] and run.status == "nothing-to-do"
    assert any("nothing new upstream" in line for line in lines)


def test_lock_collision_names_the_holder(tmp_path):
    runs = tmp_path / "runs"
    with RunLock(runs, "20260101T000000Z-abcd"):
        with pytest.raises(PipelineLocked) as err:
            _pipe(tmp_path, Recorder()).run()
    msg = str(err.value)
    assert "20260101T000000Z-abcd" in msg and f"pid {os.getpid()}" in msg and socket.gethostname() in msg
    assert not list(runs.glob("*/run.json"))  # the refused run wrote nothing
    _pipe(tmp_path, Recorder()).run()           # released: the next run goes ahead


def test_lock_held_by_another_process(tmp_path):
    runs = tmp_path / "runs"
    code = textwrap.dedent(f"""
        import sys, time
        from nodeforge.pipeline.lock import RunLock
        with RunLock({str(runs)!r}, "other-run"):
            print("locked", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(PipelineLocked, match=rf"run other-run, pid {proc.pid} on "):
            _pipe(tmp_path, Recorder()).run()
    finally:
        proc.stdin.close()
        proc.wait(10)
    _pipe(tmp_path, Recorder()).run()


def test_resume_unknown_run(tmp_path):
    with pytest.raises(rr.RunNotFound):
        _pipe(tmp_path, Recorder()).resume("nope")


def test_fixture_never_touches_production_lockfile(tmp_path):
    cfg = st.PipelineConfig(lockfile=st.PRODUCTION_LOCKFILE, fixture="local fixture mirror")
    with pytest.raises(UsageError, match="production lockfile"):
        Pipeline(cfg, runs_dir=tmp_path, stages=Recorder().stages()).run()


# --- the real check and bump stages against a local mirror ---------------------------------

@pytest.fixture
def upstream(tmp_path):
    up = FixtureUpstream(tmp_path / "up", size=256)
    for version in ("1.35.1", "1.36.0"):
        up.add_kubernetes(version)
    for minor in ("1.35", "1.36"):
        up.add(Component.CRICTL, f"{minor}.0")
    for comp, version in COMPANIONS.items():
        up.add(comp, version)
    lock = tmp_path / "fixture" / "versions.yaml"
    lock.parent.mkdir()
    lock.write_text(up.lockfile_text({"1.35": "1.35.1", "1.36": "1.36.0"}, COMPANIONS))
    with MirrorServer(up.root) as server:
        (lock.parent / "sources.yaml").write_text(
            "mirrors:\n" + "".join(f"  {s.value}: {server.base_url(s)}\n" for s in SourceName))
        yield up, lock, server


def test_real_check_and_bump_then_later_stages_fail_without_promote(upstream, tmp_path):
    up, lock, server = upstream
    up.add_kubernetes("1.36.1")                                   # a new patch appears on the mirror
    before = lock.read_text()
    cfg = st.PipelineConfig(lockfile=lock, cache_dir=tmp_path / "cache", fixture="test fixture mirror")
    stages = dict(st.DEFAULT_STAGES)
    calls = []

    def broken_build(ctx):
        calls.append("build")
        raise st.StageFailed(stage="build", detail="no builder here")

    def no_promote(ctx):
        calls.append("promote")
        raise AssertionError("promote must not run")

    stages |= {"render": lambda ctx: {"summary": "skipped in this test"}, "build": broken_build,
               "promote": no_promote}
    pipe = Pipeline(cfg, runs_dir=tmp_path / "runs", stages=stages)
    plan = pipe.plan()
    assert plan.minors == ["1.36"] and plan.bump["versions"] == {"1.36": {"old": "1.36.0", "new": "1.36.1"}}
    assert lock.read_text() == before and not (tmp_path / "runs").exists()   # the dry run wrote nothing
    with pytest.raises(PipelineFailed, match=r"build\[1.36\]"):
        pipe.run()
    assert calls == ["build"]
    run = rr.RunRecord.load(tmp_path / "runs", next((tmp_path / "runs").glob("*/run.json")).parent.name)
    assert lf.load(lock).minor("1.36").version == lf.Version.parse("1.36.1")     # bumped
    assert run.find("prefetch", "1.36").status == "succeeded"
    released = run.find("check").outputs["released"]["1.36"]
    assert released["version"] == "1.36.1" and released["published_at"]     # the mirror's Last-Modified
    assert "1.36.1" in (run.root / "pr-body.md").read_text()
    # A second run sees nothing new.
    assert Pipeline(cfg, runs_dir=tmp_path / "runs2", stages=stages).run().status == "nothing-to-do"


def test_cli_dry_run_and_nothing_new(upstream, tmp_path, capsys):
    up, lock, server = upstream
    args = ["pipeline", "run", "--lockfile", str(lock), "--cache-dir", str(tmp_path / "c"),
            "--runs-dir", str(tmp_path / "runs")]
    assert cli.main([*args, "--dry-run", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["minors"] == []
    assert cli.main(args) == 0
    out = capsys.readouterr()
    assert "nothing new upstream" in out.err
    [row] = rr.list_runs(tmp_path / "runs")
    assert row["status"] == "nothing-to-do"
    # The run's HTML report is written beside its record, and its path said (docs/reports.md).
    index = tmp_path / "runs" / row["run_id"] / "report" / "index.html"
    assert f"report: {index}" in out.err and index.is_file()
    assert "data-stage=\"check\"" in (index.parent / "run.html").read_text()
    assert cli.main(["pipeline", "show", row["run_id"], "--runs-dir", str(tmp_path / "runs"), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "nothing-to-do"
    assert cli.main(["pipeline", "run", "--resume", "x", "--minor", "1.36"]) == 2


def test_build_stage_uses_the_render_stages_tree(tmp_path):
    """The real render and build stages: build is given the render stage's tree (not a render of its
    own), so a tree changed after the render stage is refused, naming it, before anything is built."""
    import shutil

    lock = tmp_path / "versions.yaml"
    shutil.copyfile(st.PRODUCTION_LOCKFILE, lock)
    rec = Recorder(minors=["1.36"])
    stages = rec.stages()

    def render_then_edit(ctx):
        out = st.render(ctx)
        readme = ctx.workdir / "render" / ctx.minor / "elements" / "kubelet" / "README.rst"
        readme.write_text(readme.read_text() + "edited after the render stage\n")
        return out

    stages |= {"render": render_then_edit, "build": st.build}
    cfg = st.PipelineConfig(lockfile=lock, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache")
    with pytest.raises(PipelineFailed, match=r"build\[1.36\]"):
        Pipeline(cfg, runs_dir=tmp_path / "runs", stages=stages).run()
    run = rr.RunRecord.load(tmp_path / "runs", next((tmp_path / "runs").glob("*/run.json")).parent.name)
    root = run.find("render", "1.36").outputs["root"]
    error = run.find("build", "1.36").error
    assert root in error["message"] and "elements/ changed since it was rendered" in error["message"]
    assert not (run.root / "builds").exists() and "publish[1.36]" not in rec.calls
