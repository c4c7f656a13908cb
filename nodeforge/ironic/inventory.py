"""Bare-metal inventories: one model, four input formats, whole-batch validation.

Formats (``docs/inventory.md``; their schemas, generated from the declarations
below, in ``docs/schemas.md``), detected from the file or forced by ``fmt``:

* ``nodeforge`` YAML/JSON (:class:`NodeforgeFile`): ``{version: 1, scope: NAME,
  defaults: {...}, nodes: [...]}``.
* ``csv`` (:class:`CsvRow`): one node per row; the header names the columns.
* ``ironicclient`` (:class:`BulkFile`): python-ironicclient's ``baremetal create``
  file, all of it: chassis (with nested nodes), nodes with nested ports and port
  groups, port groups with nested ports (enrolled by :func:`enroll.plan_bulk`).
* ``bifrost`` (:class:`BifrostNode`): Bifrost's inventory (a mapping of node name
  to ``{driver, driver_info: {power: {...}}, nics: [{mac}], properties}``), JSON or
  YAML, or its legacy header-less CSV (:class:`BifrostCsvRow`).

Every file is read by the schema layer's one safe loader (:mod:`nodeforge.schema`)
and validated against its declaration; the CSV and Bifrost readers are thin
adapters that produce the mapping a nodeforge node (:class:`NodeEntry`) is, and
every problem is reported in the one shape ``file:line: key.path: detail``
(:class:`~nodeforge.schema.Problem`), the key path the one in the file as
written (``nodes[3].bmc.password``, ``defaults.bmc.username``,
``chassis[0].nodes[1].ports[2].address``, a CSV's ``[row].column``).

BMCs are URLs (``ipmi://host[:port]``, ``redfish[+http|+https]://host[:port][/redfish/v1/Systems/ID]``,
``redfish-virtualmedia://``, ``idrac-redfish://``, ``fake://``) mapped to the
Ironic hardware type, interfaces and ``driver_info`` by :data:`HARDWARE`.
Passwords and the other secret ``driver_info`` fields are credential references
(:mod:`.secrets`), masked by field in every output.

Every inventory has an ownership scope (:attr:`Inventory.scope`): ``scope:``
at the top of a nodeforge YAML/JSON file, else derived from the file's path
(:func:`constants.derive_scope`; the other formats have no place for it).
Enrollment marks nodes with it (``extra.nodeforge_scope``).
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import functools
import io
import logging
import re
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Optional

from pydantic import (AfterValidator, BeforeValidator, Field, ValidationError, ValidationInfo, create_model,
                      field_validator, model_validator)
from pydantic_core import PydanticCustomError

from nodeforge import schema
from nodeforge.errors import ConfigError, ExitCode  # noqa: F401 - ConfigError is part of this module's API
from nodeforge.ironic import constants as C
from nodeforge.base import secrets as secrets_mod
from nodeforge.redact import MASK, Secret, scrub_obj
from nodeforge.schema import Declared, Document, Problem, Rule, SchemaError, vocab

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


@dataclasses.dataclass(frozen=True)
class Cleaning:
    mode: CleanMode = CleanMode.AUTOMATED
    steps: tuple[CleanStep, ...] = ()
    disable_ramdisk: bool = False

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "steps": [s.to_dict() for s in self.steps],
                "disable_ramdisk": self.disable_ramdisk}


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
    return kind, host, port, transport, (path or None)


# --------------------------------------------------------------------------- declarations
# Each shape declared once; docs/schemas.md is generated from these.

def _bmc_address(value: str) -> str:
    parse_bmc_url(value)
    return value.strip().rstrip("/")


BMC_RULE = ("a BMC URL: ipmi://HOST[:PORT], redfish[+http|+https]://HOST[:PORT][/redfish/v1/Systems/ID], "
            "redfish-virtualmedia[+http|+https]://..., idrac-redfish[+http|+https]://... or fake://NAME; "
            "no credentials")
BmcAddress = Annotated[str, AfterValidator(_bmc_address), Rule(BMC_RULE)]
UUID_RULE = "a UUID (stored lower case)"
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)


def _uuid(value: str) -> str:
    if not _UUID.fullmatch(value):
        raise ValueError(f"expected {UUID_RULE}, got {vocab.shown(value)}")
    return value.lower()


Uuid = Annotated[str, AfterValidator(_uuid), Rule(UUID_RULE)]
_CONDUCTOR_GROUP = re.compile(r"[A-Za-z0-9_.-]{0,255}")
CONDUCTOR_GROUP_RULE = "at most 255 characters of A-Z a-z 0-9 _ - . (stored lower case)"


def _conductor_group(value: str) -> str:
    if not _CONDUCTOR_GROUP.fullmatch(value):
        raise ValueError(f"expected {CONDUCTOR_GROUP_RULE}, got {vocab.shown(value)}")
    return value.lower()


def _text(low: int, high: int):
    return Annotated[str, Field(min_length=low, max_length=high), Rule(f"text of {low}-{high} characters")]


def _no_reserved(extra: dict) -> dict:
    bad = sorted(str(k) for k in extra if str(k).startswith("nodeforge_"))
    if bad:
        raise ValueError(f"key(s) {', '.join(bad)}: keys starting nodeforge_ are reserved for nodeforge's bookkeeping")
    return extra


def _interfaces(value: dict) -> dict:
    out = {}
    for k, v in value.items():
        name = k.removesuffix("_interface")
        if name not in _INTERFACES:
            raise ValueError(f"unknown interface {k!r} (one of {', '.join(_INTERFACES)})")
        out[f"{name}_interface"] = v
    return out


Extra = Annotated[dict[str, Any], AfterValidator(_no_reserved), Rule("keys starting nodeforge_ are reserved")]
Interfaces = Annotated[dict[str, str], AfterValidator(_interfaces),
                       Rule(f"keys: {', '.join(_INTERFACES)} (with or without _interface)")]
Password = Annotated[str, schema.SECRET]      # a reference (env:, file:, fernet:), resolved while validated


def _macs(macs: list) -> list:
    twice = next((m for i, m in enumerate(macs) if m in macs[:i]), None)
    if twice:
        raise ValueError(f"MAC {twice} listed twice")
    return macs


Macs = Annotated[list[vocab.MacAddress], AfterValidator(_macs), Rule("each once")]


def _secret_error(detail: str) -> PydanticCustomError:
    # A nodeforge message about a secret field: it never holds the value (declare._detail keeps it).
    return PydanticCustomError("nodeforge_secret", "{detail}", {"detail": detail})


def _of_node(detail: str, node: str | None) -> str:
    """``detail`` naming the node (None: the key path names it already, or the value came from defaults)."""
    return f"{detail} (node {node})" if node else detail


def _node_label(name: Any, keypath: tuple) -> str | None:
    """The node name a secret's problem adds to its key path: none when the key path starts with
    the name (Bifrost) or the value is the one ``defaults`` gives every node (one problem, not one a node)."""
    if not isinstance(name, str) or not name or keypath[:1] in (("defaults",), (name,)):
        return None
    return name


def _bmc_kind(info: ValidationInfo) -> BmcKind | None:
    address = info.data.get("address")
    return parse_bmc_url(address)[0] if address else None


class BmcDefaults(Declared):
    """A node's BMC (in ``defaults``: the values every node's BMC gets unless it sets its own)."""

    address: Optional[BmcAddress] = None
    username: Optional[Annotated[str, Field(min_length=1)]] = Field(
        None, description="required for a real BMC (not fake://)")
    password: Optional[Password] = Field(
        None, description=f"required for a real BMC: {vocab.SECRET_REF_RULE} (plaintext only with "
                          "--allow-plaintext-secrets)")
    verify_ca: bool | str = Field(True, description="Redfish only: true, false or a CA bundle path "
                                                    "(relative to the inventory)")


class BmcEntry(BmcDefaults):
    """A node's BMC. The password is resolved when the inventory is read (a reference that does
    not resolve is a problem of this field); a fake:// BMC's credentials are not used."""

    address: BmcAddress
    # validate_default: "required for a real BMC" is this field's problem, with its key path.
    username: Optional[Annotated[str, Field(min_length=1)]] = Field(
        None, validate_default=True, description=BmcDefaults.model_fields["username"].description)
    password: Optional[Password] = Field(
        None, validate_default=True, description=BmcDefaults.model_fields["password"].description)

    @field_validator("username")
    @classmethod
    def _username(cls, value, info: ValidationInfo):
        kind = _bmc_kind(info)
        if kind is None or not HARDWARE[kind].needs_credentials:
            return None
        if not value:
            raise ValueError("required for a real BMC")
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value, info: ValidationInfo):
        kind = _bmc_kind(info)
        if kind is None or not HARDWARE[kind].needs_credentials:
            return None
        if not value:
            raise _secret_error(f"required for a real BMC ({vocab.SECRET_REF_RULE})")
        resolver = (info.context or {}).get("resolver")
        if resolver is None:
            return value
        try:
            return resolver.resolve(value)
        except secrets_mod.SecretRefError as exc:
            raise _secret_error(_of_node(str(exc), (info.context or {}).get("node"))) from None

    @field_validator("verify_ca")
    @classmethod
    def _verify_ca(cls, value, info: ValidationInfo):
        if _bmc_kind(info) is BmcKind.IPMI:
            raise ValueError("only for Redfish BMCs")
        resolver = (info.context or {}).get("resolver")
        if isinstance(value, str) and resolver is not None:
            ca = Path(value).expanduser()
            ca = ca if ca.is_absolute() else resolver.base_dir / ca
            if not ca.exists():
                raise ValueError(f"CA bundle {ca} not found")
            return str(ca)
        return value


