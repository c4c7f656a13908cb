"""The release pipeline acting on a Debian package update: the real
check and bump stages against a local signed apt repository (tests/oslock
fixtures: its own key, a Debian suite layout, real .debs) and a local
Kubernetes upstream mirror, nothing mocked there. The per-minor stages after
bump are small callables here (the real ones build and boot: the slow
end-to-end test, test_pipeline_security_e2e.py)."""

from __future__ import annotations

import datetime
import json

import pytest

from nodeforge import cli
from nodeforge.demo.upstream_mirror import FixtureUpstream, MirrorServer
from nodeforge.oslock import lock as ol, watch
from nodeforge.pins.lockfile import Component
from nodeforge.pins.sources import SourceName
from nodeforge.pipeline import runrecord as rr
from nodeforge.pipeline import stages as st
from nodeforge.pipeline.run import Pipeline, PipelineFailed
from tests.oslock.aptrepo import RELEASE, lock_template
from tests.oslock.fixtures import apt_repo, other_key, signing_key  # noqa: F401 - fixtures

COMPANIONS = {Component.CNI_PLUGINS: "1.9.1", Component.CONTAINERD: "2.3.4", Component.RUNC: "1.4.3"}
SEC = f"{RELEASE}-security"
MINORS = ["1.35", "1.36"]


@pytest.fixture
def setup(tmp_path, apt_repo):
    """A fixture lockfile (1.35, 1.36, current upstream) with a package lock beside it, resolved
    against the signed fixture archive (nf-app, nf-lib, nf-base)."""
    up = FixtureUpstream(tmp_path / "up", size=256)
    for version in ("1.35.1", "1.36.0"):
        up.add_kubernetes(version)
    for minor in MINORS:
        up.add(Component.CRICTL, f"{minor}.0")
    for comp, version in COMPANIONS.items():
        up.add(comp, version)
    lockfile = tmp_path / "fixture" / "versions.yaml"
    lockfile.parent.mkdir()
    lockfile.write_text(up.lockfile_text({"1.35": "1.35.1", "1.36": "1.36.0"}, COMPANIONS))
    # The lock is made from indexes dated 10 minutes ago (an update's index is newer: rollback protection).
    apt_repo.date = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(minutes=10)
    apt_repo.publish()
    template = lock_template(lockfile.parent / ol.FILENAME)
    plock, _ = watch.resolve_lock(template, watch.config_for(template, apt_repo.mirrors()))
    plock.save()
    with MirrorServer(up.root) as server:
        (lockfile.parent / "sources.yaml").write_text(
            "mirrors:\n" + "".join(f"  {s.value}: {server.base_url(s)}\n" for s in SourceName))
        yield lockfile, plock, apt_repo


def _security_update(repo, when: datetime.datetime):
    """nf-lib 2.0-1+deb1u1 appears in the security suite; its InRelease is dated ``when``."""
    deb = repo.add(SEC, "nf-lib", "2.0-1+deb1u1")
    repo.date = when
    repo.publish()
    return deb


class After:
    """The stages after bump as small callables (recorded calls; promote approves)."""

    def __init__(self):
        self.calls: list[str] = []

    def stages(self) -> dict:
        def make(name):
            def fn(ctx):
                self.calls.append(f"{name}[{ctx.minor}]")
                if name == "publish":
                    ctx.run.images[ctx.minor] = {"vm": f"img-{ctx.minor}"}
                    return {"images": {"vm": f"img-{ctx.minor}"}}
                if name == "promote":
                    ctx.run.approved[ctx.minor] = {"vm": f"img-{ctx.minor}"}
                return {"summary": f"{name} ok"}
            return fn
        return dict(st.DEFAULT_STAGES) | {n: make(n) for n in rr.MINOR_STAGES}


def _cfg(lockfile, tmp_path, **kw):
    return st.PipelineConfig(lockfile=lockfile, cache_dir=tmp_path / "cache", fixture="test fixture mirror", **kw)


def test_nothing_new_checks_the_package_lock_too(setup, tmp_path):
    lockfile, plock, repo = setup
    after = After()
    run = Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=after.stages()).run()
    assert run.status == "nothing-to-do" and after.calls == []
    assert "OS package" in run.message
    pk = run.find("check").outputs["packages"]
    assert pk["packages"] == 3 and pk["updates"] == [] and not run.find("check").outputs["packages_moved"]


