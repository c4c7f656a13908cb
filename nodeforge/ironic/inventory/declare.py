"""The declared shape of every inventory format (the schemas in docs/schemas.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Optional

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from nodeforge import schema
from nodeforge.ironic import constants as C
from nodeforge.base import secrets as secrets_mod
from nodeforge.schema import Declared, Rule, vocab
from nodeforge.ironic.inventory.model import BmcKind, HARDWARE, LIMITS, _INTERFACES, parse_bmc_url


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
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty: write true, false or the path of a CA bundle file")
        if isinstance(value, str) and value.strip().startswith(("/dev/", "/proc/", "/sys/")):
            raise ValueError("a CA bundle is a file, not a device or a kernel file")
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
    A bare mode (``cleaning: none``) is the same as ``{mode: none}``. With the agent, at
    enrollment: ``burn_in`` (seconds of CPU, memory and disk stress) and ``erase: full`` (every
    disk overwritten; the passes are the conductor's ``[deploy] shred_*`` settings)."""

    mode: Literal["automated", "manual", "none"] = "automated"
    steps: list[CleanStepEntry] = []
    disable_ramdisk: bool = False
    erase: Literal["metadata", "full"] = "metadata"
    burn_in: dict[Literal["cpu", "memory", "disk"], Annotated[int, Field(ge=1, le=7 * 86400)]] = {}

    @model_validator(mode="after")
    def _steps_match_mode(self):
        agent = [k for k, on in (("erase: full", self.erase == "full"), ("burn_in", bool(self.burn_in))) if on]
        if self.mode == "manual" and not (self.steps or agent):
            raise ValueError("manual cleaning needs at least one step (or erase: full, or burn_in)")
        if self.mode != "manual" and self.steps:
            raise ValueError("steps are only used with mode: manual")
        if agent and (self.mode == "none" or self.disable_ramdisk):
            raise ValueError(f"{' and '.join(agent)} {'run' if len(agent) > 1 else 'runs'} in the agent ramdisk: not with "
                             f"{'mode: none' if self.mode == 'none' else 'disable_ramdisk: true'}")
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