class CleanStepEntry(Declared):
    """One manual cleaning step (Ironic's clean step)."""

    interface: Annotated[str, Field(min_length=1)]
    step: Annotated[str, Field(min_length=1)]
    args: dict[str, Any] = {}


class CleaningPolicy(Declared):
    """How a node is cleaned: ``automated`` (Ironic's automated cleaning on provide),
    ``manual`` (the listed steps, then provide without automated cleaning) or ``none``.
    A bare mode (``cleaning: none``) is the same as ``{mode: none}``."""

    mode: Literal["automated", "manual", "none"] = "automated"
    steps: list[CleanStepEntry] = []
    disable_ramdisk: bool = False

    @model_validator(mode="after")
    def _steps_match_mode(self):
        if self.mode == "manual" and not self.steps:
            raise ValueError("manual cleaning needs at least one step")
        if self.mode != "manual" and self.steps:
            raise ValueError("steps are only used with mode: manual")
        return self


Cleaning_ = Annotated[CleaningPolicy, BeforeValidator(lambda v: {"mode": v} if isinstance(v, str) else v)]


class _NodeFields(Declared):
    """Fields a node and ``defaults`` share."""

    resource_class: Optional[vocab.ResourceClass] = None
    properties: dict[str, Any] = {}
    traits: Optional[list[vocab.Trait]] = Field(None, description="kept sorted, once each")
    owner: Optional[str] = Field(None, description="a Keystone project ID or name")
    extra: Extra = {}
    interfaces: Interfaces = {}
    driver_info: dict[str, Any] = Field({}, description=(
        "more Ironic driver_info (e.g. deploy_kernel); the BMC's address and password go under bmc; "
        "ipmi_kg_key, snmp_auth_key, snmp_priv_key are secret references like the password"))
    inspect: bool = False
    cleaning: Cleaning_ = CleaningPolicy()
    description: Optional[str] = None


class NodeDefaults(_NodeFields):
    """Values every node gets unless it sets its own (mappings are merged key by key)."""

    bmc: Optional[BmcDefaults] = None
    macs: Macs = []


class NodeEntry(_NodeFields):
    """One server (the mapping every other format is read into)."""

    name: vocab.Name
    bmc: BmcEntry
    macs: Macs = Field([], description="its NICs (Ironic ports); unique in the inventory")


def _scope(value: Any) -> Any:
    why = C.scope_problem(value)
    if why:
        raise ValueError(why)
    return value


class NodeforgeFile(Declared):
    """A nodeforge inventory (YAML or JSON)."""

    version: Literal[1]
    scope: Annotated[Any, AfterValidator(_scope), Rule(C.SCOPE_RULE)] = Field(
        None, description="the ownership scope; default derived from the file's path")
    defaults: Optional[NodeDefaults] = None
    nodes: list[NodeEntry]


class CsvRow(Declared):
    """One row of a nodeforge CSV inventory; the header names the columns (in any order);
    ``properties.KEY``, ``extra.KEY`` and ``interfaces.KEY`` columns set one key each
    (``true``/``false``/``yes``/``no`` and integers typed). Empty cells are not set;
    lines starting with ``#`` are comments."""

    name: str
    bmc_address: str
    bmc_username: Optional[str] = None
    bmc_password: Optional[Annotated[str, schema.SECRET]] = None
    bmc_verify_ca: Optional[str] = None
    macs: Optional[str] = Field(None, description="MAC addresses separated by ; or spaces")
    resource_class: Optional[str] = None
    traits: Optional[str] = Field(None, description="traits separated by ; or spaces")
    owner: Optional[str] = None
    inspect: Optional[str] = None
    cleaning: Optional[str] = Field(None, description="a cleaning mode: automated, manual or none")
    description: Optional[str] = None


CSV_COLUMNS = set(CsvRow.model_fields)
CSV_PREFIXES = ("properties.", "extra.", "interfaces.")

# --- python-ironicclient's bulk format --------------------------------------------------
# ``baremetal create FILE`` (ironicclient/v1/create_resources.py): the top level has only
# ``chassis`` and ``nodes``; a chassis may nest ``nodes``; a node nests ``ports`` and
# ``portgroups``; a port group nests ``ports``. The fields of each resource are python-ironicclient's
# ``_creation_attributes`` (anything else it refuses, and so does nodeforge).

