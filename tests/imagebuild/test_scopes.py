"""Ownership scopes for images and the catalog: every
published image carries ``nodeforge_scope`` (publish's scope, else the build
manifest's, the lockfile's, else ``default``); promote's retention acts only
on approved images of the promoted image's scope; other scopes' images and
legacy ones (no ``nodeforge_scope``) are never hidden, deactivated or
deleted; ``image list --scope`` filters; a bad scope exits 2.

Fast tests run against the in-memory Glance (``fake_glance.py``); the
``devcloud`` ones do the same with two scopes side by side in the local Glance.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from pathlib import Path

import pytest

from nodeforge import cli
from nodeforge.errors import UsageError
from nodeforge.imageverify import builddir
from nodeforge.pins import lockfile
from nodeforge.schema import SchemaError
from nodeforge.publish import catalog, glance as g
from nodeforge.base.sums import write_sums
from nodeforge.publish.retention import Expire, RetentionPolicy
from nodeforge.ironic import constants as IC
from nodeforge.pipeline import PipelineConfig
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.fake_glance import FakeConn
from tests.imagebuild.glance_fixtures import admin, tracker  # noqa: F401 - fixtures
from tests.imagebuild.verify_fixture import write_verify

P = g.P
REPO = Path(__file__).resolve().parents[2]
# Retire everything beyond the newest: any image a promote may touch, it does.
STRICT = RetentionPolicy(visible=1, keep=1, expire=Expire.DELETE)


def _build(root: Path, *, k8s="1.36.0", minutes_ago=0, manifest_scope: str | None = None,
           variants=("vm",)) -> builddir.BuildDir:
    """A synthetic verified build; ``manifest_scope`` is recorded in its manifest.json the way
    ``image build`` records the lockfile's (SUMS and verify.json written again to match)."""
    when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=minutes_ago)
    d = make_build_dir(root, k8s=k8s, build_time=when, variants=variants)
    if manifest_scope is not None:
        doc = json.loads((d / "manifest.json").read_text())
        doc["scope"] = manifest_scope
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        (d / "manifest.json").write_text(text)
        files = {}
        for name in [*doc["images"].values(), "manifest.json"]:
            data = (d / name).read_bytes()
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}
        write_sums(d, files)
        write_verify(d, "passed")
    return builddir.load(d)


def _publish(conn, root, *, scope=None, **kw) -> str:
    b = _build(root, **kw)
    return g.Publisher(conn, RetentionPolicy(), scope=scope).publish(b)[0].image_id


def _approved(conn, root, scope, **kw) -> str:
    image_id = _publish(conn, root, scope=scope, **kw)
    catalog.promote(conn, image_id, STRICT)
    return image_id


def _make_legacy(conn, image_id: str) -> None:
    """What a nodeforge before scopes left: the same image without ``nodeforge_scope``."""
    g.patch_image(conn, image_id, [{"op": "remove", "path": f"/{g.SCOPE}"}], "strip scope")


def _snapshot(conn, ids) -> dict:
    return {i: {k: conn.image.images[i].get(k) for k in ("status", "os_hidden", "tags", "visibility")} for i in ids}


# --------------------------------------------------------------------------
# The mark

def test_published_images_carry_the_scope_explicit_then_manifest_then_default(tmp_path):
    conn = FakeConn()
    plain = _build(tmp_path / "plain")
    scoped = _build(tmp_path / "scoped", manifest_scope="lock-a")
    # A manifest without a scope (older builds, synthetic ones) and no scope given: the default.
    [r] = g.Publisher(conn, RetentionPolicy()).publish(plain)
    img = conn.image.images[r.image_id]
    assert r.scope == img[g.SCOPE] == g.DEFAULT_SCOPE == "default"
    for side in (f"{P}manifest_image", f"{P}verify_report"):
        assert conn.image.images[img[side]][g.SCOPE] == "default"
    # The manifest's scope (what `image build` records from the lockfile).
    [r] = g.Publisher(conn, RetentionPolicy()).publish(scoped)
    assert conn.image.images[r.image_id][g.SCOPE] == "lock-a" == r.scope
    # An explicit scope overrides the manifest's.
    other = _build(tmp_path / "other", manifest_scope="lock-a")
    [r] = g.Publisher(conn, RetentionPolicy(), scope="team-b").publish(other)
    assert conn.image.images[r.image_id][g.SCOPE] == "team-b"


