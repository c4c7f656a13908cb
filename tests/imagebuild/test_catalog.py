"""The approved-image catalog: promote plans (table tests), retention, and
promote/list/show against the local Glance."""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest

from nodeforge import cli
from nodeforge.errors import ConfigError
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance as g, retention
from nodeforge.publish.retention import Expire, RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.verify_fixture import signed_envelope


def _img(i: int, *, verify="passed", approved=True, in_use=False, status="active", scope="team-a") -> dict:
    tags = ["nodeforge", "nodeforge-k8s-1.36", "nodeforge-vm", "nodeforge-approved" if approved else "nodeforge-candidate"]
    img = {"id": f"id-{i}", "name": f"img-{i}", "status": status, "tags": tags, "nodeforge_role": "image",
           "nodeforge_verify": verify, "nodeforge_k8s_minor": "1.36", "nodeforge_variant": "vm",
           "nodeforge_promoted_at": f"2026-01-{i:02d}T00:00:00Z",
           "nodeforge_verify_report": f"report-{i}", "nodeforge_verify_sha256": "0" * 64}
    if scope is not None:
        img["nodeforge_scope"] = scope
    if in_use:
        img["nodeforge_in_use"] = "true"
    return img


@pytest.mark.parametrize("visible,keep,expire,in_use,expected", [
    # newest first: id-4, id-3, id-2, id-1 (by promotion time)
    (1, 3, Expire.DEACTIVATE, set(), {"id-4": "hide", "id-3": "hide", "id-2": "deactivate", "id-1": "deactivate"}),
    (2, 3, Expire.DELETE, set(), {"id-4": "keep", "id-3": "hide", "id-2": "delete", "id-1": "delete"}),
    (1, 2, Expire.DELETE, {"id-2"}, {"id-4": "hide", "id-3": "delete", "id-2": "hide", "id-1": "delete"}),
    (5, 5, Expire.DELETE, set(), {"id-4": "keep", "id-3": "keep", "id-2": "keep", "id-1": "keep"}),
])
def test_plan_promote_applies_retention(visible, keep, expire, in_use, expected):
    approved = [_img(i, in_use=f"id-{i}" in in_use) for i in range(1, 5)]
    steps = catalog.plan_promote(_img(9, approved=False), approved, RetentionPolicy(visible, keep, expire))
    assert steps[0].image_id == "id-9" and steps[0].action is catalog.Action.APPROVE
    assert {s.image_id: s.action.value for s in steps[1:]} == expected


@pytest.mark.parametrize("verify", ["failed", "absent", None])
def test_promote_refuses_unverified_builds(verify):
    img = _img(1, approved=False, verify=verify)
    if verify is None:
        del img["nodeforge_verify"]
    with pytest.raises(catalog.PromoteRefused, match="boot verification"):
        catalog.plan_promote(img, [], RetentionPolicy())


@pytest.mark.parametrize("missing", ["nodeforge_verify_report", "nodeforge_verify_sha256"])
def test_promote_refuses_a_passed_string_without_its_verify_report(missing):
    img = _img(1, approved=False)
    del img[missing]
    with pytest.raises(catalog.PromoteRefused, match="carries no verify report.*proves nothing"):
        catalog.plan_promote(img, [], RetentionPolicy())


def test_promote_refuses_non_nodeforge_and_inactive_images():
    with pytest.raises(catalog.PromoteRefused, match="not a nodeforge node image"):
        catalog.plan_promote({"id": "x", "tags": [], "status": "active"}, [], RetentionPolicy())
    with pytest.raises(catalog.PromoteRefused, match="'queued', not active"):
        catalog.plan_promote(_img(1, status="queued"), [], RetentionPolicy())


def test_retention_file_validated(tmp_path):
    assert retention.load(retention.DEFAULT_PATH) == RetentionPolicy(1, 3, Expire.DEACTIVATE)
    bad = tmp_path / "r.yaml"
    bad.write_text("visible: 3\nkeep: 2\nexpire: burn\nmetadata:\n  replace_frequency: hourly\n")
    with pytest.raises(ConfigError) as exc:
        retention.load(bad)
    text = str(exc.value)
    assert f"{bad}:3: expire: got the string 'burn', expected 'deactivate' or 'delete'" in text
    assert f"{bad}:5: metadata.replace_frequency: got the string 'hourly'" in text
    bad.write_text("visible: 3\nkeep: 2\n")
    with pytest.raises(ConfigError, match=r"r.yaml:2: keep: must be >= visible \(3\), got 2"):
        retention.load(bad)


