"""Image refresh in ``template upgrade-plan`` against the local cloud's real Magnum, Glance and
Nova: two templates applied by ``template apply`` from files of this test's own Kubernetes minor
and scope, one with a cluster (a record: the conductor ends it CREATE_FAILED here, there is no
Cluster API management cluster), one without; then a same-version rebuild of their image is
approved and the old image superseded as a promote does it (hidden, tagged). Each template
gets a refresh step naming the version apply makes, the cluster its rolling upgrade to it;
after the plan's own command (``template apply``) the templates are current and the cluster's
command names the new version Magnum now has."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from nodeforge import cli
from nodeforge.clients import container_infra as mc
from nodeforge.publish import glance as g

pytestmark = pytest.mark.devcloud

ROOT = Path(__file__).resolve().parents[2]
SYSTEM, ADMIN = "nodeforge-dev-system", "nodeforge-dev"


# template apply makes templates under the test's prefix: the live fixture removes them too
SWEEP_PREFIXED_TEMPLATES = True


def nf(capsys, *args, fmt="json"):
    capsys.readouterr()
    rc = cli.main(["--os-cloud", ADMIN, *args, "--baremetal-cloud", SYSTEM, "-o", fmt])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if fmt == "json" else out)


def template_files(tmp_path: Path, prefix: str, minor: str, scope: str, flavor: str) -> Path:
    tdir = tmp_path / "templates"
    tdir.mkdir()
    shipped = yaml.safe_load((ROOT / "manifests" / "templates" / "k8s-1.36-vm.yaml").read_text())
    for stem in ("solo", "busy"):
        doc = dict(shipped, name=f"{prefix}{stem}", kubernetes=minor, scope=scope)
        doc["node_groups"] = [dict(gr, flavor=flavor) for gr in shipped["node_groups"]]
        (tdir / f"{stem}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return tdir


def test_same_version_rebuild_is_a_refresh_step_with_and_without_clusters(live, tmp_path, capsys):
    p = live.prefix
    minor, scope = f"1.{random.randint(300, 9999)}", f"{p}scope"
    version = f"{minor}.4"
    old = live.image(version, **{g.SCOPE: scope, f"{g.P}promoted_at": "2026-11-01T00:00:00.000000Z"})
    flv = live.flavor("vm")
    tdir = template_files(tmp_path, p, minor, scope, flv["name"])
    rc, out = nf(capsys, "template", "apply", "--templates", str(tdir))
    assert rc == 0 and out["writes"] == 2, out
    made = {t["name"]: t for t in mc.read_templates(live.admin) if t["name"].startswith(p)}
    solo, busy = made[f"{p}solo-v1"], made[f"{p}busy-v1"]
    assert solo["image_id"] == busy["image_id"] == old["id"]
    c = live.cluster("c", busy)
    live.wait_cluster_recorded(c["uuid"])
    names = (f"{p}solo", f"{p}busy", f"{p}c")

    # Nothing superseded yet: no step anywhere.
    rc, data = nf(capsys, "template", "upgrade-plan", *names)
    assert rc == 0 and [(t["template"], t["steps"]) for t in data["templates"]] == [
        (f"{p}busy-v1", []), (f"{p}solo-v1", [])]
    [cl] = data["clusters"]
    assert cl["steps"] == []

    # A security rebuild of the same version approved; the old image superseded (hidden, tagged).
    new = live.image(version, name=f"{p}rebuild",
                     **{g.SCOPE: scope, f"{g.P}promoted_at": "2026-12-04T00:00:00.000000Z"})
    g.patch_image(live.admin, old["id"], [{"op": "replace", "path": "/os_hidden", "value": True},
                                           {"op": "replace", "path": "/tags",
                                            "value": sorted({*old["tags"], g.TAG_SUPERSEDED})}], "supersede")
    rc, data = nf(capsys, "template", "upgrade-plan", *names)
    assert rc == 0
    plans = {t["template"]: t for t in data["templates"]}
    assert set(plans) == {f"{p}solo-v1", f"{p}busy-v1"}
    for stem, clusters in (("solo", []), ("busy", [f"{p}c"])):
        t = plans[f"{p}{stem}-v1"]
        assert t["clusters"] == clusters and t["managed"] == f"{p}{stem}"
        assert [(s["kind"], s["from_version"], s["to_version"], s["from_image"], s["to_image"], s["new_template"])
                for s in t["steps"]] == [("refresh", f"v{version}", f"v{version}", old["id"], new["id"],
                                          f"{p}{stem}-v2")]
        assert t["commands"] == [f"nodeforge template apply {p}{stem}"]
    [cl] = data["clusters"]
    assert cl["cluster_id"] == c["uuid"] and cl["template_id"] == busy["uuid"]
    assert [(s["kind"], s["to_version"], s["template"], s["template_id"]) for s in cl["steps"]] == [
        ("refresh", f"v{version}", f"{p}busy-v2", "")]
    assert "k8s_cluster_api_debian replaces the nodes" in cl["steps"][0]["reason"]
    assert cl["commands"] == [f"openstack coe cluster upgrade {p}c {p}busy-v2"]
    assert any("CREATE_FAILED" in n for n in cl["notes"])            # the record's status, as Magnum has it
    rc, text = nf(capsys, "template", "upgrade-plan", *names, fmt="table")
    assert rc == 0 and "template plan" in text
    lines = text.splitlines()
    assert (lines.index(f"nodeforge template apply {p}busy")
            < lines.index(f"openstack coe cluster upgrade {p}c {p}busy-v2"))

    # The plan's command: apply makes v2 of each with the rebuild (what the plan said it would).
    rc, out = nf(capsys, "template", "apply", "--templates", str(tdir))
    assert rc == 0 and sorted(t["magnum_name"] for t in out["templates"]) == [f"{p}busy-v2", f"{p}solo-v2"], out
    made = {t["name"]: t for t in mc.read_templates(live.admin) if t["name"].startswith(p)}
    assert made[f"{p}busy-v2"]["image_id"] == made[f"{p}solo-v2"]["image_id"] == new["id"]
    rc, data = nf(capsys, "template", "upgrade-plan", *names)
    assert [(t["template"], t["steps"]) for t in data["templates"]] == [(f"{p}busy-v2", []), (f"{p}solo-v2", [])]
    [cl] = data["clusters"]
    assert [(s["kind"], s["template_id"]) for s in cl["steps"]] == [("refresh", made[f"{p}busy-v2"]["uuid"])]
    assert cl["commands"] == [f"openstack coe cluster upgrade {p}c {p}busy-v2"]