def test_publish_refuses_a_build_already_in_glance_under_another_scope_before_any_write(tmp_path):
    conn = FakeConn()
    b = _build(tmp_path, variants=("vm", "baremetal"))
    first = g.Publisher(conn, RetentionPolicy(), scope="team-a").publish(b)
    before = dict(conn.image.images)
    conn.image.calls.clear()
    with pytest.raises(g.ScopeConflict, match=r"under scope 'team-a', not 'team-b'; nothing was written"):
        g.Publisher(conn, RetentionPolicy(), scope="team-b").publish(b)
    assert conn.image.images == before and all(c[0] == "GET" for c in conn.image.calls)
    again = g.Publisher(conn, RetentionPolicy(), scope="team-a").publish(b)   # its own scope: exists
    assert [r.action for r in again] == ["exists", "exists"]
    assert [r.image_id for r in again] == [r.image_id for r in first]


def test_a_legacy_image_of_the_build_is_taken_into_the_scope_on_publish(tmp_path):
    conn = FakeConn()
    b = _build(tmp_path)
    [r] = g.Publisher(conn, RetentionPolicy()).publish(b)
    _make_legacy(conn, r.image_id)
    [dry] = g.Publisher(conn, RetentionPolicy(), scope="team-a").plan(b).results
    assert dry.action == "exists" and "legacy" in dry.note and g.SCOPE not in conn.image.images[r.image_id]
    [again] = g.Publisher(conn, RetentionPolicy(), scope="team-a").publish(b)
    assert again.action == "exists" and conn.image.images[r.image_id][g.SCOPE] == "team-a"


@pytest.mark.parametrize("bad", ["", "Team-A", "-a", "a b", "a/b", "x" * 64, "ä"])
def test_a_bad_scope_is_refused_everywhere(bad, tmp_path):
    assert IC.scope_problem(bad) is not None
    with pytest.raises(UsageError):
        g.Publisher(FakeConn(), RetentionPolicy(), scope=bad)
    with pytest.raises(UsageError):
        catalog.list_catalog(FakeConn(), scope=bad)
    with pytest.raises(UsageError):
        catalog.promote(FakeConn(), "x", RetentionPolicy(), scope=bad)
    with pytest.raises(UsageError):
        PipelineConfig(lockfile=tmp_path / "versions.yaml", scope=bad).check()


@pytest.mark.parametrize("args", [["image", "publish", "{build}", "--scope", "Bad Scope"],
                                  ["image", "promote", "some-image", "--scope", "Bad Scope"],
                                  ["image", "list", "--scope", "Bad Scope"]])
def test_cli_bad_scope_exits_2_before_any_api_call(args, tmp_path, run_cli, monkeypatch):
    build = make_build_dir(tmp_path)

    def no_cloud(self):
        raise AssertionError("connected to the cloud despite a bad --scope")

    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", no_cloud)
    code, _, err = run_cli(*[a.format(build=build) for a in args])
    assert code == 2 and "--scope" in err and "1-63 characters" in err


def test_a_bad_scope_in_a_manifest_is_refused(tmp_path):
    """Refused when the build directory is read (the manifest's declaration), naming the field."""
    with pytest.raises(SchemaError, match=r"manifest.json:\d+: scope: must be 1-63"):
        _build(tmp_path, manifest_scope="Not Valid")


# --------------------------------------------------------------------------
# Retention within the scope: two scopes side by side, and legacy images

