"""Ironic (all-in-one, Keystone auth, secure RBAC) driving the local cloud's
emulated BMCs for real: ``redfish`` and ``ipmi`` nodes verified to
``manageable`` (power state read from the BMC), Redfish out-of-band
inspection, a wrong BMC password reported without leaking it, and a
``fake-hardware`` node through automated cleaning to ``available``.

Every node is named ``nftest-ironic-...`` and deleted after its test. Each
test claims a BMC (Redfish system / IPMI port) no other Ironic node uses: a
BMC or MAC can't sit on two nodes. Redfish calls cost ~0.8 s of Ironic CPU
each (PBKDF2 of the password), so Redfish nodes are kept to three.
"""

from __future__ import annotations

import secrets
import time

import pytest
import requests
from openstack import exceptions as sdk_exc

from nodeforge.devcloud import bmc

pytestmark = pytest.mark.devcloud

PREFIX = "nftest-ironic-"
API_VERSION = {"X-OpenStack-Ironic-API-Version": "latest"}
TRANSIENT = {"verifying", "inspecting", "cleaning", "clean wait", "inspect wait", "deleting"}
# Systems and BMCs these tests may claim (the tail of the fleet, away from
# what demos and other tests pick first).
# local_gb Ironic's Redfish inspection reports per fleet shape (docs/devcloud-bmc.md).
LOCAL_GB = {"compute": 446, "storage": 893}


@pytest.fixture(scope="module")
def conn(devcloud):
    """System-scoped admin: Ironic's secure RBAC wants system scope for
    nodes without an owner."""
    conn = devcloud.system()
    # Nodes left behind by an interrupted run of this module hold BMCs and MACs.
    for node in conn.baremetal.nodes(details=True):
        if node.name and node.name.startswith(PREFIX):
            _delete_node(conn, node.id)
    return conn


@pytest.fixture
def nodes(conn):
    """Create nodes through this; they are deleted after the test."""
    created = []

    def create(**attrs):
        attrs["name"] = f"{PREFIX}{attrs.pop('name')}-{secrets.token_hex(4)}"
        node = conn.baremetal.create_node(**attrs)
        created.append(node.id)
        return node

    yield create
    for node_id in created:
        _delete_node(conn, node_id)
        with pytest.raises(sdk_exc.NotFoundException):
            conn.baremetal.get_node(node_id)


def _delete_node(conn, node_id, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            node = conn.baremetal.get_node(node_id)
        except sdk_exc.NotFoundException:
            return
        if node.provision_state not in TRANSIENT and not node.reservation:
            try:
                conn.baremetal.delete_node(node_id)
                return
            except sdk_exc.ConflictException:
                pass  # locked by the conductor for a moment
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node_id} stuck in {node.provision_state}, not deleted")
        time.sleep(1)


def wait_settled(conn, node, timeout=180.0):
    """Poll until the node leaves its transient state (success or failure)."""
    deadline = time.monotonic() + timeout
    while True:
        node = conn.baremetal.get_node(node.id)
        if node.target_provision_state is None and node.provision_state not in TRANSIENT:
            return node
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node.id} still {node.provision_state} -> "
                                 f"{node.target_provision_state} after {timeout} s: {node.last_error}")
        time.sleep(1)


def move(conn, node, action, timeout=180.0):
    conn.baremetal.set_node_provision_state(node, action)
    return wait_settled(conn, node, timeout)


def claim_redfish(pool, shape=None):
    return pool.redfish(1, shape=shape)[0]


def claim_ipmi(pool):
    return pool.ipmi(1)[0]


def redfish_power(paths, system) -> str:
    """The emulator's own view of the system's power, as Ironic spells it."""
    creds = bmc.credentials(paths).redfish
    resp = requests.get(bmc.redfish_system_url(system), auth=(creds.username, creds.password.reveal()),
                        verify=str(bmc.ca_bundle(paths)), timeout=10, headers={"Connection": "close"})
    resp.raise_for_status()
    return {"On": "power on", "Off": "power off"}[resp.json()["PowerState"]]


def ipmi_power(endpoint) -> str:
    result = bmc.ipmitool(endpoint, "power", "status")
    assert result.returncode == 0, result.stderr
    return {"Chassis Power is on": "power on", "Chassis Power is off": "power off"}[result.stdout.strip()]


# -- enroll -> manageable, power read for real ------------------------------------


@pytest.mark.slow  # 9 s idle, 25 s seen on a busy machine (PBKDF2 per Redfish call)
def test_redfish_node_enroll_to_manageable(conn, devcloud, nodes, bmc_pool):
    system = claim_redfish(bmc_pool)
    node = nodes(name="redfish", driver="redfish", driver_info=bmc.redfish_driver_info(devcloud.paths, system))
    assert node.provision_state == "enroll"
    assert node.power_state is None
    assert node.driver_info["redfish_password"] == "******"

    node = move(conn, node, "manage", timeout=120)
    assert node.provision_state == "manageable", node.last_error
    assert node.last_error is None
    # Verification read the power state from the emulated system.
    assert node.power_state == redfish_power(devcloud.paths, system)
    assert node.management_interface == "redfish" and node.power_interface == "redfish"


