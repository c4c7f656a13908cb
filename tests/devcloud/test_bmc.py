"""The local cloud's emulated BMCs: Redfish (sushy-tools) and IPMI (pyghmi).

Unit tests of the fleet, credentials and PKI run anywhere; the ``devcloud``
tests start both emulators in a private state directory (sharing only the
installed virtualenvs) on free ports, and stop them at the end.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from nodeforge.devcloud import bmc, pki
from nodeforge.devcloud.bmc import fleet
from nodeforge.devcloud.paths import Paths
from nodeforge.redact import MASK, Secret
from tests.support.ports import free_tcp_port

# -- unit tests ------------------------------------------------------------------


def test_fleet_is_deterministic_and_distinct():
    a, b = fleet.redfish_systems(), fleet.redfish_systems()
    assert len(a) >= 50
    assert a == b
    assert [s.uuid for s in a] == [s.uuid for s in b]
    # A system's identity depends only on its index, not on the fleet size.
    assert fleet.redfish_systems(200)[:50] == a
    for attr in ("uuid", "name", "serial"):
        values = [getattr(s, attr) for s in fleet.redfish_systems(300)]
        assert len(set(values)) == len(values), attr
    macs = [m for s in fleet.redfish_systems(300) for m in s.macs]
    macs += [m for b_ in fleet.ipmi_bmcs(count=20) for m in b_.macs]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        octets = mac.split(":")
        assert len(octets) == 6 and all(len(o) == 2 for o in octets) and mac == mac.lower()
        assert int(octets[0], 16) & 0x02, "locally administered"
        assert not int(octets[0], 16) & 0x01, "unicast"
    assert all(1 <= len(s.nics) <= 2 for s in a)


def test_fleet_has_two_hardware_shapes():
    systems = fleet.redfish_systems()
    by_shape: dict[str, list] = {}
    for s in systems:
        by_shape.setdefault(s.shape, []).append(s)
    assert set(by_shape) == {"compute", "storage"}
    assert len(by_shape["storage"]) >= 10
    compute, storage = by_shape["compute"][0], by_shape["storage"][0]
    # Distinguishable by CPU, memory, disks and model: two resource classes.
    assert compute.cpu.model != storage.cpu.model
    assert compute.memory_gib != storage.memory_gib
    assert compute.model != storage.model
    assert {d.media_type for d in storage.disks} == {"SSD", "HDD"}
    assert compute.memory_gib == sum(d.capacity_mib for d in compute.dimms) // 1024
    # Fleet UUIDs are stable across releases: later issues key inventory on them.
    assert fleet.redfish_system(1).uuid == "749adaee-0a9e-5c5f-b8e4-fe28c0380191"
    assert fleet.redfish_system(1).macs == ["02:4e:46:00:01:00", "02:4e:46:00:01:01"]


def test_ipmi_bmcs_have_own_ports_and_users():
    bmcs = fleet.ipmi_bmcs(base_port=7000, count=5)
    assert [b.port for b in bmcs] == [7000, 7001, 7002, 7003, 7004]
    assert len({b.username for b in bmcs}) == 5
    assert {b.power_state for b in bmcs} == {"on", "off"}


def test_credentials_generated_once_private_and_masked(tmp_path):
    paths = Paths(tmp_path)
    creds = fleet.ensure_credentials(paths)
    path = fleet.credentials_path(paths)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = fleet.ensure_credentials(paths)
    assert again.redfish.password.reveal() == creds.redfish.password.reveal()
    # Growing the IPMI fleet keeps existing passwords and adds new ones.
    grown = fleet.ensure_credentials(paths, ipmi_count=fleet.DEFAULT_IPMI_COUNT + 2)
    assert grown.ipmi["ipmi-node-01"].password.reveal() == creds.ipmi["ipmi-node-01"].password.reveal()
    assert len(grown.ipmi) == fleet.DEFAULT_IPMI_COUNT + 2
    passwords = [creds.redfish.password.reveal()] + [c.password.reveal() for c in grown.ipmi.values()]
    assert len(set(passwords)) == len(passwords)
    assert all(len(p) <= 20 for p in passwords[1:]), "IPMI 2.0 passwords are at most 20 bytes"
    assert isinstance(creds.redfish.password, Secret)
    text = repr(creds) + str(creds) + repr(grown.ipmi)
    assert MASK in text
    for p in passwords:
        assert p not in text
    assert fleet.load_credentials(paths).redfish.password.reveal() == creds.redfish.password.reveal()
    # Another state directory gets other passwords.
    other = fleet.ensure_credentials(Paths(tmp_path / "other"))
    assert other.redfish.password.reveal() != creds.redfish.password.reveal()


def test_pki_ca_and_server_cert(tmp_path):
    from cryptography import x509

    paths = Paths(tmp_path)
    cert = pki.server_cert(paths, "bmc")
    assert cert.ca == pki.ca_bundle(paths)
    for key in (cert.key, pki.pki_dir(paths) / "ca-key.pem"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate(cert.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(cert.ca.read_bytes())
    leaf.verify_directly_issued_by(ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    # Stable: a second call reuses the files; the CA is created once.
    ca_bytes, leaf_bytes = cert.ca.read_bytes(), cert.cert.read_bytes()
    pki.server_cert(paths, "bmc")
    assert cert.ca.read_bytes() == ca_bytes and cert.cert.read_bytes() == leaf_bytes
    # A certificate for other hosts is re-issued by the same CA.
    other = pki.server_cert(paths, "bmc", hosts=("127.0.0.1", "bmc.local"))
    assert other.cert.read_bytes() != leaf_bytes and cert.ca.read_bytes() == ca_bytes
    # Python's TLS stack accepts the chain for 127.0.0.1.
    ctx = ssl.create_default_context(cafile=str(cert.ca))
    assert ctx.cert_store_stats()["x509_ca"] == 1


def test_service_specs_keep_passwords_off_argv(tmp_path):
    paths = Paths(tmp_path)
    rf = bmc.redfish_service(paths, 18123)
    ip = bmc.ipmi_service(paths, 16400)
    creds = bmc.credentials(paths)
    secrets_ = [creds.redfish.password.reveal()] + [c.password.reveal() for c in creds.ipmi.values()]
    for spec in (rf, ip):
        assert spec.group == "baremetal"
        joined = " ".join(spec.argv) + json.dumps(spec.env)
        assert not any(s in joined for s in secrets_)
        assert "bmc" in spec.argv[0] and spec.argv[0].endswith("python")
    # The emulator's port, then the machines' agent ports (checked free before the start too).
    assert list(rf.ports) == [18123] + [bmc.agent_base_port() + i for i in range(fleet.DEFAULT_MACHINE_COUNT)]
    assert list(getattr(ip, "udp_ports", ip.ports)) == list(range(16400, 16400 + fleet.DEFAULT_IPMI_COUNT))
    for cfg in (paths.etc / "bmc").glob("*.json"):
        assert stat.S_IMODE(cfg.stat().st_mode) == 0o600, cfg
    cfg = json.loads(bmc.redfish_config_path(paths, 18123).read_text())
    assert len(cfg["systems"]) == 50 + fleet.DEFAULT_MACHINE_COUNT and cfg["listen_ip"] == "127.0.0.1"
    assert [s["name"] for s in cfg["systems"] if s["machine"]] == ["rf-vm-01"]
    # The emulator scripts are standalone: they must not import nodeforge.
    for script in (bmc.REDFISH_SCRIPT, bmc.IPMI_SCRIPT, bmc.MACHINE_MODULE):
        modules = set()
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                modules.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module.split(".")[0])
        assert "sushy_tools" in modules or "pyghmi" in modules or script == bmc.MACHINE_MODULE
        assert "nodeforge" not in modules, script


# -- the running emulators -------------------------------------------------------------


def _free_tcp_port() -> int:
    return free_tcp_port()          # outside the ephemeral range: the tests restart on it


def _free_udp_range(count: int) -> int:
    for base in range(16230, 17230, 10):
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP port range")


class _Launcher:
    """The lead's Supervisor when it exists, else a minimal Popen runner."""

    def __init__(self, paths: Paths):
        self.paths = paths
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            from nodeforge.devcloud.process import Supervisor

            self.sup = Supervisor(paths.run, paths.log)
        except ImportError:
            self.sup = None

    def start(self, spec) -> None:
        if self.sup is not None:
            self.sup.start(spec)
            self.sup.wait_healthy(spec)
            return
        log = open(self.paths.log / f"{spec.name}.log", "ab")
        env = dict(os.environ, **spec.env)
        env.pop("VIRTUAL_ENV", None)
        self.procs[spec.name] = proc = subprocess.Popen(
            list(spec.argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + spec.start_timeout
        reason = "never checked"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{spec.name} exited with {proc.returncode}")
            reason = spec.health()
            if reason is None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{spec.name} not healthy: {reason}")

    def stop(self, name: str) -> None:
        if self.sup is not None:
            self.sup.stop(name)
            return
        proc = self.procs.pop(name, None)
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def pid(self, name: str) -> int | None:
        if self.sup is not None:
            return self.sup.running_pid(name)
        proc = self.procs.get(name)
        return proc.pid if proc and proc.poll() is None else None


class Env:
    def __init__(self, paths, launcher, rf_port, ipmi_base, machines=()):
        self.paths, self.launcher = paths, launcher
        self.rf_port, self.ipmi_base = rf_port, ipmi_base
        self.machines = list(machines)
        self.creds = bmc.credentials(paths)
        self.ca = str(bmc.ca_bundle(paths))
        self.url = bmc.redfish_endpoint(rf_port)
        self.ipmi = bmc.ipmi_endpoints(paths, ipmi_base)

    def passwords(self) -> list[str]:
        return [self.creds.redfish.password.reveal()] + [c.password.reveal() for c in self.creds.ipmi.values()]

    def auth(self):
        return (self.creds.redfish.username, self.creds.redfish.password.reveal())


@contextlib.contextmanager
def _bmc_env(root: Path):
    """Both emulators on free ports with a state directory of their own."""
    real = Paths.default()
    python = real.venv_bin("bmc", "python")
    if not python.exists():
        pytest.fail(f"the bmc virtualenv is missing ({python}); run 'make setup'")
    if not shutil.which("ipmitool"):
        pytest.fail("ipmitool is missing (Debian package 'ipmitool'); run 'make setup'")
    root.mkdir(parents=True, exist_ok=True)
    (root / "venvs").symlink_to(real.venvs.resolve())
    paths = Paths(root).ensure()
    launcher = _Launcher(paths)
    rf_port, ipmi_base = _free_tcp_port(), _free_udp_range(fleet.DEFAULT_IPMI_COUNT)
    # The default machine-backed system, its agent on a free port (not the default cloud's).
    machines = bmc.redfish_machines(agent_port=_free_tcp_port())
    specs = [bmc.redfish_service(paths, rf_port, machines=machines), bmc.ipmi_service(paths, ipmi_base)]
    started = []
    try:
        for spec in specs:
            launcher.start(spec)
            started.append(spec.name)
        yield Env(paths, launcher, rf_port, ipmi_base, machines)
    finally:
        for name in reversed(started):
            launcher.stop(name)
        for name in (bmc.REDFISH_SERVICE, bmc.IPMI_SERVICE):
            assert launcher.pid(name) is None


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with _bmc_env(tmp_path_factory.mktemp("devcloud-bmc")) as e:
        yield e


def _sushy(env, **kw):
    import sushy

    kw.setdefault("verify", env.ca)
    user, password = env.auth()
    # The emulator has no SessionService: BasicAuth saves sushy's failing
    # session attempt (a 401 and an ERROR log line per connection).
    auth = sushy.auth.BasicAuth(username=kw.pop("username", user), password=kw.pop("password", password))
    return sushy.Sushy(f"{env.url}/redfish/v1", auth=auth, **kw)


@pytest.mark.devcloud
def test_redfish_system_read_through_sushy(env):
    import sushy

    root = _sushy(env)
    members = root.get_system_collection().members_identities
    assert len(members) == fleet.DEFAULT_REDFISH_COUNT + fleet.DEFAULT_MACHINE_COUNT
    for spec in (fleet.redfish_system(1), fleet.redfish_system(4)):
        system = root.get_system(f"/redfish/v1/Systems/{spec.uuid}")
        assert system.uuid == spec.uuid and system.name == spec.name
        assert system.serial_number == spec.serial
        assert (system.manufacturer, system.model, system.sku) == (spec.manufacturer, spec.model, spec.sku)
        assert system.bios_version == spec.bios_version
        assert system.boot.mode == sushy.BootSourceOverrideMode.UEFI
        macs = sorted(e.mac_address.lower() for e in system.ethernet_interfaces.get_members())
        assert macs == sorted(spec.macs)
        assert system.ethernet_interfaces.get_members()[0].speed_mbps in (10000, 25000)
        procs = system.processors.get_members()
        assert len(procs) == spec.cpu.sockets
        assert {p.model for p in procs} == {spec.cpu.model}
        assert system.processors.summary.count == spec.cpu.total_threads
        assert procs[0].total_cores == spec.cpu.cores and procs[0].max_speed_mhz == spec.cpu.max_speed_mhz
        assert system.memory_summary.size_gib == spec.memory_gib
        # Storage: what Ironic's out-of-band inspection reads.
        assert sorted(system.simple_storage.disks_sizes_bytes) == sorted(d.capacity_bytes for d in spec.disks)
        assert system.storage.volumes_sizes_bytes[0] == spec.disks[0].capacity_bytes
        drives = system.storage.get_members()[0].drives
        assert sorted((d.serial_number, d.media_type) for d in drives) == \
            sorted((d.serial, d.media_type) for d in spec.disks)


@pytest.mark.devcloud
def test_redfish_memory_storage_and_volumes_answer(env):
    spec = fleet.redfish_system(8)
    base = f"{env.url}/redfish/v1/Systems/{spec.uuid}"
    s = requests.Session()
    s.auth = env.auth()
    for path in ("/Memory", f"/Memory/{spec.dimms[0].id}", "/Storage", "/Storage/1", "/Storage/1/Volumes",
                 "/Storage/1/Volumes/1", "/SimpleStorage", "/Processors", "/EthernetInterfaces", "/BIOS"):
        # verify= per request: a Session's verify is overridden by REQUESTS_CA_BUNDLE.
        r = s.get(base + path, verify=env.ca, timeout=10)
        assert r.status_code == 200, (path, r.status_code)
    mem = s.get(base + f"/Memory/{spec.dimms[0].id}", verify=env.ca, timeout=10).json()
    assert mem["CapacityMiB"] == spec.dimms[0].capacity_mib
    vols = s.get(base + "/Storage/1/Volumes", verify=env.ca, timeout=10).json()
    assert vols["Members@odata.count"] == 2


@pytest.mark.devcloud
def test_redfish_power_change_is_immediate(env):
    import sushy

    root = _sushy(env)
    system = root.get_system(f"/redfish/v1/Systems/{fleet.redfish_system(2).uuid}")
    assert system.power_state == sushy.PowerState.OFF
    t0 = time.monotonic()
    system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.ON
    system.reset_system(sushy.ResetType.FORCE_RESTART)
    system.refresh()
    assert system.power_state == sushy.PowerState.ON
    system.reset_system(sushy.ResetType.FORCE_OFF)
    system.refresh()
    assert system.power_state == sushy.PowerState.OFF
    # Reported, not asserted (timings belong in bench/): stock sushy-tools takes 1-11 s per change.
    print(f"three power changes in {time.monotonic() - t0:.2f} s")
    # Another system is untouched.
    other = root.get_system(f"/redfish/v1/Systems/{fleet.redfish_system(3).uuid}")
    assert other.power_state == sushy.PowerState.OFF


@pytest.mark.devcloud
def test_redfish_rejects_wrong_password_and_untrusted_tls(env):
    url = f"{env.url}/redfish/v1/Systems"
    user, password = env.auth()
    assert requests.get(url, auth=(user, password + "x"), verify=env.ca, timeout=10).status_code == 401
    assert requests.get(url, auth=("root", password), verify=env.ca, timeout=10).status_code == 401
    assert requests.get(url, verify=env.ca, timeout=10).status_code == 401
    assert requests.get(url, auth=(user, password), verify=env.ca, timeout=10).status_code == 200
    import sushy

    with pytest.raises(sushy.exceptions.AccessError):
        _sushy(env, password="wrong-password").get_system_collection()
    # TLS is real: the system trust store does not know the local CA.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url, auth=(user, password), verify=True, timeout=10)
    # ...and plain HTTP is not served.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(url.replace("https://", "http://"), auth=(user, password), timeout=10)


def _ipmi(env, idx, *args, password=None):
    r = bmc.ipmitool(env.ipmi[idx], *args, password=password)
    return r.returncode, (r.stdout + r.stderr).strip()


@pytest.mark.devcloud
def test_ipmi_power_via_ipmitool(env):
    # Initial states differ per BMC (fleet: odd off, even on).
    assert _ipmi(env, 1, "power", "status") == (0, "Chassis Power is on")
    rc, out = _ipmi(env, 0, "power", "status")
    assert (rc, out) == (0, "Chassis Power is off")
    assert _ipmi(env, 0, "power", "on")[0] == 0
    assert _ipmi(env, 0, "power", "status") == (0, "Chassis Power is on")
    assert _ipmi(env, 0, "power", "off")[0] == 0
    assert _ipmi(env, 0, "power", "status") == (0, "Chassis Power is off")
    # Boot device round trip (what Ironic's ipmitool management does).
    assert _ipmi(env, 0, "chassis", "bootdev", "pxe")[0] == 0
    rc, out = _ipmi(env, 0, "chassis", "bootparam", "get", "5")
    assert rc == 0 and "Force PXE" in out
    assert _ipmi(env, 0, "chassis", "bootdev", "disk")[0] == 0
    rc, out = _ipmi(env, 0, "chassis", "bootparam", "get", "5")
    assert rc == 0 and "Force Boot from default Hard-Drive" in out
    # The BMCs are independent: BMC 2 still on.
    assert _ipmi(env, 1, "power", "status") == (0, "Chassis Power is on")


@pytest.mark.devcloud
def test_ipmi_refuses_wrong_credentials(env):
    rc, out = _ipmi(env, 2, "power", "status", password=Secret("not-the-password"))
    assert rc != 0 and "Unable to establish IPMI v2 / RMCP+ session" in out
    # Each BMC has its own password: BMC 1's password does not open BMC 3.
    rc, _ = _ipmi(env, 2, "power", "status", password=env.ipmi[0].password)
    assert rc != 0
    assert _ipmi(env, 2, "power", "status")[0] == 0


@pytest.mark.devcloud
def test_ipmi_probe_health(env):
    assert bmc.ipmi_probe("127.0.0.1", env.ipmi_base)
    assert not bmc.ipmi_probe("127.0.0.1", env.ipmi_base + 50, timeout=0.3)


@pytest.mark.devcloud
def test_no_bmc_password_in_argv_or_logs(env):
    passwords = [p.encode() for p in env.passwords()]
    assert len(passwords) == 1 + fleet.DEFAULT_IPMI_COUNT
    pids = [env.launcher.pid(bmc.REDFISH_SERVICE), env.launcher.pid(bmc.IPMI_SERVICE)]
    assert all(pids)
    scanned = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        scanned += 1
        for p in passwords:
            assert p not in cmdline, f"a BMC password is on the command line of pid {proc.name}"
    assert scanned > 2
    logs = list(env.paths.log.glob("*.log"))
    assert {f.name for f in logs} >= {f"{bmc.REDFISH_SERVICE}.log", f"{bmc.IPMI_SERVICE}.log"}
    for log in logs:
        data = log.read_bytes()
        for p in passwords:
            assert p not in data, f"a BMC password is in {log}"
    # The logs are not empty: the scan looked at real output.
    assert b"GET /redfish/v1/Systems" in (env.paths.log / f"{bmc.REDFISH_SERVICE}.log").read_bytes()


@pytest.mark.devcloud
def test_redfish_state_is_fresh_after_restart(tmp_path):
    """Restarts an emulator of its own (the module's is never disturbed, so
    the order of the tests does not matter)."""
    import sushy

    with _bmc_env(tmp_path / "restart") as own:
        uuid = fleet.redfish_system(5).uuid
        system = _sushy(own).get_system(f"/redfish/v1/Systems/{uuid}")
        system.reset_system(sushy.ResetType.ON)
        system.refresh()
        assert system.power_state == sushy.PowerState.ON
        own.launcher.stop(bmc.REDFISH_SERVICE)
        own.launcher.start(bmc.redfish_service(own.paths, own.rf_port, machines=own.machines))
        system = _sushy(own).get_system(f"/redfish/v1/Systems/{uuid}")
        assert system.power_state == sushy.PowerState.OFF
