"""Bare-metal inventories: one model, four input formats, whole-batch validation.

Formats (``docs/inventory.md``), detected from the file or forced by ``fmt``:

* ``nodeforge`` YAML/JSON: ``{version: 1, scope: NAME, defaults: {...}, nodes: [...]}``.
* ``csv``: one node per row; header names the columns.
* ``ironicclient``: python-ironicclient's ``baremetal create`` file, all of it:
  ``{chassis: [{description, extra, uuid, nodes: [...]}], nodes: [{driver, driver_info, ...,
  ports: [...], portgroups: [{..., ports: [...]}]}]}`` (:class:`ChassisSpec`,
  :class:`PortGroupSpec`, :class:`PortSpec`; enrolled by :func:`enroll.plan_bulk`).
* ``bifrost``: Bifrost's inventory (a mapping of node name to
  ``{driver, driver_info: {power: {...}}, nics: [{mac}], properties}``), as JSON or
  YAML, or its legacy header-less CSV.

Every format is normalised into :class:`NodeSpec`. BMCs are URLs
(``ipmi://host[:port]``, ``redfish[+http|+https]://host[:port][/redfish/v1/Systems/ID]``,
``redfish-virtualmedia://``, ``idrac-redfish://``, ``fake://``) mapped to the
Ironic hardware type, interfaces and ``driver_info`` by :data:`HARDWARE`.

:func:`load` validates the whole batch before anything is written and raises
one :class:`InventoryError` listing every problem with file, line (or CSV row),
node and field. Passwords are credential references (:mod:`.secrets`).

Every inventory has an ownership scope (:attr:`Inventory.scope`): ``scope:``
at the top of a nodeforge YAML/JSON file, else derived from the file's path
(:func:`constants.derive_scope`; the other formats have no place for it).
Enrollment marks nodes with it (``extra.nodeforge_scope``).
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import io
import ipaddress
import logging
import re
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from nodeforge.errors import ConfigError, ExitCode
from nodeforge.imagebuild import yamlfile
from nodeforge.ironic import constants as C
from nodeforge.base import secrets as secrets_mod
from nodeforge.redact import MASK, Secret, scrub_obj

SCHEMA_VERSION = 1
log = logging.getLogger(__name__)

_MAC = re.compile(r"^[0-9a-f]{2}([:-]?)[0-9a-f]{2}(\1[0-9a-f]{2}){4}$", re.I)
_NAME = re.compile(r"^[A-Za-z0-9._~-]{1,255}$")
_TRAIT = re.compile(r"^[A-Z0-9_]{1,255}$")
_RESOURCE_CLASS = re.compile(r"^[A-Za-z0-9._-]{1,80}$")
_REDFISH_PATH = re.compile(r"^/redfish/v1/Systems/[^/]+/?$")
_INTERFACES = ("bios", "boot", "console", "deploy", "firmware", "inspect", "management", "network",
               "power", "raid", "rescue", "storage", "vendor")


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
    file: str
    line: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        if self.row is not None:
            return f"{self.file}:{self.line}: row {self.row}" if self.line else f"{self.file}: row {self.row}"
        return f"{self.file}:{self.line}" if self.line else self.file

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class Issue:
    location: Location
    node: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        parts = [str(self.location)]
        if self.node:
            parts.append(f"node {self.node!r}")
        if self.field:
            parts.append(f"field {self.field!r}")
        return ": ".join(parts) + f": {self.message}"

    def to_dict(self) -> dict:
        return {"location": self.location.to_dict(), "node": self.node, "field": self.field,
                "message": self.message}


class InventoryError(ConfigError):
    message = "{path}: {count} problem(s) in the inventory:\n{details}"
    exit_code = ExitCode.USAGE

    def __init__(self, path: str, issues: list[Issue]):
        self.issues = issues
        super().__init__(path=path, count=len(issues), details="\n".join(f"  {i}" for i in issues),
                         hint="fix every listed problem; nothing was written")
        # With --output json|yaml the error document also lists the issues.
        self.details = {"valid": False, "file": path, "issues": [i.to_dict() for i in issues]}


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
    ports: list["PortSpec"] = dataclasses.field(default_factory=list)
    portgroups: list["PortGroupSpec"] = dataclasses.field(default_factory=list)
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
    chassis: list["ChassisSpec"] = dataclasses.field(default_factory=list)   # python-ironicclient format
    warnings: list[Issue] = dataclasses.field(default_factory=list)   # fields read but not enrolled

    def by_name(self) -> dict[str, NodeSpec]:
        return {n.name: n for n in self.nodes}


# --------------------------------------------------------------------------- parsing

def normalize_mac(text: str) -> str | None:
    text = str(text).strip()
    if not _MAC.match(text):
        return None
    digits = re.sub(r"[^0-9a-f]", "", text.lower())
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def parse_bmc_url(url: str) -> tuple[BmcKind, str, int | None, str | None, str | None]:
    """(kind, host, port, transport, system_id) of a BMC URL; ValueError says why not."""
    url = str(url).strip()
    if "://" not in url:
        raise ValueError(f"not a BMC URL (expected one of {', '.join(sorted(SCHEMES))}://host)")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unknown BMC scheme {scheme!r} (expected one of {', '.join(sorted(SCHEMES))})")
    kind, transport = SCHEMES[scheme]
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        # Never echo the URL: it holds a credential.
        raise ValueError("credentials in the BMC URL are not allowed; use username/password fields")
    if parts.query or parts.fragment:
        raise ValueError("a BMC URL takes no query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("invalid port (1-65535)") from None
    if port == 0:
        raise ValueError("invalid port 0 (1-65535)")
    host = parts.hostname or ""
    if kind is BmcKind.FAKE:
        if not host and not parts.path.strip("/"):
            raise ValueError("fake:// needs an identifier (fake://NAME)")
        return kind, (host or parts.path.strip("/")), port, None, None
    if not host:
        raise ValueError("missing host")
    _check_host(host)
    path = parts.path.rstrip("/")
    system_id = None
    if kind is BmcKind.IPMI:
        if path:
            raise ValueError("an ipmi:// URL takes no path")
    elif path:
        if not _REDFISH_PATH.match(path):
            raise ValueError("Redfish path must be /redfish/v1/Systems/<id>")
        system_id = path
    return kind, host, port, transport, system_id


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host.split(".")
    if not all(re.match(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$", lab) for lab in labels):
        raise ValueError(f"invalid host name {host!r}")


@dataclasses.dataclass
class _Ident:
    """What identifies a node, kept even for invalid ones (duplicate checks)."""

    name: str | None
    macs: list[str]
    bmc_key: str | None
    bmc_address: str | None
    location: Location
    raw: "_Raw"


class _Collector:
    """Collects issues for one file; ``where`` gives a field's location."""

    def __init__(self, path: Path):
        self.path = path
        self.issues: list[Issue] = []
        self.idents: list[_Ident] = []
        self.chassis: list[ChassisSpec] = []
        self.warnings: list[Issue] = []      # accepted, but not enrolled (named, never silently dropped)

    def add(self, loc: Location, node: str | None, field: str | None, message: str) -> None:
        self.issues.append(Issue(loc, node, field, message))

    def warn(self, loc: Location, node: str | None, field: str | None, message: str) -> None:
        self.warnings.append(Issue(loc, node, field, message))