def test_promote_in_one_scope_never_touches_another_scopes_or_legacy_images(tmp_path):
    conn = FakeConn()
    a_old = [_approved(conn, tmp_path / f"a{i}", "team-a", minutes_ago=60 - i) for i in range(2)]
    b_old = [_approved(conn, tmp_path / f"b{i}", "team-b", minutes_ago=50 - i) for i in range(2)]
    legacy = _approved(conn, tmp_path / "legacy", "team-x", minutes_ago=40)
    _make_legacy(conn, legacy)
    # Team B's approved images: its own promote already retired the older one (within B only).
    assert b_old[0] not in conn.image.images and a_old[0] not in conn.image.images
    untouched = _snapshot(conn, [b_old[1], legacy])
    a_new = _publish(conn, tmp_path / "a-new", scope="team-a")
    steps = catalog.promote(conn, a_new, STRICT)
    assert [(s.image_id, s.action.value, s.scope) for s in steps] == [
        (a_new, "approve", "team-a"), (a_old[1], "delete", "team-a")]
    assert a_old[1] not in conn.image.images
    assert _snapshot(conn, [b_old[1], legacy]) == untouched            # same group, other scope / no scope
    assert g.TAG_APPROVED in conn.image.images[b_old[1]]["tags"] and not conn.image.images[b_old[1]]["os_hidden"]
    # And the other way round: B's promote leaves A's approved image alone.
    b_new = _publish(conn, tmp_path / "b-new", scope="team-b")
    steps = catalog.promote(conn, b_new, RetentionPolicy(visible=1, keep=3))
    assert [(s.image_id, s.action.value) for s in steps] == [(b_new, "approve"), (b_old[1], "hide")]
    a_img = conn.image.images[a_new]
    assert not a_img["os_hidden"] and g.TAG_SUPERSEDED not in a_img["tags"] and a_img["status"] == "active"
    assert _snapshot(conn, [legacy]) == {legacy: untouched[legacy]}


def test_plan_promote_gives_no_step_to_images_of_other_scopes_or_none():
    def img(i, scope, approved=True):
        out = {"id": f"id-{i}", "name": f"img-{i}", "status": "active", "nodeforge_role": "image",
               "tags": [g.TAG, g.TAG_APPROVED if approved else g.TAG_CANDIDATE], "nodeforge_verify": "passed",
               "nodeforge_verify_report": "r", "nodeforge_verify_sha256": "0" * 64,
               "nodeforge_promoted_at": f"2026-01-{i:02d}T00:00:00Z"}
        if scope:
            out["nodeforge_scope"] = scope
        return out

    approved = [img(1, "team-a"), img(2, "team-b"), img(3, None), img(4, "team-a")]
    steps = catalog.plan_promote(img(9, "team-a", approved=False), approved, STRICT)
    assert {s.image_id: s.action.value for s in steps} == {"id-9": "approve", "id-4": "delete", "id-1": "delete"}
    steps = catalog.plan_promote(img(9, "team-b", approved=False), approved, STRICT)
    assert {s.image_id: s.action.value for s in steps} == {"id-9": "approve", "id-2": "delete"}


def test_a_legacy_candidate_is_promoted_only_into_a_named_scope(tmp_path):
    conn = FakeConn()
    a_old = _approved(conn, tmp_path / "a", "team-a", minutes_ago=30)
    cand = _publish(conn, tmp_path / "legacy-cand")
    _make_legacy(conn, cand)
    with pytest.raises(catalog.PromoteRefused, match="carries no nodeforge_scope.*give --scope"):
        catalog.promote(conn, cand, STRICT)
    assert g.TAG_CANDIDATE in conn.image.images[cand]["tags"]
    steps = catalog.promote(conn, cand, STRICT, scope="team-a")
    assert [(s.action.value, s.image_id) for s in steps] == [("approve", cand), ("delete", a_old)]
    assert "taken into scope 'team-a'" in steps[0].reason
    assert conn.image.images[cand][g.SCOPE] == "team-a"


def test_promote_with_a_scope_refuses_another_scopes_image(tmp_path):
    conn = FakeConn()
    image_id = _publish(conn, tmp_path, scope="team-a")
    with pytest.raises(catalog.PromoteRefused, match="belongs to scope 'team-a', not 'team-b'"):
        catalog.promote(conn, image_id, STRICT, scope="team-b")
    assert g.TAG_CANDIDATE in conn.image.images[image_id]["tags"]
    assert catalog.promote(conn, image_id, STRICT, scope="team-a")[0].action is catalog.Action.APPROVE


# --------------------------------------------------------------------------
# list / show

