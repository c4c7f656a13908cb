"""The whole chain against the local cloud: Redfish emulator nodes enrolled
(with inspection) by nodeforge's own enroll, classified by the hardware
profiles into two resource classes, flavors synced (a second run changes
nothing), an approved image published and promoted by the catalog code,
then 'template render' returns that image and 'template check' passes, and
fails precisely after the image is hidden, after a flavor is removed, and
after the template's minor no longer matches the image.

Five Redfish systems (3 compute, 2 storage; Redfish calls cost Ironic
~0.8 s of CPU each), claimed among those no Ironic node uses. Every node,
flavor and image created here is deleted at the end."""

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
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import Tracker
from tests.ironic.devcloud_inventory import delete_nodes, redfish_node, write_inventory

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SYSTEM, ADMIN = "nodeforge-dev-system", "nodeforge-dev"


def nf(*args, cloud=ADMIN):
    return cli.main(["--os-cloud", cloud, *args])


def _free_systems(bmc_pool):
    return bmc_pool.redfish(3, shape="compute") + bmc_pool.redfish(2, shape="storage")


@pytest.fixture(scope="module")
def chain(devcloud, bmc_pool, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    prefix = f"nft{uuid.uuid4().hex[:5]}-"
    system, admin = devcloud.system(), devcloud.admin()
    tracker = Tracker(admin)
    try:
        nodes = [{**redfish_node(devcloud.paths, tmp, s.index, prefix=prefix), "resource_class": None,
                  "inspect": True} for s in _free_systems(bmc_pool)]
        inv = write_inventory(tmp / "inventory.yaml", nodes)
        start = time.monotonic()
        assert nf("baremetal", "enroll", str(inv), "--concurrency", "5", "-o", "json", cloud=SYSTEM) == 0
        enroll_seconds = time.monotonic() - start
        # Flavors named per run, derived from the real profiles.
        flavors = tmp / "flavors.yaml"
        flavors.write_text(yaml.safe_dump({"version": 1, "profiles": str(ROOT / "manifests/hardware-profiles.yaml"),
                                           # a root disk: Magnum refuses a zero-disk flavor without boot_volume_size
                                           "flavors": [{"name": f"{prefix}bm.compute", "profile": "compute",
                                                        "disk_gb": 446},
                                                       {"name": f"{prefix}bm.storage", "profile": "storage",
                                                        "disk_gb": 893}]}))
        # An approved image of a Kubernetes minor no one else uses.
        minor = f"1.{random.randint(300, 9999)}"
        build = builddir.load(tracker.build(make_build_dir(
            tmp, k8s=f"{minor}.0", variants=("baremetal",),
            build_time=datetime.datetime.now(datetime.timezone.utc))))
        image_id = g.Publisher(admin, RetentionPolicy()).publish(build)[0].image_id
        catalog.promote(admin, image_id, RetentionPolicy())
        templates = tmp / "templates"
        templates.mkdir()
        doc = yaml.safe_load((ROOT / "manifests/templates/k8s-1.36-baremetal.yaml").read_text())
        doc.update(name=f"{prefix}k8s", kubernetes=minor)
        doc.pop("scope")             # any scope's image: this one is the fixture build's
        for grp in doc["node_groups"]:
            grp["flavor"] = prefix + grp["flavor"]
        (templates / "t.yaml").write_text(yaml.safe_dump(doc))
        yield {"prefix": prefix, "system": system, "admin": admin, "flavors": flavors, "image": image_id,
               "templates": templates, "doc": doc, "minor": minor, "enroll_seconds": enroll_seconds}
    finally:
        delete_nodes(system, prefix)
        for f in F.list_flavors(admin):
            if f["name"].startswith(prefix):
                nova.call(admin, "DELETE", f"/flavors/{f['id']}", "cleanup", missing_ok=True)
        tracker.cleanup()


def test_chain(chain, capsys):
    p, system, admin = chain["prefix"], chain["system"], chain["admin"]
    # classify: dry run writes nothing and shows two profiles; then apply, then nothing left to do.
    capsys.readouterr()
    assert nf("baremetal", "classify", "--dry-run", "--node", f"{p}*", "-o", "json", cloud=SYSTEM) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {n["profile"] for n in plan["nodes"]} == {"compute", "storage"}
    # Every profile but the emulated machines' canary pool (no machine in this batch) matches a node.
    assert all(n["outcome"] == "update" for n in plan["nodes"]) and plan["unused_profiles"] == ["canary"]
    assert {n.resource_class for n in system.baremetal.nodes(details=True) if n.name.startswith(p)} == {None}
    rc = nf("baremetal", "classify", "--node", f"{p}*", "-o", "json", cloud=SYSTEM)
    results = json.loads(capsys.readouterr().out)["results"]
    assert rc == 0 and all(r["ok"] for r in results), [r["error"] for r in results]
    mine = [n for n in system.baremetal.nodes(details=True) if n.name.startswith(p)]
    assert sorted(n.resource_class for n in mine) == ["baremetal-compute"] * 3 + ["baremetal-storage"] * 2
    assert all(set(n.traits) in ({"CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"}, {"CUSTOM_HDD_POOL", "CUSTOM_NIC_10G"})
               for n in mine)
    capsys.readouterr()
    assert nf("baremetal", "classify", "--node", f"{p}*", "-o", "json", cloud=SYSTEM) == 0
    assert json.loads(capsys.readouterr().out)["writes"] == 0

    # flavors: created, second run changes nothing; capacity sees the nodes.
    assert nf("flavor", "sync", "--flavors", str(chain["flavors"])) == 0
    capsys.readouterr()
    assert nf("flavor", "sync", "--flavors", str(chain["flavors"]), "-o", "json") == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["no-op"] == 2 and summary["create"] == summary["update"] == 0
    assert nf("flavor", "capacity", "--baremetal-cloud", SYSTEM, "-o", "json") == 0
    cap = {r["flavor"]: r for r in json.loads(capsys.readouterr().out)}
    assert cap[f"{p}bm.compute"]["available"] >= 3 and cap[f"{p}bm.storage"]["available"] >= 2

    # render and check.
    t = ["--templates", str(chain["templates"]), "--baremetal-cloud", SYSTEM]
    assert nf("template", "render", f"{p}k8s", *t, "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cluster_template"]["image_id"] == chain["image"]
    assert out["cluster_template"]["labels"]["kube_tag"] == f"v{chain['minor']}.0"
    # What the cluster-api driver serves: vm with the bare-metal flavors, the driver named.
    assert (out["cluster_template"]["server_type"], out["cluster_template"]["driver"]) == \
        ("vm", "k8s_cluster_api_debian")
    assert out["cluster_template"]["flavor_id"] == next(
        f["id"] for f in F.list_flavors(admin) if f["name"] == f"{p}bm.compute")
    assert nf("template", "check", f"{p}k8s", *t) == 0

    def broken() -> list[str]:
        capsys.readouterr()
        assert nf("template", "check", *t, "-o", "json") == 1
        [res] = json.loads(capsys.readouterr().out)["templates"]
        return [f"{i['kind']}: {i['detail']}" for i in res["issues"]]

    name = g.get_image(admin, chain["image"])["name"]
    # 1. the image is hidden
    g.patch_image(admin, chain["image"], [{"op": "replace", "path": "/os_hidden", "value": True}], "hide")
    assert broken() == [f"image: no approved image for Kubernetes {chain['minor']}, variant baremetal, os debian 12: "
                        f"{chain['image']} ({name}) is hidden (superseded or "
                        "withdrawn)"]
    g.patch_image(admin, chain["image"], [{"op": "replace", "path": "/os_hidden", "value": False}], "unhide")
    # 2. a flavor is removed
    storage = next(f for f in F.list_flavors(admin) if f["name"] == f"{p}bm.storage")
    nova.call(admin, "DELETE", f"/flavors/{storage['id']}", "delete")
    assert broken() == [f"flavor: flavor '{p}bm.storage' not found in Nova"]
    assert nf("flavor", "sync", "--flavors", str(chain["flavors"])) == 0
    assert nf("template", "check", *t) == 0
    # 3. the template's minor no longer matches the image
    doc = dict(chain["doc"], labels={**chain["doc"]["labels"], "kube_tag": "v1.35.9"})
    (chain["templates"] / "t.yaml").write_text(yaml.safe_dump(doc))
    assert broken() == [f"kube_version: image {chain['image']} ({name}) is "
                        f"Kubernetes v{chain['minor']}.0 (minor {chain['minor']}) but the template's kube_tag "
                        "v1.35.9 is minor 1.35"]
