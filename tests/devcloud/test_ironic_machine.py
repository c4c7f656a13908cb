"""Ironic drives the local cloud's machine-backed Redfish system (``rf-vm-01``) under the
``redfish`` hardware type with the ``redfish-virtual-media`` boot interface: verification reads
its real power state, a one-time boot device reaches the emulator as a ``Once`` override, and
power on / off start and stop its QEMU machine."""

from __future__ import annotations

import time

import pytest
import requests

from nodeforge.devcloud import bmc
from tests.devcloud.test_bmc_machine import _qemu_pids, _wait
from tests.devcloud import test_ironic
from tests.devcloud.test_ironic import PREFIX, move, redfish_power

conn, nodes = test_ironic.conn, test_ironic.nodes     # its fixtures: system-scoped admin, nodes deleted after

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]   # a UEFI power-on under TCG, Ironic's power sync


def _boot_override(paths, system) -> tuple[str, str]:
    creds = bmc.credentials(paths).redfish
    resp = requests.get(bmc.redfish_system_url(system), auth=(creds.username, creds.password.reveal()),
                        verify=str(bmc.ca_bundle(paths)), timeout=10, headers={"Connection": "close"})
    resp.raise_for_status()
    boot = resp.json()["Boot"]
    return boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]


def test_ironic_powers_the_machine_on_and_off(devcloud, conn, nodes):
    [system] = bmc.redfish_machines()
    system_id = f"/redfish/v1/Systems/{system.uuid}"
    users = [n.name for n in conn.baremetal.nodes(details=True)
             if (n.driver_info or {}).get("redfish_system_id") == system_id and not n.name.startswith(PREFIX)]
    assert not users, f"{system.name} is already enrolled as {users} in this cloud"
    directory = bmc.machine_dir(devcloud.paths, system)
    node = nodes(name="machine", driver="redfish", boot_interface="redfish-virtual-media",
                 driver_info=bmc.redfish_driver_info(devcloud.paths, system))
    node = move(conn, node, "manage")
    assert node.provision_state == "manageable", node.last_error
    assert node.power_state == "power off" == redfish_power(devcloud.paths, system)
    assert _qemu_pids(directory) == []

    conn.baremetal.set_node_boot_device(node, "cdrom", persistent=False)
    assert _boot_override(devcloud.paths, system) == ("Cd", "Once")

    t0 = time.monotonic()
    conn.baremetal.set_node_power_state(node, "power on", wait=True, timeout=120)
    assert redfish_power(devcloud.paths, system) == "power on"
    [pid] = _qemu_pids(directory)
    print(f"Ironic power on: {time.monotonic() - t0:.1f} s (QEMU pid {pid})")
    # The power-on used the override up; the firmware runs on the serial console.
    assert _boot_override(devcloud.paths, system)[1] == "Disabled"
    assert "boot order Cd, Hdd, Pxe" in (directory / "qemu.log").read_text()
    _wait(lambda: (directory / "console.log").exists() and (directory / "console.log").stat().st_size > 0, 60,
          "OVMF's output on the serial console")

    conn.baremetal.set_node_power_state(node, "power off", wait=True, timeout=120)
    assert redfish_power(devcloud.paths, system) == "power off"
    assert _qemu_pids(directory) == []
    assert conn.baremetal.get_node(node.id).power_state == "power off"
