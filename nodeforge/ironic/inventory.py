"""Bare-metal inventories: one model, four input formats, whole-batch validation.

Formats (``docs/inventory.md``), detected from the file or forced by ``fmt``:

* ``nodeforge`` YAML/JSON: ``{version: 1, scope: NAME, defaults: {...}, nodes: [...]}``.
* ``csv``: one node per row; header names the columns.
* ``ironicclient``: python-ironicclient's ``baremetal create`` file
  (``{nodes: [{driver, driver_info, ports: [...]}]}``).
* ``bifrost``: Bifrost's inventory (a mapping of node name to
  ``{driver, driver_info: {power: {...}}, nics: [{mac}], properties}``).

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
import re
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from nodeforge.errors import ConfigError, ExitCode
from nodeforge.imagebuild import yamlfile
from nodeforge.ironic import constants as C
from nodeforge.ironic import secrets as secrets_mod
from nodeforge.redact import MASK, Secret

SCHEMA_VERSION = 1

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

    @property
    def driver(self) -> str:
        return self.bmc.hardware.hardware_type

    def all_interfaces(self) -> dict[str, str]:
        return {**self.bmc.hardware.interfaces, **self.interfaces}

    def driver_info(self, *, reveal: bool = False) -> dict[str, Any]:
        return {**self.driver_info_extra, **self.bmc.driver_info(reveal=reveal)}

    def to_dict(self) -> dict:
        """Masked view (validate / dry-run output)."""
        return {
            "name": self.name, "driver": self.driver, "bmc": self.bmc.address,
            "driver_info": self.driver_info(), "interfaces": self.all_interfaces(),
            "macs": self.macs, "resource_class": self.resource_class, "properties": self.properties,
            "traits": self.traits, "owner": self.owner, "extra": self.extra, "inspect": self.inspect,
            "cleaning": self.cleaning.to_dict(), "scope": self.scope, "location": str(self.location),
        }


@dataclasses.dataclass
class Inventory:
    path: Path
    format: Format
    nodes: list[NodeSpec]
    scope: str | None = None          # set by load(): ``scope:`` or derived from the path
    scope_source: str = "file"        # "file" or "derived"

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

    def add(self, loc: Location, node: str | None, field: str | None, message: str) -> None:
        self.issues.append(Issue(loc, node, field, message))


@dataclasses.dataclass
class _Raw:
    """One node's fields in nodeforge terms, with a location per field path."""

    fields: dict[str, Any]
    location: Location
    lines: dict[str, int]

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
    if fmt is Format.CSV or (fmt is None and path.suffix.lower() == ".csv"):
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
    if not raws and not col.issues:
        col.add(Location(str(path)), None, None, "no nodes: the inventory lists no servers")
    _check_duplicates(col.idents, col)
    scope, scope_source = C.derive_scope(path), "derived"
    if fmt is Format.NODEFORGE and isinstance(doc, dict) and "scope" in doc:
        scope, scope_source = doc["scope"], "file"      # validated by _raw_nodeforge
    if col.issues:
        raise InventoryError(str(path), sorted(col.issues, key=lambda i: (i.location.line or 0)))
    for n in nodes:
        n.scope = scope
    return Inventory(path=path, format=fmt, nodes=nodes, scope=scope, scope_source=scope_source)


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
    reader = csv.reader(io.StringIO("".join(lines)))
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


IRONIC_NODE_FIELDS = {"name", "driver", "driver_info", "properties", "resource_class", "traits", "owner",
                      "extra", "ports", "description", "uuid", "chassis_uuid",
                      *(f"{i}_interface" for i in _INTERFACES)}


def _bmc_from_driver_info(driver: str | None, info: dict,
                          interfaces: dict) -> tuple[dict, dict, tuple[str, str] | None]:
    """(nodeforge bmc fields, remaining driver_info, error as (field, message)) from Ironic driver_info."""
    if not isinstance(info, dict):
        return {}, {}, ("driver_info", "must be a mapping")
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


