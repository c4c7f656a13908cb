"""End-to-end against the local cloud's real Ironic and BMC emulators.

One mixed batch (Redfish + IPMI from the emulators, fake-hardware nodes, a
wrong password, an unreachable BMC, a MAC Ironic already has) goes through
the real CLI; then a re-run must make zero writes. Every node it creates is
deleted at the end. The secret-leak test runs every command and failure path
with -vv and JSON output and scans everything printed for the passwords.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from nodeforge.devcloud import bmc
from tests.ironic.devcloud_inventory import fake_mac, fake_node, ipmi_node, redfish_node, write_inventory

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

SYSTEM = "nodeforge-dev-system"
WRONG_PASSWORD = "wrong-Pw-" + uuid.uuid4().hex[:8]


def nodeforge(*args, env=None, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM, *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return proc


@pytest.fixture(scope="module")
def batch(devcloud, bmc_pool, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("enroll")
    prefix = f"t{uuid.uuid4().hex[:4]}-"
    paths = devcloud.paths
    conn = devcloud.system()
    # A node Ironic already has, holding a MAC the inventory also lists.
    owner = conn.baremetal.create_node(name=f"{prefix}mac-owner", driver="fake-hardware")
    dup_mac = fake_mac(prefix, 99999)
    conn.baremetal.create_port(node_uuid=owner.id, address=dup_mac)
    rf_a, rf_b, rf_c = bmc_pool.redfish(3)
    ipmi_ok, ipmi_bad = bmc_pool.ipmi(2)
    nodes = [redfish_node(paths, tmp, rf_a.index, prefix=prefix), redfish_node(paths, tmp, rf_b.index, prefix=prefix),
             ipmi_node(paths, tmp, ipmi_ok, prefix=prefix),
             ipmi_node(paths, tmp, ipmi_bad, prefix=prefix, password=WRONG_PASSWORD),
             {**redfish_node(paths, tmp, rf_c.index, prefix=prefix), "name": f"{prefix}unreachable",
              "bmc": {**redfish_node(paths, tmp, rf_c.index, prefix=prefix)["bmc"],
                      "address": "redfish+https://127.0.0.1:1/redfish/v1/Systems/x"}},
             {**fake_node(9000, prefix=prefix), "name": f"{prefix}dup-mac", "macs": [dup_mac]}]
    nodes += [fake_node(i, prefix=prefix) for i in range(12)]
    # An explicit scope: the tests re-run subsets of the batch from other files (good.yaml, rotate.yaml).
    inv = write_inventory(tmp / "inventory.yaml", nodes, scope=prefix.rstrip("-"))
    yield {"inv": inv, "tmp": tmp, "prefix": prefix, "conn": conn, "names": [n["name"] for n in nodes],
           "rf": nodes[0]["name"], "rf_system": rf_a, "ipmi_ok": nodes[2]["name"], "ipmi_bad": nodes[3]["name"],
           "dup_mac": dup_mac, "failing": (nodes[3]["name"], f"{prefix}unreachable", f"{prefix}dup-mac"),
           "secrets": [bmc.credentials(paths).redfish.password.reveal(),
                       *(e.password.reveal() for e in bmc.ipmi_endpoints(paths)), WRONG_PASSWORD]}
    errors = []
    for n in list(conn.baremetal.nodes(details=True)):
        if n.name and n.name.startswith(prefix):
            try:
                if n.is_maintenance:
                    conn.baremetal.unset_node_maintenance(n.id)
                conn.baremetal.delete_node(n.id, ignore_missing=True)
            except Exception as exc:  # noqa: BLE001 - collected, reported below
                errors.append(f"{n.name}: {exc}")
    assert not errors, f"teardown could not delete: {errors}"


@pytest.fixture(scope="module")
def first_run(batch):
    report = batch["tmp"] / "report.xml"
    proc = nodeforge("baremetal", "enroll", str(batch["inv"]), "-o", "json", "--report", str(report),
                     "--concurrency", "6")
    return proc, json.loads(proc.stdout), report


def test_mixed_batch_reaches_available_and_failures_are_per_node(batch, first_run):
    proc, data, report = first_run
    p = batch["prefix"]
    by = {n["name"]: n for n in data["nodes"]}
    assert proc.returncode == 3, proc.stderr  # ExitCode.PARTIAL
    good = [n for n in batch["names"] if n not in batch["failing"]]
    for name in good:
        assert by[name]["ok"] and by[name]["state"] == "available", by[name]
    assert by[batch["ipmi_bad"]]["error_type"] == "power-credentials"
    assert by[f"{p}unreachable"]["error_type"] == "power-credentials"
    assert by[f"{p}dup-mac"]["error_type"] == "conflict" and batch["dup_mac"] in by[f"{p}dup-mac"]["error"]
    assert by[f"{p}dup-mac"]["uuid"] is None  # never created
    assert by[batch["ipmi_bad"]]["hint"]
    # A failed node's row carries its history from Ironic (API 1.78), its error there; a node created
    # and taken through cleanly has none read (Ironic records errors: it would be an empty list).
    assert all(isinstance(by[n]["history"], list) for n in batch["failing"] if by[n]["uuid"])
    assert any(e["severity"] == "ERROR" for e in by[batch["ipmi_bad"]]["history"]), by[batch["ipmi_bad"]]
    assert any(by[n]["history"] is None for n in good if by[n]["action"] == "create")
    # Redfish node: ports for its MACs, fingerprint kept, no password readable.
    node = batch["conn"].baremetal.get_node(by[batch["rf"]]["uuid"])
    assert node.extra["nodeforge_credential_fp"].startswith("scrypt1:")
    assert node.driver_info["redfish_password"] == "******"
    ports = {x.address for x in batch["conn"].baremetal.ports(node_uuid=node.id)}
    assert ports == set(batch["rf_system"].macs)
    xml = report.read_text()
    assert xml.count("<testcase") == len(batch["names"]) and xml.count("<failure") == 3


def test_second_run_makes_zero_writes(batch, first_run):
    proc = nodeforge("baremetal", "enroll", str(batch["inv"]), "-o", "json")
    data = json.loads(proc.stdout)
    # The whole batch again: the good nodes are left alone, the failed ones fail again.
    by = {n["name"]: n for n in data["nodes"]}
    assert proc.returncode == 3, proc.stderr
    assert set(by) == set(batch["names"])
    for name in batch["names"]:
        if name in batch["failing"]:
            assert not by[name]["ok"], by[name]
        else:
            assert by[name]["ok"] and by[name]["action"] == "no-op" and by[name]["state"] == "available", by[name]
    # The failed nodes are retried (manage again) - count only writes for the good ones:
    # re-run the good subset alone, which must be a pure no-op.
    doc = yaml.safe_load(batch["inv"].read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] not in batch["failing"]]
    good = batch["tmp"] / "good.yaml"
    good.write_text(yaml.safe_dump(doc))
    proc = nodeforge("baremetal", "enroll", str(good), "-o", "json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert data["writes"] == 0
    assert {n["action"] for n in data["nodes"]} == {"no-op"}


def test_dry_run_shows_rotation_masked_and_writes_nothing(batch, first_run):
    doc = yaml.safe_load(batch["inv"].read_text())
    node = next(n for n in doc["nodes"] if n["name"] == batch["rf"])
    rotated = batch["tmp"] / "rotated.pw"
    rotated.write_text("Rotated-" + uuid.uuid4().hex)
    node["bmc"]["password"] = f"file:{rotated}"
    node["resource_class"] = "baremetal-rf-new"
    doc["nodes"] = [node]
    f = batch["tmp"] / "rotate.yaml"
    f.write_text(yaml.safe_dump(doc))
    before = batch["conn"].baremetal.get_node(batch["rf"])
    proc = nodeforge("baremetal", "enroll", str(f), "--dry-run", "-o", "json")
    plan = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    [n] = plan["nodes"]
    fields = {c["field"]: c for c in n["changes"]}
    assert n["action"] == "update" and n["matched_by"] == "name"
    assert fields["resource_class"]["desired"] == "baremetal-rf-new"
    assert fields["driver_info.redfish_password"]["desired"] == "(rotated)"
    assert rotated.read_text() not in proc.stdout + proc.stderr
    after = batch["conn"].baremetal.get_node(batch["rf"])
    assert after.resource_class == before.resource_class and after.extra == before.extra


def test_secret_leak_over_every_command_and_failure_path(batch, first_run, tmp_path):
    secrets = batch["secrets"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"version": 1, "nodes": [
        {"name": "leak-1", "bmc": {"address": "ipmi://127.0.0.1:6231", "username": "x", "password": WRONG_PASSWORD}},
        {"name": "leak 2", "bmc": {"address": "redfish://127.0.0.1:8000", "username": "x",
                                   "password": secrets[0]}, "macs": ["zz"]}]}))
    runs = [
        # The two pre-flights first: most of their time is waiting out the
        # unreachable BMC's retries, so the other runs go on beside them.
        ("baremetal", "preflight", str(batch["inv"]), "-o", "json", "-vv"),  # wrong creds, unreachable
        ("baremetal", "preflight", str(batch["inv"]), "-vv"),
        ("baremetal", "validate", str(batch["inv"]), "-vv"),
        ("baremetal", "validate", str(batch["inv"]), "-o", "json", "-vv"),
        ("baremetal", "validate", str(plain), "-vv"),                  # plaintext refused + errors
        ("baremetal", "validate", str(plain), "-o", "json"),
        ("baremetal", "enroll", str(batch["inv"]), "--dry-run", "-vv"),
        ("baremetal", "enroll", str(batch["inv"]), "--dry-run", "-o", "json", "--log-format", "json", "-vv"),
        ("baremetal", "enroll", str(batch["inv"]), "-o", "json", "-vv", "--no-lifecycle"),
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda args: nodeforge(*args), runs))
    for args, proc in zip(runs, procs):
        text = proc.stdout + proc.stderr
        assert proc.stdout or proc.stderr, args
        for s in secrets:
            assert s not in text, f"password leaked by {args}"
    xml = (batch["tmp"] / "report.xml").read_text()
    assert not any(s in xml for s in secrets)


def test_preflight_classifies_failures(batch, first_run):
    proc = nodeforge("baremetal", "preflight", str(batch["inv"]), "-o", "json")
    data = json.loads(proc.stdout)
    p = batch["prefix"]
    by = {c["name"]: c for c in data["checks"]}
    assert proc.returncode == 3
    assert by[batch["rf"]]["ok"] and by[batch["rf"]]["facts"]["serial_number"]
    assert set(by[batch["rf"]]["facts"]["macs"]) == set(batch["rf_system"].macs)
    assert by[batch["ipmi_ok"]]["ok"] and by[batch["ipmi_ok"]]["power_state"] in ("on", "off")
    assert by[batch["ipmi_bad"]]["failure"] == "auth"
    assert by[f"{p}unreachable"]["failure"] == "network"
