"""The local cloud's emulated BMCs: Redfish (sushy-tools) and IPMI (pyghmi).

Both emulators run as standalone scripts under the ``bmc`` virtualenv
(``<state>/venvs/bmc``) and read a JSON config file this module writes
(mode 0600: it holds the BMC passwords, which never go on a command line).

* :func:`redfish_service` -> ServiceSpec "redfish-bmc": HTTPS + basic auth on
  ``127.0.0.1:<port>``, :data:`fleet.DEFAULT_REDFISH_COUNT` fake systems and
  :data:`fleet.DEFAULT_MACHINE_COUNT` machine-backed ones (a QEMU machine
  behind each, running only while it is powered on; :func:`redfish_machines`,
  :func:`machine_dir`).
* :func:`ipmi_service` -> ServiceSpec "ipmi-bmc": one IPMI 2.0 BMC per UDP
  port from ``base_port`` upwards.

Helpers for tests and later issues: :func:`redfish_endpoint`,
:func:`redfish_systems`, :func:`ipmi_endpoints`, :func:`credentials`.
See docs/devcloud-bmc.md.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from nodeforge.base import ipmitool as base_ipmitool, runner
from nodeforge.devcloud import pki
from nodeforge.devcloud.bmc import fleet
from nodeforge.devcloud.bmc.fleet import (Credential, Credentials, IpmiBmc, RedfishSystem,
                                          ensure_credentials, load_credentials)
from nodeforge.devcloud.paths import Paths, port_offset
from nodeforge.devcloud.process import ServiceSpec
from nodeforge.ironic.ipmi import ipmi_probe
from nodeforge.redact import Secret

__all__ = [
    "REDFISH_PORT", "IPMI_BASE_PORT", "GROUP", "REDFISH_SERVICE", "IPMI_SERVICE",
    "redfish_service", "ipmi_service", "redfish_endpoint", "redfish_systems",
    "redfish_system_url", "redfish_driver_info", "ipmi_probe", "redfish_machines", "machine_dir",
    "agent_base_port", "machine_tools", "guest_forwards",
    "ipmi_endpoints", "IpmiEndpoint", "credentials", "ca_bundle", "ipmitool",
    "Credential", "Credentials", "RedfishSystem", "IpmiBmc", "fleet",
]

REDFISH_PORT = 8000
IPMI_BASE_PORT = 6230
GROUP = "baremetal"
REDFISH_SERVICE = "redfish-bmc"
IPMI_SERVICE = "ipmi-bmc"
HOST = "127.0.0.1"

_HERE = Path(__file__).resolve().parent
REDFISH_SCRIPT = _HERE / "redfish_emulator.py"
MACHINE_MODULE = _HERE / "machine.py"     # imported by the emulator script (standalone too)
IPMI_SCRIPT = _HERE / "ipmi_sim.py"
CERT_NAME = "bmc"


def _python(paths: Paths) -> str:
    return str(paths.venv_bin("bmc", "python"))


def _bmc_etc(paths: Paths) -> Path:
    d = paths.etc / "bmc"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d


def redfish_config_path(paths: Paths, port: int) -> Path:
    return paths.etc / "bmc" / f"redfish-{port}.json"


def ipmi_config_path(paths: Paths, base_port: int) -> Path:
    return paths.etc / "bmc" / f"ipmi-{base_port}.json"


def credentials(paths: Paths, ipmi_count: int = fleet.DEFAULT_IPMI_COUNT) -> Credentials:
    """The BMC credentials (created on first use), passwords as Secret."""
    return ensure_credentials(paths, ipmi_count)


def ca_bundle(paths: Paths) -> Path:
    return pki.ca_bundle(paths)


def redfish_port(port: int | None = None) -> int:
    """The Redfish emulator's port: given, or the default shifted by the
    local cloud's port offset."""
    return REDFISH_PORT + port_offset() if port is None else port


def ipmi_base_port(base_port: int | None = None) -> int:
    return IPMI_BASE_PORT + port_offset() if base_port is None else base_port


def agent_base_port(base_port: int | None = None) -> int:
    """The host port forwarded to machine 1's agent (machine i: + i - 1): given, or the default
    shifted by the local cloud's port offset."""
    return fleet.AGENT_BASE_PORT + port_offset() if base_port is None else base_port


# -- Redfish -------------------------------------------------------------------

def redfish_endpoint(port: int | None = None) -> str:
    """Base URL of the Redfish emulator (what Ironic's redfish_address takes)."""
    return f"https://{HOST}:{redfish_port(port)}"


def redfish_system_url(system: RedfishSystem, port: int | None = None) -> str:
    return f"{redfish_endpoint(port)}/redfish/v1/Systems/{system.uuid}"


def redfish_systems(count: int = fleet.DEFAULT_REDFISH_COUNT) -> list[RedfishSystem]:
    """The emulated systems: uuid (= Redfish system id), name, MACs, ..."""
    return fleet.redfish_systems(count)