# --------------------------------------------------------------------------
# Against the local Glance

def _publish(conn, tmp_path, tracker, *, verify="passed", minutes_ago=0, variants=("vm",)):
    when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=minutes_ago)
    # A unique minor per test keeps parallel or leftover images of other tests out of the group.
    b = builddir.load(tracker.build(make_build_dir(tmp_path, k8s=_publish.k8s, verify=verify, build_time=when,
                                                   variants=variants)))
    return g.Publisher(conn, RetentionPolicy()).publish(b)[0].image_id


@pytest.fixture
def unique_k8s():
    import random

    _publish.k8s = f"1.{random.randint(200, 9999)}.0"
    return _publish.k8s


@pytest.mark.devcloud
def test_promote_newer_hides_older_and_list_shows_approved(tmp_path, admin, tracker, unique_k8s, capsys,
                                                           monkeypatch):
    old = _publish(admin, tmp_path, tracker, minutes_ago=60)
    new = _publish(admin, tmp_path, tracker)
    policy = RetentionPolicy(visible=1, keep=3)
    catalog.promote(admin, old, policy)
    assert g.get_image(admin, old)["visibility"] == "public"
    steps = catalog.plan(admin, new, policy).steps
    assert [(s.image_id, s.action.value) for s in steps] == [(new, "approve"), (old, "hide")]
    assert g.get_image(admin, old)["os_hidden"] is False  # dry run wrote nothing
    catalog.promote(admin, new, policy)
    o, n = g.get_image(admin, old), g.get_image(admin, new)
    assert o["os_hidden"] is True and "nodeforge-superseded" in o["tags"] and o["status"] == "active"
    assert n["os_hidden"] is False and "nodeforge-approved" in n["tags"] and "nodeforge-candidate" not in n["tags"]
    # The manifest goes public with the image: a template author can read it.
    assert g.get_image(admin, n["nodeforge_manifest_image"])["visibility"] == "public"

    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev-member")
    minor = unique_k8s.rsplit(".", 1)[0]
    capsys.readouterr()
    assert cli.main(["image", "list", "--approved", "--k8s", minor, "--variant", "vm", "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [new] and rows[0]["state"] == "approved" and rows[0]["verify"] == "passed"
    assert cli.main(["image", "list", "--approved", "--k8s", minor, "--all", "-o", "json"]) == 0
    assert {r["id"]: r["state"] for r in json.loads(capsys.readouterr().out)} == {new: "approved", old: "superseded"}
    assert cli.main(["image", "manifest", new]) == 0
    assert json.loads(capsys.readouterr().out)["kubernetes"]["version"] == unique_k8s
    # The report's catalog page from a fresh snapshot of the cloud: hidden images included, each state as text.
    (tmp_path / "run").mkdir()
    assert cli.main(["report", "html", str(tmp_path / "run"), "--dest", str(tmp_path / "site"),
                     "--cloud", "nodeforge-dev-member"]) == 0
    page = (tmp_path / "site" / "catalog.html").read_text()
    assert f'data-minor="{minor}"' in page and "from cloud <code>nodeforge-dev-member</code>" in page
    assert f'<tr data-image="{new}" data-state="approved">' in page
    assert f'<tr data-image="{old}" data-state="superseded">' in page
    assert not list((tmp_path / "run").iterdir())        # the snapshot is not written into the run directory


@pytest.mark.devcloud
def test_retention_deletes_beyond_keep_but_never_an_image_in_use(tmp_path, admin, tracker, unique_k8s):
    ids = [_publish(admin, tmp_path, tracker, minutes_ago=60 - i) for i in range(4)]
    g.patch_image(admin, ids[1], [{"op": "add", "path": "/nodeforge_in_use", "value": "true"}], "mark in use")
    policy = RetentionPolicy(visible=1, keep=2, expire=Expire.DELETE)
    for image_id in ids:
        catalog.promote(admin, image_id, policy)
    remaining = {i["id"] for b in tracker.build_ids for i in tracker.images(b) if i.get("nodeforge_role") == "image"}
    # newest (3) listed, 2 hidden (within keep), 1 in use -> hidden, 0 deleted with its manifest.
    assert remaining == set(ids[1:])
    assert g.get_image(admin, ids[1])["os_hidden"] is True


@pytest.mark.devcloud
def test_member_cannot_promote_and_failed_verify_stays_candidate(tmp_path, admin, member, tracker, unique_k8s,
                                                                 monkeypatch, capsys):
    mine = _publish(member, tmp_path, tracker)  # a member may publish candidates
    assert g.get_image(member, mine)["visibility"] == "private"
    with pytest.raises(catalog.PromoteRefused, match="HTTP 403.*admin action"):
        catalog.promote(member, mine, RetentionPolicy())
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev-member")
    capsys.readouterr()
    assert cli.main(["image", "promote", mine]) == 1
    assert "cannot promote" in capsys.readouterr().err
    img = g.get_image(member, mine)
    assert img["visibility"] == "private" and "nodeforge-candidate" in img["tags"]
    # A failed verify never becomes a candidate: publish refuses it and uploads nothing.
    failed = tracker.build(make_build_dir(tmp_path / "failed", k8s=_publish.k8s, verify="failed", variants=("vm",)))
    with pytest.raises(g.NotVerified, match="'failed'.*NF-HARD-003 failed"):
        g.Publisher(admin, RetentionPolicy()).publish(builddir.load(failed))
    assert tracker.images(failed.name) == []
    # A candidate whose string says passed but whose stored report is not its own stays a candidate.
    g.patch_image(admin, mine, [{"op": "replace", "path": "/nodeforge_verify", "value": "passed"}], "x")
    data = signed_envelope((failed / "verify.json").read_bytes())    # another build's report, signed by a trusted key
    forged = g.create_image(admin, {"name": "forged.verify.json", "disk_format": "raw", "container_format": "bare",
                                    "os_hidden": True, "nodeforge_build_id": img["nodeforge_build_id"]})
    admin.image.put(f"/images/{forged['id']}/file", data=data, headers={"Content-Type": "application/octet-stream"})
    g.patch_image(admin, mine, g.set_ops(g.get_image(admin, mine), {
        "nodeforge_verify_report": forged["id"],
        "nodeforge_verify_sha256": hashlib.sha256(data).hexdigest()}), "forge")
    with pytest.raises(catalog.PromoteRefused, match="build_id .* is another build's"):
        catalog.promote(admin, mine, RetentionPolicy())
    assert "nodeforge-approved" not in g.get_image(admin, mine)["tags"]


def test_promote_plan_writes_nothing_and_apply_makes_its_steps(tmp_path):
    """catalog.plan reads (Glance, the verify report), writes nothing; apply makes the steps;
    promote is apply of plan (in-memory Glance)."""
    from tests.imagebuild.fake_glance import FakeConn

    conn = FakeConn()
    ids = []
    for n in range(2):
        b = builddir.load(make_build_dir(tmp_path / str(n), variants=("vm",)))
        ids.append(g.Publisher(conn, RetentionPolicy()).publish(b)[0].image_id)
    catalog.promote(conn, ids[0], RetentionPolicy())
    before = len(conn.image.calls)
    plan = catalog.plan(conn, ids[1], RetentionPolicy(visible=1, keep=1, expire=Expire.DELETE))
    assert [c for c in conn.image.calls[before:] if c[0] != "GET"] == []
    assert [(c.kind.value, c.target) for c in plan.changes()] == \
        [("approve", conn.image.images[ids[1]]["name"]), ("delete", conn.image.images[ids[0]]["name"])]
    assert plan.counts() == {"approve": 1, "keep": 0, "hide": 0, "deactivate": 0, "delete": 1}
    assert catalog.state(g.get_image(conn, ids[1])) == "candidate" and ids[0] in conn.image.images
    assert catalog.apply(conn, plan) == plan.steps
    assert catalog.state(g.get_image(conn, ids[1])) == "approved" and ids[0] not in conn.image.images
