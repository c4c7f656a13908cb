"""template apply against the local cloud's real Magnum (23, with the
magnum-cluster-api and magnum-capi-helm drivers), Glance, Nova and Neutron.

Two template files (bare-metal and vm variants, the shipped files with this
test's names) over approved images published and promoted by the catalog
code (a fast fixture build, no real image build), and flavors made for this
test. Checked: a dry run writes nothing (template list and every updated_at
unchanged); apply creates NAME-v1, driver-correct; a re-run makes 0 writes; a
cluster created from each applied template passes Magnum's driver validation
(HTTP 202) while a server_type bm template is refused at cluster create; a
change to a template in use yields NAME-v2 with v1 hidden and otherwise
unchanged, nothing deleted; a hand-made template is never touched; bad input
(unknown driver, missing flavor, missing network) is refused naming file,
line and field, with nothing written.

There is no Cluster API management cluster in the local cloud: Magnum's
conductor then fails each cluster (CREATE_FAILED); such clusters cannot be
deleted through the API here, so they are purged from the local cloud's
Magnum database (nodeforge.devcloud.magnum.purge_clusters). Everything made
here is removed at the end; a failed clean-up fails the test."""

from __future__ import annotations

import datetime
import json
import random
import time
import uuid
from pathlib import Path

import pytest
import yaml

from nodeforge import cli
from nodeforge.compute import flavors as F
from nodeforge.clients import compute as nova
from nodeforge.devcloud import magnum as dc_magnum
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import RetentionPolicy
from nodeforge.clients import container_infra as mc
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import Tracker
from tests.magnum.live_cloud import RECORD_TIMEOUT, conductor_errors

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ADMIN, SYSTEM = "nodeforge-dev", "nodeforge-dev-system"


def nf(*args) -> int:
    return cli.main(["--os-cloud", ADMIN, *args])


def apply(capsys, tdir, *extra) -> tuple[int, dict]:
    capsys.readouterr()
    rc = nf("template", "apply", "--templates", str(tdir), "--baremetal-cloud", SYSTEM, "-o", "json", *extra)
    return rc, json.loads(capsys.readouterr().out)


def mine(conn, prefix) -> dict[str, dict]:
    return {t["name"]: t for t in mc.read_templates(conn) if t["name"].startswith(prefix)}


def _cluster_now(conn, uuid: str) -> dict | None:
    """The cluster as Magnum shows it now; None while the conductor has not yet made its node groups
    (Magnum then answers 400 "master_count ... Value: '0'" for a cluster it accepted)."""
    try:
        return mc.get_cluster(conn, uuid)
    except mc.MagnumError as exc:
        if "(HTTP 400)" in str(exc) and "master_count" in str(exc):
            return None
        raise


def create_cluster(conn, tmpl: dict, name: str) -> dict:
    return mc.create_cluster(conn, {"name": name, "cluster_template_id": tmpl["uuid"], "master_count": 1,
                                    "node_count": 1, "create_timeout": 60})