def _raw_ironicclient(path: Path, doc: Any, col: _Collector) -> list[_Raw]:
    file = str(path)
    raws = []
    if isinstance(doc, dict) and doc.get("chassis"):
        col.add(Location(file, yamlfile.line_of(doc, "chassis")), None, "chassis",
                "chassis are not supported; list nodes at the top level")
    for item, line in _items(doc, "nodes", path, col):
        if not isinstance(item, dict):
            col.add(Location(file, line), None, None, "a node must be a mapping")
            continue
        lines = _lines_of(item)
        loc = Location(file, yamlfile.line_of(item) or line)
        name = item.get("name")
        fields: dict[str, Any] = {}
        for key in item:
            if key not in IRONIC_NODE_FIELDS:
                col.add(Location(file, lines.get(str(key), loc.line)), name, str(key), "unknown field")
        interfaces = {k: v for k, v in item.items() if str(k).endswith("_interface")}
        bmc, rest, err = _bmc_from_driver_info(item.get("driver"), _plain(item.get("driver_info") or {}),
                                               interfaces)
        if err:
            col.add(Location(file, lines.get(err[0], lines.get("driver_info", loc.line))), name, err[0], err[1])
            continue
        if item.get("driver") == "fake-hardware":
            bmc["address"] = f"fake://{name or 'node'}"
        fields.update({k: _plain(v) for k, v in item.items()
                       if k in ("name", "properties", "resource_class", "traits", "owner", "extra", "description")})
        fields["bmc"] = bmc
        if interfaces:
            fields["interfaces"] = {k[:-len("_interface")]: v for k, v in interfaces.items()}
        if rest:
            fields["driver_info"] = rest
        ports = item.get("ports") or []
        fields["macs"] = [p.get("address") if isinstance(p, dict) else p for p in ports]
        # driver_info.ipmi_password -> bmc.password, etc.
        mapped = dict(lines)
        for k in ("username", "password", "verify_ca"):
            for pre in ("ipmi_", "redfish_"):
                if f"driver_info.{pre}{k}" in lines:
                    mapped[f"bmc.{k}"] = lines[f"driver_info.{pre}{k}"]
        for pre in ("ipmi_address", "redfish_address"):
            if f"driver_info.{pre}" in lines:
                mapped["bmc.address"] = lines[f"driver_info.{pre}"]
        mapped["macs"] = lines.get("ports", loc.line)
        raws.append(_Raw(fields, loc, mapped))
    return raws


BIFROST_IGNORED = {"uuid", "ipv4_address", "ipv4_subnet_mask", "ipv4_gateway", "ipv4_nameserver",
                   "ipv4_interface_mac", "provisioning_ipv4_address", "ansible_ssh_host", "ansible_host",
                   "host_groups", "instance_info", "network_interface", "addressing_mode",
                   "ansible_ssh_user", "instance_name"}
BIFROST_FIELDS = {"name", "driver", "driver_info", "nics", "properties", "resource_class", "traits", "owner",
                  "extra", "description", *(f"{i}_interface" for i in _INTERFACES)} | BIFROST_IGNORED


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
        fields["macs"] = [n.get("mac") if isinstance(n, dict) else n for n in (item.get("nics") or [])]
        mapped = dict(lines)
        for src, dst in (("ipmi_address", "address"), ("redfish_address", "address"), ("ipmi_username", "username"),
                         ("ipmi_password", "password"), ("redfish_username", "username"),
                         ("redfish_password", "password")):
            for pre in ("driver_info.", "driver_info.power."):
                if pre + src in lines:
                    mapped[f"bmc.{dst}"] = lines[pre + src]
        mapped["macs"] = lines.get("nics", line)
        raws.append(_Raw(fields, loc, mapped))
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
    for k in di_extra:
        if "password" in k or k in ("ipmi_address", "redfish_address", "redfish_system_id"):
            bad(f"driver_info.{k}", "set BMC address and credentials under 'bmc', not driver_info")
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

    key = bmc_key(bmc) if bmc is not None else None
    col.idents.append(_Ident(label, macs, key, bmc.address if bmc else None, raw.location, raw))
    if len(col.issues) > before or bmc is None:
        return None
    return NodeSpec(name=name, bmc=bmc, location=raw.location, macs=macs, resource_class=rc,
                    properties=dict(f.get("properties") or {}), traits=traits, owner=owner, extra=extra,
                    interfaces=interfaces, driver_info_extra=di_extra, inspect=bool(inspect), cleaning=cleaning,
                    description=f.get("description"))


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
