"""The emulated hardware of the local cloud, defined deterministically.

Every value here (UUIDs, names, MACs, serials, CPU, memory, disks) is a pure
function of the system's index, so tests, the emulators and later issues
agree on what "rf-node-007" is without sharing state. Only the BMC
credentials are random: generated once per state directory and kept 0600 in
``<state>/etc/bmc/credentials.json`` (see :func:`ensure_credentials`).

Two hardware shapes exist so that a later issue can classify nodes into two
resource classes:

* ``compute``: 2 x Intel Xeon Gold 6338 (32 cores each), 256 GiB RAM,
  1 x 480 GB NVMe SSD, 2 x 25 GbE, UEFI.
* ``storage``: 1 x AMD EPYC 7313P (16 cores), 128 GiB RAM, 2 x 960 GB SATA
  SSD + 4 x 8 TB SAS HDD, 1 x 10 GbE, UEFI (every fourth system).

MACs are locally administered (``02:4e:46:...``, "NF"), so they never clash
with real hardware: bytes 3-4 are the system index, byte 5 carries the BMC
kind (high nibble: 0 Redfish, 1 IPMI, 2 machine-backed Redfish) and the NIC
number (low nibble).

**Machine-backed systems** (``rf-vm-01`` ...; shape ``emulated``) are Redfish
systems with a real QEMU machine behind them (:class:`Machine`: memory, vCPUs,
disk, the host port forwarded to the guest's agent port). They are a fleet of
their own (:func:`machine_systems`), never among :func:`redfish_systems`, so
nothing that hands out fake systems ever powers a machine on. The emulator
runs a machine only while it is powered on (docs/devcloud.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import uuid
from pathlib import Path
from typing import Any

from nodeforge.base import fs
from nodeforge.devcloud.paths import Paths
from nodeforge.errors import ConfigError
from nodeforge.redact import Secret

DEFAULT_REDFISH_COUNT = 50
DEFAULT_IPMI_COUNT = 6  # the test session hands each out once: test_ironic 2, leak sweep 1, enroll 2
# Machine-backed Redfish systems in the local cloud's emulator: powered off, they cost nothing.
DEFAULT_MACHINE_COUNT = 1
# Host port forwarded to machine 1's agent port (machine i: + i - 1), before the port offset. Below
# 9768 so that every offset the tests use (up to 23000) stays under the ephemeral range.
AGENT_BASE_PORT = 9400
AGENT_GUEST_PORT = 9999          # ironic-python-agent's API port inside the guest
# Upper bound for the index encoding in MACs (two bytes).
MAX_SYSTEMS = 0xFFFF

_NAMESPACE = uuid.UUID("6f1c3a52-5a3e-4b8e-9d0e-6e6f6465666f")  # "nodeforge" fleet namespace
GiB = 1024 ** 3
GB = 1000 ** 3
TB = 1000 ** 4

REDFISH_USERNAME = "nf-redfish"


@dataclasses.dataclass(frozen=True)
class Nic:
    id: str            # Redfish EthernetInterface id
    mac: str           # lower-case colon form
    speed_mbps: int


@dataclasses.dataclass(frozen=True)
class Disk:
    id: str
    name: str
    capacity_bytes: int
    media_type: str    # "SSD" | "HDD"
    protocol: str      # "NVMe" | "SATA" | "SAS"
    model: str
    serial: str
    manufacturer: str


@dataclasses.dataclass(frozen=True)
class Cpu:
    vendor: str
    model: str
    sockets: int
    cores: int         # per socket
    threads: int       # per socket
    max_speed_mhz: int

    @property
    def total_cores(self) -> int:
        return self.sockets * self.cores

    @property
    def total_threads(self) -> int:
        return self.sockets * self.threads


@dataclasses.dataclass(frozen=True)
class Dimm:
    id: str
    capacity_mib: int
    speed_mhz: int
    manufacturer: str
    part_number: str
    serial: str


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    manufacturer: str
    model: str
    sku: str
    cpu: Cpu
    dimm_count: int
    dimm_gib: int
    disks: tuple[tuple[str, int, str, str, str], ...]   # (media, bytes, protocol, model, vendor)
    nic_count: int
    nic_speed_mbps: int
    boot_mode: str = "UEFI"

    @property
    def memory_gib(self) -> int:
        return self.dimm_count * self.dimm_gib


SHAPES: dict[str, Shape] = {
    "compute": Shape(
        name="compute", manufacturer="Contoso", model="CX-1100 Compute", sku="CX1100-2S",
        cpu=Cpu(vendor="Intel(R) Corporation", model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                sockets=2, cores=32, threads=64, max_speed_mhz=3200),
        dimm_count=16, dimm_gib=16,
        disks=(("SSD", 480 * GB, "NVMe", "PM983 480GB", "Samsung"),),
        nic_count=2, nic_speed_mbps=25000,
    ),
    # A QEMU machine (machine-backed systems): what the guest really has. The defaults fit an
    # ironic-python-agent ramdisk (2 GiB) and one TCG vCPU on a two-core host.
    "emulated": Shape(
        name="emulated", manufacturer="QEMU", model="Standard PC (Q35 + ICH9, 2009)", sku="NF-VM-1",
        cpu=Cpu(vendor="QEMU", model="QEMU TCG CPU (max)", sockets=1, cores=1, threads=1, max_speed_mhz=2000),
        dimm_count=1, dimm_gib=2,
        disks=(("SSD", 10 * GiB, "PCIe", "QEMU virtio-blk", "QEMU"),),
        nic_count=1, nic_speed_mbps=1000,
    ),
    "storage": Shape(
        name="storage", manufacturer="Contoso", model="SX-2400 Storage", sku="SX2400-1S",
        cpu=Cpu(vendor="Advanced Micro Devices, Inc.", model="AMD EPYC 7313P 16-Core Processor",
                sockets=1, cores=16, threads=32, max_speed_mhz=3700),
        dimm_count=8, dimm_gib=16,
        disks=(("SSD", 960 * GB, "SATA", "MZ7LH960", "Samsung"),
               ("SSD", 960 * GB, "SATA", "MZ7LH960", "Samsung"),
               ("HDD", 8 * TB, "SAS", "ST8000NM001A", "Seagate"),
               ("HDD", 8 * TB, "SAS", "ST8000NM001A", "Seagate"),
               ("HDD", 8 * TB, "SAS", "ST8000NM001A", "Seagate"),
               ("HDD", 8 * TB, "SAS", "ST8000NM001A", "Seagate")),
        nic_count=1, nic_speed_mbps=10000,
    ),
}


def shape_for(index: int) -> Shape:
    """Every fourth system (index 4, 8, ...) is a storage box."""
    return SHAPES["storage"] if index % 4 == 0 else SHAPES["compute"]


def mac_for(kind: int, index: int, nic: int) -> str:
    if not 0 <= index <= MAX_SYSTEMS:
        raise ValueError(f"system index {index} out of range")
    octets = [0x02, 0x4E, 0x46, index >> 8, index & 0xFF, (kind << 4) | nic]
    return ":".join(f"{o:02x}" for o in octets)


@dataclasses.dataclass(frozen=True)
class Machine:
    """The QEMU machine behind a machine-backed Redfish system."""
    memory_mib: int        # a whole number of GiB (Redfish reports TotalSystemMemoryGiB)
    cpus: int
    disk_gib: int          # the virtual disk (qcow2, sparse)
    agent_port: int        # 127.0.0.1:agent_port -> the guest's AGENT_GUEST_PORT

    def __post_init__(self):
        if self.memory_mib < 1024 or self.memory_mib % 1024:
            raise ValueError(f"machine memory {self.memory_mib} MiB: a whole number of GiB, at least 1")
        if not 1 <= self.cpus <= 8:
            raise ValueError(f"machine cpus {self.cpus}: 1 to 8")
        if not 1 <= self.disk_gib <= 1024:
            raise ValueError(f"machine disk {self.disk_gib} GiB: 1 to 1024")
        if not 1024 <= self.agent_port <= 65535:
            raise ValueError(f"machine agent port {self.agent_port}: 1024 to 65535")


@dataclasses.dataclass(frozen=True)
class RedfishSystem:
    index: int
    uuid: str
    name: str
    shape: str
    manufacturer: str
    model: str
    sku: str
    serial: str
    bios_version: str
    boot_mode: str
    power_state: str
    cpu: Cpu
    memory_gib: int
    dimms: tuple[Dimm, ...]
    nics: tuple[Nic, ...]
    disks: tuple[Disk, ...]
    machine: Machine | None = None     # a QEMU machine behind it (machine-backed); None: fake

    @property
    def macs(self) -> list[str]:
        return [n.mac for n in self.nics]

    @property
    def root_disk_bytes(self) -> int:
        return self.disks[0].capacity_bytes

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class IpmiBmc:
    index: int
    name: str
    uuid: str
    port: int
    username: str
    power_state: str       # "on" | "off"
    boot_device: str       # pyghmi names: "default", "network", "hd", ...
    macs: tuple[str, ...]
    shape: str


def redfish_system(index: int) -> RedfishSystem:
    """System number ``index`` (1-based)."""
    if index < 1:
        raise ValueError("system indexes start at 1")
    shape = shape_for(index)
    sys_uuid = str(uuid.uuid5(_NAMESPACE, f"redfish-system-{index}"))
    serial_prefix = "CX" if shape.name == "compute" else "SX"
    nics = tuple(Nic(id=f"NIC{n + 1}", mac=mac_for(0, index, n), speed_mbps=shape.nic_speed_mbps)
                 for n in range(shape.nic_count))
    disks = tuple(
        Disk(id=f"Disk{d + 1}", name=f"{media} {proto} {n // GB} GB" if n < TB else f"{media} {proto} {n // TB} TB",
             capacity_bytes=n, media_type=media, protocol=proto, model=model,
             serial=f"{vendor[:2].upper()}{index:05d}D{d + 1}", manufacturer=vendor)
        for d, (media, n, proto, model, vendor) in enumerate(shape.disks))
    dimms = tuple(
        Dimm(id=f"DIMM{m + 1}", capacity_mib=shape.dimm_gib * 1024, speed_mhz=3200,
             manufacturer="Micron", part_number="MTA18ASF2G72PDZ-3G2",
             serial=f"MU{index:05d}{m + 1:02d}")
        for m in range(shape.dimm_count))
    return RedfishSystem(
        index=index, uuid=sys_uuid, name=f"rf-node-{index:03d}", shape=shape.name,
        manufacturer=shape.manufacturer, model=shape.model, sku=shape.sku,
        serial=f"{serial_prefix}{index:07d}", bios_version=f"2.{index % 3}.1",
        boot_mode=shape.boot_mode, power_state="Off", cpu=shape.cpu,
        memory_gib=shape.memory_gib, dimms=dimms, nics=nics, disks=disks,
    )


def redfish_systems(count: int = DEFAULT_REDFISH_COUNT) -> list[RedfishSystem]:
    """The fake systems (no machine behind them)."""
    return [redfish_system(i) for i in range(1, count + 1)]


def machine_system(index: int, *, agent_port: int | None = None, memory_mib: int | None = None,
                   cpus: int | None = None, disk_gib: int | None = None) -> RedfishSystem:
    """Machine-backed system number ``index`` (1-based): ``rf-vm-01`` ..., shape ``emulated``;
    identity, MAC and serial depend only on the index, the machine's size on the arguments."""
    if index < 1:
        raise ValueError("system indexes start at 1")
    shape = SHAPES["emulated"]
    def given(value, default):
        return default if value is None else value

    machine = Machine(memory_mib=given(memory_mib, shape.memory_gib * 1024), cpus=given(cpus, shape.cpu.cores),
                      disk_gib=given(disk_gib, shape.disks[0][1] // GiB),
                      agent_port=given(agent_port, AGENT_BASE_PORT + index - 1))
    media, _, proto, model, vendor = shape.disks[0]
    cpu = dataclasses.replace(shape.cpu, cores=machine.cpus, threads=machine.cpus)
    return RedfishSystem(
        index=index, uuid=str(uuid.uuid5(_NAMESPACE, f"redfish-machine-{index}")), name=f"rf-vm-{index:02d}",
        shape=shape.name, manufacturer=shape.manufacturer, model=shape.model, sku=shape.sku,
        serial=f"VM{index:07d}", bios_version="OVMF 2022.11", boot_mode=shape.boot_mode, power_state="Off",
        cpu=cpu, memory_gib=machine.memory_mib // 1024,
        dimms=(Dimm(id="DIMM1", capacity_mib=machine.memory_mib, speed_mhz=3200, manufacturer="QEMU",
                    part_number="QEMU-RAM", serial=f"VM{index:05d}01"),),
        nics=(Nic(id="NIC1", mac=mac_for(2, index, 0), speed_mbps=shape.nic_speed_mbps),),
        # Two drives behind the machine's storage controller, mirrored into the one volume the guest
        # sees as its disk (a server with a hardware RAID controller: the OS sees volumes, the BMC
        # drives and volumes). Volumes made or deleted at the BMC change its record, not the guest.
        disks=tuple(Disk(id=f"Disk{d}", name=f"{media} {proto} {machine.disk_gib} GiB",
                         capacity_bytes=machine.disk_gib * GiB, media_type=media, protocol=proto, model=model,
                         serial=f"VM{index:05d}D{d}", manufacturer=vendor) for d in (1, 2)),
        machine=machine,
    )


def machine_systems(count: int = DEFAULT_MACHINE_COUNT, agent_base_port: int = AGENT_BASE_PORT,
                    **size) -> list[RedfishSystem]:
    """The machine-backed systems, machine i's agent forwarded from ``agent_base_port + i - 1``."""
    return [machine_system(i, agent_port=agent_base_port + i - 1, **size) for i in range(1, count + 1)]


def ipmi_bmcs(base_port: int = 6230, count: int = DEFAULT_IPMI_COUNT) -> list[IpmiBmc]:
    result = []
    for i in range(1, count + 1):
        shape = shape_for(i)
        result.append(IpmiBmc(
            index=i, name=f"ipmi-node-{i:02d}",
            uuid=str(uuid.uuid5(_NAMESPACE, f"ipmi-bmc-{i}")),
            port=base_port + i - 1,
            username=f"ipmi{i:02d}",
            power_state="on" if i % 2 == 0 else "off",
            boot_device="default",
            macs=tuple(mac_for(1, i, n) for n in range(shape.nic_count)),
            shape=shape.name,
        ))
    return result


# -- credentials ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Credential:
    username: str
    password: Secret

    def __repr__(self) -> str:
        return f"Credential(username={self.username!r}, password=***)"


@dataclasses.dataclass(frozen=True)
class Credentials:
    redfish: Credential
    ipmi: dict[str, Credential]     # BMC name -> credential

    def for_ipmi(self, bmc: IpmiBmc) -> Credential:
        return self.ipmi[bmc.name]


def credentials_path(paths: Paths) -> Path:
    return paths.etc / "bmc" / "credentials.json"


def _new_password(nbytes: int) -> str:
    # URL-safe alphabet: no shell, URL or htpasswd metacharacters.
    return secrets.token_urlsafe(nbytes)


def ensure_credentials(paths: Paths, ipmi_count: int = DEFAULT_IPMI_COUNT) -> Credentials:
    """Load the BMC credentials, creating any that are missing (0600)."""
    path = credentials_path(paths)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    with fs.locked(path.parent / ".lock"):
        return _ensure_credentials_locked(path, ipmi_count)


def _ensure_credentials_locked(path: Path, ipmi_count: int) -> Credentials:
    data: dict[str, Any] = {}
    if path.exists():
        data = _read_json(path)
    changed = False
    if "redfish" not in data:
        data["redfish"] = {"username": REDFISH_USERNAME, "password": _new_password(18)}
        changed = True
    ipmi = data.setdefault("ipmi", {})
    for bmc in ipmi_bmcs(count=ipmi_count):
        if bmc.name not in ipmi:
            # IPMI 2.0 passwords are at most 20 bytes; 12 bytes -> 16 chars.
            ipmi[bmc.name] = {"username": bmc.username, "password": _new_password(12)}
            changed = True
    if changed:
        write_private_json(path, data)
    return _to_credentials(path, data)


def load_credentials(paths: Paths) -> Credentials:
    """Load existing credentials (raises ConfigError if never generated)."""
    path = credentials_path(paths)
    if not path.exists():
        raise ConfigError(path=str(path), detail="no BMC credentials yet; start the local cloud first",
                          hint="run 'nodeforge devcloud up'")
    return _to_credentials(path, _read_json(path))


def _to_credentials(path: Path, data: dict[str, Any]) -> Credentials:
    try:
        rf = data["redfish"]
        return Credentials(
            redfish=Credential(rf["username"], Secret(rf["password"])),
            ipmi={name: Credential(c["username"], Secret(c["password"]))
                  for name, c in data.get("ipmi", {}).items()},
        )
    except (KeyError, TypeError):
        raise ConfigError(path=str(path), detail="malformed BMC credentials file") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        # Never echo the content: it holds passwords.
        raise ConfigError(path=str(path), detail="unreadable or invalid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(path=str(path), detail="expected a JSON object")
    return data


def write_private_json(path: Path, data: Any) -> None:
    """Write JSON atomically with mode 0600 from the first byte."""
    fs.atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n", 0o600)
