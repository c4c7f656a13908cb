"""`template check --live` and `template upgrade-plan` against the local cloud's real Magnum
(Glance, Nova, Ironic too). Templates are made by hand through Magnum's API (the audit
treats nodeforge's and hand-made ones alike); clusters end CREATE_FAILED here (no Cluster
API management cluster) but keep their cluster_template_id, which is all the audit needs.
The audit reads every template in Magnum; each test filters by its own names (NAMES), so
other tests' templates in the shared cloud never change its exit code."""

from __future__ import annotations

import json

import pytest

from nodeforge import cli
from nodeforge.publish import glance as g

pytestmark = pytest.mark.devcloud

SYSTEM, ADMIN = "nodeforge-dev-system", "nodeforge-dev"


def nf(*args) -> int:
    return cli.main(["--os-cloud", ADMIN, *args])


def check_live(capsys, *names, fmt="json"):
    capsys.readouterr()
    rc = nf("template", "check", "--live", *names, "--baremetal-cloud", SYSTEM, "-o", fmt)
    out = capsys.readouterr().out
    return rc, (json.loads(out) if fmt == "json" else out)


def test_hidden_image_flagged_clusters_listed_exit_codes(live, capsys, tmp_path):
    img = live.image("1.36.4")
    flv = live.flavor("vm")
    t = live.template("a", img, flv)
    c = live.cluster("c1", t)
    live.wait_cluster_recorded(c["uuid"])

    rc, data = check_live(capsys, t["name"])
    assert rc == 0, data["findings"]
    assert data["ok"] is True and data["findings"] == []
    [row] = data["templates"]
    assert row["template_id"] == t["uuid"] and row["kube_tag"] == "v1.36.4"
    [cl] = row["clusters"]
    assert (cl["name"], cl["uuid"], cl["kube_tag"], cl["image_approved"]) == (
        live.prefix + "c1", c["uuid"], "v1.36.4", True)
    assert cl["status"]                                   # whatever the conductor got to (CREATE_FAILED here)
    # Every list read once: one page of templates and clusters, Glance's visible+hidden listings,
    # one flavor listing, one node listing; never once per template.
    calls = data["api_calls"]
    assert (calls["container-infra"], calls["image"], calls["compute"], calls["baremetal"]) == (2, 2, 1, 1), calls
    assert data["maintained"]["minors"] == ["1.34", "1.35", "1.36"]
    assert data["maintained"]["source"].startswith("lockfile")
    # Three times the templates and clusters: the same calls.
    more = [live.template(f"more{i}", img, flv) for i in range(2)]
    live.wait_cluster_recorded(live.cluster("c2", more[0])["uuid"])
    rc, again = check_live(capsys, t["name"], *(m["name"] for m in more))
    assert rc == 0 and len(again["templates"]) == 3
    assert again["api_calls"] == calls

    g.patch_image(live.admin, img["id"], [{"op": "replace", "path": "/os_hidden", "value": True}], "hide")
    rc, data = check_live(capsys, t["name"])
    assert rc == 3
    assert sorted((f["kind"], f["template_id"], f["cluster"]) for f in data["findings"]) == [
        ("cluster_image", t["uuid"], live.prefix + "c1"), ("image_hidden", t["uuid"], "")]
    assert data["templates"][0]["clusters"][0]["image_approved"] is False
    rc, text = check_live(capsys, t["name"], fmt="table")
    assert rc == 3 and "image_hidden" in text and "cluster_image" in text and live.prefix + "c1" in text


def test_hand_made_template_audited(live, capsys):
    img = live.image("1.36.4")
    vm = live.flavor("vm")
    bmish = live.flavor("bmish", extra_specs={"resources:CUSTOM_NF_AUDIT": "1"})   # VCPU/RAM/DISK not zeroed
    t = live.template("hand", img, bmish, master_flavor_id=vm["id"], driver=None,
                      labels={"kube_tag": "v1.36.2"})
    old = live.image("1.30.1")
    t_old = live.template("old", old, vm)
    live.admin.compute.delete(f"/flavors/{vm['id']}")               # Nova lets a flavor go under a template
    rc, data = check_live(capsys, t["name"], t_old["name"])
    assert rc == 3
    got = sorted((f["template"], f["kind"], f["subject"]) for f in data["findings"])
    p = live.prefix
    # Magnum itself filled in the driver the template did not name: the alphabetically first
    # loaded one, k8s_capi_helm_v1, which serves no debian: the audit says so.
    assert got == [(f"{p}hand", "driver", "driver"),
                   (f"{p}hand", "flavor_missing", "master_flavor_id"),
                   (f"{p}hand", "flavor_shape", "flavor_id"),
                   (f"{p}hand", "kube_version", "image_id"),
                   (f"{p}old", "flavor_missing", "flavor_id"),
                   (f"{p}old", "flavor_missing", "master_flavor_id"),
                   (f"{p}old", "kube_tag", "labels.kube_tag")], got
    [drv] = [f for f in data["findings"] if f["kind"] == "driver"]
    assert drv["detail"] == ("driver 'k8s_capi_helm_v1' does not serve (vm, debian, kubernetes) "
                             "(k8s_cluster_api_debian does)")
    # --maintained moves the window: 1.30 maintained, 1.36 not.
    capsys.readouterr()
    rc = nf("template", "check", "--live", t_old["name"], "--maintained", "1.29,1.30,1.31",
            "--baremetal-cloud", SYSTEM, "-o", "json")
    data = json.loads(capsys.readouterr().out)
    assert rc == 3 and {f["kind"] for f in data["findings"]} == {"flavor_missing"}
    assert data["maintained"] == {"minors": ["1.29", "1.30", "1.31"], "source": "option"}


def test_upgrade_plan_against_magnum(live, capsys):
    flv = live.flavor("vm")
    i35, i36 = live.image("1.35.8"), live.image("1.36.4")
    t35 = live.template("k35", i35, flv)
    t36 = live.template("k36", i36, flv)
    c = live.cluster("up", t35)
    live.wait_cluster_recorded(c["uuid"])
    capsys.readouterr()
    assert nf("template", "upgrade-plan", live.prefix + "up", "--baremetal-cloud", SYSTEM, "-o", "json") == 0
    data = json.loads(capsys.readouterr().out)
    [plan] = data["clusters"]
    assert plan["cluster_id"] == c["uuid"] and plan["template_id"] == t35["uuid"] and plan["urgent"] is False
    assert [(s["kind"], s["from_version"], s["to_version"], s["template_id"]) for s in plan["steps"]] == [
        ("minor", "v1.35.8", "v1.36.4", t36["uuid"])]
    assert plan["commands"] == [f"openstack coe cluster upgrade {live.prefix}up {live.prefix}k36"]
    capsys.readouterr()
    assert nf("template", "upgrade-plan", live.prefix + "up", "--baremetal-cloud", SYSTEM) == 0
    assert f"openstack coe cluster upgrade {live.prefix}up {live.prefix}k36" in capsys.readouterr().out
