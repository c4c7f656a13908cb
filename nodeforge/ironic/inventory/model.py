"""Bare-metal inventories: the model every format is read into (:class:`Inventory` of
:class:`NodeSpec`), and the BMC addresses (:func:`parse_bmc_url`, :data:`HARDWARE`)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import re
from pathlib import Path
from typing import Any

from nodeforge import schema
from nodeforge.base import secrets as secrets_mod
from nodeforge.redact import MASK, Secret, scrub_obj
from nodeforge.errors import ConfigError, ExitCode  # noqa: F401 - ConfigError is part of the inventory API
from nodeforge.schema import Problem, SchemaError, vocab


SCHEMA_VERSION = 1
log = logging.getLogger(__name__)

_INTERFACES = ("bios", "boot", "console", "deploy", "firmware", "inspect", "management", "network",
               "power", "raid", "rescue", "storage", "vendor")
# A realistic large batch (10,000 nodes with ports, docs/inventory.md "Large inventories") fits; a
# larger or hostile file is refused by the loader before the round-trip parse.
LIMITS = schema.Limits(max_bytes=8 << 20, max_values=500_000)


class Format(str, enum.Enum):
    NODEFORGE = "nodeforge"
    CSV = "csv"
    IRONICCLIENT = "ironicclient"
    BIFROST = "bifrost"


class BmcKind(str, enum.Enum):
    IPMI = "ipmi"
    REDFISH = "redfish"
    REDFISH_VIRTUALMEDIA = "redfish-virtualmedia"
    IDRAC_REDFISH = "idrac-redfish"
    FAKE = "fake"


@dataclasses.dataclass(frozen=True)
class Hardware:
    hardware_type: str
    interfaces: dict[str, str]
    needs_credentials: bool = True


# URL scheme -> (BMC kind, Redfish transport)
SCHEMES: dict[str, tuple[BmcKind, str | None]] = {
    "ipmi": (BmcKind.IPMI, None),
    "redfish": (BmcKind.REDFISH, "https"),
    "redfish+https": (BmcKind.REDFISH, "https"),
    "redfish+http": (BmcKind.REDFISH, "http"),
    "redfish-virtualmedia": (BmcKind.REDFISH_VIRTUALMEDIA, "https"),
    "redfish-virtualmedia+https": (BmcKind.REDFISH_VIRTUALMEDIA, "https"),
    "redfish-virtualmedia+http": (BmcKind.REDFISH_VIRTUALMEDIA, "http"),
    "idrac-redfish": (BmcKind.IDRAC_REDFISH, "https"),
    "idrac-redfish+https": (BmcKind.IDRAC_REDFISH, "https"),
    "idrac-redfish+http": (BmcKind.IDRAC_REDFISH, "http"),
    "fake": (BmcKind.FAKE, None),
}

# BMC kind -> Ironic hardware type and the interfaces nodeforge sets.
HARDWARE: dict[BmcKind, Hardware] = {
    BmcKind.IPMI: Hardware("ipmi", {"management_interface": "ipmitool", "power_interface": "ipmitool"}),
    BmcKind.REDFISH: Hardware("redfish", {"management_interface": "redfish", "power_interface": "redfish"}),
    BmcKind.REDFISH_VIRTUALMEDIA: Hardware("redfish", {"management_interface": "redfish",
                                                       "power_interface": "redfish",
                                                       "boot_interface": "redfish-virtual-media"}),
    BmcKind.IDRAC_REDFISH: Hardware("idrac", {"management_interface": "idrac-redfish",
                                              "power_interface": "idrac-redfish"}),
    BmcKind.FAKE: Hardware("fake-hardware", {}, needs_credentials=False),
}


class CleanMode(str, enum.Enum):
    AUTOMATED = "automated"   # provide runs Ironic's automated cleaning
    MANUAL = "manual"         # nodeforge runs the listed steps, then provide without automated cleaning
    NONE = "none"             # no cleaning at all (automated_clean=False on the node)


@dataclasses.dataclass(frozen=True)
class Location:
    """Where a node (port, port group, chassis) was read: ``file:line`` (``: row N`` for CSV)."""

    file: str
    line: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        if self.row is not None:
            return f"{self.file}:{self.line}: row {self.row}" if self.line else f"{self.file}: row {self.row}"
        return f"{self.file}:{self.line}" if self.line else self.file


class InventoryError(SchemaError):
    """Every problem of an inventory (exit 2): ``file:line: key.path: detail`` per line;
    with ``--output json`` the error document lists them under ``problems``."""

    exit_code = ExitCode.USAGE

    def __init__(self, path: str, problems: list[Problem]):
        super().__init__(path, sorted(problems, key=lambda p: (p.line or 0)),
                         hint="fix every listed problem; nothing was written")
        self.details = {"valid": False, **self.details}


# --------------------------------------------------------------------------- the model

@dataclasses.dataclass(frozen=True)
class Bmc:
    kind: BmcKind
    address: str                 # canonical URL, no credentials
    host: str
    port: int | None
    transport: str | None        # http/https for Redfish
    system_id: str | None        # /redfish/v1/Systems/<id>
    username: str | None = None
    password: Secret | None = None
    verify_ca: bool | str = True

    @property
    def hardware(self) -> Hardware:
        return HARDWARE[self.kind]

    @property
    def is_redfish(self) -> bool:
        return self.kind in (BmcKind.REDFISH, BmcKind.REDFISH_VIRTUALMEDIA, BmcKind.IDRAC_REDFISH)

    @property
    def redfish_address(self) -> str:
        port = f":{self.port}" if self.port else ""
        return f"{self.transport}://{_host_in_url(self.host)}{port}"

    def driver_info(self, *, reveal: bool = False) -> dict[str, Any]:
        """Ironic ``driver_info``. The password is masked unless ``reveal``
        (only the provisioner's API call reveals it)."""
        pw = (self.password.reveal() if reveal else MASK) if self.password is not None else None
        if self.kind is BmcKind.IPMI:
            info: dict[str, Any] = {"ipmi_address": self.host, "ipmi_port": self.port or 623}
            if self.username is not None:
                info["ipmi_username"] = self.username
            if pw is not None:
                info["ipmi_password"] = pw
            return info
        if self.is_redfish:
            info = {"redfish_address": self.redfish_address}
            if self.system_id:
                info["redfish_system_id"] = self.system_id
            if self.username is not None:
                info["redfish_username"] = self.username
            if pw is not None:
                info["redfish_password"] = pw
            if self.verify_ca is not True:
                info["redfish_verify_ca"] = self.verify_ca
            return info
        return {}

    def credential_fingerprint(self) -> str | None:
        if self.password is None:
            return None
        return secrets_mod.fingerprint(self.username or "", self.password, self.address)


def bmc_key_from_driver_info(driver: str | None, info: dict | None) -> str | None:
    """The canonical BMC key of an existing Ironic node (for matching)."""
    from urllib.parse import urlsplit

    info = info or {}
    if info.get("ipmi_address"):
        return f"ipmi://{_host_in_url(str(info['ipmi_address']).lower())}:{int(info.get('ipmi_port') or 623)}"
    if info.get("redfish_address"):
        addr = str(info["redfish_address"]).rstrip("/").lower()
        if "://" not in addr:
            addr = "https://" + addr
        parts = urlsplit(addr)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        sys_id = str(info.get("redfish_system_id") or "").rstrip("/")
        return f"redfish://{_host_in_url(parts.hostname or '')}:{port}{sys_id}"
    return None


def bmc_key(bmc: Bmc) -> str | None:
    """The same canonical key for an inventory BMC (None for fake://)."""
    return bmc_key_from_driver_info(bmc.hardware.hardware_type, bmc.driver_info())


@dataclasses.dataclass(frozen=True)
class CleanStep:
    interface: str
    step: str
    args: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"interface": self.interface, "step": self.step, "args": dict(self.args)}