def test_list_shows_and_filters_the_scope(tmp_path, run_cli, monkeypatch):
    conn = FakeConn()
    a = _approved(conn, tmp_path / "a", "team-a")
    b = _approved(conn, tmp_path / "b", "team-b")
    legacy = _approved(conn, tmp_path / "l", "team-x")
    _make_legacy(conn, legacy)
    rows = catalog.list_catalog(conn, approved=True)
    assert {r["id"]: r["scope"] for r in rows} == {a: "team-a", b: "team-b", legacy: None}
    assert [r["id"] for r in catalog.list_catalog(conn, approved=True, scope="team-a")] == [a]
    assert catalog.list_catalog(conn, scope="nobody") == []
    assert catalog.show(conn, b)["scope"] == "team-b"
    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", lambda self: conn)
    code, out, _ = run_cli("image", "list", "--scope", "team-b", "-o", "json")
    assert code == 0 and [(r["id"], r["scope"]) for r in json.loads(out)] == [(b, "team-b")]
    code, out, _ = run_cli("image", "list", "--approved")
    assert code == 0 and "scope" in out and "team-a" in out and "team-b" in out


# --------------------------------------------------------------------------
# The pipeline passes its lockfile's scope

def test_pipeline_scope_is_the_lockfiles_unless_given(tmp_path):
    path = tmp_path / "versions.yaml"
    text = (REPO / "manifests" / "versions.yaml").read_text()
    path.write_text(text.replace("\nscope: platform\n", "\n", 1))
    assert PipelineConfig(lockfile=path).image_scope() == IC.derive_scope(path) == lockfile.load(path).scope
    path.write_text(text.replace("\nscope: platform\n", "\nscope: team-a\n", 1))
    assert PipelineConfig(lockfile=path).image_scope() == "team-a"
    assert PipelineConfig(lockfile=path, scope="team-b").image_scope() == "team-b"


def test_pipeline_publish_and_promote_stages_act_within_the_lockfiles_scope(tmp_path, monkeypatch):
    from nodeforge.pipeline import stages

    path = tmp_path / "versions.yaml"
    path.write_text((REPO / "manifests" / "versions.yaml").read_text()
                    .replace("\nscope: platform\n", "\nscope: team-a\n", 1))
    conn = FakeConn()
    b_old = _approved(conn, tmp_path / "b", "team-b", minutes_ago=20)
    a_old = _approved(conn, tmp_path / "a", "team-a", minutes_ago=10)
    build = _build(tmp_path / "new")

    class Run:
        images: dict = {}
        approved: dict = {}

    class Ctx:
        config = PipelineConfig(lockfile=path)
        run = Run()
        minor = "1.36"
        previous: dict = {"build": {"build_dir": str(build.path)}}

        def conn(self):
            return conn

        def say(self, line):
            pass

    monkeypatch.setattr(PipelineConfig, "policy", lambda self: STRICT)
    ctx = Ctx()
    out = stages.publish(ctx)
    assert out["scope"] == "team-a" and conn.image.images[out["images"]["vm"]][g.SCOPE] == "team-a"
    ctx.previous = {"publish": out}
    out = stages.promote(ctx)
    assert out["retired"] == [a_old] and b_old in conn.image.images
    assert g.TAG_APPROVED in conn.image.images[b_old]["tags"] and not conn.image.images[b_old]["os_hidden"]


# --------------------------------------------------------------------------
# Against the local Glance: two scopes side by side

@pytest.fixture
def scopes() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"test-a-{tag}", f"test-b-{tag}"


@pytest.fixture
def unique_k8s() -> str:
    import random

    return f"1.{random.randint(200, 9999)}.0"


def _dc_publish(conn, root, tracker, *, scope=None, k8s, minutes_ago=0) -> str:
    b = _build(root, k8s=k8s, minutes_ago=minutes_ago)
    tracker.build(b.path)
    return g.Publisher(conn, RetentionPolicy(), scope=scope).publish(b)[0].image_id


def _state(conn, image_id) -> dict | None:
    try:
        img = g.get_image(conn, image_id)
    except g.PublishError:
        return None
    return {"status": img["status"], "os_hidden": img["os_hidden"], "tags": sorted(img["tags"]),
            "visibility": img["visibility"], "scope": img.get(g.SCOPE)}