# Fields python-ironicclient accepts that need a newer Ironic API than nodeforge's default
# (constants.API_VERSION): each request that carries one is made at the version it needs
# (api_version_for), so an older Ironic answers that request with a clear 406, never a silent drop.
IC_NEWER_API = {
    "node": {"shard": "1.82", "parent_node": "1.83", "disable_power_off": "1.95", "instance_name": "1.104"},
    "port": {"name": "1.88", "description": "1.97", "vendor": "1.100", "category": "1.101"},
    "portgroup": {"physical_network": "1.102", "category": "1.103"},
}
# Node fields passed to Ironic as they are (besides the ones nodeforge models itself).
IC_NODE_PASSTHROUGH = ("uuid", "conductor_group", "lessee", "network_data")
# Ironic's keys of a port's local_link_connection (ironic/api/controllers/v1/utils.py).
LOCAL_LINK_KEYS = ("switch_id", "port_id", "switch_info", "hostname", "network_type")


class BulkPort(Declared):
    """A port (python-ironicclient), of a node or nested in a port group."""

    address: vocab.MacAddress
    extra: Optional[dict[str, Any]] = None
    local_link_connection: Optional[dict[Literal[LOCAL_LINK_KEYS], Any]] = None  # type: ignore[valid-type]
    node_uuid: Optional[Uuid] = Field(None, description="only the uuid of the node it is nested in")
    physical_network: Optional[_text(1, 64)] = None
    portgroup_uuid: Optional[Uuid] = Field(None, description="an existing port group; nested in one: its uuid")
    pxe_enabled: Optional[bool] = None
    uuid: Optional[Uuid] = None
    is_smartnic: Optional[bool] = None
    name: Optional[vocab.Name] = None
    description: Optional[_text(1, 255)] = None
    vendor: Optional[_text(1, 32)] = None
    category: Optional[_text(1, 80)] = None


class BulkPortGroup(Declared):
    """A port group of a node; nodeforge finds it again by name, else address, else uuid
    (one of them is required)."""

    address: Optional[vocab.MacAddress] = None
    extra: Optional[dict[str, Any]] = None
    name: Optional[vocab.Name] = None
    node_uuid: Optional[Uuid] = Field(None, description="only the uuid of the node it is nested in")
    standalone_ports_supported: Optional[bool] = None
    mode: Optional[Annotated[str, Field(min_length=1)]] = Field(None, description="bonding mode (802.3ad, ...)")
    properties: Optional[dict[str, Any]] = None
    uuid: Optional[Uuid] = None
    physical_network: Optional[_text(1, 64)] = None
    category: Optional[_text(1, 64)] = None
    ports: list[BulkPort] = []


_INTERFACE_FIELDS = {f"{i}_interface": (Optional[str], None) for i in _INTERFACES}


class _BulkNodeFields(Declared):
    """A node (python-ironicclient). The BMC is read from ``driver_info``
    (``ipmi_address``/``ipmi_port``/``ipmi_username``/``ipmi_password`` or
    ``redfish_address``/``redfish_system_id``/``redfish_username``/``redfish_password``/``redfish_verify_ca``);
    ``automated_clean: false`` is cleaning mode none."""

    name: vocab.Name
    driver: str
    driver_info: dict[str, Any] = {}
    chassis_uuid: Optional[Uuid] = Field(None, description="an existing chassis (not for a node nested in one)")
    extra: Extra = {}
    uuid: Optional[Uuid] = None
    properties: dict[str, Any] = {}
    disable_power_off: Optional[bool] = None
    resource_class: Optional[vocab.ResourceClass] = None
    conductor_group: Optional[Annotated[str, AfterValidator(_conductor_group), Rule(CONDUCTOR_GROUP_RULE)]] = None
    automated_clean: Optional[bool] = None
    network_data: Optional[dict[str, Any]] = Field(None, description="Nova's network_data.json")
    parent_node: Optional[_text(1, 255)] = None
    owner: Optional[str] = None
    lessee: Optional[str] = None
    shard: Optional[_text(1, 255)] = None
    description: Optional[str] = None
    instance_name: Optional[_text(1, 255)] = None
    traits: Optional[list[vocab.Trait]] = None
    ports: list[BulkPort] = []
    portgroups: list[BulkPortGroup] = []


BulkNode = create_model("BulkNode", __base__=_BulkNodeFields, __doc__=_BulkNodeFields.__doc__, **_INTERFACE_FIELDS)


class BulkChassis(Declared):
    """A chassis (python-ironicclient); nodeforge finds it again by uuid, else by
    description among the chassis of the inventory's scope (one of them is required)."""

    description: Optional[_text(0, 255)] = None
    extra: Extra = {}
    uuid: Optional[Uuid] = None
    nodes: list[BulkNode] = []  # type: ignore[valid-type]


class BulkFile(Declared):
    """python-ironicclient's ``baremetal create`` file (JSON or YAML)."""

    chassis: list[BulkChassis] = []
    nodes: list[BulkNode] = []  # type: ignore[valid-type]


# --- Bifrost -----------------------------------------------------------------------------
# Bifrost keys its playbooks use when deploying (addresses, config drive, Ansible groups), not
# when enrolling into Ironic: accepted, not enrolled, and each one NAMED in a warning.
BIFROST_IGNORED = ("ipv4_address", "ipv4_subnet_mask", "ipv4_gateway", "ipv4_nameserver",
                   "ipv4_interface_mac", "provisioning_ipv4_address", "ansible_ssh_host", "ansible_host",
                   "host_groups", "instance_info", "addressing_mode", "ansible_ssh_user", "instance_name",
                   "node_network_data", "ipv6_address", "ipv6_gateway", "ipv6_prefix", "ipv6_nameserver",
                   "ipv6_interface_mac")


class BifrostNic(Declared):
    mac: vocab.MacAddress


class _BifrostNodeFields(Declared):
    """A node of a Bifrost inventory: the file maps each node's name to one of these.
    The BMC is read from ``driver_info`` (or the older ``driver_info.power``) as for
    python-ironicclient; ``properties.ram``/``disk_size`` become ``memory_mb``/``local_gb``."""

    name: Optional[vocab.Name] = Field(None, description="default: the node's key")
    uuid: Optional[Uuid] = Field(None, description="enrolled with it")
    driver: Optional[str] = None
    driver_info: dict[str, Any] = {}
    nics: list[BifrostNic] = []
    properties: dict[str, Any] = {}
    resource_class: Optional[vocab.ResourceClass] = None
    traits: Optional[list[vocab.Trait]] = None
    owner: Optional[str] = None
    extra: Extra = {}
    description: Optional[str] = None


BifrostNode = create_model(
    "BifrostNode", __base__=_BifrostNodeFields, __doc__=_BifrostNodeFields.__doc__, **_INTERFACE_FIELDS,
    **{k: (Any, Field(None, description="used by Bifrost when deploying: read, not enrolled (named in a warning)"))
       for k in BIFROST_IGNORED})


