"""The upgrade plan as a table: templates on offer + a cluster -> the steps (pure), with
the version-skew edge cases."""

from __future__ import annotations

import pytest

from nodeforge.magnum import audit as A, upgrade as U
from tests.magnum import state_factory as S

MAINTAINED = A.Maintained(("1.34", "1.35", "1.36"), "option")


def cloud(versions: list[str], *, start: str, cluster_tag: str | None = None, **cluster_kw):
    """One template per version (same flavor and shape), a cluster on the ``start`` one."""
    flv = S.bm_flavor()
    parts = {"images": [], "flavors": [flv], "nodes": [S.node()], "templates": [], "clusters": []}
    by_version = {}
    for v in versions:
        img = S.image(v)
        t = S.template(img, flv, name=f"k8s-{v}")
        parts["images"].append(img)
        parts["templates"].append(t)
        by_version[v] = t
    parts["clusters"].append(S.cluster(by_version[start], name="c1", kube_tag=cluster_tag, **cluster_kw))
    return parts, by_version


def steps(parts, nodegroups=None, maintained=MAINTAINED):
    [p] = U.plan(S.state_of(parts, nodegroups), maintained)
    return p, [(s.kind, s.from_version, s.to_version, s.nodegroup) for s in p.steps]


@pytest.mark.parametrize("versions,start,expected", [
    (["1.36.1", "1.36.4"], "1.36.1", [("patch", "v1.36.1", "v1.36.4", None)]),
    (["1.36.1", "1.36.2", "1.36.4"], "1.36.1", [("patch", "v1.36.1", "v1.36.4", None)]),   # straight to the newest patch
    (["1.34.2", "1.35.8", "1.36.4"], "1.34.2", [("minor", "v1.34.2", "v1.35.8", None),
                                                 ("minor", "v1.35.8", "v1.36.4", None)]),  # one minor at a time
    (["1.34.1", "1.34.9", "1.35.8"], "1.34.1", [("patch", "v1.34.1", "v1.34.9", None),
                                                 ("minor", "v1.34.9", "v1.35.8", None)]),  # patch first
    (["1.36.4"], "1.36.4", []),                                                           # up to date
    (["1.36.4", "1.36.1"], "1.36.4", []),                                                 # never downgrades
    (["1.35.8", "1.36.0", "1.36.4"], "1.35.8", [("minor", "v1.35.8", "v1.36.4", None)]),  # newest patch of next minor
], ids=["patch", "newest patch", "two minors", "patch then minor", "current", "no downgrade", "minor to newest patch"])
def test_control_plane_path(versions, start, expected):
    parts, _ = cloud(versions, start=start)
    plan, got = steps(parts)
    assert got == expected
    assert plan.urgent is False


def test_missing_minor_blocks_instead_of_skipping():
    parts, _ = cloud(["1.33.5", "1.35.8", "1.36.4"], start="1.33.5")
    plan, got = steps(parts)
    assert got == []
    assert plan.urgent is True
    assert any("no target template for Kubernetes 1.34" in n for n in plan.notes)


def test_unmaintained_minor_is_urgent_and_walks_every_minor():
    parts, _ = cloud(["1.32.3", "1.33.5", "1.34.2", "1.35.8", "1.36.4"], start="1.32.3")
    plan, got = steps(parts)
    assert plan.urgent is True
    assert [s[2] for s in got] == ["v1.33.5", "v1.34.2", "v1.35.8", "v1.36.4"]
    assert not any("still outside" in n for n in plan.notes)


def test_urgent_ones_first():
    parts, by = cloud(["1.33.5", "1.36.4"], start="1.36.4")
    parts["clusters"].append(S.cluster(by["1.33.5"], name="zz-old"))
    plans = U.plan(S.state_of(parts), MAINTAINED)
    assert [(p.cluster, p.urgent) for p in plans] == [("zz-old", True), ("c1", False)]
    assert any("still outside the maintained minors" in n for n in plans[0].notes)


def test_cluster_kube_tag_label_overrides_template():
    parts, _ = cloud(["1.36.1", "1.36.4"], start="1.36.4", cluster_tag="v1.36.1")
    _, got = steps(parts)
    assert got == []        # the cluster already runs its template's newest; its own label says 1.36.1
    parts, _ = cloud(["1.36.1", "1.36.2", "1.36.4"], start="1.36.2", cluster_tag="v1.36.1")
    _, got = steps(parts)
    assert got == [("patch", "v1.36.1", "v1.36.4", None)]


@pytest.mark.parametrize("change", ["hidden", "image_hidden", "candidate", "kube_mismatch", "other_flavor",
                                    "other_driver"])