def redfish_driver_info(paths: Paths, system: RedfishSystem, port: int | None = None) -> dict:
    """Ironic ``redfish`` driver_info for one emulated system (password
    revealed: for API calls only, never for logs)."""
    creds = ensure_credentials(paths)
    return {"redfish_address": redfish_endpoint(port),
            "redfish_system_id": f"/redfish/v1/Systems/{system.uuid}",
            "redfish_username": creds.redfish.username,
            "redfish_password": creds.redfish.password.reveal(),
            "redfish_verify_ca": str(pki.ca_bundle(paths))}


def machine_inventory_entry(paths: Paths, system: RedfishSystem, *, name: str, password_ref: str,
                            deploy_images: dict[str, str], kernel_append: str,
                            cleaning: str | dict = "automated") -> dict:
    """A nodeforge inventory entry for a machine-backed system, as a hardware team writes one for a
    server with the agent: virtual-media boot, direct deploy, in-band inspection by the agent,
    automated cleaning; ``deploy_images``: ``deploy_kernel``/``deploy_ramdisk`` (Glance IDs);
    ``kernel_append``: Ironic's kernel parameters, to which the agent's advertise settings are
    added (Ironic reaches the agent on the machine's forward on loopback). ``password_ref``: a
    secret reference (``file:...``), never the password; ``cleaning``: the entry's cleaning policy
    (docs/inventory.md: burn-in and a full-disk erase at enrollment, say)."""
    return {"name": name,
            "bmc": {"address": f"redfish+{redfish_system_url(system)}", "username": ensure_credentials(paths).redfish.username,
                    "password": password_ref, "verify_ca": str(pki.ca_bundle(paths))},
            "macs": list(system.macs),
            "interfaces": {"boot": "redfish-virtual-media", "deploy": "direct", "inspect": "agent"},
            "driver_info": {**deploy_images, "kernel_append_params":
                            f"{kernel_append} ipa-advertise-host={HOST} ipa-advertise-port={system.machine.agent_port}"},
            "inspect": True, "cleaning": cleaning}


def redfish_machines(count: int = fleet.DEFAULT_MACHINE_COUNT, agent_port: int | None = None,
                     **size) -> list[RedfishSystem]:
    """The machine-backed systems (``rf-vm-01`` ...), agents forwarded from :func:`agent_base_port`."""
    return fleet.machine_systems(count, agent_base_port(agent_port), **size)


def redfish_state_dir(paths: Paths, port: int | None = None) -> Path:
    return paths.data / "bmc" / f"redfish-{redfish_port(port)}"


def machine_dir(paths: Paths, system: RedfishSystem, port: int | None = None) -> Path:
    """Where the emulator keeps a machine's files: ``console.log`` (the serial console),
    ``qemu.log``, ``disk.qcow2``, ``OVMF_VARS.fd`` (wiped when the emulator starts again)."""
    return redfish_state_dir(paths, port) / "machines" / system.name


def machine_tools() -> dict:
    """What the emulator runs machines with (a missing tool: the machine refuses to power on and
    says which package to install). TCG: KVM is not trusted on these hosts (docs/devcloud.md)."""
    from nodeforge.imageverify import accel, boottest

    code, vars_ = next(((c, v) for c, v in boottest.OVMF_PAIRS if Path(c).is_file() and Path(v).is_file()),
                       (None, None))
    return {"qemu": runner.which("qemu-system-x86_64"), "qemu_img": runner.which("qemu-img"),
            "ovmf_code": code, "ovmf_vars": vars_, "accel": "tcg", "machine_type": accel.MACHINE,
            "cpu": accel.CPU["tcg"]}


def guest_forwards() -> list[int]:
    """The loopback ports a machine's guest reaches at ``machine.GUEST_HOST`` (same port number): Ironic's API
    (the agent's heartbeat and inspection callback), Ironic's http_root server (images) and the
    canary's phone-home listener (a deployed image's report), shifted by the local cloud's port offset."""
    from nodeforge.devcloud import openstack

    return [openstack.port("ironic"), openstack.port(openstack.IRONIC_HTTP), openstack.port(openstack.CANARY_PHONEHOME)]


def redfish_service(paths: Paths, port: int | None = None,
                    count: int = fleet.DEFAULT_REDFISH_COUNT,
                    machines: list[RedfishSystem] | None = None,
                    forwards: list[int] | None = None) -> ServiceSpec:
    """Write the Redfish emulator's config and return its ServiceSpec: ``count`` fake systems and
    ``machines`` (default :func:`redfish_machines`; ``[]`` for none). The machines' agent ports are
    among the spec's ports (checked free before the start); their guests reach ``forwards``
    (default :func:`guest_forwards`) at ``machine.GUEST_HOST``."""
    port = redfish_port(port)
    creds = ensure_credentials(paths)
    cert = pki.server_cert(paths, CERT_NAME)
    machines = redfish_machines() if machines is None else machines
    systems = fleet.redfish_systems(count) + list(machines)
    cfg_path = redfish_config_path(paths, port)
    _bmc_etc(paths)
    fleet.write_private_json(cfg_path, {
        "listen_ip": HOST,
        "state_dir": str(redfish_state_dir(paths, port)),
        "tls": {"cert": str(cert.cert), "key": str(cert.key)},
        "auth": {"username": creds.redfish.username, "password": creds.redfish.password.reveal()},
        "systems": [s.to_json() for s in systems],
        "machine_tools": machine_tools() if machines else {},
        "guest_forwards": (guest_forwards() if forwards is None else list(forwards)) if machines else [],
    })
    url = redfish_endpoint(port)

    def health() -> str | None:
        return _redfish_health(url, creds.redfish, cert.ca, len(systems))

    return ServiceSpec(
        name=REDFISH_SERVICE,
        argv=[_python(paths), str(REDFISH_SCRIPT), "--config", str(cfg_path), "--port", str(port)],
        ports=[port] + [s.machine.agent_port for s in machines],
        health=health,
        env={"PYTHONUNBUFFERED": "1"},
        group=GROUP,
        start_timeout=30.0,
        url=f"{url}/redfish/v1",
    )