def test_ipmi_node_enroll_to_manageable_and_power_control(conn, devcloud, nodes, bmc_pool):
    endpoint = claim_ipmi(bmc_pool)
    node = nodes(name="ipmi", driver="ipmi", driver_info=endpoint.driver_info())
    assert node.provision_state == "enroll"
    assert node.driver_info["ipmi_password"] == "******"

    node = move(conn, node, "manage", timeout=120)
    assert node.provision_state == "manageable", node.last_error
    assert node.last_error is None
    before = ipmi_power(endpoint)
    assert node.power_state == before

    # Power goes both ways through Ironic and lands on the BMC.
    flipped = "power off" if before == "power on" else "power on"
    for state in (flipped, before):
        conn.baremetal.set_node_power_state(node, state, wait=True, timeout=90)
        assert conn.baremetal.get_node(node.id).power_state == state
        assert ipmi_power(endpoint) == state


# -- out-of-band inspection ------------------------------------------------------


def test_redfish_out_of_band_inspection(conn, devcloud, nodes, bmc_pool):
    system = claim_redfish(bmc_pool, shape="storage")
    node = nodes(name="inspect", driver="redfish", inspect_interface="redfish",
                 driver_info=bmc.redfish_driver_info(devcloud.paths, system))
    assert node.inspect_interface == "redfish"
    node = move(conn, node, "manage", timeout=120)
    assert node.provision_state == "manageable", node.last_error
    assert not list(conn.baremetal.ports(node_id=node.id))

    node = move(conn, node, "inspect", timeout=180)
    assert node.provision_state == "manageable", node.last_error
    assert node.last_error is None
    raw = conn.baremetal.get(f"/nodes/{node.id}", headers=API_VERSION).json()
    assert raw["inspection_finished_at"]     # (not an openstacksdk Node attribute)
    props = node.properties
    assert int(props["memory_mb"]) == system.memory_gib * 1024
    assert props["cpu_arch"] == "x86_64"
    assert int(props["local_gb"]) == LOCAL_GB[system.shape]
    assert "boot_mode:uefi" in props.get("capabilities", "")

    ports = list(conn.baremetal.ports(node_id=node.id, details=True))
    assert sorted(p.address.lower() for p in ports) == sorted(system.macs)
    assert {p.node_id for p in ports} == {node.id}


# -- a wrong BMC password ----------------------------------------------------------


def _ironic_api_text(conn, node_id) -> str:
    """Everything Ironic's API says about a node, as raw text."""
    texts = []
    for path in (f"/nodes/{node_id}", f"/nodes/{node_id}/states", f"/nodes/{node_id}/validate",
                 f"/nodes/{node_id}/history", f"/nodes/{node_id}/ports?detail=True",
                 "/nodes?detail=True"):
        # (Not /management/*: those call the BMC, i.e. another failed login.)
        resp = conn.baremetal.get(path, headers=API_VERSION, raise_exc=False)
        texts.append(resp.text)
    for event in conn.baremetal.get(f"/nodes/{node_id}/history", headers=API_VERSION).json()["history"]:
        texts.append(conn.baremetal.get(f"/nodes/{node_id}/history/{event['uuid']}", headers=API_VERSION).text)
    return "\n".join(texts)


@pytest.mark.parametrize("driver", ["ipmi", "redfish"])
def test_wrong_bmc_password_back_to_enroll_without_leaking_it(conn, devcloud, nodes, bmc_pool, driver):
    password = f"nf-wrong-{secrets.token_hex(5)}"   # 19 chars: within IPMI 2.0's 20
    if driver == "ipmi":
        endpoint = claim_ipmi(bmc_pool)
        info = endpoint.driver_info() | {"ipmi_password": password}
        real = endpoint.password.reveal()
    else:
        system = claim_redfish(bmc_pool)
        info = bmc.redfish_driver_info(devcloud.paths, system) | {"redfish_password": password}
        real = bmc.credentials(devcloud.paths).redfish.password.reveal()
    assert password != real
    log = devcloud.paths.log / "ironic-app.log"
    log_offset = log.stat().st_size if log.exists() else 0

    node = nodes(name=f"badpw-{driver}", driver=driver, driver_info=info)
    # [ipmi] command_retry_timeout bounds how long IPMI retries (6 s here).
    node = move(conn, node, "manage", timeout=120)
    assert node.provision_state == "enroll"
    assert node.last_error
    assert "power state" in node.last_error
    assert node.power_state is None

    text = _ironic_api_text(conn, node.id)
    assert node.last_error in text          # the failure is visible ...
    assert f'"{driver}_password": "******"' in text   # (driver_info was in what we searched)
    assert password not in text             # ... the password is not
    assert real not in text
    assert log.is_file(), f"Ironic's log {log} is missing: the no-password-in-log check cannot run"
    with open(log, "rb") as fh:
        fh.seek(log_offset)
        logged = fh.read().decode(errors="replace")
    assert node.id in logged
    assert password not in logged and real not in logged


# -- fake-hardware through automated cleaning -------------------------------------


def test_fake_hardware_node_cleaned_to_available(conn, nodes):
    node = nodes(name="fake", driver="fake-hardware")
    assert node.provision_state == "enroll"
    node = move(conn, node, "manage", timeout=60)
    assert node.provision_state == "manageable", node.last_error
    node = move(conn, node, "provide", timeout=120)
    assert node.provision_state == "available", node.last_error
    assert node.last_error is None
    assert node.clean_step == {}

    events = [e["event"] for e in
              conn.baremetal.get(f"/nodes/{node.id}/history", headers=API_VERSION).json()["history"]]
    assert any(e.startswith("Starting automated cleaning") for e in events), events
    assert any("Automated Cleaning completed successfully" in e for e in events), events