@dataclasses.dataclass
class _Raw:
    """One node's fields in nodeforge terms, with a location per field path."""

    fields: dict[str, Any]
    location: Location
    lines: dict[str, int]
    parts: dict[str, Any] = dataclasses.field(default_factory=dict)   # python-ironicclient: ports, groups, ...

    def loc(self, field: str | None = None) -> Location:
        if field is not None:
            # The field itself, else its closest parent (bmc.password -> bmc).
            f = field
            while f:
                if f in self.lines:
                    return dataclasses.replace(self.location, line=self.lines[f])
                f = f.rpartition(".")[0]
        return self.location


NODE_FIELDS = {"name", "bmc", "macs", "resource_class", "properties", "traits", "owner", "extra",
               "interfaces", "driver_info", "inspect", "cleaning", "description"}
BMC_FIELDS = {"address", "username", "password", "verify_ca"}
CLEANING_FIELDS = {"mode", "steps", "disable_ramdisk"}


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


def load(path: Path | str, *, fmt: Format | str | None = None, allow_plaintext: bool = False,
         key_file: Path | None = None, environ: dict | None = None) -> Inventory:
    """Parse and validate a whole inventory; raise InventoryError listing every problem."""
    path = Path(path)
    text = yamlfile.read_text(path)       # UTF-8 (a BOM is accepted); binary refused with the line
    fmt = Format(fmt) if fmt else None
    col = _Collector(path)
    doc: Any = None
    if path.suffix.lower() == ".csv" and (fmt is Format.BIFROST or (fmt is None and _is_bifrost_csv(text))):
        fmt = Format.BIFROST
        raws = _raw_bifrost_csv(path, text, col)
    elif fmt is Format.CSV or (fmt is None and path.suffix.lower() == ".csv"):
        fmt = Format.CSV
        raws = _raw_csv(path, text, col)
    else:
        doc = yamlfile.load(path, text)
        fmt = fmt or detect_format(path, doc)
        raws = {Format.NODEFORGE: _raw_nodeforge, Format.IRONICCLIENT: _raw_ironicclient,
                Format.BIFROST: _raw_bifrost}[fmt](path, doc, col)
    key = secrets_mod.load_key(key_file) if key_file else None
    resolver = secrets_mod.Resolver(path.parent, allow_plaintext=allow_plaintext, key=key, environ=environ)
    nodes = [n for n in (_build(raw, col, resolver) for raw in raws) if n is not None]
    if not raws and not col.issues and not col.chassis:
        col.add(Location(str(path)), None, None, "no nodes: the inventory lists no servers")
    _check_duplicates(col.idents, col)
    _check_bulk_duplicates(nodes, col)
    scope, scope_source = C.derive_scope(path), "derived"
    if fmt is Format.NODEFORGE and isinstance(doc, dict) and "scope" in doc:
        scope, scope_source = doc["scope"], "file"      # validated by _raw_nodeforge
    if col.issues:
        raise InventoryError(str(path), sorted(col.issues, key=lambda i: (i.location.line or 0)))
    for n in nodes:
        n.scope = scope
    for c in col.chassis:
        c.scope = scope
    for w in col.warnings:
        log.warning("%s", w)
    return Inventory(path=path, format=fmt, nodes=nodes, scope=scope, scope_source=scope_source,
                     chassis=list(col.chassis), warnings=list(col.warnings))


