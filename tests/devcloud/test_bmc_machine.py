"""Machine-backed Redfish systems: a real QEMU machine (UEFI, disk, NIC, serial console, virtual CD)
behind a system of the local cloud's Redfish emulator.

Unit tests of the fleet entries, the QEMU command line and the boot order run anywhere; the
``devcloud`` tests start the Redfish emulator alone in a private state directory (as
``test_bmc.py`` does) with two fake systems and one small machine, and talk to it with sushy,
the Redfish client Ironic uses. The ISO they boot is made here: GRUB (grub-mkstandalone) as
``EFI/BOOT/BOOTX64.EFI`` on an El Torito EFI image, its built-in grub.cfg printing a marker on the
serial console, waiting, then powering the machine off.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from nodeforge.devcloud import bmc
from nodeforge.devcloud.bmc import fleet, machine as qm, redfish_emulator
from nodeforge.devcloud.paths import Paths
from tests.devcloud.test_bmc import _free_tcp_port, _Launcher, _sushy
from tests.prereq import require_tools

GUEST_SLEEP = 10          # seconds the ISO's GRUB waits after its marker before it powers off
BOOT_TIMEOUT = 90         # OVMF + GRUB to the marker: 8-12 s under TCG on two idle cores

# -- unit tests --------------------------------------------------------------------------------------


def test_machine_systems_are_their_own_fleet():
    vm = fleet.machine_system(1)
    assert (vm.name, vm.shape, vm.uuid) == ("rf-vm-01", "emulated", fleet.machine_system(1).uuid)
    assert vm.machine == fleet.Machine(memory_mib=2048, cpus=1, disk_gib=10, agent_port=fleet.AGENT_BASE_PORT)
    assert vm.memory_gib == 2 and vm.disks[0].capacity_bytes == 10 * fleet.GiB
    assert vm.macs == ["02:4e:46:00:01:20"]              # kind 2: machine-backed Redfish
    # Never among the fake systems the tests and the demo hand out (nothing powers a machine on
    # by accident), and distinct from all of them.
    fake = fleet.redfish_systems(300)
    assert all(s.machine is None for s in fake)
    assert not {vm.uuid, vm.name, vm.serial} & {v for s in fake for v in (s.uuid, s.name, s.serial)}
    assert not set(vm.macs) & {m for s in fake for m in s.macs}
    small = fleet.machine_systems(2, 17000, memory_mib=1024, disk_gib=2)
    assert [(s.machine.agent_port, s.machine.memory_mib, s.memory_gib) for s in small] == \
        [(17000, 1024, 1), (17001, 1024, 1)]
    assert small[0].uuid == vm.uuid                          # identity from the index only
    assert vm.to_json()["machine"]["agent_port"] == fleet.AGENT_BASE_PORT
    for bad in ({"memory_mib": 1536}, {"cpus": 0}, {"disk_gib": 0}, {"agent_port": 80}):
        with pytest.raises(ValueError):
            fleet.machine_system(1, **bad)


def _machine(tmp_path: Path, **overrides) -> qm.QemuMachine:
    system = fleet.machine_system(3, agent_port=17003, memory_mib=1024).to_json()
    tools = {"qemu": "/usr/bin/qemu-system-x86_64", "qemu_img": "/usr/bin/qemu-img",
             "ovmf_code": "/usr/share/OVMF/OVMF_CODE_4M.fd", "ovmf_vars": "/usr/share/OVMF/OVMF_VARS_4M.fd",
             "accel": "tcg", "machine_type": "q35", "cpu": "max", **overrides}
    return qm.QemuMachine(system, tools, str(tmp_path / "rf-vm-03"))


def _bootindex(argv: list[str]) -> dict[str, int]:
    found = {}
    for arg in argv:
        for dev, name in (("virtio-blk-pci", "Hdd"), ("ide-cd", "Cd"), ("virtio-net-pci", "Pxe")):
            if arg.startswith(dev + ","):
                found[name] = int(arg.split("bootindex=")[1].split(",")[0])
    return found


def test_machine_command_line(tmp_path):
    m = _machine(tmp_path)
    argv = m.argv()
    joined = " ".join(argv)
    assert argv[0] == "/usr/bin/qemu-system-x86_64"
    assert "-machine q35,accel=tcg -cpu max -smp 1 -m 1024" in joined
    assert f"-uuid {m.system['uuid']}" in joined
    # UEFI with a private variables store; disk and console under the machine's directory.
    assert "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd" in joined
    assert f"unit=1,file={m.dir}/OVMF_VARS.fd" in joined
    assert f"file={m.dir}/disk.qcow2" in joined and f"path={m.dir}/console.log" in joined
    # One NIC, the fleet's MAC, user-mode network isolated, only the agent port forwarded from loopback.
    netdev = argv[argv.index("-netdev") + 1]
    assert netdev == "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:17003-:9999"
    assert [a for a in argv if a.startswith("virtio-net-pci")] == \
        ["virtio-net-pci,netdev=net0,id=nic,mac=02:4e:46:00:03:20,romfile=,bootindex=2"]
    assert argv.count("-netdev") == 1
    # QMP on stdio, no socket file; an empty CD drive until media is inserted.
    assert "stdio,id=qmp0,signal=off" in argv and "-qmp" not in argv
    assert "if=none,id=cd0,media=cdrom,readonly=on" in argv
    m.cd = "/srv/a,b.iso"
    assert "if=none,id=cd0,media=cdrom,readonly=on,format=raw,file=/srv/a,,b.iso" in m.argv()
    # The SMBIOS system is the Redfish system (IPA and Ironic see the same serial and UUID).
    smbios = argv[argv.index("-smbios") + 1]
    assert "product=Standard PC (Q35 + ICH9,, 2009)" in smbios and f"serial={m.system['serial']}" in smbios


@pytest.mark.parametrize("target, enabled, order, after", [
    ("Hdd", "Disabled", ["Hdd", "Cd", "Pxe"], "Disabled"),
    ("Cd", "Disabled", ["Hdd", "Cd", "Pxe"], "Disabled"),     # an override that is off is no override
    ("Cd", "Once", ["Cd", "Hdd", "Pxe"], "Disabled"),
    ("Cd", "Continuous", ["Cd", "Hdd", "Pxe"], "Continuous"),
    ("Pxe", "Once", ["Pxe", "Hdd", "Cd"], "Disabled"),
])
def test_boot_order_follows_the_override(tmp_path, target, enabled, order, after):
    m = _machine(tmp_path)
    m.set_boot(target, enabled)
    assert m.boot_order() == order
    assert _bootindex(m.argv()) == {dev: i for i, dev in enumerate(order)}
    # A target set without BootSourceOverrideEnabled turns a disabled override on (Continuous).
    fresh = _machine(tmp_path)
    fresh.set_boot("Cd")
    assert (fresh.boot_device, fresh.boot_enabled) == ("Cd", "Continuous")
    with pytest.raises(qm.MachineError):
        m.set_boot("UefiHttp")
    with pytest.raises(qm.MachineError):
        m.set_boot(None, "Sometimes")


def test_machine_without_tools_refuses_to_power_on(tmp_path):
    m = _machine(tmp_path, qemu=None)
    with pytest.raises(qm.MachineError, match="qemu not found .*qemu-system-x86"):
        m.start()
    assert m.power_state() == "Off"


def test_virtual_media_urls_are_loopback_only():
    ok = ["http://127.0.0.1:8080/a.iso", "https://localhost/a.iso", "http://[::1]:80/x", "http://127.1.2.3/x"]
    bad = ["http://192.0.2.1/a.iso", "http://example.org/a.iso", "file:///etc/passwd", "ftp://127.0.0.1/a",
           "http://127.0.0.1.example.org/a", "", "http://[::ffff:192.0.2.1]/x"]
    assert all(redfish_emulator.is_loopback_url(u) for u in ok)
    assert not any(redfish_emulator.is_loopback_url(u) for u in bad)


# -- the running emulator ------------------------------------------------------------------------------

def _qemu_pids(directory: Path) -> list[int]:
    """Live QEMU processes whose command line names ``directory``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"qemu-system" in cmdline and str(directory).encode() in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def _wait(predicate, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class MachineEnv:
    def __init__(self, paths: Paths, launcher: _Launcher, port: int, system: fleet.RedfishSystem):
        self.paths, self.launcher, self.port, self.system = paths, launcher, port, system
        self.creds = bmc.credentials(paths)
        self.ca = str(bmc.ca_bundle(paths))
        self.url = bmc.redfish_endpoint(port)
        self.dir = bmc.machine_dir(paths, system, port)

    def auth(self):
        return self.creds.redfish.username, self.creds.redfish.password.reveal()

    def redfish(self):
        return _sushy(self).get_system(f"/redfish/v1/Systems/{self.system.uuid}")

    def start(self) -> None:
        self.launcher.start(bmc.redfish_service(self.paths, self.port, count=2, machines=[self.system]))

    def console(self) -> str:
        try:
            return (self.dir / "console.log").read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""


@contextlib.contextmanager
def _machine_env(root: Path):
    real = Paths.default()
    python = real.venv_bin("bmc", "python")
    if not python.exists():
        pytest.fail(f"the bmc virtualenv is missing ({python}); run 'make setup'")
    require_tools("qemu-system-x86_64", "qemu-img", why="machine-backed Redfish systems")
    root.mkdir(parents=True, exist_ok=True)
    (root / "venvs").symlink_to(real.venvs.resolve())
    paths = Paths(root).ensure()
    system = fleet.machine_system(1, agent_port=_free_tcp_port(), memory_mib=1024, disk_gib=2)
    env = MachineEnv(paths, _Launcher(paths), _free_tcp_port(), system)
    try:
        env.start()
        yield env
    finally:
        env.launcher.stop(bmc.REDFISH_SERVICE)
        assert env.launcher.pid(bmc.REDFISH_SERVICE) is None
        assert _qemu_pids(env.dir) == [], "a QEMU outlived the emulator"


@pytest.fixture(scope="module")
def menv(tmp_path_factory):
    with _machine_env(tmp_path_factory.mktemp("bmc-machine")) as e:
        yield e


@pytest.fixture(scope="module")
def iso(tmp_path_factory):
    """(URL on loopback, marker): a UEFI-bootable ISO served over HTTP on 127.0.0.1."""
    tools = require_tools("grub-mkstandalone", "mkfs.vfat", "mmd", "mcopy", "genisoimage",
                          why="the test ISO (GRUB as an El Torito EFI image)")
    work = tmp_path_factory.mktemp("iso")
    marker = f"nodeforge-machine-{secrets.token_hex(4)}"
    (work / "grub.cfg").write_text(
        "serial --unit=0 --speed=115200\nterminal_output serial console\n"
        f'echo "{marker}"\nsleep {GUEST_SLEEP}\nhalt\n')
    efi, img, root = work / "BOOTX64.EFI", work / "efi.img", work / "root"
    root.mkdir()

    def run(*argv):
        subprocess.run([str(a) for a in argv], check=True, capture_output=True, timeout=120)

    run(tools["grub-mkstandalone"], "-O", "x86_64-efi", "-o", efi,
        "--install-modules=normal configfile serial terminal echo sleep halt", "--modules=serial terminal",
        "--locales=", "--fonts=", "--themes=", f"boot/grub/grub.cfg={work / 'grub.cfg'}")
    run(tools["mkfs.vfat"], "-C", img, "2048")
    run(tools["mmd"], "-i", img, "::/EFI", "::/EFI/BOOT")
    run(tools["mcopy"], "-i", img, efi, "::/EFI/BOOT/BOOTX64.EFI")
    os.link(img, root / "efi.img")
    serve = work / "www"
    serve.mkdir()
    run(tools["genisoimage"], "-quiet", "-o", serve / "boot.iso", "-J", "-R", "-e", "efi.img", "-no-emul-boot", root)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(serve))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/boot.iso", marker
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.devcloud
def test_machine_system_reports_its_machine(menv):
    import sushy

    system = menv.redfish()
    spec = menv.system
    assert (system.uuid, system.name, system.serial_number) == (spec.uuid, spec.name, spec.serial)
    assert [e.mac_address.lower() for e in system.ethernet_interfaces.get_members()] == spec.macs
    assert system.memory_summary.size_gib == 1
    assert system.processors.summary.count == spec.machine.cpus
    assert system.simple_storage.disks_sizes_bytes == [2 * fleet.GiB] * 2      # two drives, one volume
    assert [v.capacity_bytes for v in system.storage.get_members()[0].volumes.get_members()] == [2 * fleet.GiB]
    assert system.boot.mode == sushy.BootSourceOverrideMode.UEFI
    assert system.power_state == sushy.PowerState.OFF
    assert system.boot.enabled == sushy.BootSourceOverrideEnabled.DISABLED
    assert _qemu_pids(menv.dir) == []                  # powered off: no QEMU, nothing made yet
    # The fake systems beside it are untouched: their power still lands at once, no QEMU.
    fake = _sushy(menv).get_system(f"/redfish/v1/Systems/{fleet.redfish_system(1).uuid}")
    fake.reset_system(sushy.ResetType.ON)
    fake.refresh()
    assert fake.power_state == sushy.PowerState.ON and _qemu_pids(menv.paths.root) == []
    fake.reset_system(sushy.ResetType.FORCE_OFF)