@pytest.mark.devcloud
def test_devcloud_two_scopes_side_by_side(tmp_path, admin, tracker, scopes, unique_k8s, monkeypatch, capsys):
    a, b = scopes
    a_old = _dc_publish(admin, tmp_path / "a-old", tracker, scope=a, k8s=unique_k8s, minutes_ago=30)
    b_old = _dc_publish(admin, tmp_path / "b-old", tracker, scope=b, k8s=unique_k8s, minutes_ago=20)
    legacy = _dc_publish(admin, tmp_path / "legacy", tracker, scope=a, k8s=unique_k8s, minutes_ago=10)
    for image_id in (a_old, b_old, legacy):
        catalog.promote(admin, image_id, RetentionPolicy(visible=5, keep=5))
    _make_legacy(admin, legacy)
    assert g.get_image(admin, a_old)[g.SCOPE] == a and g.SCOPE not in g.get_image(admin, legacy)
    untouched = {i: _state(admin, i) for i in (b_old, legacy)}
    # Same Kubernetes minor, variant and OS: one group; A's promote retires only A's older image.
    a_new = _dc_publish(admin, tmp_path / "a-new", tracker, k8s=unique_k8s, scope=a)
    plan = catalog.plan(admin, a_new, STRICT).steps
    assert [(s.image_id, s.action.value) for s in plan] == [(a_new, "approve"), (a_old, "delete")]
    catalog.promote(admin, a_new, STRICT)
    assert _state(admin, a_old) is None
    assert {i: _state(admin, i) for i in (b_old, legacy)} == untouched
    assert untouched[b_old]["status"] == "active" and not untouched[b_old]["os_hidden"]
    # B's promote, in turn, leaves A's approved image alone.
    b_new = _dc_publish(admin, tmp_path / "b-new", tracker, k8s=unique_k8s, scope=b)
    steps = catalog.promote(admin, b_new, RetentionPolicy(visible=1, keep=3))
    assert [(s.image_id, s.action.value) for s in steps] == [(b_new, "approve"), (b_old, "hide")]
    a_state = _state(admin, a_new)
    assert a_state["status"] == "active" and not a_state["os_hidden"] and "nodeforge-approved" in a_state["tags"]
    assert _state(admin, legacy) == untouched[legacy]
    # The catalog by scope (a Glance property filter) and with its scope column.
    minor = unique_k8s.rsplit(".", 1)[0]
    assert [r["id"] for r in catalog.list_catalog(admin, approved=True, k8s=minor, scope=a)] == [a_new]
    assert {r["id"]: r["scope"] for r in catalog.list_catalog(admin, approved=True, k8s=minor)} == {
        a_new: a, b_new: b, legacy: None}
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")
    capsys.readouterr()
    assert cli.main(["image", "list", "--k8s", minor, "--all", "--scope", b, "-o", "json"]) == 0
    assert {r["id"]: (r["state"], r["scope"]) for r in json.loads(capsys.readouterr().out)} == {
        b_new: ("approved", b), b_old: ("superseded", b)}
    assert cli.main(["image", "list", "--scope", "NOT VALID"]) == 2
    assert "--scope" in capsys.readouterr().err


@pytest.mark.devcloud
def test_devcloud_publish_under_another_scope_is_refused_and_legacy_candidate_needs_a_scope(
        tmp_path, admin, tracker, scopes, unique_k8s):
    a, b = scopes
    build = _build(tmp_path / "one", k8s=unique_k8s)
    tracker.build(build.path)
    [r] = g.Publisher(admin, RetentionPolicy(), scope=a).publish(build)
    with pytest.raises(g.ScopeConflict, match=f"under scope '{a}', not '{b}'"):
        g.Publisher(admin, RetentionPolicy(), scope=b).publish(build)
    assert len([i for i in tracker.images(build.build_id) if i.get(f"{P}role") == "image"]) == 1
    _make_legacy(admin, r.image_id)
    with pytest.raises(catalog.PromoteRefused, match="carries no nodeforge_scope"):
        catalog.promote(admin, r.image_id, STRICT)
    steps = catalog.promote(admin, r.image_id, STRICT, scope=b)
    assert steps[0].action is catalog.Action.APPROVE and g.get_image(admin, r.image_id)[g.SCOPE] == b