# Burn-in kinds (ironic-python-agent's generic hardware manager: stress-ng for CPU and memory, fio
# for the disks): its clean step and the driver_info key that bounds its time.
BURN_IN = {"cpu": ("burnin_cpu", "agent_burnin_cpu_timeout"),
           "memory": ("burnin_memory", "agent_burnin_vm_timeout"),
           "disk": ("burnin_disk", "agent_burnin_fio_disk_runtime")}
ERASE_FULL = "full"


@dataclasses.dataclass(frozen=True)
class Cleaning:
    """How a node is cleaned. ``mode`` is Ironic's cleaning on every provide (``automated``: the
    conductor's automated cleaning, a metadata erase on the local cloud) or nodeforge's own
    (``manual``) or none. At enrollment, before the first provide, the agent also runs the
    policy's burn-in (``burn_in``: seconds per kind, in the order of :data:`BURN_IN`), then a
    full-disk erase (``erase: full``: the agent's ``erase_devices``, a secure erase where the disk
    has one, else ``shred`` with the passes of the conductor's ``[deploy] shred_*`` settings,
    which Ironic hands the agent itself), then the listed manual ``steps``: one manual cleaning
    (:meth:`enrollment_steps`)."""

    mode: CleanMode = CleanMode.AUTOMATED
    steps: tuple[CleanStep, ...] = ()
    disable_ramdisk: bool = False
    erase: str = "metadata"
    burn_in: tuple[tuple[str, int], ...] = ()

    def enrollment_steps(self) -> list[dict]:
        """The manual cleaning run once at enrollment (empty: none)."""
        seconds = dict(self.burn_in)
        steps = [{"interface": "deploy", "step": BURN_IN[k][0], "args": {}} for k in BURN_IN if k in seconds]
        if self.erase == ERASE_FULL:
            steps.append({"interface": "deploy", "step": "erase_devices", "args": {}})
        return steps + [s.to_dict() for s in self.steps]

    def driver_info(self) -> dict[str, Any]:
        """The agent's settings for those steps (driver_info; the inventory's own values win)."""
        info: dict[str, Any] = {BURN_IN[k][1]: v for k, v in self.burn_in}
        if "disk" in dict(self.burn_in):
            info["agent_burnin_fio_disk_loops"] = 1     # fio runs for the time given, not four passes
        if "memory" in dict(self.burn_in):
            # stress-ng's share of the available memory (the agent's default, 98%, leaves the agent,
            # which runs from its initramfs in RAM, too little)
            info["agent_burnin_vm_vm-bytes"] = "75%"
        return info

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "steps": [s.to_dict() for s in self.steps],
                "disable_ramdisk": self.disable_ramdisk, "erase": self.erase,
                "burn_in": dict(self.burn_in)}