class BifrostCsvRow(Declared):
    """A row of Bifrost's legacy CSV (no header; the columns in this order, at least the
    first 11; the ``unused`` columns are not read, by Bifrost either). Only IPMI drivers."""

    mac: str
    username: str
    password: Annotated[str, schema.SECRET]
    address: str
    cpus: Optional[str] = None
    ram: Optional[str] = Field(None, description="MiB")
    disk: Optional[str] = Field(None, description="GiB")
    unused_8: Optional[str] = Field(None, description="not read")
    unused_9: Optional[str] = Field(None, description="not read")
    uuid: Optional[str] = None
    name: str
    ipv4_address: Optional[str] = Field(None, description="deploy-time: not enrolled (warned)")
    ipmi_target_channel: Optional[str] = None
    ipmi_target_address: Optional[str] = None
    ipmi_transit_channel: Optional[str] = None
    ipmi_transit_address: Optional[str] = None
    driver: Optional[str] = Field(None, description="default ipmi; must name an IPMI driver")
    unused_18: Optional[str] = Field(None, description="not read")
    provisioning_ipv4_address: Optional[str] = Field(None, description="deploy-time: not enrolled (warned)")


BIFROST_CSV_COLUMNS = list(BifrostCsvRow.model_fields)
BIFROST_CSV_MIN_COLUMNS = 11

_DOC_FORMATS = ("yaml", "json")
schema.register("inventory", NodeforgeFile, title="Bare-metal inventory (nodeforge YAML/JSON)",
                path="inventory.yaml", formats=_DOC_FORMATS, limits=LIMITS,
                description="nodeforge's own inventory format (docs/inventory.md).")
schema.register("inventory-csv", CsvRow, title="Bare-metal inventory (nodeforge CSV)", path="inventory.csv",
                formats=("csv",), limits=LIMITS, description="The same nodes as rows (docs/inventory.md).")
schema.register("inventory-ironicclient", BulkFile, title="Bare-metal inventory (python-ironicclient bulk)",
                formats=_DOC_FORMATS, limits=LIMITS,
                description="The file `baremetal create` reads, all of it (docs/inventory.md).")
schema.register("inventory-bifrost", BifrostNode, title="Bare-metal inventory (Bifrost)", formats=_DOC_FORMATS,
                limits=LIMITS, description="A mapping of node name to the node below (docs/inventory.md).")
schema.register("inventory-bifrost-csv", BifrostCsvRow, title="Bare-metal inventory (Bifrost legacy CSV)",
                formats=("csv",), limits=LIMITS, description="Bifrost's header-less CSV (docs/inventory.md).")


def api_version_for(kind: str, fields: Iterable[str]) -> str:
    """The Ironic API version a request with ``fields`` of a ``kind``
    ("node", "port", "portgroup") needs: nodeforge's default, or newer."""
    need = [IC_NEWER_API[kind][f] for f in fields if f in IC_NEWER_API[kind]]
    return max([C.API_VERSION, *need], key=lambda v: tuple(int(x) for x in v.split(".")))


# --------------------------------------------------------------------------- loading

def detect_format(path: Path, doc: Any) -> Format:
    if path.suffix.lower() == ".csv":
        return Format.CSV
    if isinstance(doc, dict):
        if "version" in doc or "defaults" in doc:
            return Format.NODEFORGE
        if "nodes" in doc or "chassis" in doc:
            nodes = doc.get("nodes") or []
            if isinstance(nodes, list) and nodes and isinstance(nodes[0], dict) and "bmc" in nodes[0]:
                return Format.NODEFORGE
            return Format.IRONICCLIENT
        if doc and all(isinstance(v, dict) for v in doc.values()):
            return Format.BIFROST
    raise ConfigError(path=str(path), detail="cannot tell the inventory format (nodeforge YAML needs "
                                             "'version: 1'); pass --format")


Remap = Callable[[tuple], tuple]


@dataclasses.dataclass
class _Entry:
    """One node in nodeforge terms (:class:`NodeEntry`'s mapping), how its key paths map back
    to the file, where it was read, and the format-specific parts built already."""

    data: dict
    remap: Remap
    location: Location
    bulk: dict = dataclasses.field(default_factory=dict)


class _Reader:
    """One inventory being read: its document, problems and warnings."""

    def __init__(self, document: Document, resolver: secrets_mod.Resolver):
        self.document = document
        self.resolver = resolver
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.chassis: list[ChassisSpec] = []

    def problem(self, keypath: tuple, detail: str, *, warning: bool = False) -> None:
        (self.warnings if warning else self.problems).append(self.document.problem(keypath, detail))

    def declared(self, data: Any, model, remap: Remap = lambda kp: kp, context: dict | None = None):
        """``data`` as ``model`` or None; its problems, at their key paths in the file (``remap``)."""
        try:
            return model.model_validate(data, context=context)
        except ValidationError as exc:
            local = Document(self.document.path, "data", data, data)
            for p in schema.problems_of(exc, local, model):
                self.problem(remap(p.keypath), p.detail)
            return None

    def location(self, keypath: tuple, row: int | None = None) -> Location:
        return Location(self.document.path, self.document.line(keypath), row)


def load(path: Path | str, *, fmt: Format | str | None = None, allow_plaintext: bool = False,
         key_file: Path | None = None, environ: dict | None = None,
         secrets_dir: Path | None = None) -> Inventory:
    """Parse and validate a whole inventory; raise InventoryError listing every problem.
    ``file:`` references may point into the inventory's directory and ``secrets_dir``
    (default ``$NODEFORGE_SECRETS_DIR``); see :class:`secrets_mod.Policy`."""
    path = Path(path)
    fmt = Format(fmt) if fmt else None
    csv_file = fmt is Format.CSV or (path.suffix.lower() == ".csv" and fmt in (None, Format.BIFROST))
    if csv_file:
        document, rows = _csv_document(path, schema.read_text(path, LIMITS))
        fmt = fmt or (Format.BIFROST if rows and normalize_mac(rows[0][1][0]) else Format.CSV)
        if fmt is Format.BIFROST:       # no header: key path [N] is row N, as in a CSV with one
            document = dataclasses.replace(document, _csv_lines=[1, *document._csv_lines])
    else:
        document = schema.load(path, format="json" if path.suffix.lower() == ".json" else "yaml", limits=LIMITS)
        fmt = fmt or detect_format(path, document.data)
    key = secrets_mod.load_key(key_file) if key_file else None
    reader = _Reader(document, secrets_mod.Resolver(path.parent, allow_plaintext=allow_plaintext, key=key,
                                                    environ=environ, secrets_dir=secrets_dir))
    if fmt is Format.CSV:
        entries = _csv_entries(reader, rows)
    elif fmt is Format.BIFROST:
        entries = _bifrost_csv_entries(reader, rows) if csv_file else _bifrost_entries(reader, document.data)
    elif fmt is Format.IRONICCLIENT:
        entries = _bulk_entries(reader, document.data)
    else:
        entries = _nodeforge_entries(reader, document.data)
    nodes = [] if entries is None else _finish(reader, entries)
    if not reader.problems and not nodes and not reader.chassis:
        reader.problem((), "no nodes: the inventory lists no servers")
    if reader.problems:
        raise InventoryError(str(path), _unique(reader.problems))
    scope, scope_source = C.derive_scope(path), "derived"
    if fmt is Format.NODEFORGE and document.data.get("scope") is not None:
        scope, scope_source = document.data["scope"], "file"
    for item in (*nodes, *reader.chassis):
        item.scope = scope
    for w in reader.warnings:
        log.warning("%s", w)
    return Inventory(path=path, format=fmt, nodes=nodes, scope=scope, scope_source=scope_source,
                     chassis=reader.chassis, warnings=reader.warnings)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.keypath, p.detail) not in seen:
            seen.add((p.keypath, p.detail))
            out.append(p)
    return out


