"""The baseline audit against the local cloud's real Ironic and Redfish emulator.

Three storage-shaped Redfish systems are enrolled (with out-of-band inspection) into a resource
class whose profile declares a baseline the emulated machines meet. Then, behind Ironic's back
and directly on the emulator: a BIOS setting is changed on one, a volume removed on another and
an older BIOS firmware installed on the third. ``baremetal audit --inventory`` (the BMCs' own
view) finds each by node and item and exits 11; Ironic's cached view (without --inventory)
still shows the old BIOS setting, which is why the BMCs are read. A BMC the audit cannot log
into makes the run partial (exit 3), its password never printed. The emulator's state and the
nodes are put back at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from nodeforge.devcloud import bmc
from tests.ironic.devcloud_inventory import delete_nodes, redfish_node, write_inventory, write_secret

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

SYSTEM = "nodeforge-dev-system"
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def nodeforge(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM, *args],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


class Emulator:
    """Direct calls to the emulated BMC (what an operator at the BMC does, unseen by Ironic)."""

    def __init__(self, paths):
        creds = bmc.credentials(paths)
        self.auth = (creds.redfish.username, creds.redfish.password.reveal())
        self.ca = str(bmc.ca_bundle(paths))
        self.url = bmc.redfish_endpoint(bmc.redfish_port())

    def __call__(self, method: str, path: str, **kw):
        r = requests.request(method, self.url + path, auth=self.auth, verify=self.ca, timeout=10, **kw)
        assert r.ok, (method, path, r.status_code, r.text)
        return r


def _profiles(tmp: Path, rc: str) -> Path:
    shutil.copy(EXAMPLES / "bios-registry-qemu.yaml", tmp / "registry.yaml")
    sha = "0" * 64
    path = tmp / "profiles.yaml"
    path.write_text(f"""version: 1
profiles:
  - name: audited
    resource_class: {rc}
    match: {{vendor: Contoso}}
    baseline:
      bios_registry: registry.yaml
      bios: {{ProcTurboMode: Enabled, BootMode: Uefi}}
      raid:
        - {{size_gb: MAX, raid_level: "1", is_root_volume: true, controller: "1", physical_disks: [Disk1, Disk2]}}
        - {{size_gb: MAX, raid_level: "6", controller: "1", physical_disks: [Disk3, Disk4, Disk5, Disk6]}}
      firmware:
        - {{component: bios, version: "2.0.0", url: "https://fw.example/bios-2.0.0.bin", sha256: "{sha}"}}
        - {{component: bmc, version: "1.0.0", url: "https://fw.example/bmc-1.0.0.bin", sha256: "{sha}"}}
""")
    return path


@pytest.fixture(scope="module")
def fleet(devcloud, bmc_pool, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    prefix = f"au{os.getpid() % 10000}-"
    rc = f"{prefix}storage"
    systems = bmc_pool.redfish(3, shape="storage")
    nodes = [redfish_node(devcloud.paths, tmp, s.index, prefix=prefix, inspect=True, resource_class=rc)
             for s in systems]
    inv = write_inventory(tmp / "inventory.yaml", nodes, scope=prefix.rstrip("-"))
    emulator = Emulator(devcloud.paths)
    before = {s.uuid: emulator("GET", f"/redfish/v1/Systems/{s.uuid}").json()["BiosVersion"] for s in systems}
    try:
        proc = nodeforge("baremetal", "enroll", str(inv), "-o", "json")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        yield {"tmp": tmp, "inv": inv, "nodes": [n["name"] for n in nodes], "systems": systems,
               "profiles": _profiles(tmp, rc), "emulator": emulator, "scope": prefix.rstrip("-")}
    finally:
        delete_nodes(devcloud.system(), prefix)
        _restore(emulator, systems, before)


def _restore(emulator: Emulator, systems, bios_versions: dict) -> None:
    """The emulator as the fleet had it (a reused cloud's later tests see the same machines)."""
    for s in systems:
        base = f"/redfish/v1/Systems/{s.uuid}"
        emulator("PATCH", base + "/BIOS/Settings", json={"Attributes": {"ProcTurboMode": "Enabled"}})
        vols = emulator("GET", base + "/Storage/1/Volumes").json()["Members"]
        if len(vols) < 2:
            hdds = [{"@odata.id": f"{base}/Storage/1/Drives/{d.id}"} for d in s.disks if d.media_type == "HDD"]
            emulator("POST", base + "/Storage/1/Volumes", json={"Name": "data-raid6", "RAIDType": "RAID6",
                                                                "Links": {"Drives": hdds}})
        emulator("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                 json={"ImageURI": f"https://fw.example/bios-{bios_versions[s.uuid]}.bin",
                       "Targets": [f"/redfish/v1/UpdateService/FirmwareInventory/{s.uuid}-BIOS"]})


def _audit(fleet, *extra):
    proc = nodeforge("baremetal", "audit", "--profiles", str(fleet["profiles"]), "--scope", fleet["scope"], *extra)
    return proc


def _findings(doc) -> dict:
    return {n["name"]: (n["status"], n["source"], [i["item"] for i in n["items"]]) for n in doc["nodes"]}