def test_security_update_triggers_every_minor_with_the_changes_recorded(setup, tmp_path):
    lockfile, plock, repo = setup
    when = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(minutes=5)
    deb = _security_update(repo, when)
    before_lockfile = lockfile.read_text()

    pipe = Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=After().stages())
    plan = pipe.plan()
    # Only packages moved: every minor the lockfile builds is rebuilt.
    assert plan.minors == MINORS
    assert [(c["name"], c["old_version"], c["new_version"], c["suite"], c["security"]) for c in plan.packages] == [
        ("nf-lib", "2.0-1", "2.0-1+deb1u1", SEC, True)]
    assert plan.check["triggers"] == ["packages"]
    assert ol.load(plock.path).digest() == plock.digest() and not (tmp_path / "runs").exists()   # dry run

    after = After()
    run = Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=after.stages()).run()
    assert run.status == rr.SUCCEEDED, run.message
    assert after.calls == [f"{s}[{m}]" for m in MINORS for s in rr.MINOR_STAGES[:-1]] + [
        f"promote[{m}]" for m in MINORS]
    # The lock moved, to the verified index's sha256; the Kubernetes lockfile did not.
    moved = ol.load(plock.path).by_key()[("nf-lib", "amd64")]
    assert (moved.version, moved.suite, moved.sha256) == ("2.0-1+deb1u1", SEC, watch.sha256_file(deb))
    assert lockfile.read_text() == before_lockfile
    # The run record and the PR body carry the change.
    change = {"name": "nf-lib", "arch": "amd64", "old_version": "2.0-1", "new_version": "2.0-1+deb1u1",
              "suite": SEC, "security": True}
    doc = json.loads(run.json_path.read_text())
    assert doc["packages"] == [change]
    assert run.find("bump").outputs["packages"] == [change]
    body = (run.root / "pr-body.md").read_text()
    assert f"| nf-lib | amd64 | 2.0-1 | 2.0-1+deb1u1 | **{SEC}** (security) |" in body
    assert "The lockfile is up to date" in body                          # the Kubernetes part said nothing moved
    assert "nf-lib" in run.summary_path.read_text()
    # Package-update latency from the security suite's signed InRelease Date to approval.
    for minor in MINORS:
        lat = doc["latency"][minor]
        assert lat["triggers"] == ["packages"] and lat["latency_seconds"] is None   # no Kubernetes release
        pk = lat["packages"]
        assert rr.parse_iso(pk["published_at"]) == when
        assert pk["updates"] == 1 and pk["security"] == 1
        assert pk["latency_seconds"] >= 300
    # A second run: the lock is current again.
    again = Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=After().stages()).run()
    assert again.status == "nothing-to-do"


def test_named_minor_only_and_no_packages_keeps_the_old_behaviour(setup, tmp_path):
    lockfile, plock, repo = setup
    _security_update(repo, datetime.datetime.now(datetime.timezone.utc))
    quiet = Pipeline(_cfg(lockfile, tmp_path, packages=False), runs_dir=tmp_path / "r0", stages=After().stages()).run()
    assert quiet.status == "nothing-to-do" and quiet.find("check").outputs["packages"] is None
    assert ol.load(plock.path).digest() == plock.digest()

    after = After()
    run = Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "r1", stages=after.stages()).run(["1.36"])
    assert run.status == rr.SUCCEEDED and run.minors == ["1.36"]
    assert after.calls[-1] == "promote[1.36]" and not any("1.35" in c for c in after.calls)
    assert [c["name"] for c in run.packages] == ["nf-lib"]


def test_a_deb_not_matching_the_index_is_refused_and_nothing_written(setup, tmp_path):
    lockfile, plock, repo = setup
    deb = _security_update(repo, datetime.datetime.now(datetime.timezone.utc))
    deb.write_bytes(deb.read_bytes() + b"tampered")          # the mirror serves other bytes than its index says
    after = After()
    with pytest.raises(PipelineFailed, match=r"bump.*nf-lib"):
        Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=after.stages()).run()
    assert ol.load(plock.path).digest() == plock.digest() and after.calls == []


def test_index_signed_by_another_key_fails_the_check(setup, tmp_path, other_key):
    lockfile, plock, repo = setup
    repo.key = other_key
    _security_update(repo, datetime.datetime.now(datetime.timezone.utc))
    with pytest.raises(PipelineFailed, match="check.*signature does not verify"):
        Pipeline(_cfg(lockfile, tmp_path), runs_dir=tmp_path / "runs", stages=After().stages()).run()
    assert ol.load(plock.path).digest() == plock.digest()


def test_cli_dry_run_shows_the_package_changes(setup, tmp_path, capsys):
    lockfile, plock, repo = setup
    _security_update(repo, datetime.datetime.now(datetime.timezone.utc))
    args = ["pipeline", "run", "--lockfile", str(lockfile), "--cache-dir", str(tmp_path / "c"),
            "--runs-dir", str(tmp_path / "runs"), "--dry-run"]
    assert cli.main([*args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["minors"] == MINORS and [c["name"] for c in doc["packages"]] == ["nf-lib"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "OS package changes" in out and "2.0-1+deb1u1" in out and SEC in out
    assert cli.main([*args, "--no-packages", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["minors"] == []
    assert ol.load(plock.path).digest() == plock.digest()
    assert cli.main(["pipeline", "run", "--resume", "x", "--no-packages"]) == 2