# --- nodeforge YAML/JSON ------------------------------------------------------------------

def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _nodeforge_entries(reader: _Reader, data: Any) -> list[_Entry] | None:
    if not isinstance(data, dict):
        reader.problem((), "the top level must be a mapping with 'version' and 'nodes'")
        return None
    nodes = data.get("nodes")
    reader.declared({**data, "nodes": []}, NodeforgeFile)     # the top level; nodes one by one below
    if not isinstance(nodes, list):
        if "nodes" in data:
            reader.problem(("nodes",), f"expected a list of nodes, got {schema.kind_of(nodes)}")
        return None
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}

    def remap_for(i: int, item: dict) -> Remap:
        def remap(kp: tuple) -> tuple:
            # A key the node does not set itself came from defaults.
            node, dflt = item, defaults
            for depth, part in enumerate(kp):
                if isinstance(node, dict) and part in node:
                    node, dflt = node[part], dflt.get(part) if isinstance(dflt, dict) else None
                    continue
                if isinstance(dflt, dict) and part in dflt:
                    return ("defaults", *kp)
                break
            return ("nodes", i, *kp)
        return remap

    entries = []
    for i, item in enumerate(nodes):
        if not isinstance(item, dict):
            reader.problem(("nodes", i), f"a node must be a mapping, got {schema.kind_of(item)}")
            continue
        entries.append(_Entry(_merge(defaults, item), remap_for(i, item), reader.location(("nodes", i))))
    return entries


# --- nodeforge CSV --------------------------------------------------------------------------

def _csv_document(path: Path, text: str) -> tuple[Document, list[tuple[int, list[str]]]]:
    """The CSV's records (comment and blank lines dropped) with their lines, and a Document
    whose key path ``(i, column)`` is record i's line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        while True:
            start = reader.line_num + 1
            record = next(reader, None)
            if record is None:
                break
            if record and any(c.strip() for c in record) and not record[0].lstrip().startswith("#"):
                rows.append((start, [c.strip() for c in record]))
    except csv.Error as exc:
        raise InventoryError(str(path), [Problem(str(path), reader.line_num, (), f"malformed CSV: {exc}")]) from None
    data = [r for _, r in rows]
    return Document(str(path), "csv", data, data, text, _csv_lines=[line for line, _ in rows]), rows


def _csv_scalar(cell: str) -> Any:
    low = cell.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if re.fullmatch(r"-?\d+", cell):
        return int(cell)
    return cell


def _csv_entries(reader: _Reader, rows: list[tuple[int, list[str]]]) -> list[_Entry] | None:
    if not rows:
        return []
    header = rows[0][1]
    for h in sorted({h for h in header if header.count(h) > 1}):
        reader.problem((0, h), f"column {h!r} appears twice in the header")
    for h in header:
        if h not in CSV_COLUMNS and not h.startswith(CSV_PREFIXES):
            reader.problem((0, h), f"unknown column (columns: {', '.join(CsvRow.model_fields)}, "
                                   f"or {', '.join(p + 'KEY' for p in CSV_PREFIXES)})")
    if "name" not in header or "bmc_address" not in header:
        reader.problem((0,), "the header needs at least 'name' and 'bmc_address'")
        return None
    columns = {("bmc", c[4:]): c for c in header if c.startswith("bmc_")}
    entries = []
    for i, (line, record) in enumerate(rows[1:], start=1):
        if len(record) != len(header):
            reader.problem((i,), f"{len(record)} cells for {len(header)} columns")
            continue
        fields: dict[str, Any] = {}
        for h, cell in zip(header, record):
            if cell == "" or (h not in CSV_COLUMNS and not h.startswith(CSV_PREFIXES)):
                continue
            if h.startswith("bmc_"):
                fields.setdefault("bmc", {})[h[4:]] = _csv_scalar(cell) if h == "bmc_verify_ca" else cell
            elif h in ("macs", "traits"):
                fields[h] = [x for x in re.split(r"[;\s]+", cell) if x]
            elif h == "cleaning":
                fields["cleaning"] = cell
            elif h == "inspect":
                fields[h] = _csv_scalar(cell)
            elif h.startswith(CSV_PREFIXES):
                group, _, key = h.partition(".")
                fields.setdefault(group, {})[key] = _csv_scalar(cell)
            else:
                fields[h] = cell

        def remap(kp: tuple, i=i) -> tuple:
            if kp[:1] == ("bmc",):
                return (i, columns.get(kp[:2], f"bmc_{kp[1]}" if len(kp) > 1 else "bmc_address"))
            if len(kp) >= 2 and kp[0] in ("properties", "extra", "interfaces"):
                return (i, f"{kp[0]}.{kp[1]}")
            return (i, *kp[:1])
        entries.append(_Entry(fields, remap, Location(reader.document.path, line, i)))
    return entries


# --- BMC from Ironic's driver_info (python-ironicclient and Bifrost) ---------------------------

def _bmc_from_driver_info(reader: _Reader, driver: str | None, info: dict, interfaces: dict, name: str,
                          at: Callable[[str], tuple]) -> tuple[dict, dict, dict] | None:
    """(nodeforge bmc fields, remaining driver_info, bmc field -> key path in the file) from
    Ironic's ``driver_info``; None (with a problem) when it names no BMC. ``at(key)``: the key path
    of ``driver_info.key`` in the file."""
    info = dict(info)
    if driver == "fake-hardware":
        return {"address": f"fake://{name}"}, info, {}
    for pre, addr in (("ipmi_", "ipmi_address"), ("redfish_", "redfish_address")):
        if addr in info:
            break
    else:
        reader.problem(at(""), "driver_info has neither ipmi_address nor redfish_address")
        return None
    where = {"address": at(addr)}
    if pre == "ipmi_":
        host, port = info.pop("ipmi_address"), info.pop("ipmi_port", None)
        if port is not None and (isinstance(port, bool) or not re.fullmatch(r"\d{1,5}", str(port).strip())
                                 or not 1 <= int(str(port).strip()) <= 65535):
            reader.problem(at("ipmi_port"), f"must be a port number 1-65535, got {port!r}")
            return None
        bmc = {"address": f"ipmi://{_host_in_url(str(host))}" + (f":{int(str(port).strip())}" if port else "")}
    else:
        url = str(info.pop("redfish_address")).rstrip("/")
        transport, _, rest = (url if "://" in url else "https://" + url).partition("://")
        base = "idrac-redfish" if driver == "idrac" else "redfish"
        if interfaces.get("boot_interface") == "redfish-virtual-media" and base == "redfish":
            base = "redfish-virtualmedia"
        bmc = {"address": f"{base}+{transport}://{rest}{info.pop('redfish_system_id', '') or ''}"}
    for k in ("username", "password", "verify_ca"):
        if f"{pre}{k}" in info and (pre == "redfish_" or k != "verify_ca"):
            bmc[k] = info.pop(f"{pre}{k}")
            where[k] = at(f"{pre}{k}")
    return bmc, info, where


def _remap_driver_info(base: tuple, where: dict, mapping: dict) -> Remap:
    """Key paths of a node read from driver_info: ``bmc.x`` -> where it was read, the rest by ``mapping``
    (nodeforge field -> key in the file), else under ``base``."""
    def remap(kp: tuple) -> tuple:
        if kp[:1] == ("bmc",) and len(kp) > 1 and kp[1] in where:
            return where[kp[1]]
        if kp[:1] == ("interfaces",) and len(kp) > 1:
            return (*base, f"{str(kp[1]).removesuffix('_interface')}_interface")
        if kp[:1] and kp[0] in mapping:
            return (*base, *mapping[kp[0]])
        return (*base, *kp)
    return remap


def _node_from_ironic(reader: _Reader, item: Any, base: tuple, name: str, fields: Iterable[str],
                      driver_info: dict, mapping: dict, at: Callable[[str], tuple]) -> _Entry | None:
    """A node given in Ironic's terms (a validated python-ironicclient or Bifrost node) as a nodeforge node."""
    interfaces = {f"{i}_interface": getattr(item, f"{i}_interface") for i in _INTERFACES
                  if getattr(item, f"{i}_interface") is not None}
    got = _bmc_from_driver_info(reader, item.driver, driver_info, interfaces, name, at)
    if got is None:
        return None
    bmc, rest, where = got
    data = {k: getattr(item, k) for k in fields if getattr(item, k) is not None}
    data.update(name=name, bmc=bmc, interfaces=interfaces, driver_info=rest)
    return _Entry(data, _remap_driver_info(base, where, mapping), reader.location(base))


