"""The emulated Redfish BMC serves what a hardware baseline is audited against
(nodeforge/devcloud/bmc/redfish_hardware.py): a BIOS attribute registry that
sushy (and so Ironic) finds and that BIOS writes are checked against, volumes
that POST creates and DELETE removes, and a firmware inventory whose
SimpleUpdate changes the BIOS or BMC version. Over HTTPS against the emulator
the devcloud tests start (tests/devcloud/test_bmc.py's launcher)."""

from __future__ import annotations

import pytest
import requests

from nodeforge.devcloud.bmc import fleet
from tests.devcloud.test_bmc import _bmc_env, _sushy

pytestmark = pytest.mark.devcloud


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with _bmc_env(tmp_path_factory.mktemp("devcloud-bmc-hw")) as e:
        yield e


class Http:
    def __init__(self, env):
        self.env, self.s = env, requests.Session()
        self.s.auth = env.auth()

    def __call__(self, method: str, path: str, **kw):
        # verify= per request: a Session's verify is overridden by REQUESTS_CA_BUNDLE.
        return self.s.request(method, self.env.url + path, verify=self.env.ca, timeout=10, **kw)


def _system(index: int) -> str:
    return f"/redfish/v1/Systems/{fleet.redfish_system(index).uuid}"


def test_the_bios_registry_is_found_through_sushy_as_ironic_reads_it(env):
    system = _sushy(env).get_system(_system(1))
    registry = system.bios.get_attribute_registry()
    assert registry is not None and registry.identity == "BiosAttributeRegistryP89.v1_0_0"
    attrs = {a.name: a for a in registry.registry_entries.attributes}
    # Every setting the BIOS has is described (Ironic copies the fields of each one it caches).
    assert set(system.bios.attributes) <= set(attrs)
    cores = attrs["NumCores"]
    assert (cores.attribute_type.value if hasattr(cores.attribute_type, "value") else cores.attribute_type) \
        == "Integer"
    assert (cores.lower_bound, cores.upper_bound, cores.read_only) == (1, 64, False)
    assert [v["ValueName"] for v in attrs["ProcTurboMode"].allowable_values] == ["Enabled", "Disabled"]
    assert attrs["SerialNumber"].read_only is True


def test_bios_writes_are_checked_against_the_registry(env):
    http = Http(env)
    path = _system(2) + "/BIOS"
    before = http("GET", path).json()["Attributes"]
    for bad in ({"ProcTurboMode": "Maybe"}, {"SerialNumber": "X1"}, {"TurboBoostX": "Enabled"},
                {"NumCores": 500}, {"ProcTurboMode": "Disabled", "QuietBoot": "perhaps"}):
        r = http("PATCH", path + "/Settings", json={"Attributes": bad})
        assert r.status_code == 400, (bad, r.status_code, r.text)
    assert http("GET", path).json()["Attributes"] == before          # nothing of a refused write applied
    assert http("PATCH", path + "/Settings", json={"Attributes": {"ProcTurboMode": "Disabled",
                                                                  "NumCores": 2}}).status_code == 204
    after = http("GET", path).json()["Attributes"]
    assert (after["ProcTurboMode"], str(after["NumCores"])) == ("Disabled", "2")
    # Another system is untouched.
    assert http("GET", _system(3) + "/BIOS").json()["Attributes"]["ProcTurboMode"] == before["ProcTurboMode"]


def test_volumes_are_created_and_deleted_for_real(env):
    http = Http(env)
    spec = fleet.redfish_system(8)                     # storage shape: SSD mirror + RAID-6 over 4 HDDs
    base = _system(8) + "/Storage/1/Volumes"
    members = [m["@odata.id"] for m in http("GET", base).json()["Members"]]
    assert [http("GET", m).json()["RAIDType"] for m in members] == ["RAID1", "RAID6"]
    assert http("DELETE", base + "/2").status_code == 204
    assert http("GET", base).json()["Members@odata.count"] == 1
    assert http("GET", base + "/2").status_code == 404
    assert http("DELETE", base + "/2").status_code == 404
    hdds = [d.id for d in spec.disks if d.media_type == "HDD"]
    drives = [{"@odata.id": f"{_system(8)}/Storage/1/Drives/{d}"} for d in hdds]
    # Refused: too few drives for the level, a drive the storage does not have, more than the drives hold.
    for body in ({"RAIDType": "RAID5", "Links": {"Drives": drives[:2]}},
                 {"RAIDType": "RAID1", "Links": {"Drives": [{"@odata.id": "/x/Drives/nope"}, drives[0]]}},
                 {"RAIDType": "RAID6", "CapacityBytes": 10 ** 15, "Links": {"Drives": drives}},
                 {"RAIDType": "RAID7"}):
        assert http("POST", base, json=body).status_code == 400, body
    r = http("POST", base, json={"Name": "data", "RAIDType": "RAID6", "Links": {"Drives": drives}})
    assert r.status_code == 201, r.text
    created = http("GET", r.headers["Location"]).json()
    assert created["RAIDType"] == "RAID6" and created["CapacityBytes"] == 2 * spec.disks[-1].capacity_bytes
    # sushy (what Ironic's redfish RAID reads) sees the new volume with its level.
    storage = _sushy(env).get_system(_system(8)).storage.get_members()[0]
    levels = sorted(str(getattr(v.raid_type, "value", v.raid_type)) for v in storage.volumes.get_members())
    assert levels == ["RAID1", "RAID6"]


def test_firmware_inventory_and_simple_update_change_the_versions(env):
    http = Http(env)
    uuid = fleet.redfish_system(5).uuid
    inventory = http("GET", "/redfish/v1/UpdateService/FirmwareInventory").json()
    ids = [m["@odata.id"].rsplit("/", 1)[1] for m in inventory["Members"]]
    assert {f"{uuid}-BIOS", f"{uuid}-BMC"} <= set(ids)
    item = "/redfish/v1/UpdateService/FirmwareInventory/" + uuid
    assert http("GET", item + "-BIOS").json()["Version"] == fleet.redfish_system(5).bios_version
    assert http("GET", item + "-BMC").json()["Version"] == "1.0.0"
    action = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
    assert http("POST", action, json={"ImageURI": "http://fw.example/bmc-1.1.0.bin"}).status_code == 400
    assert http("POST", action, json={"ImageURI": "file:///bmc-1.1.0.bin",
                                      "Targets": [f"/redfish/v1/Managers/{uuid}"]}).status_code == 400
    r = http("POST", action, json={"ImageURI": "https://fw.example/bmc-1.1.0.bin",
                                   "Targets": [f"/redfish/v1/Managers/{uuid}"]})
    assert r.status_code == 202 and r.headers["Location"].startswith("/redfish/v1/TaskService/Tasks/")
    root = _sushy(env)
    assert root.get_manager(f"/redfish/v1/Managers/{uuid}").firmware_version == "1.1.0"
    # An older BIOS, through its inventory item: the System's BiosVersion follows.
    r = http("POST", action, json={"ImageURI": "https://fw.example/bios-1.9.0.bin", "Targets": [item + "-BIOS"]})
    assert r.status_code == 202
    assert root.get_system(_system(5)).bios_version == "1.9.0"
    assert http("GET", item + "-BIOS").json()["Version"] == "1.9.0"
    # Other systems keep theirs.
    assert root.get_manager(f"/redfish/v1/Managers/{fleet.redfish_system(6).uuid}").firmware_version == "1.0.0"