@dataclasses.dataclass
class PortSpec:
    """One port of a node (python-ironicclient format): its MAC, the port group
    it belongs to (``portgroup``: the group's key on the same node, or
    ``portgroup_uuid`` of an existing one) and the Ironic fields given."""

    address: str
    location: Location
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)  # pxe_enabled, local_link_connection, ...
    portgroup: str | None = None
    portgroup_uuid: str | None = None

    def to_dict(self) -> dict:
        return {"address": self.address, **self.fields, "portgroup": self.portgroup,
                **({"portgroup_uuid": self.portgroup_uuid} if self.portgroup_uuid else {}),
                "location": str(self.location)}


@dataclasses.dataclass
class PortGroupSpec:
    """A port group of a node. ``key`` finds it again: its name, else its
    MAC address, else its uuid (one of them is required)."""

    key: str
    location: Location
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)   # name, address, mode, properties, ...

    def to_dict(self) -> dict:
        return {"key": self.key, **self.fields, "location": str(self.location)}


@dataclasses.dataclass
class ChassisSpec:
    """A chassis. Ironic chassis have no name: nodeforge finds one again by
    ``uuid`` when the file gives it, else by ``description`` among the chassis
    marked with the inventory's scope (``extra.nodeforge_scope``)."""

    key: str                  # "uuid:<uuid>" or "description:<text>"
    location: Location
    description: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    uuid: str | None = None
    scope: str | None = None

    def to_dict(self) -> dict:
        return {"key": self.key, "uuid": self.uuid, "description": self.description, "extra": self.extra,
                "location": str(self.location)}