@pytest.fixture(scope="module")
def world(devcloud, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("magnum-apply")
    prefix = f"nfm{devcloud.run_id}{uuid.uuid4().hex[:4]}-"
    admin = devcloud.admin()
    tracker = Tracker(admin)
    made_flavors, clusters = [], []
    state = {"prefix": prefix, "admin": admin, "tmp": tmp, "clusters": clusters, "paths": devcloud.paths}
    try:
        minor = f"1.{random.randint(300, 9999)}"
        build = builddir.load(tracker.build(make_build_dir(
            tmp, k8s=f"{minor}.0", variants=("vm", "baremetal"),
            build_time=datetime.datetime.now(datetime.timezone.utc))))
        images = {}
        for r in g.Publisher(admin, RetentionPolicy()).publish(build):
            catalog.promote(admin, r.image_id, RetentionPolicy())
            images[g.get_image(admin, r.image_id)["nodeforge_variant"]] = r.image_id
        for spec in (F.FlavorSpec(name=f"{prefix}bm.compute", resource_class="baremetal-compute",
                                  required_traits=("CUSTOM_LOCAL_NVME",), disk=446, scope=f"{prefix}flavors"),
                     F.FlavorSpec(name=f"{prefix}bm.storage", resource_class="baremetal-storage",
                                  required_traits=("CUSTOM_HDD_POOL",), disk=893, scope=f"{prefix}flavors")):
            made_flavors.append(F._create(admin, spec, (), None)["id"])
        made_flavors.append(nova.call(admin, "POST", "/flavors", "vm flavor", body={"flavor": {
            "name": f"{prefix}m1.medium", "vcpus": 2, "ram": 4096, "disk": 20}})["flavor"]["id"])
        tdir = tmp / "templates"
        tdir.mkdir()
        docs = {}
        for stem in ("k8s-1.36-baremetal", "k8s-1.36-vm"):
            doc = yaml.safe_load((ROOT / "manifests" / "templates" / f"{stem}.yaml").read_text())
            doc.update(name=f"{prefix}{stem}", kubernetes=minor, scope=f"{prefix}scope")
            for grp in doc["node_groups"]:
                grp["flavor"] = prefix + grp["flavor"]
            docs[stem] = doc
        # The images are of no scope of ours: let the test's scope own them.
        for img in images.values():
            g.patch_image(admin, img, [{"op": "add", "path": "/nodeforge_scope", "value": f"{prefix}scope"}], "scope")
        state.update(images=images, minor=minor, tdir=tdir, docs=docs)

        def write(stem, doc=None):
            (tdir / f"{stem}.yaml").write_text(yaml.safe_dump(doc or docs[stem], sort_keys=False))
        state["write"] = write
        for stem in docs:
            write(stem)
        yield state
    finally:
        purged = dc_magnum.purge_clusters(devcloud.paths, [c["uuid"] for c in clusters]) if clusters else []
        left = []
        for t in mine(admin, prefix).values():
            mc.delete_template(admin, t["uuid"])
        left += list(mine(admin, prefix))
        for fid in made_flavors:
            nova.call(admin, "DELETE", f"/flavors/{fid}", "cleanup", missing_ok=True)
        tracker.cleanup()
        assert len(purged) == len(clusters) and not left, (purged, clusters, left)


def test_apply_dry_run_rerun_and_driver_validation(world, capsys):
    admin, p, tdir = world["admin"], world["prefix"], world["tdir"]
    hand = mc.create_template(admin, {"name": f"{p}hand-made", "coe": "kubernetes", "image_id": world["images"]["vm"],
                                      "flavor_id": f"{p}m1.medium", "master_flavor_id": f"{p}m1.medium",
                                      "server_type": "bm", "network_driver": "calico",
                                      "external_network_id": "public"})
    before = mc.read_templates(admin)
    # Dry run: the plan, no write (every template's updated_at as it was).
    rc, plan = apply(capsys, tdir, "--dry-run")
    assert rc == 0, plan
    assert plan["summary"]["create"] == 2 and plan["writes"] == 2
    assert mc.read_templates(admin) == before
    # Apply: NAME-v1 each, what the cluster-api driver accepts.
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 2 and all(r["ok"] for r in out["results"]), out
    got = mine(admin, p)
    bm, vm = got[f"{p}k8s-1.36-baremetal-v1"], got[f"{p}k8s-1.36-vm-v1"]
    for t, variant in ((bm, "baremetal"), (vm, "vm")):
        assert (t["server_type"], t["driver"], t["cluster_distro"]) == ("vm", "k8s_cluster_api_debian", "debian")
        assert t["image_id"] == world["images"][variant] and t["hidden"] is False
        assert t["labels"]["kube_tag"] == f"v{world['minor']}.0"
        assert t["labels"]["nodeforge_scope"] == f"{p}scope" and t["labels"]["nodeforge_template_version"] == "1"
        assert t["tags"] == f"nodeforge,scope:{p}scope,v1"
    assert bm["flavor_id"] == next(f["id"] for f in F.list_flavors(admin) if f["name"] == f"{p}bm.compute")
    public = next(n for n in admin.network.networks() if n.name == "public")
    assert bm["external_network_id"] == public.id
    # A re-run: 0 writes, nothing changed in Magnum.
    after = mc.read_templates(admin)
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 0 and out["summary"]["no-op"] == 2, out
    assert mc.read_templates(admin) == after
    # The hand-made template was never touched.
    assert next(t for t in after if t["uuid"] == hand["uuid"]) == next(
        t for t in before if t["uuid"] == hand["uuid"])
    # Magnum's driver validation at cluster create: 202 for each applied template ...
    for t in (bm, vm):
        c = create_cluster(admin, t, f"{t['name']}-c")
        world["clusters"].append(c)
        assert c.get("uuid"), c
    # ... and the refusal nodeforge avoids: no loaded driver serves (bm, debian, kubernetes).
    with pytest.raises(mc.MagnumError) as exc:
        world["clusters"].append(create_cluster(admin, hand, f"{p}hand-c"))
    assert "(HTTP 400)" in str(exc.value) and "Cluster type (bm, debian, kubernetes) is not supported" in str(exc.value)
    # The conductor then fails the clusters: no Cluster API management cluster in the local cloud.
    # A bounded wait, not a timing: the one conductor worker gets to each cluster within seconds.
    deadline = time.monotonic() + RECORD_TIMEOUT
    status = {}
    while time.monotonic() < deadline:
        status = {c["uuid"]: (_cluster_now(admin, c["uuid"]) or {}).get("status") for c in world["clusters"]}
        if all(s == "CREATE_FAILED" for s in status.values()):
            break
        time.sleep(3)
    print("clusters after create (no management cluster here):", status)
    assert set(status.values()) == {"CREATE_FAILED"}, (status, conductor_errors(world["paths"]))


def test_a_change_to_a_template_in_use_is_a_new_version_and_bad_input_is_refused(world, capsys):
    admin, p, tdir = world["admin"], world["prefix"], world["tdir"]
    rc, _ = apply(capsys, tdir)            # v1 exists (also when this test runs alone)
    assert rc == 0
    v1 = mine(admin, p)[f"{p}k8s-1.36-baremetal-v1"]
    c = create_cluster(admin, v1, f"{p}in-use")
    world["clusters"].append(c)
    doc = dict(world["docs"]["k8s-1.36-baremetal"])
    doc["labels"] = {**doc["labels"], "keystone_auth_enabled": "false"}
    world["write"]("k8s-1.36-baremetal", doc)
    rc, plan = apply(capsys, tdir, "--dry-run")
    [tp] = [t for t in plan["templates"] if t["template"] == f"{p}k8s-1.36-baremetal"]
    assert tp["action"] == "new-version" and tp["magnum_name"] == f"{p}k8s-1.36-baremetal-v2"
    assert tp["changes"] == [{"field": "labels.keystone_auth_enabled", "current": "true", "desired": "false"}]
    assert [v["clusters"] for v in tp["versions"]] == [[f"{p}in-use"]] or f"{p}in-use" in tp["versions"][0]["clusters"]
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 2, out
    got = mine(admin, p)
    v1_after, v2 = got[f"{p}k8s-1.36-baremetal-v1"], got[f"{p}k8s-1.36-baremetal-v2"]
    assert v1_after["hidden"] is True and v2["hidden"] is False
    assert {k: v for k, v in v1_after.items() if k not in ("hidden", "updated_at")} == \
        {k: v for k, v in v1.items() if k not in ("hidden", "updated_at")}
    assert v2["labels"]["keystone_auth_enabled"] == "false" and v2["labels"]["nodeforge_template_version"] == "2"
    deadline = time.monotonic() + RECORD_TIMEOUT
    while (recorded := _cluster_now(admin, c["uuid"])) is None and time.monotonic() < deadline:
        time.sleep(2)
    assert recorded is not None and recorded["cluster_template_id"] == v1["uuid"], (
        recorded, conductor_errors(world["paths"]))
    world["clusters"].append(create_cluster(admin, v2, f"{p}v2-c"))
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 0

    # Bad input: refused naming file, line and field; nothing written.
    before = mc.read_templates(admin)
    path = tdir / "k8s-1.36-baremetal.yaml"
    text = yaml.safe_dump(doc, sort_keys=False)
    cases = [
        (text.replace(f"flavor: {p}bm.storage", f"flavor: {p}bm.nope"), "node_groups[2].flavor",
         f"flavor '{p}bm.nope' not found in Nova"),
        (text.replace("fixed_network: private", "fixed_network: no-such-net"), "magnum.fixed_network",
         "network 'no-such-net' not found in Neutron"),
        (text.replace("driver: k8s_cluster_api_debian", "driver: k8s_fedora_atomic_v1"), "driver",
         "unknown Magnum driver 'k8s_fedora_atomic_v1'"),
    ]
    for bad, field, detail in cases:
        assert bad != text
        path.write_text(bad)
        line = next(i for i, ln in enumerate(bad.splitlines(), 1)
                    if (field.split(".")[-1] if "[" not in field else f"{p}bm.nope") in ln)
        capsys.readouterr()
        rc = nf("template", "apply", "--templates", str(tdir), "--baremetal-cloud", SYSTEM)
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"{path}" in err and (f"{path}:{line}: {field}: {detail}" in err
                                     or f"line {line}: {field}: {detail}" in err), err
    assert mc.read_templates(admin) == before
    world["write"]("k8s-1.36-baremetal", doc)


def test_the_project_named_in_the_file_owns_the_template(world, devcloud, capsys):
    """``project:`` in the file: the template is created with a token of that project (the admin holds a
    role there), so that project owns it and its members see it while it is private; another project is
    another version."""
    admin, p = world["admin"], world["prefix"]
    tdir = world["tmp"] / "templates-project"
    tdir.mkdir(exist_ok=True)
    doc = {**world["docs"]["k8s-1.36-vm"], "name": f"{p}tenant-vm", "project": "nodeforge"}
    # The admin project's 'private' network is not shared: a template owned by another project names only
    # the external network (Magnum checks the networks with the owner's token).
    doc["magnum"] = {k: v for k, v in doc["magnum"].items() if k not in ("fixed_network", "fixed_subnet")}
    doc["magnum"]["public"] = False
    (tdir / "tenant-vm.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 1, out
    nodeforge_project = admin.identity.find_project("nodeforge", domain_id="default")
    admin_project = admin.identity.find_project("admin", domain_id="default")
    made = mine(admin, f"{p}tenant-vm")[f"{p}tenant-vm-v1"]
    assert made["project_id"] == nodeforge_project.id != admin_project.id and made["public"] is False
    member_sees = {t["uuid"] for t in mc.read_templates(devcloud.member())}
    assert made["uuid"] in member_sees
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 0, out
    # Moved to the admin project: a new version there, the old one hidden (never moved, never deleted).
    (tdir / "tenant-vm.yaml").write_text(yaml.safe_dump({**doc, "project": "admin"}, sort_keys=False))
    rc, out = apply(capsys, tdir)
    assert rc == 0 and out["writes"] == 2, [r.get("error") for r in out["results"]]
    got = mine(admin, f"{p}tenant-vm")
    assert got[f"{p}tenant-vm-v2"]["project_id"] == admin_project.id and got[f"{p}tenant-vm-v1"]["hidden"] is True
    assert got[f"{p}tenant-vm-v2"]["uuid"] not in {t["uuid"] for t in mc.read_templates(devcloud.member())}