# --- python-ironicclient bulk -------------------------------------------------------------------

def _bulk_checks(reader: _Reader, data: dict) -> None:
    """What python-ironicclient refuses across a resource and what it is nested in (the
    declarations hold each resource alone): a nested resource's node_uuid, portgroup_uuid,
    chassis_uuid must be its parent's; chassis and port group keys unique."""
    def seq(x):
        return [(i, v) for i, v in enumerate(x) if isinstance(v, dict)] if isinstance(x, list) else []

    def same(a, b) -> bool:
        return str(a).lower() == str(b).lower()

    seen: dict[str, tuple] = {}
    nodes = [(("nodes", i), n, None) for i, n in seq(data.get("nodes"))]
    for ci, c in seq(data.get("chassis")):
        key = (f"uuid:{str(c['uuid']).lower()}" if c.get("uuid") is not None else
               f"description:{c['description']}" if isinstance(c.get("description"), str) else None)
        field = "uuid" if c.get("uuid") is not None else "description"
        if key is None or key == "description:":
            reader.problem(("chassis", ci), "a chassis needs a uuid or a description: Ironic chassis have no name, "
                                            "and nodeforge finds a chassis again by one of them (a re-run would "
                                            "make another)")
        elif key in seen:
            reader.problem(("chassis", ci, field), f"another chassis of this file has the same {field} "
                                                   f"(first at {schema.keypath_str(seen[key])})")
        elif key:
            seen[key] = ("chassis", ci)
        nodes += [(("chassis", ci, "nodes", i), n, c) for i, n in seq(c.get("nodes"))]
    for at, n, parent in nodes:
        if parent is not None and n.get("chassis_uuid") is not None and not same(n["chassis_uuid"], parent.get("uuid")):
            reader.problem((*at, "chassis_uuid"), "a node nested in a chassis takes that chassis "
                                                  "(python-ironicclient refuses a different chassis_uuid)")
        groups = seq(n.get("portgroups"))
        members = [((*at, "ports", i), p, None) for i, p in seq(n.get("ports"))] + \
            [((*at, "portgroups", gi, "ports", i), p, g) for gi, g in groups for i, p in seq(g.get("ports"))]
        for where, r, what in [((*at, "portgroups", gi), g, "port group") for gi, g in groups] + \
                [(w, p, "port") for w, p, _ in members]:
            if r.get("node_uuid") is not None and (n.get("uuid") is None or not same(r["node_uuid"], n["uuid"])):
                reader.problem((*where, "node_uuid"), f"a {what} nested in a node belongs to it (python-ironicclient "
                                                      "refuses a different node_uuid; give the node that uuid instead)")
        for where, p, g in members:
            if g is not None and p.get("portgroup_uuid") is not None and not same(p["portgroup_uuid"], g.get("uuid")):
                reader.problem((*where, "portgroup_uuid"), "a port nested in a port group belongs to it "
                                                           "(python-ironicclient refuses a different portgroup_uuid)")
        keys: dict[str, int] = {}
        for gi, g in groups:
            key = next((str(g[k]).lower() for k in ("name", "address", "uuid") if g.get(k) is not None), None)
            if key is None:
                reader.problem((*at, "portgroups", gi), "a port group needs a name, address or uuid: nodeforge "
                                                        "finds it again by one of them (a re-run would make another)")
            elif key in keys:
                reader.problem((*at, "portgroups", gi), f"same name/address as portgroups[{keys[key]}] of this node")
            elif key is not None:
                keys[key] = gi


_BULK_NODE_FIELDS = ("properties", "resource_class", "traits", "owner", "extra", "description")


