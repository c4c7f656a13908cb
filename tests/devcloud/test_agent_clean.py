"""Ironic's agent on a machine of the local cloud: nodeforge's agent ramdisk booted by Ironic
through Redfish virtual media on rf-vm-01, heartbeating to Ironic through the guest's forward to
its API, reached back on the machine's agent port, and running a cleaning step on the machine's
disk; the node ends ``manageable`` and no QEMU is left."""

from __future__ import annotations

import os
import time

import pytest

from nodeforge.devcloud import bmc, openstack
from nodeforge.imagebuild import ramdisk

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]


def _wait(fn, timeout: float, what: str, step: float = 3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_the_agent_cleans_the_machine(devcloud, tmp_path):
    from tests.devcloud.test_ironic import PREFIX, _delete_node, wait_settled
    from tests.devcloud.test_ironic_vmedia import _qemu_pids

    conn = devcloud.system()
    [system] = bmc.redfish_machines()
    record = ramdisk.build(ramdisk.plan(), log=print)
    cache = ramdisk.plan().cache
    files = openstack.ironic_files_dir(devcloud.paths)
    for name in (ramdisk.KERNEL, ramdisk.INITRAMFS):
        if not (files / name).exists():
            os.link(cache / name, files / name)
    directory = bmc.machine_dir(devcloud.paths, system)
    append = (f"{openstack.IRONIC_KERNEL_APPEND} ipa-advertise-host=127.0.0.1 "
              f"ipa-advertise-port={system.machine.agent_port}")
    info = dict(bmc.redfish_driver_info(devcloud.paths, system),
                deploy_kernel=(files / ramdisk.KERNEL).as_uri(), deploy_ramdisk=(files / ramdisk.INITRAMFS).as_uri(),
                kernel_append_params=append)
    node = conn.baremetal.create_node(name=f"{PREFIX}agent-{os.getpid()}", driver="redfish",
                                      boot_interface="redfish-virtual-media", deploy_interface="direct",
                                      driver_info=info)
    for mac in system.macs:              # the agent looks its node up by the MACs it sees
        conn.baremetal.create_port(node_uuid=node.id, address=mac)
    try:
        conn.baremetal.set_node_provision_state(node, "manage")
        node = wait_settled(conn, node, 180)
        assert node.provision_state == "manageable", node.last_error
        t0 = time.monotonic()
        conn.baremetal.set_node_provision_state(
            node, "clean", clean_steps=[{"interface": "deploy", "step": "erase_devices_metadata"}])
        heartbeat = _wait(lambda: (conn.baremetal.get_node(node.id).driver_internal_info or {}).get("agent_url"),
                          900, "the agent's first heartbeat", step=5)
        first = time.monotonic() - t0
        # Where Ironic reaches the agent: the machine's forward on loopback, with the TLS certificate the
        # agent made for itself and sent along (ironic-python-agent's automatic TLS).
        assert heartbeat == f"https://127.0.0.1:{system.machine.agent_port}", heartbeat
        node = _wait(lambda: (lambda n: n if n.provision_state in ("manageable", "clean failed") and not n.reservation
                              else None)(conn.baremetal.get_node(node.id)), 900, "the cleaning to finish", step=5)
        done = time.monotonic() - t0
        assert node.provision_state == "manageable", node.last_error
        console = (directory / "console.log").read_text(errors="replace")
        assert "ironic-python-agent[" in console and "erase_devices_metadata" in console
        print(f"agent clean on {system.name}: first heartbeat {first:.0f} s, cleaning done {done:.0f} s "
              f"(ramdisk initramfs {record['files'][ramdisk.INITRAMFS]['bytes'] >> 20} MiB)")
    finally:
        node = conn.baremetal.get_node(node.id)
        if node.provision_state == "clean wait":
            conn.baremetal.set_node_provision_state(node, "abort")
            _wait(lambda: (lambda n: n.provision_state == "clean failed" and not n.reservation)(
                conn.baremetal.get_node(node.id)), 180, "the aborted cleaning")
        conn.baremetal.set_node_power_state(node, "power off", wait=True, timeout=120)
        node = conn.baremetal.get_node(node.id)
        if node.provision_state == "clean failed":
            conn.baremetal.set_node_provision_state(node, "manage")
            wait_settled(conn, node, 180)
        _delete_node(conn, node.id)
    assert _qemu_pids(directory) == []