@dataclasses.dataclass
class NodeSpec:
    name: str
    bmc: Bmc
    location: Location
    macs: list[str] = dataclasses.field(default_factory=list)
    resource_class: str | None = None
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)
    traits: list[str] | None = None
    owner: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    interfaces: dict[str, str] = dataclasses.field(default_factory=dict)
    driver_info_extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    inspect: bool = False
    cleaning: Cleaning = dataclasses.field(default_factory=Cleaning)
    description: str | None = None
    scope: str | None = None          # the inventory's ownership scope (extra.nodeforge_scope)
    # python-ironicclient format: the chassis (ChassisSpec.key) it is nested in, or the uuid of an
    # existing chassis; its ports and port groups in full; Ironic fields passed as they are.
    chassis: str | None = None
    chassis_uuid: str | None = None
    ports: list[PortSpec] = dataclasses.field(default_factory=list)
    portgroups: list[PortGroupSpec] = dataclasses.field(default_factory=list)
    ironic: dict[str, Any] = dataclasses.field(default_factory=dict)   # uuid, conductor_group, lessee, ...
    # Node fields that need a newer Ironic API (IC_NEWER_API["node"]): set by a PATCH at that version.
    ironic_newer: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def driver(self) -> str:
        return self.bmc.hardware.hardware_type

    def all_interfaces(self) -> dict[str, str]:
        return {**self.bmc.hardware.interfaces, **self.interfaces}

    def driver_info(self, *, reveal: bool = False) -> dict[str, Any]:
        extra = {k: ((v.reveal() if reveal else MASK) if isinstance(v, Secret) else v)
                 for k, v in self.driver_info_extra.items()}
        return {**extra, **self.bmc.driver_info(reveal=reveal)}

    def credential_fingerprint(self) -> str | None:
        """The BMC credentials' fingerprint, covering the secret driver_info fields too when
        there are any (unchanged for a node without them, so no false rotation)."""
        fp = self.bmc.credential_fingerprint()
        secrets_ = sorted((k, v) for k, v in self.driver_info_extra.items() if isinstance(v, Secret))
        if fp is None or not secrets_:
            return fp
        joined = Secret("\0".join(f"{k}={v.reveal()}" for k, v in secrets_))
        return secrets_mod.fingerprint(fp, joined, self.bmc.address)

    def to_dict(self) -> dict:
        """Masked view (validate / dry-run output)."""
        return {
            "name": self.name, "driver": self.driver, "bmc": self.bmc.address,
            "driver_info": self.driver_info(), "interfaces": self.all_interfaces(),
            "macs": self.macs, "resource_class": self.resource_class, "properties": self.properties,
            "traits": self.traits, "owner": self.owner, "extra": self.extra, "inspect": self.inspect,
            "cleaning": self.cleaning.to_dict(), "scope": self.scope, "location": str(self.location),
            **({"chassis": self.chassis} if self.chassis else {}),
            **({"chassis_uuid": self.chassis_uuid} if self.chassis_uuid else {}),
            **({"ports": [scrub_obj(p.to_dict()) for p in self.ports]} if self.ports else {}),
            **({"portgroups": [scrub_obj(g.to_dict()) for g in self.portgroups]} if self.portgroups else {}),
            **({"ironic": scrub_obj({**self.ironic, **self.ironic_newer})}
               if self.ironic or self.ironic_newer else {}),
        }


@dataclasses.dataclass
class Inventory:
    path: Path
    format: Format
    nodes: list[NodeSpec]
    scope: str | None = None          # set by load(): ``scope:`` or derived from the path
    scope_source: str = "file"        # "file" or "derived"
    chassis: list[ChassisSpec] = dataclasses.field(default_factory=list)   # python-ironicclient format
    warnings: list[Problem] = dataclasses.field(default_factory=list)   # fields read but not enrolled

    def by_name(self) -> dict[str, NodeSpec]:
        return {n.name: n for n in self.nodes}


# --------------------------------------------------------------------------- BMC URLs

def normalize_mac(text: str) -> str | None:
    try:
        return vocab.check_mac(str(text).strip())
    except ValueError:
        return None


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


_REDFISH_PATH = re.compile(r"/redfish/v1/Systems/[^/]+/?")


@functools.lru_cache(maxsize=1024)
def parse_bmc_url(url: str) -> tuple[BmcKind, str, int | None, str | None, str | None]:
    """(kind, host, port, transport, system_id) of a BMC URL; ValueError says why not
    (never echoing a credential)."""
    from urllib.parse import urlsplit

    url = str(url).strip()
    if "://" not in url:
        raise ValueError(f"not a BMC URL (expected one of {', '.join(sorted(SCHEMES))}://host)")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unknown BMC scheme {vocab.shown(scheme)} (expected one of {', '.join(sorted(SCHEMES))})")
    kind, transport = SCHEMES[scheme]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("invalid port (1-65535)") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the BMC URL are not allowed; use username/password fields")
    if parts.query or parts.fragment:
        raise ValueError("a BMC URL takes no query or fragment")
    if port == 0:
        raise ValueError("invalid port 0 (1-65535)")
    host = parts.hostname or ""
    if kind is BmcKind.FAKE:
        if not host and not parts.path.strip("/"):
            raise ValueError("fake:// needs an identifier (fake://NAME)")
        return kind, (host or parts.path.strip("/")), port, None, None
    if not host:
        raise ValueError("missing host")
    try:
        vocab.check_host(host)
    except ValueError:
        raise ValueError(f"invalid host name {vocab.shown(host)}") from None
    path = parts.path.rstrip("/")
    if kind is BmcKind.IPMI and path:
        raise ValueError("an ipmi:// URL takes no path")
    if path and not _REDFISH_PATH.fullmatch(path):
        raise ValueError("Redfish path must be /redfish/v1/Systems/<id>")
    if path and path.rsplit("/", 1)[1] in (".", ".."):
        raise ValueError("a Redfish system id cannot be '.' or '..' (a path step, not a system)")
    return kind, host, port, transport, (path or None)

