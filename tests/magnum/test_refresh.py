"""Image refresh in the upgrade plan (pure): a template or a cluster whose image was superseded
by an approved image of the same Kubernetes version (a security rebuild), with and without
clusters; the catalog's group and scope decide what supersedes what; the refresh ordered with
the version steps; the driver's rolling replacement or a manual step."""

from __future__ import annotations

import pytest

from nodeforge.magnum import audit as A, refresh as R, upgrade as U
from tests.magnum import state_factory as S

MAINTAINED = A.Maintained(("1.34", "1.35", "1.36"), "option")


def managed(img, flv, name="k8s-1.36-vm", version=1, **kw):
    """A template as ``template apply`` writes it: NAME-vN with nodeforge's marks."""
    t = S.template(img, flv, name=f"{name}-v{version}", **kw)
    t["labels"].update(nodeforge_scope="platform", nodeforge_template=name, nodeforge_template_version=str(version))
    return t


def superseded(img):
    """What a promote of a newer image does to an older one beyond ``visible``: hidden, tagged."""
    img["os_hidden"] = True
    img["tags"] = [*img["tags"], "nodeforge-superseded"]
    return img


def rebuild_world(*, clusters=(), old_hidden=True):
    """v1.36.4 image A behind NAME-v1; a rebuild B of 1.36.4 promoted later (A hidden by retention)."""
    flv = S.vm_flavor()
    a = S.image("1.36.4", variant="vm", nodeforge_promoted_at="2026-11-01T00:00:00Z")
    b = S.image("1.36.4", variant="vm", nodeforge_promoted_at="2026-12-01T00:00:00Z", name="rebuild")
    if old_hidden:
        superseded(a)
    v1 = managed(a, flv)
    parts = {"images": [a, b], "flavors": [flv], "nodes": [], "templates": [v1],
             "clusters": [S.cluster(v1, name=n) for n in clusters]}
    return parts, a, b, v1


def report(parts, nodegroups=None):
    return U.report(S.state_of(parts, nodegroups), MAINTAINED)


def test_template_without_cluster_gets_a_refresh_step():
    parts, a, b, v1 = rebuild_world()
    r = report(parts)
    assert r["clusters"] == [] and r["counts"]["templates_with_steps"] == 1
    [t] = r["templates"]
    assert (t["template"], t["managed"], t["clusters"]) == ("k8s-1.36-vm-v1", "k8s-1.36-vm", [])
    [s] = t["steps"]
    assert (s["kind"], s["from_version"], s["to_version"], s["from_image"], s["to_image"], s["new_template"]) == (
        "refresh", "v1.36.4", "v1.36.4", a["id"], b["id"], "k8s-1.36-vm-v2")
    assert "superseded" in s["reason"] and b["id"] in s["reason"]
    assert t["commands"] == ["nodeforge template apply k8s-1.36-vm"]


def test_template_with_cluster_refresh_before_and_after_apply():
    parts, a, b, v1 = rebuild_world(clusters=["prod"])
    r = report(parts)
    [t] = r["templates"]
    assert t["clusters"] == ["prod"] and t["steps"][0]["kind"] == "refresh"
    [c] = r["clusters"]
    # No template has B yet: the cluster moves to the version apply is to make.
    assert [(s["kind"], s["from_version"], s["to_version"], s["template"], s["template_id"]) for s in c["steps"]] == [
        ("refresh", "v1.36.4", "v1.36.4", "k8s-1.36-vm-v2", "")]
    assert "rolling" in c["steps"][0]["reason"] and "nodeforge template apply k8s-1.36-vm" in c["steps"][0]["reason"]
    assert c["commands"] == ["openstack coe cluster upgrade prod k8s-1.36-vm-v2"]
    # apply made v2 with B and hid v1: the line is current, the cluster moves to v2 by its ID-free name.
    v2 = managed(b, parts["flavors"][0], version=2)
    v1["hidden"] = True
    parts["templates"].append(v2)
    r = report(parts)
    [t] = r["templates"]
    assert t["template"] == "k8s-1.36-vm-v2" and t["steps"] == [] and t["commands"] == []
    [c] = r["clusters"]
    assert [(s["kind"], s["template_id"]) for s in c["steps"]] == [("refresh", v2["uuid"])]
    assert c["commands"] == ["openstack coe cluster upgrade prod k8s-1.36-vm-v2"]
    # Once the cluster is on v2: nothing to do.
    parts["clusters"][0]["cluster_template_id"] = v2["uuid"]
    [c] = report(parts)["clusters"]
    assert c["steps"] == [] and c["commands"] == []