def _bulk_entries(reader: _Reader, data: Any) -> list[_Entry] | None:
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {'list' if isinstance(data, list) else 'scalar'}"
        reader.problem((), f"a python-ironicclient resources file is a mapping with 'chassis' and/or 'nodes'; "
                           f"the file is {what}")
        return None
    bulk = reader.declared(data, BulkFile)
    _bulk_checks(reader, data)
    if bulk is None or reader.problems:
        return None
    if not bulk.nodes and not bulk.chassis:
        reader.problem((), "no nodes and no chassis: the file creates nothing")
        return None
    nodes = []
    for ci, c in enumerate(bulk.chassis):
        spec = ChassisSpec(f"uuid:{c.uuid}" if c.uuid else f"description:{c.description}",
                           reader.location(("chassis", ci)), c.description, dict(c.extra), c.uuid)
        reader.chassis.append(spec)
        nodes += [(("chassis", ci, "nodes", i), n, spec) for i, n in enumerate(c.nodes)]
    nodes += [(("nodes", i), n, None) for i, n in enumerate(bulk.nodes)]
    entries = []
    for at, n, chassis in nodes:
        entry = _node_from_ironic(reader, n, at, n.name, _BULK_NODE_FIELDS, n.driver_info,
                                  {"cleaning": ("automated_clean",), "macs": ("ports",)},
                                  lambda k, at=at: (*at, "driver_info", k) if k else (*at, "driver_info"))
        if entry is None:
            continue
        if n.automated_clean is not None:
            entry.data["cleaning"] = "automated" if n.automated_clean else "none"
        groups = [PortGroupSpec(g.name or g.address or g.uuid, reader.location((*at, "portgroups", gi)),
                                g.model_dump(exclude_none=True, exclude={"ports", "node_uuid"}))
                  for gi, g in enumerate(n.portgroups)]
        by_uuid = {g.fields["uuid"]: g.key for g in groups if "uuid" in g.fields}
        ports = []
        for where, p, group in [((*at, "ports", i), p, None) for i, p in enumerate(n.ports)] + \
                [((*at, "portgroups", gi, "ports", i), p, groups[gi].key)
                 for gi, g in enumerate(n.portgroups) for i, p in enumerate(g.ports)]:
            pg_uuid = p.portgroup_uuid if group is None and p.portgroup_uuid not in by_uuid else None
            ports.append(PortSpec(p.address, reader.location(where),
                                  p.model_dump(exclude_none=True, exclude={"address", "node_uuid", "portgroup_uuid"}),
                                  group or by_uuid.get(p.portgroup_uuid), pg_uuid))
        entry.data["macs"] = [p.address for p in ports]
        entry.bulk = {"chassis": chassis.key if chassis else None,
                      "chassis_uuid": n.chassis_uuid if chassis is None else None,
                      "ports": ports, "portgroups": groups,
                      "ironic": {k: getattr(n, k) for k in IC_NODE_PASSTHROUGH if getattr(n, k) is not None},
                      "ironic_newer": {k: getattr(n, k) for k in IC_NEWER_API["node"] if getattr(n, k) is not None}}
        entries.append(entry)
    return entries


# --- Bifrost JSON/YAML ------------------------------------------------------------------------

_BIFROST_NODE_FIELDS = ("resource_class", "traits", "owner", "extra", "description")


def _bifrost_entries(reader: _Reader, data: Any, remap: Remap = lambda kp: kp,
                     rows: dict | None = None) -> list[_Entry] | None:
    """Bifrost nodes; ``remap`` maps a key path of ``data`` to the file's (the CSV adapter's rows)."""
    if not isinstance(data, dict) or not data:
        what = "empty" if not data else f"a {'list' if isinstance(data, list) else 'scalar'}"
        reader.problem((), f"a Bifrost inventory is a mapping of node name to node; the file is {what}")
        return None
    entries = []
    for key, item in data.items():
        if not isinstance(item, dict):
            reader.problem(remap((key,)), f"a node must be a mapping, got {schema.kind_of(item)}")
            continue
        node = reader.declared(item, BifrostNode, lambda kp, key=key: remap((key, *kp)))
        if node is None:
            continue
        for k in BIFROST_IGNORED:
            if getattr(node, k) not in (None, "", [], {}):
                reader.problem(remap((key, k)), "Bifrost uses it when deploying, not enrolling: not enrolled "
                                                "into Ironic", warning=True)
        info = dict(node.driver_info)
        power = isinstance(info.get("power"), dict)
        if power:                                         # older Bifrost: driver_info.power.*
            info = {**{k: v for k, v in info.items() if k != "power"}, **info.pop("power")}
        name = node.name or str(key)

        def at(k, key=key):
            return (key, "driver_info", *(("power",) if power and k else ()), *((k,) if k else ()))
        entry = _node_from_ironic(reader, node, (key,), name, _BIFROST_NODE_FIELDS, info, {"macs": ("nics",)}, at)
        if entry is None:
            continue
        renames = {"ram": "memory_mb", "disk_size": "local_gb"}
        entry.data["properties"] = {renames.get(k, k): (int(v) if k in ("ram", "disk_size", "cpus")
                                                        and str(v).isdigit() else v)
                                    for k, v in node.properties.items()}
        entry.data["macs"] = [n.mac for n in node.nics]
        entry.remap = lambda kp, r=entry.remap: remap(r(kp))
        entry.location = reader.location(remap((key,)), rows.get(key) if rows else None)
        if node.uuid is not None:        # Bifrost enrolls the node with it
            entry.bulk = {"ironic": {"uuid": node.uuid}}
        entries.append(entry)
    return entries


# --- Bifrost legacy CSV (bifrost/inventory.py, _process_baremetal_csv) --------------------------

_BIFROST_CSV_PATHS = {("driver_info", "power", "ipmi_address"): "address", ("driver_info", "power", "ipmi_username"):
                      "username", ("driver_info", "power", "ipmi_password"): "password", ("nics",): "mac",
                      ("properties",): "cpus", ("uuid",): "uuid", ("name",): "name", ("driver",): "driver",
                      ("ipv4_address",): "ipv4_address", ("provisioning_ipv4_address",): "provisioning_ipv4_address"}


def _bifrost_csv_entries(reader: _Reader, rows: list[tuple[int, list[str]]]) -> list[_Entry] | None:
    hosts: dict[str, dict] = {}
    index: dict[str, int] = {}
    for i, (_, cells) in enumerate(rows, start=1):
        if len(cells) < BIFROST_CSV_MIN_COLUMNS:
            reader.problem((i,), f"{len(cells)} cells: a Bifrost CSV row needs at least {BIFROST_CSV_MIN_COLUMNS} "
                                 "(mac ... name)")
            continue
        row = {c: v for c, v in zip(BIFROST_CSV_COLUMNS, cells) if v != ""}
        if "name" not in row:
            reader.problem((i, "name"), "column 11 (name) is empty")
            continue
        driver = row.get("driver", "ipmi")
        if "ipmi" not in driver:
            reader.problem((i, "driver"), f"driver {driver!r}: a Bifrost CSV row maps only to IPMI (use the "
                                          "JSON/YAML format for other drivers)")
            continue
        power = {f"ipmi_{k}": row[c] for k, c in (("address", "address"), ("username", "username"),
                                                 ("password", "password")) if c in row}
        power.update({k: row[k] for k in BIFROST_CSV_COLUMNS[12:16] if k in row})
        if row.get("ipmi_target_channel") and row.get("ipmi_target_address"):
            power["ipmi_bridging"] = "dual" if row.get("ipmi_transit_channel") and row.get("ipmi_transit_address") \
                else "single"
        props = {k: row[c] for k, c in (("cpus", "cpus"), ("ram", "ram"), ("disk_size", "disk")) if c in row}
        host = {"name": row["name"], "driver": "ipmi", "driver_info": {"power": power},
                "nics": [{"mac": row["mac"]}], "properties": {**props, "cpu_arch": "x86_64"},
                **{k: row[k] for k in ("uuid", "ipv4_address", "provisioning_ipv4_address") if k in row}}
        hosts[row["name"]] = host
        index[row["name"]] = i

    def remap(kp: tuple) -> tuple:
        i = index[kp[0]]
        rest = kp[1:]
        for n in range(len(rest), 0, -1):
            if rest[:n] in _BIFROST_CSV_PATHS:
                return (i, _BIFROST_CSV_PATHS[rest[:n]])
        return (i,)
    return _bifrost_entries(reader, hosts, remap, {n: i for n, i in index.items()}) if hosts else []


