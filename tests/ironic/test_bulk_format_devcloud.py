"""python-ironicclient's bulk format against the local cloud's real Ironic.

One ``baremetal create`` file (two chassis, one with nested nodes; nodes with
nested ports and port groups; port groups with nested ports) is created by
python-ironicclient's own ``create_resources`` and snapshotted, everything is
deleted, then nodeforge enrolls the same file. The two snapshots must hold the
same chassis, nodes, ports and port groups field by field (uuids, timestamps,
links and nodeforge's own ``extra.nodeforge_*`` marks aside; references
between them compared by name/description). A re-run of nodeforge makes no
write. Everything is named from a per-run prefix and deleted at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from tests.ironic.devcloud_inventory import fake_mac

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

SYSTEM = "nodeforge-dev-system"
API = "1.70"          # nodeforge's default API version
READ = "1.103"        # reads every field of the file (port name ... port group category)
PASSWORD = "bulk-Pw-" + uuid.uuid4().hex[:10]


def bulk_doc(prefix: str) -> dict:
    mac = lambda i: fake_mac(prefix, i)  # noqa: E731
    return {
        "chassis": [
            {"description": f"{prefix}rack-a1", "extra": {"rack": "a1"}, "nodes": [
                {"name": f"{prefix}a1-n1", "driver": "fake-hardware", "resource_class": "baremetal-fake",
                 "properties": {"cpu_arch": "x86_64", "memory_mb": 4096}, "traits": ["CUSTOM_RACK_A1"],
                 "extra": {"asset": "1001"}, "description": "nested in rack-a1", "shard": "shard-a",
                 "portgroups": [
                     {"name": f"{prefix}a1-n1-bond0", "address": mac(100), "mode": "802.3ad",
                      "properties": {"miimon": "100", "xmit_hash_policy": "layer3+4"},
                      "standalone_ports_supported": False, "extra": {"lacp": "fast"},
                      "physical_network": "physnet1", "category": "bond",
                      "ports": [
                          {"address": mac(101), "pxe_enabled": False, "physical_network": "physnet1",
                           "local_link_connection": {"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "Eth1/1",
                                                     "switch_info": "tor-a1"}},
                          {"address": mac(102), "pxe_enabled": False, "physical_network": "physnet1",
                           "local_link_connection": {"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "Eth1/2",
                                                     "switch_info": "tor-a1"}, "extra": {"slot": 2}}]},
                     {"name": f"{prefix}a1-n1-bond1", "mode": "active-backup"}],
                 "ports": [{"address": mac(103), "pxe_enabled": True, "extra": {"role": "provisioning"},
                            "name": f"{prefix}a1-n1-eth2", "description": "provisioning NIC", "vendor": "acme",
                            "category": "provisioning"}]},
                {"name": f"{prefix}a1-n2", "driver": "fake-hardware", "automated_clean": False,
                 "disable_power_off": False,
                 "ports": [{"address": mac(201)}]}]},
            {"description": f"{prefix}rack-b2 (empty)", "extra": {"rack": "b2"}},
        ],
        "nodes": [
            {"name": f"{prefix}ipmi-1", "driver": "ipmi",
             "driver_info": {"ipmi_address": "192.0.2.91", "ipmi_port": 6230, "ipmi_username": "admin",
                             "ipmi_password": PASSWORD, "deploy_kernel": "http://images.example/ipa.kernel"},
             "lessee": "some-project", "network_data": {"links": [], "networks": [], "services": []},
             "portgroups": [{"name": f"{prefix}ipmi-1-bond0", "address": mac(300),
                             "ports": [{"address": mac(301), "is_smartnic": False}]}],
             "ports": [{"address": mac(302), "pxe_enabled": True}]},
        ],
    }


def ironic_get(conn, path: str, version: str = READ) -> list[dict]:
    key = path.split("/")[1]
    return conn.baremetal.get(f"{path}?limit=1000", microversion=version).json()[key]


def snapshot(conn, prefix: str) -> dict:
    """Our objects, normalised: no uuids, timestamps, links or nodeforge marks;
    references by name (node, port group) or description (chassis)."""
    chassis = [c for c in ironic_get(conn, "/chassis/detail") if (c.get("description") or "").startswith(prefix)]
    nodes = [n for n in ironic_get(conn, "/nodes/detail") if (n.get("name") or "").startswith(prefix)]
    node_names = {n["uuid"]: n["name"] for n in nodes}
    groups = [g for g in ironic_get(conn, "/portgroups/detail") if g["node_uuid"] in node_names]
    group_names = {g["uuid"]: g["name"] for g in groups}
    ports = [p for p in ironic_get(conn, "/ports/detail") if p["node_uuid"] in node_names]
    chassis_desc = {c["uuid"]: c["description"] for c in chassis}
    volatile = {"uuid", "created_at", "updated_at", "links", "ports", "portgroups", "nodes", "states", "volume",
                "provision_updated_at", "inspection_started_at", "inspection_finished_at"}

    def plain(obj: dict) -> dict:
        out = {k: v for k, v in obj.items() if k not in volatile}
        if isinstance(out.get("extra"), dict):
            out["extra"] = {k: v for k, v in out["extra"].items() if not k.startswith("nodeforge_")}
        return out

    def node(n: dict) -> dict:
        out = plain(n)
        out["chassis_uuid"] = chassis_desc.get(n.get("chassis_uuid"), n.get("chassis_uuid"))
        # Unset means the conductor's [conductor]automated_clean (True in the local cloud); nodeforge
        # always sets it from the node's cleaning policy (docs/inventory.md).
        if out.get("automated_clean") is None:
            out["automated_clean"] = True
        out["traits"] = sorted(n.get("traits") or [])
        return out

    def port(p: dict) -> dict:
        return {**plain(p), "node_uuid": node_names[p["node_uuid"]],
                "portgroup_uuid": group_names.get(p.get("portgroup_uuid"))}

    def group(g: dict) -> dict:
        return {**plain(g), "node_uuid": node_names[g["node_uuid"]]}

    return {"chassis": sorted((plain(c) for c in chassis), key=lambda c: c["description"]),
            "nodes": sorted((node(n) for n in nodes), key=lambda n: n["name"]),
            "portgroups": sorted((group(g) for g in groups), key=lambda g: g["name"]),
            "ports": sorted((port(p) for p in ports), key=lambda p: p["address"])}


def delete_all(conn, prefix: str, attempts: int = 30) -> None:
    """Nodes (Ironic deletes their ports and port groups), then chassis."""
    failed = {}
    for n in ironic_get(conn, "/nodes/detail"):
        if (n.get("name") or "").startswith(prefix):
            for _ in range(attempts):
                try:
                    conn.baremetal.delete_node(n["uuid"], ignore_missing=True)
                    failed.pop(n["name"], None)
                    break
                except Exception as exc:  # noqa: BLE001 - locked for a moment; reported if it stays
                    failed[n["name"]] = str(exc)
                    time.sleep(1)
    for c in ironic_get(conn, "/chassis/detail"):
        if (c.get("description") or "").startswith(prefix):
            try:
                conn.baremetal.delete_chassis(c["uuid"], ignore_missing=True)
            except Exception as exc:  # noqa: BLE001 - reported below
                failed[c["description"]] = str(exc)
    assert not failed, f"teardown could not delete: {failed}"


def nodeforge(*args):
    return subprocess.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM, *args],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))


@pytest.fixture(scope="module")
def bulk(devcloud, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bulk")
    prefix = f"bk{uuid.uuid4().hex[:5]}-"
    conn = devcloud.system()
    path = tmp / "resources.yaml"
    path.write_text(yaml.safe_dump(bulk_doc(prefix), sort_keys=False))
    yield {"conn": conn, "prefix": prefix, "path": path, "tmp": tmp}
    delete_all(conn, prefix)


@pytest.fixture(scope="module")
def by_ironicclient(bulk):
    """What python-ironicclient's ``baremetal create`` makes of the file (then deleted again)."""
    from ironicclient import client as ic_client
    from ironicclient.v1 import create_resources

    conn = bulk["conn"]
    client = ic_client.get_client("1", session=conn.session, endpoint=conn.baremetal.get_endpoint(),
                                  os_ironic_api_version="latest")
    create_resources.create_resources(client, [str(bulk["path"])])
    snap = snapshot(conn, bulk["prefix"])
    delete_all(conn, bulk["prefix"])
    assert snapshot(conn, bulk["prefix"]) == {"chassis": [], "nodes": [], "portgroups": [], "ports": []}
    return snap