def test_next_version_name_skips_every_name_taken_in_magnum():
    parts, a, b, v1 = rebuild_world()
    parts["templates"].append(S.template(a, parts["flavors"][0], name="k8s-1.36-vm-v3", hidden=True))  # by hand
    [t] = [t for t in report(parts)["templates"] if t["managed"]]
    assert t["steps"][0]["new_template"] == "k8s-1.36-vm-v4"


@pytest.mark.parametrize("change,refresh", [
    ("old still listed, rebuild promoted later", True),        # retention visible=2: A approved, B newer
    ("rebuild promoted earlier", False),
    ("rebuild is a candidate", False),
    ("rebuild of another scope", False),
    ("rebuild of another variant", False),
    ("rebuild of another OS version", False),
    ("rebuild hidden", False),
    ("old retired, rebuild promoted earlier", True),           # A is no longer approved: B replaces it
])
def test_what_supersedes_what_is_the_catalog_s_group_and_scope(change, refresh):
    parts, a, b, v1 = rebuild_world(old_hidden=False)
    if change == "rebuild promoted earlier":
        b["nodeforge_promoted_at"] = "2026-10-01T00:00:00Z"
    elif change == "rebuild is a candidate":
        b["tags"] = [t for t in b["tags"] if t != "nodeforge-approved"] + ["nodeforge-candidate"]
    elif change == "rebuild of another scope":
        b["nodeforge_scope"] = "team-b"
    elif change == "rebuild of another variant":
        b.update(nodeforge_variant="baremetal", tags=[t.replace("nodeforge-vm", "nodeforge-baremetal")
                                                      for t in b["tags"]])
    elif change == "rebuild of another OS version":
        b["os_version"] = "13"
    elif change == "rebuild hidden":
        superseded(b)
    elif change == "old retired, rebuild promoted earlier":
        b["nodeforge_promoted_at"] = "2026-10-01T00:00:00Z"
        superseded(a)["status"] = "deactivated"
    assert (R.superseded_by(a, parts["images"]) is b) is refresh
    [t] = report(parts)["templates"]
    assert [s["kind"] for s in t["steps"]] == (["refresh"] if refresh else [])


def test_a_newer_patch_is_a_patch_step_of_the_template_not_a_refresh():
    parts, a, b, v1 = rebuild_world(clusters=["prod"])
    b.update(kube_version="v1.36.5", name="patch")
    [t] = report(parts)["templates"]
    assert [(s["kind"], s["from_version"], s["to_version"]) for s in t["steps"]] == [("patch", "v1.36.4", "v1.36.5")]
    [c] = report(parts)["clusters"]
    # The cluster's refresh waits for no version apply is to make as a patch: plan again after it.
    assert c["steps"] == []


def test_patch_step_replaces_the_image_no_separate_refresh():
    parts, a, b, v1 = rebuild_world(clusters=["prod"])
    p = S.image("1.36.5", variant="vm", nodeforge_promoted_at="2026-12-02T00:00:00Z")
    parts["images"].append(p)
    parts["templates"].append(S.template(p, parts["flavors"][0], name="k8s-1.36.5"))
    [c] = report(parts)["clusters"]
    assert [(s["kind"], s["to_version"]) for s in c["steps"]] == [("patch", "v1.36.5")]
    assert any("no separate refresh" in n for n in c["notes"])


def test_refresh_first_then_one_minor_at_a_time():
    """A cluster on 1.35.8 whose image was rebuilt: the rebuild first, at 1.35.8, then 1.36."""
    flv = S.vm_flavor()
    a = superseded(S.image("1.35.8", variant="vm", nodeforge_promoted_at="2026-11-01T00:00:00Z"))
    b = S.image("1.35.8", variant="vm", nodeforge_promoted_at="2026-12-01T00:00:00Z")
    n = S.image("1.36.4", variant="vm")
    t35, t35r = S.template(a, flv, name="k35"), S.template(b, flv, name="k35-rebuilt")
    t36 = S.template(n, flv, name="k36")
    parts = {"images": [a, b, n], "flavors": [flv], "nodes": [], "templates": [t35, t35r, t36],
             "clusters": [S.cluster(t35, name="prod")]}
    cid = parts["clusters"][0]["uuid"]
    groups = {cid: [{"uuid": "ng-1", "name": "storage", "is_default": False, "version": "v1.35.8"}]}
    [c] = report(parts, groups)["clusters"]
    assert [(s["kind"], s["from_version"], s["to_version"], s["template"], s["nodegroup"]) for s in c["steps"]] == [
        ("refresh", "v1.35.8", "v1.35.8", "k35-rebuilt", None),
        ("minor", "v1.35.8", "v1.36.4", "k36", None),
        ("nodegroup", "v1.35.8", "v1.36.4", "k36", "storage"),
    ]
    # Without a newer minor: the non-default group follows the cluster to its refreshed template.
    parts["templates"].remove(t36)
    [c] = report(parts, groups)["clusters"]
    assert [(s["kind"], s["template"], s["nodegroup"]) for s in c["steps"]] == [
        ("refresh", "k35-rebuilt", None), ("nodegroup", "k35-rebuilt", "storage")]
    assert c["commands"] == ["openstack coe cluster upgrade prod k35-rebuilt",
                             "openstack coe cluster upgrade prod k35-rebuilt --nodegroup storage"]