def _lines_of(node: Any, prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            p = f"{prefix}{key}"
            line = yamlfile.line_of(node, key)
            if line:
                out[p] = line
            out.update(_lines_of(value, p + "."))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _items(doc: Any, key: str, path: Path, col: _Collector) -> list[tuple[Any, int | None]]:
    seq = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(seq, list):
        col.add(Location(str(path), yamlfile.line_of(doc, key) if isinstance(doc, dict) else None), None, key,
                "must be a list of nodes")
        return []
    return [(item, yamlfile.line_of(seq, i) if isinstance(seq, CommentedSeq) else None)
            for i, item in enumerate(seq)]


def _raw_nodeforge(path: Path, doc: Any, col: _Collector) -> list[_Raw]:
    file = str(path)
    if not isinstance(doc, dict):
        col.add(Location(file), None, None, "top level must be a mapping with 'version' and 'nodes'")
        return []
    if doc.get("version") != SCHEMA_VERSION:
        col.add(Location(file, yamlfile.line_of(doc, "version") if "version" in doc else 1), None, "version",
                f"must be {SCHEMA_VERSION}")
    for key in doc:
        if key not in ("version", "scope", "defaults", "nodes"):
            col.add(Location(file, yamlfile.line_of(doc, key)), None, str(key), "unknown top-level field")
    if "scope" in doc and (why := C.scope_problem(doc["scope"])) is not None:
        col.add(Location(file, yamlfile.line_of(doc, "scope")), None, "scope", why)
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        col.add(Location(file, yamlfile.line_of(doc, "defaults")), None, "defaults", "must be a mapping")
        defaults = {}
    default_lines = _lines_of(defaults)
    raws = []
    for item, line in _items(doc, "nodes", path, col):
        if not isinstance(item, dict):
            col.add(Location(file, line), None, None, "a node must be a mapping")
            continue
        fields = _merge(_plain(defaults), _plain(item))
        lines = {**default_lines, **_lines_of(item)}
        raws.append(_Raw(fields, Location(file, yamlfile.line_of(item) or line), lines))
    return raws


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


CSV_COLUMNS = {"name", "bmc_address", "bmc_username", "bmc_password", "bmc_verify_ca", "macs",
               "resource_class", "traits", "owner", "inspect", "cleaning", "description"}
CSV_PREFIXES = ("properties.", "extra.", "interfaces.")


def _raw_csv(path: Path, text: str, col: _Collector) -> list[_Raw]:
    file = str(path)
    lines = [ln for ln in text.splitlines(keepends=True)]
    reader = csv.reader(io.StringIO("".join(lines), newline=""))
    header: list[str] | None = None
    raws = []
    row_no = 0

    def records():
        try:
            yield from reader
        except csv.Error as exc:
            col.add(Location(file, reader.line_num), None, None, f"malformed CSV: {exc}")

    for record in records():
        line = reader.line_num
        if not record or all(not c.strip() for c in record) or record[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [h.strip() for h in record]
            seen: set[str] = set()
            for h in header:
                if h in seen:
                    col.add(Location(file, line), None, h, f"column {h!r} appears twice in the header")
                seen.add(h)
                if h not in CSV_COLUMNS and not h.startswith(CSV_PREFIXES):
                    col.add(Location(file, line), None, h, "unknown column")
            if "name" not in header or "bmc_address" not in header:
                col.add(Location(file, line), None, None, "header needs at least 'name' and 'bmc_address'")
            continue
        row_no += 1
        loc = Location(file, line, row_no)
        if len(record) != len(header):
            col.add(loc, None, None, f"{len(record)} cells for {len(header)} columns")
            continue
        fields: dict[str, Any] = {}
        for h, cell in zip(header, record):
            cell = cell.strip()
            if cell == "":
                continue
            if h.startswith("bmc_"):
                fields.setdefault("bmc", {})[h[4:]] = cell
            elif h in ("macs", "traits"):
                fields[h] = [x for x in re.split(r"[;\s]+", cell) if x]
            elif h == "cleaning":
                fields["cleaning"] = {"mode": cell}
            elif h.startswith(CSV_PREFIXES):
                group, _, key = h.partition(".")
                fields.setdefault(group, {})[key] = _csv_scalar(cell)
            else:
                fields[h] = cell
        if "bmc" in fields and "verify_ca" in fields["bmc"]:
            fields["bmc"]["verify_ca"] = _csv_scalar(fields["bmc"]["verify_ca"])
        raws.append(_Raw(fields, loc, {}))
    return raws


def _csv_scalar(cell: str) -> Any:
    low = cell.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if re.fullmatch(r"-?\d+", cell):
        return int(cell)
    return cell


def _type_name(value: Any) -> str:
    """What a person wrote, in YAML's words (ruamel's CommentedSeq is a list, CommentedMap a mapping)."""
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def _bmc_from_driver_info(driver: str | None, info: dict,
                          interfaces: dict) -> tuple[dict, dict, tuple[str, str] | None]:
    """(nodeforge bmc fields, remaining driver_info, error as (field, message)) from Ironic driver_info."""
    if not isinstance(info, dict):
        return {}, {}, ("driver_info", "must be a mapping")
    if driver is not None and not isinstance(driver, str):
        return {}, {}, ("driver", f"must be a hardware type name (a string), got {_type_name(driver)}")
    info = dict(info)
    if driver == "fake-hardware":
        return {"address": "fake://node"}, info, None
    if "ipmi_address" in info:
        host = info.pop("ipmi_address")
        port = info.pop("ipmi_port", None)
        if port is not None and (isinstance(port, bool) or not re.fullmatch(r"\d{1,5}", str(port).strip())
                                 or not 1 <= int(str(port).strip()) <= 65535):
            return {}, info, ("driver_info.ipmi_port", f"must be a port number 1-65535, got {port!r}")
        bmc = {"address": f"ipmi://{_host_in_url(str(host))}" + (f":{int(str(port).strip())}" if port is not None else "")}
        for k in ("username", "password"):
            if f"ipmi_{k}" in info:
                bmc[k] = info.pop(f"ipmi_{k}")
        return bmc, info, None
    if "redfish_address" in info:
        addr = str(info.pop("redfish_address")).rstrip("/")
        if "://" not in addr:
            addr = "https://" + addr
        transport, rest = addr.split("://", 1)
        base = {"redfish": "redfish", "idrac": "idrac-redfish"}.get(driver or "redfish", "redfish")
        if interfaces.get("boot_interface") == "redfish-virtual-media" and base == "redfish":
            base = "redfish-virtualmedia"
        sys_id = str(info.pop("redfish_system_id", "") or "")
        bmc = {"address": f"{base}+{transport}://{rest}{sys_id}"}
        for k in ("username", "password", "verify_ca"):
            if f"redfish_{k}" in info:
                bmc[k] = info.pop(f"redfish_{k}")
        return bmc, info, None
    return {}, info, ("driver_info", "driver_info has neither ipmi_address nor redfish_address")


# --------------------------------------------------------------------------- python-ironicclient bulk format
#
# ``baremetal create FILE`` (ironicclient/v1/create_resources.py): the top level is an object with
# only ``chassis`` and ``nodes`` (its JSON schema: additionalProperties false, both arrays of
# objects); a chassis may nest ``nodes``; a node nests ``ports`` and ``portgroups``; a port group
# nests ``ports``. The fields of each resource are python-ironicclient's ``_creation_attributes``
# (anything else it refuses, and so does nodeforge).

IC_TOP_FIELDS = ("chassis", "nodes")
IC_CHASSIS_FIELDS = {"description", "extra", "uuid", "nodes"}
IC_NODE_FIELDS = {"chassis_uuid", "driver", "driver_info", "extra", "uuid", "properties", "name",
                  *(f"{i}_interface" for i in _INTERFACES), "disable_power_off", "resource_class",
                  "conductor_group", "automated_clean", "network_data", "parent_node", "owner", "lessee",
                  "shard", "description", "instance_name", "traits", "ports", "portgroups"}
IC_PORT_FIELDS = {"address", "extra", "local_link_connection", "node_uuid", "physical_network",
                  "portgroup_uuid", "pxe_enabled", "uuid", "is_smartnic", "name", "description", "vendor",
                  "category"}
IC_PORTGROUP_FIELDS = {"address", "extra", "name", "node_uuid", "standalone_ports_supported", "mode",
                       "properties", "uuid", "physical_network", "category", "ports"}
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
LOCAL_LINK_KEYS = {"switch_id", "port_id", "switch_info", "hostname", "network_type"}
IRONIC_NODE_FIELDS = IC_NODE_FIELDS
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_CONDUCTOR_GROUP = re.compile(r"^[A-Za-z0-9_.-]{0,255}$")


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


def _seq(value: Any, parent: Any, key: str, file: str, col: _Collector, what: str, node: str | None = None,
         field: str | None = None) -> list[tuple[Any, int | None]]:
    """Items (with lines) of the list ``parent[key]``; a non-list is an issue."""
    if value is None:
        return []
    if not isinstance(value, list):
        col.add(Location(file, yamlfile.line_of(parent, key)), node, field or key, f"must be a list of {what}")
        return []
    return [(item, yamlfile.line_of(value, i) if isinstance(value, CommentedSeq) else None)
            for i, item in enumerate(value)]


def _raw_ironicclient(path: Path, doc: Any, col: _Collector) -> list[_Raw]:
    file = str(path)
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {'list' if isinstance(doc, list) else 'scalar'}"
        col.add(Location(file, yamlfile.line_of(doc) if isinstance(doc, list) else None), None, None,
                f"a python-ironicclient resources file is a mapping with 'chassis' and/or 'nodes'; the file is {what}")
        return []
    for key in doc:
        if key not in IC_TOP_FIELDS:
            col.add(Location(file, yamlfile.line_of(doc, key)), None, str(key),
                    "unknown top-level field (python-ironicclient's schema allows only 'chassis' and 'nodes')")
    raws: list[_Raw] = []
    col.chassis = []
    seen_keys: dict[str, Location] = {}
    for ci, (item, line) in enumerate(_seq(doc.get("chassis"), doc, "chassis", file, col, "chassis")):
        where = f"chassis[{ci}]"
        loc = Location(file, yamlfile.line_of(item) if isinstance(item, CommentedMap) else line)
        if not isinstance(item, dict):
            col.add(loc, None, where, "a chassis must be a mapping")
            continue
        lines = _lines_of(item)

        def cbad(field, message, item=item, lines=lines, loc=loc, where=where):
            col.add(Location(file, lines.get(field.partition(".")[0], loc.line)), None, f"{where}.{field}", message)

        before = len(col.issues)
        for k in item:
            if k not in IC_CHASSIS_FIELDS:
                cbad(str(k), "unknown field (a chassis takes description, extra, uuid, nodes)")
        desc, extra, cuuid = item.get("description"), item.get("extra"), item.get("uuid")
        if desc is not None and (not isinstance(desc, str) or len(desc) > 255):
            cbad("description", "must be text of at most 255 characters")
        if extra is not None and not isinstance(extra, dict):
            cbad("extra", "must be a mapping")
            extra = None
        for k in (extra or {}):
            if str(k).startswith("nodeforge_"):
                cbad("extra", f"key {k!r}: keys starting nodeforge_ are reserved for nodeforge's bookkeeping")
        if cuuid is not None and (not isinstance(cuuid, str) or not _UUID.match(cuuid)):
            cbad("uuid", f"not a UUID: {cuuid!r}")
        if cuuid is None and not desc:
            cbad("description", "a chassis needs a uuid or a description: Ironic chassis have no name, and "
                                "nodeforge finds a chassis again by one of them (a re-run would make another)")
        spec = None
        if len(col.issues) == before:
            key = f"uuid:{str(cuuid).lower()}" if cuuid else f"description:{desc}"
            if key in seen_keys:
                cbad("uuid" if cuuid else "description",
                     f"another chassis of this file has the same {key.partition(':')[0]} (first at {seen_keys[key]})")
            else:
                seen_keys[key] = loc
                spec = ChassisSpec(key, loc, desc, _plain(extra or {}), str(cuuid).lower() if cuuid else None)
                col.chassis.append(spec)
        for item2, line2 in _seq(item.get("nodes"), item, "nodes", file, col, "nodes", field=f"{where}.nodes"):
            raw = _ic_node(file, item2, line2, col)
            if raw is not None:
                raw.parts["chassis"] = spec.key if spec else None
                raw.parts["chassis_uuid_parent"] = spec.uuid if spec else None
                raws.append(raw)
    for item, line in _seq(doc.get("nodes"), doc, "nodes", file, col, "nodes"):
        raw = _ic_node(file, item, line, col)
        if raw is not None:
            raws.append(raw)
    if not doc.get("nodes") and not doc.get("chassis") and not col.issues:
        col.add(Location(file, 1), None, None, "no nodes and no chassis: the file creates nothing")
    return raws


def _ic_node(file: str, item: Any, line: int | None, col: _Collector) -> "_Raw | None":
    if not isinstance(item, dict):
        col.add(Location(file, line), None, None, "a node must be a mapping")
        return None
    lines = _lines_of(item)
    loc = Location(file, yamlfile.line_of(item) or line)
    name = item.get("name")
    fields: dict[str, Any] = {}
    for key in item:
        k = str(key)
        if k not in IC_NODE_FIELDS:
            col.add(Location(file, lines.get(k, loc.line)), name, k,
                    "unknown field (not a node field python-ironicclient's 'baremetal create' accepts)")
    interfaces = {k: v for k, v in item.items() if str(k).endswith("_interface")}
    bmc, rest, err = _bmc_from_driver_info(item.get("driver"), _plain(item.get("driver_info") or {}), interfaces)
    if err:
        col.add(Location(file, lines.get(err[0], lines.get("driver_info", loc.line))), name, err[0], err[1])
        return None
    if item.get("driver") == "fake-hardware":
        bmc["address"] = f"fake://{name or 'node'}"
    fields.update({k: _plain(v) for k, v in item.items()
                   if k in ("name", "properties", "resource_class", "traits", "owner", "extra", "description")})
    fields["bmc"] = bmc
    if interfaces:
        fields["interfaces"] = {k[:-len("_interface")]: v for k, v in interfaces.items()}
    if rest:
        fields["driver_info"] = rest
    if "automated_clean" in item:
        ac = item["automated_clean"]
        if ac is True:
            fields["cleaning"] = {"mode": "automated"}
        elif ac is False:
            fields["cleaning"] = {"mode": "none"}
        elif ac is not None:
            col.add(Location(file, lines.get("automated_clean", loc.line)), name, "automated_clean",
                    "must be true or false")
    mapped = dict(lines)
    for k in ("username", "password", "verify_ca"):
        for pre in ("ipmi_", "redfish_"):
            if f"driver_info.{pre}{k}" in lines:
                mapped[f"bmc.{k}"] = lines[f"driver_info.{pre}{k}"]
    for pre in ("ipmi_address", "redfish_address"):
        if f"driver_info.{pre}" in lines:
            mapped["bmc.address"] = lines[f"driver_info.{pre}"]
    mapped["macs"] = lines.get("ports", loc.line)
    parts: dict[str, Any] = {"ironic": {k: _plain(item[k]) for k in ("chassis_uuid", *IC_NODE_PASSTHROUGH)
                                        if k in item and item[k] is not None},
                             "newer": {k: _plain(item[k]) for k in IC_NEWER_API["node"]
                                       if k in item and item[k] is not None},
                             "ports": [], "portgroups": []}
    macs: list[str] = []

    def port_items(container, key, prefix):
        out = []
        for i, (p, pline) in enumerate(_seq(container.get(key), container, key, file, col, "ports", name,
                                            f"{prefix}{key}")):
            where = f"{prefix}{key}[{i}]"
            mapped[where] = yamlfile.line_of(p) if isinstance(p, CommentedMap) else (pline or loc.line)
            for k2, l2 in _lines_of(p).items():
                mapped[f"{where}.{k2}"] = l2
            out.append((where, p))
            if isinstance(p, dict):
                mac = normalize_mac(p.get("address")) if p.get("address") is not None else None
                if mac:
                    macs.append(mac)
        return out

    parts["ports"] = [(where, p, None) for where, p in port_items(item, "ports", "")]
    for gi, (g, gline) in enumerate(_seq(item.get("portgroups"), item, "portgroups", file, col, "port groups",
                                         name)):
        where = f"portgroups[{gi}]"
        mapped[where] = yamlfile.line_of(g) if isinstance(g, CommentedMap) else (gline or loc.line)
        for k2, l2 in _lines_of(g).items():
            mapped[f"{where}.{k2}"] = l2
        parts["portgroups"].append((where, g))
        if isinstance(g, dict):
            parts["ports"] += [(w, p, gi) for w, p in port_items(g, "ports", f"{where}.")]
    fields["macs"] = macs
    raw = _Raw(fields, loc, mapped)
    raw.parts = parts
    return raw


def api_version_for(kind: str, fields: Iterable[str]) -> str:
    """The Ironic API version a request with ``fields`` of a ``kind``
    ("node", "port", "portgroup") needs: nodeforge's default, or newer."""
    need = [IC_NEWER_API[kind][f] for f in fields if f in IC_NEWER_API[kind]]
    return max([C.API_VERSION, *need], key=lambda v: tuple(int(x) for x in v.split(".")))


def _build_bulk(raw: "_Raw", bad, col: _Collector) -> dict[str, Any]:
    """Validate the python-ironicclient parts of a node (passthrough fields,
    port groups, ports); return the built parts (meaningful only without issues)."""
    parts = raw.parts
    out: dict[str, Any] = {"ironic": {}, "ports": [], "portgroups": [], "chassis": parts.get("chassis"),
                           "chassis_uuid": None}
    ironic = parts.get("ironic") or {}
    node_uuid = ironic.get("uuid")
    if node_uuid is not None:
        if not isinstance(node_uuid, str) or not _UUID.match(node_uuid):
            bad("uuid", f"not a UUID: {node_uuid!r}")
        else:
            out["ironic"]["uuid"] = node_uuid.lower()
    cg = ironic.get("conductor_group")
    if cg is not None:
        if not isinstance(cg, str) or not _CONDUCTOR_GROUP.match(cg):
            bad("conductor_group", "must be at most 255 characters of A-Z a-z 0-9 _ - .")
        else:
            out["ironic"]["conductor_group"] = cg.lower()   # Ironic stores it lower case
    if "lessee" in ironic:
        if not isinstance(ironic["lessee"], str):
            bad("lessee", "must be a project ID or name")
        else:
            out["ironic"]["lessee"] = ironic["lessee"]
    if "network_data" in ironic:
        if not isinstance(ironic["network_data"], dict):
            bad("network_data", "must be a mapping (Nova's network_data.json)")
        else:
            out["ironic"]["network_data"] = ironic["network_data"]
    newer = parts.get("newer") or {}
    out["newer"] = {}
    for k in ("shard", "parent_node", "instance_name"):
        if k in newer:
            if not isinstance(newer[k], str) or not 0 < len(newer[k]) <= 255:
                bad(k, "must be text of 1-255 characters")
            else:
                out["newer"][k] = newer[k]
    if "disable_power_off" in newer:
        if not isinstance(newer["disable_power_off"], bool):
            bad("disable_power_off", "must be true or false")
        else:
            out["newer"]["disable_power_off"] = newer["disable_power_off"]
    cu = ironic.get("chassis_uuid")
    parent_uuid = parts.get("chassis_uuid_parent")
    if cu is not None:
        if not isinstance(cu, str) or not _UUID.match(cu):
            bad("chassis_uuid", f"not a UUID: {cu!r}")
        elif parts.get("chassis") is not None and cu.lower() != (parent_uuid or ""):
            bad("chassis_uuid", "a node nested in a chassis takes that chassis (python-ironicclient refuses a "
                                "different chassis_uuid)")
        elif parts.get("chassis") is None:
            out["chassis_uuid"] = cu.lower()
    groups: list[PortGroupSpec] = []
    keys: dict[str, str] = {}
    for where, g in parts.get("portgroups") or []:
        if not isinstance(g, dict):
            bad(where, "a port group must be a mapping")
            groups.append(None)
            continue
        before = len(col.issues)
        for k in g:
            if k not in IC_PORTGROUP_FIELDS:
                bad(f"{where}.{k}", "unknown field (not a port group field python-ironicclient accepts)")
        f: dict[str, Any] = {}
        gname = g.get("name")
        if gname is not None:
            if not isinstance(gname, str) or not _NAME.match(gname):
                bad(f"{where}.name", "must be 1-255 characters of A-Z a-z 0-9 . _ ~ -")
            else:
                f["name"] = gname
        if g.get("address") is not None:
            mac = normalize_mac(g["address"])
            if mac is None:
                bad(f"{where}.address", f"malformed MAC address {g['address']!r}")
            else:
                f["address"] = mac
        if g.get("mode") is not None:
            if not isinstance(g["mode"], str) or not g["mode"]:
                bad(f"{where}.mode", "must be a bonding mode (e.g. active-backup, 802.3ad, balance-rr)")
            else:
                f["mode"] = g["mode"]
        for k in ("properties", "extra"):
            if g.get(k) is not None:
                if not isinstance(g[k], dict):
                    bad(f"{where}.{k}", "must be a mapping")
                else:
                    f[k] = _plain(g[k])
        for k in ("physical_network", "category"):
            if g.get(k) is not None:
                if not isinstance(g[k], str) or not 0 < len(g[k]) <= 64:
                    bad(f"{where}.{k}", "must be text of 1-64 characters")
                else:
                    f[k] = g[k]
        if g.get("standalone_ports_supported") is not None:
            if not isinstance(g["standalone_ports_supported"], bool):
                bad(f"{where}.standalone_ports_supported", "must be true or false")
            else:
                f["standalone_ports_supported"] = g["standalone_ports_supported"]
        _check_uuid_fields(g, where, bad, f, node_uuid, "port group")
        key = f.get("name") or f.get("address") or f.get("uuid")
        if key is None and len(col.issues) == before:
            bad(where, "a port group needs a name, address or uuid: nodeforge finds it again by one of them "
                       "(a re-run would make another)")
        if key is not None and key in keys:
            bad(where, f"same name/address as {keys[key]} of this node")
        if key is not None:
            keys.setdefault(key, where)
        groups.append(PortGroupSpec(key, raw.loc(where), f) if key else None)
    out["portgroups"] = [g for g in groups if g is not None]
    for where, p, gi in parts.get("ports") or []:
        if not isinstance(p, dict):
            bad(where, "a port must be a mapping")
            continue
        for k in p:
            if k not in IC_PORT_FIELDS:
                bad(f"{where}.{k}", "unknown field (not a port field python-ironicclient accepts)")
        mac = normalize_mac(p["address"]) if p.get("address") is not None else None
        if p.get("address") is None:
            bad(f"{where}.address", "required (the port's MAC address)")
        elif mac is None:
            bad(f"{where}.address", f"malformed MAC address {p['address']!r}")
        f = {}
        for k in ("pxe_enabled", "is_smartnic"):
            if p.get(k) is not None:
                if not isinstance(p[k], bool):
                    bad(f"{where}.{k}", "must be true or false")
                else:
                    f[k] = p[k]
        if p.get("physical_network") is not None:
            if not isinstance(p["physical_network"], str) or not 0 < len(p["physical_network"]) <= 64:
                bad(f"{where}.physical_network", "must be a name of 1-64 characters")
            else:
                f["physical_network"] = p["physical_network"]
        if p.get("name") is not None:
            if not isinstance(p["name"], str) or not _NAME.match(p["name"]):
                bad(f"{where}.name", "must be 1-255 characters of A-Z a-z 0-9 . _ ~ -")
            else:
                f["name"] = p["name"]
        for k, most in (("description", 255), ("vendor", 32), ("category", 80)):
            if p.get(k) is not None:
                if not isinstance(p[k], str) or not 0 < len(p[k]) <= most:
                    bad(f"{where}.{k}", f"must be text of 1-{most} characters")
                else:
                    f[k] = p[k]
        if p.get("local_link_connection") is not None:
            llc = p["local_link_connection"]
            if not isinstance(llc, dict):
                bad(f"{where}.local_link_connection", "must be a mapping")
            else:
                unknown = sorted(str(k) for k in llc if k not in LOCAL_LINK_KEYS)
                if unknown:
                    bad(f"{where}.local_link_connection", f"unknown key(s) {', '.join(unknown)} (Ironic takes "
                                                          f"{', '.join(sorted(LOCAL_LINK_KEYS))})")
                else:
                    f["local_link_connection"] = _plain(llc)
        if p.get("extra") is not None:
            if not isinstance(p["extra"], dict):
                bad(f"{where}.extra", "must be a mapping")
            else:
                f["extra"] = _plain(p["extra"])
        _check_uuid_fields(p, where, bad, f, node_uuid, "port")
        group_key, group_uuid = None, None
        pg_uuid = p.get("portgroup_uuid")
        if gi is not None:
            group = groups[gi] if gi < len(groups) else None
            group_key = group.key if group else None
            if pg_uuid is not None and (group is None or str(pg_uuid).lower() != group.fields.get("uuid")):
                bad(f"{where}.portgroup_uuid", "a port nested in a port group belongs to it (python-ironicclient "
                                               "refuses a different portgroup_uuid)")
        elif pg_uuid is not None:
            if not isinstance(pg_uuid, str) or not _UUID.match(pg_uuid):
                bad(f"{where}.portgroup_uuid", f"not a UUID: {pg_uuid!r}")
            else:
                own = next((g for g in out["portgroups"] if g.fields.get("uuid") == pg_uuid.lower()), None)
                group_key, group_uuid = (own.key, None) if own else (None, pg_uuid.lower())
        if mac is not None:
            out["ports"].append(PortSpec(mac, raw.loc(where), f, group_key, group_uuid))
    return out


def _check_uuid_fields(item: dict, where: str, bad, f: dict, node_uuid, what: str) -> None:
    if item.get("uuid") is not None:
        if not isinstance(item["uuid"], str) or not _UUID.match(item["uuid"]):
            bad(f"{where}.uuid", f"not a UUID: {item['uuid']!r}")
        else:
            f["uuid"] = item["uuid"].lower()
    if item.get("node_uuid") is not None and (node_uuid is None
                                               or str(item["node_uuid"]).lower() != str(node_uuid).lower()):
        bad(f"{where}.node_uuid", f"a {what} nested in a node belongs to it (python-ironicclient refuses a "
                                  "different node_uuid; give the node that uuid instead)")


# Bifrost keys its playbooks use when deploying (addresses, config drive, Ansible groups), not
# when enrolling into Ironic: accepted, not enrolled, and each one NAMED in a warning.
BIFROST_IGNORED = {"ipv4_address", "ipv4_subnet_mask", "ipv4_gateway", "ipv4_nameserver",
                   "ipv4_interface_mac", "provisioning_ipv4_address", "ansible_ssh_host", "ansible_host",
                   "host_groups", "instance_info", "addressing_mode", "ansible_ssh_user", "instance_name",
                   "node_network_data", "ipv6_address", "ipv6_gateway", "ipv6_prefix", "ipv6_nameserver",
                   "ipv6_interface_mac"}
BIFROST_FIELDS = {"name", "uuid", "driver", "driver_info", "nics", "properties", "resource_class", "traits",
                  "owner", "extra", "description", *(f"{i}_interface" for i in _INTERFACES)} | BIFROST_IGNORED


def _raw_bifrost(path: Path, doc: Any, col: _Collector) -> list[_Raw]:
    file = str(path)
    raws = []
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {'list' if isinstance(doc, list) else 'scalar'}"
        col.add(Location(file, yamlfile.line_of(doc) if isinstance(doc, list) else None), None, None,
                f"a Bifrost inventory is a mapping of node name to node; the file is {what}")
        return []
    for key, item in doc.items():
        line = yamlfile.line_of(doc, key)
        loc = Location(file, line)
        if not isinstance(item, dict):
            col.add(loc, str(key), None, "a node must be a mapping")
            continue
        lines = _lines_of(item)
        name = item.get("name", key)
        for k in item:
            if k not in BIFROST_FIELDS:
                col.add(Location(file, lines.get(str(k), line)), name, str(k), "unknown field")
            elif k in BIFROST_IGNORED and item[k] not in (None, "", [], {}):
                col.warn(Location(file, lines.get(str(k), line)), name, str(k),
                         "Bifrost uses it when deploying, not enrolling: not enrolled into Ironic")
        info = _plain(item.get("driver_info") or {})
        if isinstance(info, dict) and isinstance(info.get("power"), dict):  # older Bifrost: driver_info.power.*
            info = {**{k: v for k, v in info.items() if k != "power"}, **info["power"]}
        interfaces = {k: v for k, v in item.items() if str(k).endswith("_interface")}
        bmc, rest, err = _bmc_from_driver_info(item.get("driver"), info, interfaces)
        if err:
            field = err[0]
            if field not in lines and f"driver_info.power.{field.partition('.')[2]}" in lines:
                field_line = lines[f"driver_info.power.{field.partition('.')[2]}"]
            else:
                field_line = lines.get(field, lines.get("driver_info", line))
            col.add(Location(file, field_line), name, field, err[1])
            continue
        if item.get("driver") == "fake-hardware":
            bmc["address"] = f"fake://{name}"
        fields: dict[str, Any] = {"name": name, "bmc": bmc}
        props = _plain(item.get("properties") or {})
        renames = {"ram": "memory_mb", "disk_size": "local_gb"}
        fields["properties"] = {renames.get(k, k): (int(v) if k in ("ram", "disk_size", "cpus")
                                                      and str(v).isdigit() else v) for k, v in props.items()}
        for k in ("resource_class", "traits", "owner", "extra", "description"):
            if k in item:
                fields[k] = _plain(item[k])
        if interfaces:
            fields["interfaces"] = {k[:-len("_interface")]: v for k, v in interfaces.items()}
        if rest:
            fields["driver_info"] = rest
        nics = item.get("nics") or []
        if not isinstance(nics, list):
            col.add(Location(file, lines.get("nics", line)), name, "nics",
                    f"must be a list of NICs ({{mac: ...}}), got {_type_name(nics)}")
            continue
        fields["macs"] = [n.get("mac") if isinstance(n, dict) else n for n in nics]
        mapped = dict(lines)
        for src, dst in (("ipmi_address", "address"), ("redfish_address", "address"), ("ipmi_username", "username"),
                         ("ipmi_password", "password"), ("redfish_username", "username"),
                         ("redfish_password", "password")):
            for pre in ("driver_info.", "driver_info.power."):
                if pre + src in lines:
                    mapped[f"bmc.{dst}"] = lines[pre + src]
        mapped["macs"] = lines.get("nics", line)
        raw = _Raw(fields, loc, mapped)
        if item.get("uuid") is not None:       # Bifrost enrolls the node with it
            raw.parts = {"ironic": {"uuid": _plain(item["uuid"])}}
        raws.append(raw)
    return raws


# Bifrost's legacy CSV (bifrost/inventory.py, _process_baremetal_csv): no header, one node a row:
# mac, username, password, address, cpus, ram (MiB), disk (GiB), -, -, uuid, name, ipv4_address,
# ipmi_target_channel, ipmi_target_address, ipmi_transit_channel, ipmi_transit_address, driver,
# -, provisioning_ipv4_address. Columns 7, 8 and 17 are not read by Bifrost either.
BIFROST_CSV_MIN_COLUMNS = 11


def _is_bifrost_csv(text: str) -> bool:
    try:
        for record in csv.reader(io.StringIO(text, newline="")):
            if not record or all(not c.strip() for c in record) or record[0].lstrip().startswith("#"):
                continue
            return normalize_mac(record[0]) is not None
    except csv.Error:
        return False  # malformed either way: the nodeforge CSV reader names the line
    return False


def _raw_bifrost_csv(path: Path, text: str, col: _Collector) -> list[_Raw]:
    file = str(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    raws: list[_Raw] = []
    row_no = 0
    records: list[tuple[int, list[str]]] = []
    try:
        for record in reader:
            records.append((reader.line_num, record))
    except csv.Error as exc:
        col.add(Location(file, reader.line_num), None, None, f"malformed CSV: {exc}")
        return []
    for line, record in records:
        if not record or all(not c.strip() for c in record) or record[0].lstrip().startswith("#"):
            continue
        row_no += 1
        loc = Location(file, line, row_no)
        cells = [c.strip() for c in record]
        if len(cells) < BIFROST_CSV_MIN_COLUMNS:
            col.add(loc, None, None, f"{len(cells)} cells: a Bifrost CSV row needs at least "
                                     f"{BIFROST_CSV_MIN_COLUMNS} (mac ... name)")
            continue

        def cell(i: int) -> str | None:
            return cells[i] if i < len(cells) and cells[i] != "" else None

        name = cell(10)
        if name is None:
            col.add(loc, None, "name", "column 11 (name) is empty")
            continue
        driver = cell(16) or "ipmi"
        power: dict[str, Any] = {}
        if "ipmi" in driver:
            driver = "ipmi"
            power = {"ipmi_address": cell(3), "ipmi_username": cell(1), "ipmi_password": cell(2)}
            for i, k in ((12, "ipmi_target_channel"), (13, "ipmi_target_address"), (14, "ipmi_transit_channel"),
                         (15, "ipmi_transit_address")):
                if cell(i) is not None:
                    power[k] = cell(i)
            if cell(12) and cell(13):
                power["ipmi_bridging"] = "dual" if cell(14) and cell(15) else "single"
        else:
            col.add(loc, name, "driver", f"driver {driver!r}: a Bifrost CSV row maps only to IPMI "
                                         "(use the JSON/YAML format for other drivers)")
            continue
        host: dict[str, Any] = {"name": name, "driver": driver, "driver_info": {"power": power},
                                "nics": [{"mac": cell(0)}],
                                "properties": {"cpus": cell(4), "ram": cell(5), "disk_size": cell(6),
                                               "cpu_arch": "x86_64"}}
        host["properties"] = {k: v for k, v in host["properties"].items() if v is not None}
        if cell(9) is not None:
            host["uuid"] = cell(9)
        for i, k in ((11, "ipv4_address"), (18, "provisioning_ipv4_address")):
            if cell(i) is not None:
                host[k] = cell(i)
        before_i, before_w = len(col.issues), len(col.warnings)
        got = _raw_bifrost(path, {name: host}, col)
        # Locations: this row (the dict has no lines of its own).
        for lst, start in ((col.issues, before_i), (col.warnings, before_w)):
            lst[start:] = [dataclasses.replace(i, location=loc) for i in lst[start:]]
        for raw in got:
            raw.location = loc
            raw.lines = {}
        raws.extend(got)
    return raws


# --------------------------------------------------------------------------- building + validation

def _build(raw: _Raw, col: _Collector, resolver: secrets_mod.Resolver) -> NodeSpec | None:
    f = raw.fields
    name = f.get("name")
    label = str(name) if name is not None else None
    before = len(col.issues)

    def bad(field: str, message: str) -> None:
        col.add(raw.loc(field), label, field, message)

    for key in f:
        if key not in NODE_FIELDS:
            bad(key, "unknown field")
    if not name:
        bad("name", "required")
    elif not isinstance(name, str) or not _NAME.match(name):
        bad("name", "must be 1-255 characters of A-Z a-z 0-9 . _ ~ -")

    bmc_f = f.get("bmc")
    bmc = None
    if not isinstance(bmc_f, dict) or not bmc_f.get("address"):
        bad("bmc.address", "required")
    else:
        for key in bmc_f:
            if key not in BMC_FIELDS:
                bad(f"bmc.{key}", "unknown field")
        bmc = _build_bmc(bmc_f, name, bad, resolver, raw)

    macs = []
    raw_macs = f.get("macs") or []
    if not isinstance(raw_macs, list):
        bad("macs", "must be a list of MAC addresses")
        raw_macs = []
    for m in raw_macs:
        mac = normalize_mac(m) if m is not None else None
        if mac is None:
            bad("macs", f"malformed MAC address {m!r}")
        elif mac in macs:
            bad("macs", f"MAC {mac} listed twice")
        else:
            macs.append(mac)

    rc = f.get("resource_class")
    if rc is not None and (not isinstance(rc, str) or not _RESOURCE_CLASS.match(rc)):
        bad("resource_class", "must be 1-80 characters of A-Z a-z 0-9 . _ -")
    traits = f.get("traits")
    if traits is not None:
        if not isinstance(traits, list):
            bad("traits", "must be a list")
            traits = None
        else:
            for t in traits:
                if not isinstance(t, str) or not _TRAIT.match(t):
                    bad("traits", f"invalid trait {t!r} (upper case, digits and _; custom ones start CUSTOM_)")
            traits = sorted(set(str(t) for t in traits))
    for key in ("properties", "extra", "interfaces", "driver_info"):
        if key in f and not isinstance(f[key], dict):
            bad(key, "must be a mapping")
    interfaces = {}
    for k, v in (f.get("interfaces") or {}).items() if isinstance(f.get("interfaces"), dict) else []:
        k = str(k).removesuffix("_interface")
        if k not in _INTERFACES:
            bad(f"interfaces.{k}", f"unknown interface (one of {', '.join(_INTERFACES)})")
        else:
            interfaces[f"{k}_interface"] = str(v)
    di_extra = dict(f.get("driver_info") or {}) if isinstance(f.get("driver_info"), dict) else {}
    for k in list(di_extra):
        if "password" in k or k in ("ipmi_address", "redfish_address", "redfish_system_id"):
            bad(f"driver_info.{k}", "set BMC address and credentials under 'bmc', not driver_info")
        elif k in C.SECRET_DRIVER_INFO_KEYS and di_extra[k] not in (None, ""):
            # ipmi_kg_key, snmp_auth_key, snmp_priv_key: secrets like the password, so given by
            # reference (env:, file:, fernet:) and held as a Secret, never printed.
            try:
                di_extra[k] = resolver.resolve(str(di_extra[k]))
            except secrets_mod.SecretRefError as exc:
                bad(f"driver_info.{k}", str(exc))
    extra = dict(f.get("extra") or {}) if isinstance(f.get("extra"), dict) else {}
    for k in extra:
        if str(k).startswith("nodeforge_"):
            bad(f"extra.{k}", "keys starting nodeforge_ are reserved for nodeforge's bookkeeping")
    inspect = f.get("inspect", False)
    if not isinstance(inspect, bool):
        bad("inspect", "must be true or false")
    cleaning = _build_cleaning(f.get("cleaning"), bad)
    owner = f.get("owner")
    if owner is not None and not isinstance(owner, str):
        bad("owner", "must be a project ID or name")

    bulk = _build_bulk(raw, bad, col) if raw.parts else {}
    key = bmc_key(bmc) if bmc is not None else None
    col.idents.append(_Ident(label, macs, key, bmc.address if bmc else None, raw.location, raw))
    if len(col.issues) > before or bmc is None:
        return None
    return NodeSpec(name=name, bmc=bmc, location=raw.location, macs=macs, resource_class=rc,
                    properties=dict(f.get("properties") or {}), traits=traits, owner=owner, extra=extra,
                    interfaces=interfaces, driver_info_extra=di_extra, inspect=bool(inspect), cleaning=cleaning,
                    description=f.get("description"), chassis=bulk.get("chassis"),
                    chassis_uuid=bulk.get("chassis_uuid"), ports=bulk.get("ports", []),
                    portgroups=bulk.get("portgroups", []), ironic=bulk.get("ironic", {}),
                    ironic_newer=bulk.get("newer", {}))


def _build_bmc(bmc_f: dict, name, bad, resolver, raw: _Raw) -> Bmc | None:
    try:
        kind, host, port, transport, system_id = parse_bmc_url(bmc_f["address"])
    except ValueError as exc:
        bad("bmc.address", str(exc))
        return None
    hw = HARDWARE[kind]
    username = bmc_f.get("username")
    password = None
    raw_pw = bmc_f.get("password")
    if hw.needs_credentials:
        if not username:
            bad("bmc.username", "required for a real BMC")
        if raw_pw in (None, ""):
            bad("bmc.password", "required for a real BMC (env:VAR, file:PATH or fernet:TOKEN)")
    if not hw.needs_credentials:  # fake://: credentials (e.g. from defaults) are not used
        username = raw_pw = None
    if raw_pw not in (None, ""):
        try:
            password = resolver.resolve(str(raw_pw))
        except secrets_mod.SecretRefError as exc:
            bad("bmc.password", str(exc))
    verify = bmc_f.get("verify_ca", True)
    if kind is BmcKind.IPMI and "verify_ca" in bmc_f:
        bad("bmc.verify_ca", "only for Redfish BMCs")
    elif isinstance(verify, str):
        ca = Path(verify).expanduser()
        if not ca.is_absolute():
            ca = raw_path_base(resolver) / ca
        if not ca.exists():
            bad("bmc.verify_ca", f"CA bundle {ca} not found")
        verify = str(ca)
    elif not isinstance(verify, bool):
        bad("bmc.verify_ca", "must be true, false or a CA bundle path")
    canonical = str(bmc_f["address"]).strip().rstrip("/")
    if kind is BmcKind.IPMI and port is None:
        port = 623
    return Bmc(kind=kind, address=canonical, host=host, port=port, transport=transport, system_id=system_id,
               username=str(username) if username is not None else None, password=password, verify_ca=verify)


def raw_path_base(resolver: secrets_mod.Resolver) -> Path:
    return resolver.base_dir


def _build_cleaning(value, bad) -> Cleaning:
    if value is None:
        return Cleaning()
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, dict):
        bad("cleaning", "must be a mode (automated, manual, none) or a mapping")
        return Cleaning()
    for k in value:
        if k not in CLEANING_FIELDS:
            bad(f"cleaning.{k}", "unknown field")
    try:
        mode = CleanMode(value.get("mode", "automated"))
    except ValueError:
        bad("cleaning.mode", "must be automated, manual or none")
        return Cleaning()
    steps = []
    for s in value.get("steps") or []:
        if not isinstance(s, dict) or not s.get("interface") or not s.get("step"):
            bad("cleaning.steps", "each step needs 'interface' and 'step' (and optional 'args')")
            continue
        steps.append(CleanStep(str(s["interface"]), str(s["step"]), dict(s.get("args") or {})))
    if mode is CleanMode.MANUAL and not steps:
        bad("cleaning.steps", "manual cleaning needs at least one step")
    if mode is not CleanMode.MANUAL and steps:
        bad("cleaning.steps", "steps are only used with mode: manual")
    dr = value.get("disable_ramdisk", False)
    if not isinstance(dr, bool):
        bad("cleaning.disable_ramdisk", "must be true or false")
        dr = False
    return Cleaning(mode=mode, steps=tuple(steps), disable_ramdisk=dr)


def _check_duplicates(idents: Iterable[_Ident], col: _Collector) -> None:
    seen_names: dict[str, _Ident] = {}
    seen_macs: dict[str, _Ident] = {}
    seen_bmcs: dict[str, _Ident] = {}
    for n in idents:
        if n.name:
            if n.name in seen_names:
                col.add(n.raw.loc("name"), n.name, "name", f"duplicate name (first at {seen_names[n.name].location})")
            seen_names.setdefault(n.name, n)
        for mac in n.macs:
            if mac in seen_macs and seen_macs[mac] is not n:
                col.add(n.raw.loc("macs"), n.name, "macs",
                        f"MAC {mac} also belongs to node {seen_macs[mac].name!r} ({seen_macs[mac].location})")
            seen_macs.setdefault(mac, n)
        if n.bmc_key:
            if n.bmc_key in seen_bmcs:
                first = seen_bmcs[n.bmc_key]
                col.add(n.raw.loc("bmc.address"), n.name, "bmc.address",
                        f"BMC {n.bmc_address} also used by node {first.name!r} ({first.location})")
            seen_bmcs.setdefault(n.bmc_key, n)


def _check_bulk_duplicates(nodes: list[NodeSpec], col: _Collector) -> None:
    """Port group names and addresses, and uuids, are unique in all of Ironic: a file
    that repeats one on two nodes (or two resources) could never be enrolled."""
    seen: dict[tuple[str, str], tuple[str, Location]] = {}

    def once(kind: str, value, node: str, field: str, loc: Location) -> None:
        if value is None:
            return
        if (kind, str(value)) in seen:
            other, where = seen[(kind, str(value))]
            col.add(loc, node, field, f"{kind} {value} also given to {other} ({where})")
        else:
            seen[(kind, str(value))] = (f"node {node!r}", loc)

    for n in nodes:
        once("uuid", n.ironic.get("uuid"), n.name, "uuid", n.location)
        for g in n.portgroups:
            once("port group name", g.fields.get("name"), n.name, "portgroups", g.location)
            once("port group address", g.fields.get("address"), n.name, "portgroups", g.location)
            once("uuid", g.fields.get("uuid"), n.name, "portgroups", g.location)
        for p in n.ports:
            once("uuid", p.fields.get("uuid"), n.name, "ports", p.location)
    for c in col.chassis:
        once("uuid", c.uuid, "a chassis", "chassis", c.location)