# --- every format: the nodeforge node, its BMC and secrets, uniqueness -----------------------------

def _finish(reader: _Reader, entries: list[_Entry]) -> list[NodeSpec]:
    """Every entry as a NodeSpec (declaration, BMC, secrets); then what must be unique across nodes."""
    specs: list[tuple[NodeSpec, _Entry]] = []
    for entry in entries:
        label = _node_label(entry.data.get("name"), entry.remap(("bmc", "password")))
        context = {"resolver": reader.resolver, "node": label}
        before = len(reader.problems)
        node = reader.declared(entry.data, NodeEntry, entry.remap, context=context)
        spec = _spec(reader, node, entry) if node is not None else None
        if spec is not None:
            specs.append((spec, entry))
        _name_the_node(reader, before, label)
    _unique_across(reader, entries, specs)
    return [spec for spec, _ in specs] if not reader.problems else []


def _name_the_node(reader: _Reader, start: int, label: str | None) -> None:
    """Every problem from ``start`` on names the node (unless it does already, or its key path
    starts with the name)."""
    if label:
        reader.problems[start:] = [p if f"(node {label})" in p.detail else
                                   dataclasses.replace(p, detail=_of_node(p.detail, label))
                                   for p in reader.problems[start:]]


def _spec(reader: _Reader, node: NodeEntry, entry: _Entry) -> NodeSpec | None:
    """The node's BMC and the secrets among its driver_info (the rest the declaration holds)."""
    before = len(reader.problems)
    di_extra = dict(node.driver_info)
    for k, v in node.driver_info.items():
        if "password" in k or k in ("ipmi_address", "redfish_address", "redfish_system_id"):
            reader.problem(entry.remap(("driver_info", k)), "set BMC address and credentials under 'bmc', "
                                                            "not driver_info")
        elif k in C.SECRET_DRIVER_INFO_KEYS and v not in (None, ""):
            # ipmi_kg_key, snmp_auth_key, snmp_priv_key: references like the password, held as Secrets.
            where = entry.remap(("driver_info", k))
            if not isinstance(v, str):
                # YAML's implicit typing would change it (0123 -> 123, true -> "True"); the value is not shown.
                reader.problem(where, _of_node(f"expected a string, got {schema.kind_word(v)}; quote it; the value "
                                               "is not shown (a secret field)", _node_label(node.name, where)))
                continue
            try:
                di_extra[k] = reader.resolver.resolve(v)
            except secrets_mod.SecretRefError as exc:
                reader.problem(where, _of_node(str(exc), _node_label(node.name, where)))
    if len(reader.problems) > before:
        return None
    kind, host, port, transport, system_id = parse_bmc_url(node.bmc.address)
    c, bulk = node.cleaning, entry.bulk
    return NodeSpec(
        name=node.name, location=entry.location, macs=list(node.macs), resource_class=node.resource_class,
        bmc=Bmc(kind=kind, address=node.bmc.address, host=host, port=623 if kind is BmcKind.IPMI and port is None
                else port, transport=transport, system_id=system_id, username=node.bmc.username,
                password=node.bmc.password, verify_ca=node.bmc.verify_ca),
        properties=dict(node.properties), traits=sorted(set(node.traits)) if node.traits is not None else None,
        owner=node.owner, extra=dict(node.extra), interfaces=dict(node.interfaces), driver_info_extra=di_extra,
        inspect=node.inspect, description=node.description,
        cleaning=Cleaning(CleanMode(c.mode), tuple(CleanStep(s.interface, s.step, dict(s.args)) for s in c.steps),
                          c.disable_ramdisk),
        chassis=bulk.get("chassis"), chassis_uuid=bulk.get("chassis_uuid"), ports=bulk.get("ports", []),
        portgroups=bulk.get("portgroups", []), ironic=bulk.get("ironic", {}),
        ironic_newer=bulk.get("ironic_newer", {}))


def _ident(entry: _Entry) -> tuple[str | None, list[str], str | None]:
    """(name, MACs, BMC key) of an entry, valid or not (duplicates are named even beside other problems)."""
    data = entry.data
    name = data.get("name") if isinstance(data.get("name"), str) else None
    macs = data.get("macs") if isinstance(data.get("macs"), list) else []
    macs = list(dict.fromkeys(m for m in (normalize_mac(x) for x in macs if isinstance(x, str)) if m))
    address = data["bmc"].get("address") if isinstance(data.get("bmc"), dict) else None
    try:
        kind, host, port, transport, system_id = parse_bmc_url(address)
    except (ValueError, TypeError):
        return name, macs, None
    return name, macs, bmc_key(Bmc(kind, address, host, port, transport, system_id))


def _unique_across(reader: _Reader, entries: list[_Entry], specs: list[tuple[NodeSpec, _Entry]]) -> None:
    """Names, MACs and BMCs are unique in the inventory; port group names and addresses, and
    uuids, in all of Ironic (a file that repeats one could never be enrolled)."""
    seen: dict[tuple, tuple[str | None, Location]] = {}

    def once(what: str, value, name, keypath: tuple, loc: Location, detail: str) -> None:
        if value is None:
            return
        if (what, value) in seen:
            other, where = seen[(what, value)]
            reader.problem(keypath, detail.format(value=value, other=other, where=where))
        else:
            seen[(what, value)] = (name, loc)

    for entry in entries:
        name, macs, key = _ident(entry)
        r, loc = entry.remap, entry.location
        before = len(reader.problems)
        once("name", name, name, r(("name",)), loc, "duplicate name (first at {where})")
        for mac in macs:
            once("mac", mac, name, r(("macs",)), loc, "MAC {value} also belongs to node {other!r} ({where})")
        once("bmc", key, name, r(("bmc", "address")), loc, "BMC also used by node {other!r} ({where})")
        _name_the_node(reader, before, _node_label(name, r(("name",))))
    for spec, entry in specs:
        r = entry.remap
        once("uuid", spec.ironic.get("uuid"), spec.name, r(("uuid",)), spec.location,
             "uuid {value} also given to node {other!r} ({where})")
        for g in spec.portgroups:
            for what in ("name", "address", "uuid"):
                once(f"port group {what}", g.fields.get(what), spec.name, r(("portgroups",)), g.location,
                     f"port group {what} {{value}} also given to node {{other!r}} ({{where}})")
        for p in spec.ports:
            once("uuid", p.fields.get("uuid"), spec.name, r(("ports",)), p.location,
                 "uuid {value} also given to node {other!r} ({where})")
    for c in reader.chassis:
        if c.uuid and ("uuid", c.uuid) in seen:
            reader.problem((), f"chassis uuid {c.uuid} also given to node {seen[('uuid', c.uuid)][0]!r}")