def test_ironic_caches_the_emulator_s_registry_fields(fleet, devcloud):
    conn = devcloud.system()
    node = conn.baremetal.find_node(fleet["nodes"][0])
    data = conn.baremetal.get(f"/nodes/{node.id}/bios?detail=True", microversion="1.74").json()
    settings = {s["name"]: s for s in data["bios"]}
    assert (settings["NumCores"]["lower_bound"], settings["NumCores"]["upper_bound"]) == (1, 64)
    assert settings["ProcTurboMode"]["allowable_values"] == ["Enabled", "Disabled"]
    assert settings["SerialNumber"]["read_only"] is True


def test_the_audit_finds_what_changed_behind_ironic_s_back_by_node_and_item(fleet):
    a, b, c = fleet["nodes"]
    sa, sb, sc = fleet["systems"]
    emu = fleet["emulator"]
    first = _audit(fleet, "--inventory", str(fleet["inv"]), "-o", "json")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    doc = json.loads(first.stdout)
    assert _findings(doc) == {n: ("ok", "bmc", []) for n in fleet["nodes"]} and doc["outliers"] == []

    emu("PATCH", f"/redfish/v1/Systems/{sa.uuid}/BIOS/Settings", json={"Attributes": {"ProcTurboMode": "Disabled"}})
    emu("DELETE", f"/redfish/v1/Systems/{sb.uuid}/Storage/1/Volumes/2")
    emu("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        json={"ImageURI": "https://fw.example/bios-1.9.0.bin", "Targets": [f"/redfish/v1/Systems/{sc.uuid}"]})

    proc = _audit(fleet, "--inventory", str(fleet["inv"]), "-o", "json")
    assert proc.returncode == 11, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert _findings(doc) == {a: ("drift", "bmc", ["bios.ProcTurboMode"]), b: ("drift", "bmc", ["raid"]),
                              c: ("drift", "bmc", ["firmware.bios"])}
    items = {n["name"]: n["items"][0] for n in doc["nodes"]}
    assert (items[a]["current"], items[a]["wanted"]) == ("Disabled", "Enabled")
    assert [d["raid_level"] for d in items[b]["current"]] == ["1"]
    assert items[c]["current"] == "1.9.0" and doc["summary"]["drift"] == 3

    table = _audit(fleet, "--inventory", str(fleet["inv"]))
    assert table.returncode == 11
    row = next(line for line in table.stdout.splitlines() if a in line)
    assert "bios.ProcTurboMode" in row and "Disabled" in row

    # Ironic's own view still has the setting it read at enrollment: only the BMC shows the change.
    cached = _audit(fleet, "-o", "json")
    view = {n["name"]: n for n in json.loads(cached.stdout)["nodes"]}
    # Ironic never built these volumes (its raid_config is empty), so each node shows `raid` there, and
    # nothing else: the BIOS setting and the older BIOS firmware are not in its cache.
    assert cached.returncode == 11, cached.stdout[-3000:] + cached.stderr[-2000:]
    assert _findings(json.loads(cached.stdout)) == {n: ("drift", "ironic", ["raid"]) for n in fleet["nodes"]}
    assert view[a]["items"][0]["current"] == []


def test_a_bmc_the_audit_cannot_log_into_makes_the_run_partial(fleet, devcloud):
    wrong = "wrong-Audit-pw-4411"
    doc = yaml.safe_load(fleet["inv"].read_text())
    doc["nodes"][2]["bmc"]["password"] = write_secret(fleet["tmp"], "wrong.pw", wrong)
    inv = fleet["tmp"] / "wrong.yaml"
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _audit(fleet, "--inventory", str(inv), "-o", "json")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    statuses = {n["name"]: n["status"] for n in json.loads(proc.stdout)["nodes"]}
    assert statuses[fleet["nodes"][2]] == "unreadable"
    secret = bmc.credentials(devcloud.paths).redfish.password.reveal()
    assert wrong not in proc.stdout + proc.stderr and secret not in proc.stdout + proc.stderr


def test_baseline_apply_sets_the_bios_through_cleaning_and_a_second_run_writes_nothing(fleet, devcloud):
    a = fleet["nodes"][0]
    emu, sa = fleet["emulator"], fleet["systems"][0]
    emu("PATCH", f"/redfish/v1/Systems/{sa.uuid}/BIOS/Settings", json={"Attributes": {"ProcTurboMode": "Disabled"}})
    args = ["baremetal", "baseline", "apply", "--profiles", str(fleet["profiles"]), "--scope", fleet["scope"],
            "--inventory", str(fleet["inv"]), "--node", a, "-o", "json"]
    dry = nodeforge(*args, "--dry-run")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-2000:]
    [plan] = json.loads(dry.stdout)["nodes"]
    assert (plan["action"], [i["item"] for i in plan["items"]], plan["return_to"]) == \
        ("apply", ["bios.ProcTurboMode"], "available")
    proc = nodeforge(*args, "--timeout", "400")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    [done] = json.loads(proc.stdout)["nodes"]
    assert (done["ok"], done["stage"]) == (True, "done")
    node = devcloud.system().baremetal.find_node(a)
    assert node.provision_state == "available" and "nodeforge_baseline" not in (node.extra or {})
    bios = emu("GET", f"/redfish/v1/Systems/{sa.uuid}/BIOS").json()["Attributes"]
    assert bios["ProcTurboMode"] == "Enabled"
    again = nodeforge(*args)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    doc = json.loads(again.stdout)
    assert doc["writes"] == 0 and [n["action"] for n in doc["nodes"]] == ["no-op"]