@pytest.fixture(scope="module")
def by_nodeforge(bulk, by_ironicclient):
    # --jobs 1: one write at a time, as baremetal create does. With parallel writes the local
    # cloud's SQLite-backed Ironic answered 500 "database is locked" (not retried: a 500 is
    # not a transient answer to nodeforge) on a loaded machine.
    proc = nodeforge("baremetal", "enroll", str(bulk["path"]), "--no-lifecycle", "--allow-plaintext-secrets",
                     "--jobs", "1", "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr
    return json.loads(proc.stdout), snapshot(bulk["conn"], bulk["prefix"])


def test_ironicclient_made_every_object(by_ironicclient):
    snap = by_ironicclient
    assert len(snap["chassis"]) == 2 and len(snap["nodes"]) == 3
    assert len(snap["portgroups"]) == 3 and len(snap["ports"]) == 6
    in_groups = [p for p in snap["ports"] if p["portgroup_uuid"]]
    assert len(in_groups) == 3
    # Fields of a newer API than nodeforge's default are there to compare.
    assert {n.get("shard") for n in snap["nodes"]} == {"shard-a", None}
    assert {p.get("vendor") for p in snap["ports"]} == {"acme", None}
    assert {g.get("category") for g in snap["portgroups"]} == {"bond", None}


def test_nodeforge_makes_the_same_objects_as_baremetal_create(by_ironicclient, by_nodeforge):
    report, snap = by_nodeforge
    assert {n["action"] for n in report["nodes"]} == {"create"}
    for kind in ("chassis", "nodes", "portgroups", "ports"):
        assert len(snap[kind]) == len(by_ironicclient[kind]), kind
        for mine, theirs in zip(snap[kind], by_ironicclient[kind]):
            diff = {k: (mine.get(k), theirs.get(k)) for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)}
            assert not diff, f"{kind}: nodeforge vs baremetal create differ: {diff}"