@pytest.mark.devcloud
def test_machine_refuses_media_off_loopback(menv):
    base = f"{menv.url}/redfish/v1/Systems/{menv.system.uuid}/VirtualMedia"
    for device, image in (("Cd", "http://192.0.2.1/boot.iso"), ("Floppy", "http://127.0.0.1:1/f.img")):
        r = requests.post(f"{base}/{device}/Actions/VirtualMedia.InsertMedia", json={"Image": image},
                          auth=menv.auth(), verify=menv.ca, timeout=10)
        assert r.status_code == 400, (device, r.status_code, r.text)
        vm = requests.get(f"{base}/{device}", auth=menv.auth(), verify=menv.ca, timeout=10).json()
        assert vm["Inserted"] is False


@pytest.mark.devcloud
def test_machine_power_on_says_why_qemu_did_not_start(menv):
    import socket

    import sushy

    system = menv.redfish()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", menv.system.machine.agent_port))
        taken.listen()
        with pytest.raises(sushy.exceptions.ServerSideError, match="rf-vm-01: QEMU did not start .*host forward"):
            system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.OFF and _qemu_pids(menv.dir) == []


@pytest.mark.devcloud
@pytest.mark.slow      # two UEFI boots under TCG: about 35-45 s on two idle cores
def test_machine_boots_virtual_media_and_powers_off(menv, iso):
    import sushy

    url, marker = iso
    system = menv.redfish()
    [cd] = [v for v in system.virtual_media.get_members() if sushy.VirtualMediaType.CD in v.media_types]
    cd.insert_media(url, inserted=True, write_protected=True)
    cd.refresh()
    assert cd.inserted and cd.image == url
    system.set_system_boot_options(sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.ONCE)
    system.refresh()
    assert (system.boot.target, system.boot.enabled) == (sushy.BootSource.CD, sushy.BootSourceOverrideEnabled.ONCE)

    # Power on: QEMU starts, boots the inserted ISO from the CD (the Once override), and uses it up.
    t0 = time.monotonic()
    system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.ON
    [pid] = _qemu_pids(menv.dir)
    assert system.boot.enabled == sushy.BootSourceOverrideEnabled.DISABLED
    _wait(lambda: marker in menv.console(), BOOT_TIMEOUT, "the ISO's marker on the serial console")
    print(f"power on to marker: {time.monotonic() - t0:.1f} s")
    first = menv.console().count(marker)      # GRUB prints to the serial port and the UEFI console
    assert "boot order Cd, Hdd, Pxe" in (menv.dir / "qemu.log").read_text()

    # ForceOff stops QEMU before it answers.
    system.reset_system(sushy.ResetType.FORCE_OFF)
    assert _qemu_pids(menv.dir) == [] and not Path(f"/proc/{pid}/cmdline").exists()
    system.refresh()
    assert system.power_state == sushy.PowerState.OFF

    # Again, Continuous: the override stays; the CD is ejected while the machine runs; the guest
    # (GRUB's halt) powers itself off and the system shows Off.
    system.set_system_boot_options(sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.CONTINUOUS)
    system.reset_system(sushy.ResetType.ON)
    _wait(lambda: menv.console().count(marker) >= 2 * first, BOOT_TIMEOUT, "the marker of the second boot")
    system.refresh()
    assert system.boot.enabled == sushy.BootSourceOverrideEnabled.CONTINUOUS
    cd.eject_media()
    cd.refresh()
    assert not cd.inserted
    # GRUB halts after GUEST_SLEEP s of its own; under TCG on a busy machine (agent boots, image
    # builds beside it) its countdown runs several times slower than the wall clock.
    _wait(lambda: menv.redfish().power_state == sushy.PowerState.OFF, GUEST_SLEEP * 6 + 60,
          "the guest powering itself off", step=1)
    assert _qemu_pids(menv.dir) == []
    assert "SHUTDOWN" in (menv.paths.log / f"{bmc.REDFISH_SERVICE}.log").read_text()


@pytest.mark.devcloud
@pytest.mark.slow      # two emulator starts (~3 s each) and two QEMU starts
def test_no_qemu_outlives_the_emulator(tmp_path):
    """Stopped (SIGTERM to the emulator alone, not its process group) it stops its machines;
    killed (SIGKILL), the kernel stops them (PR_SET_PDEATHSIG)."""
    import sushy

    with _machine_env(tmp_path / "stop") as env:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            system = env.redfish()
            system.reset_system(sushy.ResetType.ON)
            [pid] = _qemu_pids(env.dir)
            emulator = env.launcher.pid(bmc.REDFISH_SERVICE)
            os.kill(emulator, sig)
            _wait(lambda: not Path(f"/proc/{emulator}/cmdline").exists()
                  or Path(f"/proc/{emulator}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                  20, f"the emulator to exit on signal {sig}")
            _wait(lambda: _qemu_pids(env.dir) == [], 10, f"QEMU {pid} to stop with the emulator ({sig.name})")
            env.launcher.stop(bmc.REDFISH_SERVICE)      # reaps it and drops its pidfile
            env.start()