def test_non_targets_are_never_proposed(change):
    parts, by = cloud(["1.36.1", "1.36.4"], start="1.36.1")
    t = by["1.36.4"]
    img = next(i for i in parts["images"] if i["id"] == t["image_id"])
    if change == "hidden":
        t["hidden"] = True
    elif change == "image_hidden":
        img["os_hidden"] = True
    elif change == "candidate":
        img["tags"] = ["nodeforge"]
    elif change == "kube_mismatch":
        img["kube_version"] = "v1.36.3"
    elif change == "other_flavor":
        other = S.bm_flavor("bm.storage")
        parts["flavors"].append(other)
        t["flavor_id"] = other["id"]
    elif change == "other_driver":
        t["driver"] = "k8s_capi_helm_v1"
    plan, got = steps(parts)
    assert got == []
    assert plan.notes


def test_commands_name_the_template_and_cluster():
    parts, by = cloud(["1.35.8", "1.36.4"], start="1.35.8")
    [p] = U.plan(S.state_of(parts), MAINTAINED)
    assert p.to_dict()["commands"] == ["openstack coe cluster upgrade c1 k8s-1.36.4"]
    parts["templates"].append(dict(by["1.36.4"], uuid="ct-dup"))        # a second template of that name
    [p] = U.plan(S.state_of(parts), MAINTAINED)
    assert {c.split()[-1] for c in p.to_dict()["commands"]} <= {by["1.36.4"]["uuid"], "ct-dup"}


def _ng(name, version, default=False):
    return {"uuid": S.uid("ng"), "name": name, "role": "worker", "is_default": default, "version": version}


def test_nodegroups_follow_and_stay_within_three_minors():
    """Control plane 1.32 -> 1.36 with a storage group on 1.30: the group must be brought to the
    control plane's version before the control plane reaches 1.34 (1.34 - 1.30 > 3), and it
    follows the cluster to its final template."""
    parts, _ = cloud(["1.32.3", "1.33.5", "1.34.2", "1.35.8", "1.36.4"], start="1.32.3")
    cid = parts["clusters"][0]["uuid"]
    groups = {cid: [_ng("default-worker", "v1.32.3", default=True), _ng("storage", "v1.30.2")]}
    plan, got = steps(parts, groups)
    assert got == [
        ("minor", "v1.32.3", "v1.33.5", None),
        ("nodegroup", "v1.30.2", "v1.33.5", "storage"),       # before the control plane reaches 1.34
        ("minor", "v1.33.5", "v1.34.2", None),
        ("minor", "v1.34.2", "v1.35.8", None),
        ("minor", "v1.35.8", "v1.36.4", None),
        ("nodegroup", "v1.33.5", "v1.36.4", "storage"),       # follows the cluster at the end
    ]
    cmds = plan.to_dict()["commands"]
    assert cmds[1] == "openstack coe cluster upgrade c1 k8s-1.33.5 --nodegroup storage"


def test_nodegroup_exactly_three_behind_may_stay():
    parts, _ = cloud(["1.35.8", "1.36.4"], start="1.35.8")
    cid = parts["clusters"][0]["uuid"]
    _, got = steps(parts, {cid: [_ng("storage", "v1.33.1")]})
    assert got == [("minor", "v1.35.8", "v1.36.4", None), ("nodegroup", "v1.33.1", "v1.36.4", "storage")]


def test_nodegroup_four_behind_goes_first():
    parts, _ = cloud(["1.35.8", "1.36.4"], start="1.35.8")
    cid = parts["clusters"][0]["uuid"]
    _, got = steps(parts, {cid: [_ng("storage", "v1.32.1")]})
    assert got[0] == ("nodegroup", "v1.32.1", "v1.35.8", "storage")
    assert got[1] == ("minor", "v1.35.8", "v1.36.4", None)


def test_nodegroup_newer_than_control_plane_is_noted():
    parts, _ = cloud(["1.35.8"], start="1.35.8")
    cid = parts["clusters"][0]["uuid"]
    plan, _ = steps(parts, {cid: [_ng("storage", "v1.36.0")]})
    assert any("newer than the control plane" in n for n in plan.notes)


def test_failed_cluster_is_planned_with_a_note():
    parts, _ = cloud(["1.36.1", "1.36.4"], start="1.36.1", status="CREATE_FAILED")
    plan, got = steps(parts)
    assert got and any("CREATE_FAILED" in n for n in plan.notes)


def test_unparseable_kube_tag():
    parts, _ = cloud(["1.36.4"], start="1.36.4", cluster_tag="latest")
    plan, got = steps(parts)
    assert got == [] and any("not a version" in n for n in plan.notes)


def test_report_counts():
    parts, by = cloud(["1.33.5", "1.34.2", "1.35.8", "1.36.4"], start="1.33.5")
    parts["clusters"].append(S.cluster(by["1.36.4"], name="c2"))
    r = U.report(S.state_of(parts), MAINTAINED)
    assert r["counts"] == {"clusters": 2, "urgent": 1, "with_steps": 1, "templates": 4, "templates_with_steps": 0}