def test_chassis_and_nodes_carry_the_scope(bulk, by_nodeforge):
    conn, prefix = bulk["conn"], bulk["prefix"]
    chassis = [c for c in ironic_get(conn, "/chassis/detail") if (c.get("description") or "").startswith(prefix)]
    nodes = [n for n in ironic_get(conn, "/nodes/detail") if (n.get("name") or "").startswith(prefix)]
    scopes = {c["extra"].get("nodeforge_scope") for c in chassis} | {n["extra"].get("nodeforge_scope") for n in nodes}
    assert len(scopes) == 1 and None not in scopes
    assert {n["driver_info"].get("ipmi_password") for n in nodes if n["driver"] == "ipmi"} == {"******"}


def test_rerun_makes_no_write(bulk, by_nodeforge):
    proc = nodeforge("baremetal", "enroll", str(bulk["path"]), "--no-lifecycle", "--allow-plaintext-secrets",
                     "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["writes"] == 0
    assert {n["action"] for n in data["nodes"]} == {"no-op"}
    assert snapshot(bulk["conn"], bulk["prefix"]) == by_nodeforge[1]


def test_drift_is_repaired_then_quiet(bulk, by_nodeforge):
    """A port moved out of its group, a port group's mode and a chassis' extra
    changed by hand: the next run puts them back, and the one after writes nothing."""
    conn, prefix = bulk["conn"], bulk["prefix"]
    snap = by_nodeforge[1]
    port = next(p for p in ironic_get(conn, "/ports/detail") if p["address"] == fake_mac(prefix, 101))
    conn.baremetal.patch(f"/ports/{port['uuid']}", json=[{"op": "remove", "path": "/portgroup_uuid"},
                                                        {"op": "replace", "path": "/physical_network",
                                                         "value": "physnet9"}], microversion=API)
    group = next(g for g in ironic_get(conn, "/portgroups/detail") if g["name"] == f"{prefix}a1-n1-bond0")
    conn.baremetal.patch(f"/portgroups/{group['uuid']}", json=[{"op": "replace", "path": "/mode",
                                                               "value": "balance-rr"}], microversion=API)
    chassis = next(c for c in ironic_get(conn, "/chassis/detail") if c["description"] == f"{prefix}rack-a1")
    conn.baremetal.patch(f"/chassis/{chassis['uuid']}", json=[{"op": "replace", "path": "/extra/rack",
                                                              "value": "zz"}], microversion=API)
    assert snapshot(conn, prefix) != snap
    proc = nodeforge("baremetal", "enroll", str(bulk["path"]), "--no-lifecycle", "--allow-plaintext-secrets",
                     "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["writes"] == 3       # one patch each: port, port group, chassis
    assert snapshot(conn, prefix) == snap
    proc = nodeforge("baremetal", "enroll", str(bulk["path"]), "--no-lifecycle", "--allow-plaintext-secrets",
                     "-o", "json")
    assert json.loads(proc.stdout)["writes"] == 0


# --------------------------------------------------------------------------- Bifrost, into the real Ironic

def bifrost_nodes(prefix: str) -> list[dict]:
    """(name, uuid, mac, ipmi address) of three Bifrost nodes, one per format."""
    return [{"name": f"{prefix}bf-{fmt}", "uuid": str(uuid.uuid4()), "mac": fake_mac(prefix, 500 + i),
             "address": f"192.0.2.{120 + i}"} for i, fmt in enumerate(("json", "yaml", "csv"))]


def test_bifrost_json_yaml_and_legacy_csv_enroll(devcloud, tmp_path, monkeypatch):
    conn = devcloud.system()
    prefix = f"bf{uuid.uuid4().hex[:5]}-"
    monkeypatch.setenv("NODEFORGE_SECRET_BF_PW", PASSWORD)
    js, ym, cv = bifrost_nodes(prefix)

    def host(n: dict, **more) -> dict:
        return {n["name"]: {"name": n["name"], "uuid": n["uuid"], "driver": "ipmi",
                            "driver_info": {"power": {"ipmi_address": n["address"], "ipmi_username": "admin",
                                                      "ipmi_password": "env:NODEFORGE_SECRET_BF_PW"}},
                            "nics": [{"mac": n["mac"]}],
                            "properties": {"cpu_arch": "x86_64", "ram": "8192", "disk_size": "100", "cpus": "4"},
                            "ipv4_address": "192.0.2.200", **more}}

    (tmp_path / "bifrost.json").write_text(json.dumps(host(js)))
    (tmp_path / "bifrost.yaml").write_text(yaml.safe_dump(host(ym, resource_class="baremetal-bf")))
    (tmp_path / "baremetal.csv").write_text(
        f"{cv['mac']},admin,env:NODEFORGE_SECRET_BF_PW,{cv['address']},4,8192,100,NA,NA,{cv['uuid']},{cv['name']},"
        "192.0.2.201,,,,,ipmi\n")
    try:
        for name, fmt in (("bifrost.json", []), ("bifrost.yaml", ["--format", "bifrost"]), ("baremetal.csv", [])):
            proc = nodeforge("baremetal", "enroll", str(tmp_path / name), *fmt, "--no-lifecycle", "-o", "json")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "ipv4_address" in proc.stderr          # named: read, not enrolled
            assert PASSWORD not in proc.stdout + proc.stderr
        nodes = {n["name"]: n for n in ironic_get(conn, "/nodes/detail") if (n.get("name") or "").startswith(prefix)}
        ports = {p["node_uuid"]: p["address"] for p in ironic_get(conn, "/ports/detail")}
        for n in (js, ym, cv):
            got = nodes[n["name"]]
            assert got["uuid"] == n["uuid"]                                  # Bifrost enrolls with its uuid
            assert got["driver"] == "ipmi" and got["power_interface"] == "ipmitool"
            assert got["driver_info"]["ipmi_address"] == n["address"]
            assert got["driver_info"]["ipmi_username"] == "admin"
            assert got["driver_info"]["ipmi_password"] == "******"
            assert got["properties"] == {"cpu_arch": "x86_64", "memory_mb": 8192, "local_gb": 100, "cpus": 4}
            assert ports[n["uuid"]] == n["mac"]
        assert nodes[ym["name"]]["resource_class"] == "baremetal-bf"
        # A re-run of each file writes nothing.
        for name, fmt in (("bifrost.json", []), ("bifrost.yaml", ["--format", "bifrost"]), ("baremetal.csv", [])):
            proc = nodeforge("baremetal", "enroll", str(tmp_path / name), *fmt, "--no-lifecycle", "-o", "json")
            assert proc.returncode == 0 and json.loads(proc.stdout)["writes"] == 0, proc.stdout + proc.stderr
    finally:
        delete_all(conn, prefix)


def test_bulk_nodes_go_through_the_lifecycle_to_available(devcloud, tmp_path):
    """Without --no-lifecycle: chassis, port groups and ports do not stand in
    the way of manage -> clean -> provide."""
    conn = devcloud.system()
    prefix = f"bl{uuid.uuid4().hex[:5]}-"
    mac = lambda i: fake_mac(prefix, i)  # noqa: E731
    doc = {"chassis": [{"description": f"{prefix}rack", "nodes": [
        {"name": f"{prefix}n{i}", "driver": "fake-hardware", "resource_class": "baremetal-fake",
         "portgroups": [{"name": f"{prefix}n{i}-bond0", "mode": "active-backup",
                         "ports": [{"address": mac(10 * i + 1), "pxe_enabled": True},
                                   {"address": mac(10 * i + 2), "pxe_enabled": False}]}]}
        for i in (1, 2)]}]}
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(doc))
    try:
        proc = nodeforge("baremetal", "enroll", str(path), "-o", "json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        assert {n["state"] for n in data["nodes"]} == {"available"}, data["nodes"]
        groups = {g["name"]: g["uuid"] for g in ironic_get(conn, "/portgroups/detail")}
        ports = {p["address"]: p["portgroup_uuid"] for p in ironic_get(conn, "/ports/detail")}
        assert ports[mac(11)] == ports[mac(12)] == groups[f"{prefix}n1-bond0"]
        proc = nodeforge("baremetal", "enroll", str(path), "-o", "json")
        assert proc.returncode == 0 and json.loads(proc.stdout)["writes"] == 0, proc.stdout + proc.stderr
    finally:
        delete_all(conn, prefix)