def test_a_cluster_refreshes_within_its_own_line_first():
    """Another line of the same shape already has the rebuild: the cluster still moves along its own
    line (the version apply is to make), and to the other only when its line has none coming."""
    parts, a, b, v1 = rebuild_world(clusters=["prod"])
    other = managed(b, parts["flavors"][0], name="k8s-1.36-other", version=1)
    parts["templates"].append(other)
    [c] = report(parts)["clusters"]
    assert [(s["template"], s["template_id"]) for s in c["steps"]] == [("k8s-1.36-vm-v2", "")]
    v2 = managed(b, parts["flavors"][0], version=2, created_at="2025-01-01T00:00:00Z")    # older than `other`
    parts["templates"].append(v2)
    [c] = report(parts)["clusters"]
    assert [s["template_id"] for s in c["steps"]] == [v2["uuid"]]
    parts["templates"].remove(v2)
    v1["labels"].pop("nodeforge_template")          # v1 hand-made now: no line, nothing coming
    [c] = report(parts)["clusters"]
    assert [s["template_id"] for s in c["steps"]] == [other["uuid"]]


def test_a_driver_without_rolling_replacement_gets_a_manual_step():
    parts, a, b, v1 = rebuild_world(clusters=["prod"])
    for t in parts["templates"]:
        t["driver"] = "k8s_fedora_coreos_v1"          # a Heat-era driver nodeforge does not know
    [c] = report(parts)["clusters"]
    [s] = c["steps"]
    assert s["kind"] == "refresh" and s["command"] is None and c["commands"] == []
    assert "k8s_fedora_coreos_v1 is not known to replace nodes" in s["manual"]
    assert f"--image {b['id']}" in s["manual"]


def test_hand_made_template_gets_a_manual_template_step_and_its_cluster_waits():
    flv = S.vm_flavor()
    a = superseded(S.image("1.36.4", variant="vm", nodeforge_promoted_at="2026-11-01T00:00:00Z"))
    b = S.image("1.36.4", variant="vm", nodeforge_promoted_at="2026-12-01T00:00:00Z")
    hand = S.template(a, flv, name="hand")
    parts = {"images": [a, b], "flavors": [flv], "nodes": [], "templates": [hand],
             "clusters": [S.cluster(hand, name="prod")]}
    r = report(parts)
    [t] = r["templates"]
    assert t["managed"] is None and t["commands"] == []
    [s] = t["steps"]
    assert s["kind"] == "refresh" and s["command"] is None and f"--image {b['id']}" in s["manual"]
    [c] = r["clusters"]
    [s] = c["steps"]
    assert (s["kind"], s["template"], s["command"]) == ("refresh", "", None)
    assert "no template of its shape has image" in s["manual"]
    # A copy made by hand with the rebuild: the cluster moves to it.
    copy = S.template(b, flv, name="hand-2")
    parts["templates"].append(copy)
    [c] = report(parts)["clusters"]
    assert c["commands"] == ["openstack coe cluster upgrade prod hand-2"]


def test_only_a_line_s_current_version_and_visible_hand_made_templates_are_planned():
    parts, a, b, v1 = rebuild_world()
    v1["hidden"] = True
    v2 = managed(a, parts["flavors"][0], version=2)
    hidden_hand = S.template(a, parts["flavors"][0], name="old-hand", hidden=True)
    parts["templates"] += [v2, hidden_hand]
    assert [t["template"] for t in report(parts)["templates"]] == ["k8s-1.36-vm-v2"]


def test_image_gone_or_not_from_the_catalog_is_noted_not_refreshed():
    parts, a, b, v1 = rebuild_world()
    v1["image_id"] = "gone"
    [t] = report(parts)["templates"]
    assert t["steps"] == [] and "no refresh" in t["notes"][0]
    foreign = {"id": "img-foreign", "name": "ubuntu", "status": "active", "tags": [], "kube_version": "v1.36.4"}
    parts["images"].append(foreign)
    v1["image_id"] = foreign["id"]
    [t] = report(parts)["templates"]
    assert t["steps"] == [] and "not a nodeforge catalog image" in t["notes"][0]


def test_known_drivers_roll_nodes_on_an_image_change():
    from nodeforge.magnum import drivers

    assert all(d.rolling_image for d in drivers.DRIVERS.values())