def _redfish_health(url: str, cred: Credential, ca: Path, expected: int) -> str | None:
    import requests

    try:
        resp = requests.get(f"{url}/redfish/v1/Systems", auth=(cred.username, cred.password.reveal()),
                            verify=str(ca), timeout=5, headers={"Connection": "close"})
    except requests.RequestException as exc:
        return f"GET /redfish/v1/Systems failed: {type(exc).__name__}"
    if resp.status_code != 200:
        return f"GET /redfish/v1/Systems answered HTTP {resp.status_code}"
    try:
        count = resp.json().get("Members@odata.count")
    except ValueError:
        return "GET /redfish/v1/Systems answered non-JSON"
    if count != expected:
        return f"expected {expected} systems, emulator lists {count}"
    return None


# -- IPMI ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class IpmiEndpoint:
    bmc: IpmiBmc
    host: str
    port: int
    username: str
    password: Secret

    @property
    def address(self) -> str:
        """``ipmi://host:port`` (the inventory's BMC address form)."""
        return f"ipmi://{self.host}:{self.port}"

    def driver_info(self) -> dict:
        """Ironic ``ipmi`` driver_info (password revealed: for API calls only)."""
        return {"ipmi_address": self.host, "ipmi_port": self.port,
                "ipmi_username": self.username, "ipmi_password": self.password.reveal(),
                # pyghmi's BMC offers cipher suite 3 only.
                "ipmi_cipher_suite": 3}


def ipmi_endpoints(paths: Paths, base_port: int | None = None,
                   count: int = fleet.DEFAULT_IPMI_COUNT) -> list[IpmiEndpoint]:
    creds = ensure_credentials(paths, count)
    base_port = ipmi_base_port(base_port)
    return [IpmiEndpoint(bmc=b, host=HOST, port=b.port, username=creds.ipmi[b.name].username,
                         password=creds.ipmi[b.name].password)
            for b in fleet.ipmi_bmcs(base_port, count)]


def ipmi_service(paths: Paths, base_port: int | None = None,
                 count: int = fleet.DEFAULT_IPMI_COUNT) -> ServiceSpec:
    """Write the IPMI simulator's config and return its ServiceSpec."""
    base_port = ipmi_base_port(base_port)
    endpoints = ipmi_endpoints(paths, base_port, count)
    cfg_path = ipmi_config_path(paths, base_port)
    _bmc_etc(paths)
    fleet.write_private_json(cfg_path, {
        "listen_ip": HOST,
        "bmcs": [{"name": e.bmc.name, "port": e.port, "uuid": e.bmc.uuid, "username": e.username,
                  "password": e.password.reveal(), "power_state": e.bmc.power_state,
                  "boot_device": e.bmc.boot_device} for e in endpoints],
    })
    ports = [e.port for e in endpoints]

    def health() -> str | None:
        for port in ports:
            if not ipmi_probe(HOST, port):
                return f"no IPMI answer on udp/{port}"
        return None

    # UDP ports go in `udp_ports` (checked free as UDP by the Supervisor).
    port_kw = ({"ports": [], "udp_ports": ports}
               if "udp_ports" in {f.name for f in dataclasses.fields(ServiceSpec)} else {"ports": ports})
    return ServiceSpec(
        name=IPMI_SERVICE,
        argv=[_python(paths), str(IPMI_SCRIPT), "--config", str(cfg_path)],
        **port_kw,
        health=health,
        env={"PYTHONUNBUFFERED": "1"},
        group=GROUP,
        start_timeout=30.0,
        url=f"ipmi://{HOST}:{ports[0]}" + (f"-{ports[-1]}" if len(ports) > 1 else ""),
    )


def ipmitool(endpoint: IpmiEndpoint, *args: str, password: Secret | None = None,
             timeout: float = 30.0, cipher_suite: int = 3) -> runner.CompletedProcess:
    """Run ``ipmitool -I lanplus`` against an endpoint (:func:`nodeforge.base.ipmitool.ipmitool`);
    the password travels in the environment (``-E``), never on the command line."""
    return base_ipmitool.ipmitool(endpoint.host, endpoint.port, endpoint.username, password or endpoint.password,
                                  *args, cipher_suite=cipher_suite, retries=1, timeout_per_try=2, timeout=timeout)

