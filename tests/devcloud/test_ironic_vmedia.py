"""Ironic's virtual-media boot path on the local cloud's machine-backed Redfish system.

* ``ironic-http``, the server of Ironic's http_root: started, checked healthy and stopped by the
  Supervisor like every service, on 8089 + the port offset, 127.0.0.1 only; files with byte
  ranges, 416, no listings, nothing outside the root.
* The ESP image for ``[conductor] bootloader``: ``EFI/BOOT/BOOTX64.EFI`` on a FAT image (read with
  mtools, no mount), its embedded config searching for Ironic's ``EFI/BOOT/grub.cfg``.
* The machine's guest forwards: the QEMU command line carries a guestfwd per port, and the relay
  command QEMU runs per guest connection carries HTTP to exactly that loopback port. (What this does
  *not* prove: a guest's own packets through QEMU. The end-to-end test's power-on shows QEMU accepts
  the rules; a guest making HTTP requests waits for the agent ramdisk.)
* End to end, against the session cloud's Ironic: ``rf-vm-01`` under ``redfish`` +
  ``redfish-virtual-media`` (UEFI), manual cleaning boots the deploy ISO Ironic builds (a Debian
  kernel and initrd stand in for the agent ramdisk) and the kernel on the machine's serial console
  runs with Ironic's command line; then abort, power off, node deleted.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from nodeforge.devcloud import bmc, esp, openstack
from nodeforge.devcloud.bmc import fleet, machine as qm
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import Supervisor
from tests.devcloud.test_bmc_machine import _qemu_pids, _wait
from tests.prereq import require, require_tools

HTTP_SCRIPT = Path(openstack.__file__).with_name("http_root.py")


def _private_paths(root: Path) -> Paths:
    real = Paths.default()
    if not (real.venvs / openstack.VENV / "bin" / "python").exists():
        pytest.fail(f"the openstack virtualenv is missing ({real.venvs}); run 'make setup'")
    root.mkdir(parents=True, exist_ok=True)
    (root / "venvs").symlink_to(real.venvs.resolve())
    return Paths(root).ensure()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)      # connections in TIME_WAIT do not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# -- ironic-http ----------------------------------------------------------------------------------


@pytest.mark.devcloud
def test_http_root_service_start_health_range_stop(tmp_path, monkeypatch):
    paths = _private_paths(tmp_path / "cloud")
    offset = next((o for o in (21500, 21600, 21700, 21800) if _port_free(8089 + o)), None)
    assert offset is not None, "no free port for the http_root server"
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_PORT_OFFSET", str(offset))
    spec = openstack.ironic_http(openstack.Context(paths, creds={}))
    port = 8089 + offset
    assert spec.ports == [port] and spec.url == f"http://127.0.0.1:{port}"
    assert spec.health() is not None                 # nothing listens yet
    sup = Supervisor(paths.run, paths.log)
    sup.start(spec)
    try:
        sup.wait_healthy(spec)
        root = openstack.ironic_http_root(paths)
        data = os.urandom(3 * 1024 * 1024 + 17)
        (root / "redfish").mkdir()
        (root / "redfish" / "boot.iso").write_bytes(data)
        base = spec.url
        whole = requests.get(f"{base}/redfish/boot.iso", timeout=30)
        assert whole.status_code == 200 and whole.content == data
        assert whole.headers["Accept-Ranges"] == "bytes"
        part = requests.get(f"{base}/redfish/boot.iso", headers={"Range": "bytes=1048576-1048675"}, timeout=10)
        assert part.status_code == 206 and part.content == data[1048576:1048676]
        assert part.headers["Content-Range"] == f"bytes 1048576-1048675/{len(data)}"
        tail = requests.get(f"{base}/redfish/boot.iso", headers={"Range": "bytes=-10"}, timeout=10)
        assert tail.status_code == 206 and tail.content == data[-10:]
        from_ = requests.get(f"{base}/redfish/boot.iso", headers={"Range": f"bytes={len(data) - 5}-"}, timeout=10)
        assert from_.content == data[-5:]
        bad = requests.get(f"{base}/redfish/boot.iso", headers={"Range": f"bytes={len(data)}-"}, timeout=10)
        assert bad.status_code == 416 and bad.headers["Content-Range"] == f"bytes */{len(data)}"
        head = requests.head(f"{base}/redfish/boot.iso", timeout=10)
        assert head.status_code == 200 and int(head.headers["Content-Length"]) == len(data) and not head.content
        assert requests.get(f"{base}/redfish/", timeout=10).status_code == 403          # no listings
        assert requests.get(f"{base}/missing.iso", timeout=10).status_code == 404
        (tmp_path / "secret.txt").write_text("outside the root")
        (root / "link").symlink_to(tmp_path / "secret.txt")
        assert requests.get(f"{base}/link", timeout=10).status_code == 404            # a symlink out of the root
        raw = socket.create_connection(("127.0.0.1", port))
        raw.sendall(b"GET /../../secret.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 404")
        raw.close()
        # Loopback only: nothing listens on the host's other addresses.
        out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert out.split() and all(line.split()[3] == f"127.0.0.1:{port}" for line in out.splitlines())
        log = (paths.log / f"{openstack.IRONIC_HTTP}.log").read_text()
        assert '"GET /redfish/boot.iso HTTP/1.1" 206 100 range=1048576-1048675' in log
    finally:
        assert sup.stop(openstack.IRONIC_HTTP)
    assert sup.running_pid(openstack.IRONIC_HTTP) is None and _port_free(port)


# -- the ESP image ---------------------------------------------------------------------------------


def test_esp_image_holds_grub_that_finds_ironics_grub_cfg(tmp_path):
    tools = require_tools("grub-mkimage", "mkfs.vfat", "mmd", "mcopy", "mdir", why="the ESP image")
    require((esp.GRUB_EFI_DIR / "moddep.lst").is_file(), "grub-efi-amd64-bin (GRUB's EFI modules)")
    paths = Paths(tmp_path).ensure()
    t0 = time.monotonic()
    image = esp.ensure(paths)
    built = time.monotonic() - t0
    assert image == esp.image_path(paths) and image.parent == paths.data / "ironic" / "bootloader"
    env = dict(os.environ, MTOOLS_SKIP_CHECK="1")
    listing = subprocess.run([tools["mdir"], "-b", "-i", str(image), "::/EFI/BOOT"], capture_output=True,
                             text=True, env=env, check=True).stdout.split()
    assert listing == ["::/EFI/BOOT/BOOTX64.EFI"]
    efi = tmp_path / "BOOTX64.EFI"
    subprocess.run([tools["mcopy"], "-i", str(image), "::/EFI/BOOT/BOOTX64.EFI", str(efi)], env=env, check=True)
    binary = efi.read_bytes()
    assert binary[:2] == b"MZ"                                    # a PE image
    # The embedded config: find the file Ironic writes (grub_config_path) and read it as $prefix/grub.cfg.
    assert esp.GRUB_CONFIG_PATH == "EFI/BOOT/grub.cfg"
    assert b"search --no-floppy --file --set=root /EFI/BOOT/grub.cfg" in binary
    assert b"set prefix=($root)/EFI/BOOT" in binary
    for module in (b"iso9660", b"linux", b"search_fs_file", b"normal"):
        assert module in binary
    # Cached: a second ensure is the same file, untouched.
    mtime = image.stat().st_mtime_ns
    assert esp.ensure(paths) == image and image.stat().st_mtime_ns == mtime
    print(f"ESP image: {image.stat().st_size} bytes, BOOTX64.EFI {len(binary)} bytes, built in {built:.2f} s")


# -- guest forwards --------------------------------------------------------------------------------


def test_guestfwd_rules_and_the_relay_reach_exactly_the_loopback_port(tmp_path):
    system = fleet.machine_system(2, agent_port=17002, memory_mib=1024).to_json()
    tools = {"qemu": "/usr/bin/qemu-system-x86_64", "ovmf_code": "/usr/share/OVMF/OVMF_CODE_4M.fd"}
    m = qm.QemuMachine(system, tools, str(tmp_path / "m"), [16385, 18089])
    netdev = m.argv()[m.argv().index("-netdev") + 1]
    rules = re.findall(r",guestfwd=(tcp:[0-9.]+:\d+)-cmd:", netdev)
    assert rules == ["tcp:10.0.2.100:16385", "tcp:10.0.2.100:18089"]
    assert netdev.startswith("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:17002-:9999,")
    with pytest.raises(qm.MachineError, match="guest_forwards: 'x' is not a TCP port"):
        qm.QemuMachine(system, {}, str(tmp_path / "m"), ["x"])

    # The command QEMU runs per guest connection, with the connection on its stdin/stdout, against
    # an http_root server on a loopback port.
    root = tmp_path / "root"
    root.mkdir()
    (root / "img").write_bytes(b"0123456789" * 1000)
    server = subprocess.Popen([str(Paths.default().venv_bin(openstack.VENV, "python")), str(HTTP_SCRIPT),
                               "--root", str(root), "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r":(\d+)$", server.stderr.readline().strip()).group(1))
        rule = m.guestfwd(port)
        assert rule.startswith(f"tcp:10.0.2.100:{port}-cmd:")
        cmd = shlex.split(rule.split("-cmd:", 1)[1])
        guest, qemu_side = socket.socketpair()
        relay = subprocess.Popen(cmd, stdin=qemu_side.fileno(), stdout=qemu_side.fileno(), stderr=subprocess.DEVNULL)
        qemu_side.close()
        guest.sendall(b"GET /img HTTP/1.1\r\nHost: 10.0.2.100\r\nRange: bytes=5-14\r\n"
                      b"User-Agent: relay-test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := guest.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 206") and answer.endswith(b"5678901234")
        guest.close()                              # the guest's side closes too: the relay is done
        assert relay.wait(10) == 0
        # A port nobody listens on: the guest's connection is closed, nothing else is tried.
        guest2, qemu2 = socket.socketpair()
        dead = subprocess.Popen(shlex.split(m.guestfwd(1).split("-cmd:", 1)[1]), stdin=qemu2.fileno(),
                                stdout=qemu2.fileno(), stderr=subprocess.DEVNULL)
        qemu2.close()
        assert dead.wait(15) == 1 and guest2.recv(10) == b""
    finally:
        server.terminate()
        server.wait(10)


# -- end to end: Ironic boots its deploy ISO on rf-vm-01 --------------------------------------------


def _debian_kernel(dest: Path) -> tuple[Path, Path]:
    """The Debian kernel and initrd of the newest cached package base (a stand-in for the agent)."""
    # base.tar since the recipe's /2; a cache may still hold /1 entries (base.tar.gz) until they are pruned.
    # GNU tar tells the two apart when it reads the file.
    bases = os.path.expanduser("~/.cache/nodeforge/dib/package-base/*/")
    tarballs = sorted(glob.glob(bases + "base.tar") + glob.glob(bases + "base.tar.gz"),
                      key=os.path.getmtime, reverse=True)
    require(bool(tarballs), "a cached package base (~/.cache/nodeforge/dib/package-base): run an image build once")
    work = dest / "extract"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", tarballs[0], "-C", str(work), "--wildcards", "./boot/vmlinuz-*",
                    "./boot/initrd.img-*"], check=True, timeout=300)
    [kernel] = sorted((work / "boot").glob("vmlinuz-*"))
    [initrd] = sorted((work / "boot").glob("initrd.img-*"))
    return kernel, initrd


@pytest.mark.slow
@pytest.mark.devcloud
def test_ironic_boots_its_virtual_media_iso_on_the_machine(devcloud, tmp_path):
    from tests.devcloud.test_ironic import PREFIX, _delete_node, wait_settled

    conn = devcloud.system()
    [system] = bmc.redfish_machines()
    system_id = f"/redfish/v1/Systems/{system.uuid}"
    users = [n.name for n in conn.baremetal.nodes(details=True)
             if (n.driver_info or {}).get("redfish_system_id") == system_id]
    assert not users, f"{system.name} is already enrolled as {users} in this cloud"
    kernel, initrd = _debian_kernel(tmp_path)
    files = openstack.ironic_files_dir(devcloud.paths)
    for f in (kernel, initrd):
        os.link(f, files / f.name) if not (files / f.name).exists() else None
    directory = bmc.machine_dir(devcloud.paths, system)
    console = directory / "console.log"
    offset_before = console.stat().st_size if console.exists() else 0
    api_url = f"http://{openstack.GUEST_HOST}:{openstack.port('ironic')}"

    info = dict(bmc.redfish_driver_info(devcloud.paths, system),
                deploy_kernel=(files / kernel.name).as_uri(), deploy_ramdisk=(files / initrd.name).as_uri())
    node = conn.baremetal.create_node(name=f"{PREFIX}vmedia-{os.getpid()}", driver="redfish",
                                      boot_interface="redfish-virtual-media", deploy_interface="direct",
                                      driver_info=info)
    try:
        conn.baremetal.set_node_provision_state(node, "manage")
        node = wait_settled(conn, node, 180)
        assert node.provision_state == "manageable", node.last_error
        t0 = time.monotonic()
        conn.baremetal.set_node_provision_state(
            node, "clean", clean_steps=[{"interface": "deploy", "step": "erase_devices_metadata"}])
        _wait(lambda: conn.baremetal.get_node(node.id).provision_state in ("clean wait", "clean failed"), 240,
              "Ironic preparing the ramdisk boot")
        node = conn.baremetal.get_node(node.id)
        assert node.provision_state == "clean wait", node.last_error
        prepared = time.monotonic() - t0
        assert node.power_state == "power on" and _qemu_pids(directory)
        assert "boot order Cd, Hdd, Pxe" in (directory / "qemu.log").read_text().rsplit("--- ", 1)[-1]
        # The ISO Ironic built and published under http_root, fetched by the emulator from there.
        isos = list((openstack.ironic_http_root(devcloud.paths) / "redfish").glob(f"boot-{node.id}.iso"))
        assert len(isos) == 1
        iso_size = isos[0].stat().st_size
        http_log = (devcloud.paths.log / f"{openstack.IRONIC_HTTP}.log").read_text()
        assert f'"GET /redfish/boot-{node.id}.iso HTTP/1.1" 200 {iso_size}' in http_log

        def command_line():
            with open(console, "rb") as fh:
                fh.seek(offset_before)
                text = fh.read().decode("utf-8", "replace")
            m = re.search(r"Command line: (.*)", text)
            return m and m.group(1)

        t1 = time.monotonic()
        line = _wait(command_line, 300, "the kernel of Ironic's ISO on the serial console", step=0.5)
        kernel_at = time.monotonic() - t1
        words = line.split()
        # Ironic's command line (never printed whole: it carries the agent token).
        assert f"ipa-api-url={api_url}" in words
        assert "boot_method=vmedia" in words and "console=ttyS0,115200n8" in words
        assert any(w.startswith("ipa-agent-token=") for w in words)
        assert words[0] == "BOOT_IMAGE=/vmlinuz"                 # the ISO's kernel, from Ironic's grub.cfg
        print(f"clean -> clean wait {prepared:.1f} s; clean wait -> kernel command line {kernel_at:.1f} s; "
              f"ISO {iso_size} bytes")
    finally:
        node = conn.baremetal.get_node(node.id)
        if node.provision_state == "clean wait":
            conn.baremetal.set_node_provision_state(node, "abort")
            # An aborted cleaning ends in "clean failed" with "manageable" as its target, until `manage`.
            _wait(lambda: (lambda n: n.provision_state == "clean failed" and not n.reservation)(
                conn.baremetal.get_node(node.id)), 180, "the aborted cleaning")
        conn.baremetal.set_node_power_state(node, "power off", wait=True, timeout=120)
        node = conn.baremetal.get_node(node.id)
        if node.provision_state == "clean failed":
            conn.baremetal.set_node_provision_state(node, "manage")
            wait_settled(conn, node, 180)
        _delete_node(conn, node.id)
    assert _qemu_pids(directory) == []
