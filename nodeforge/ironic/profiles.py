"""Hardware profiles: declarative rules over a node's hardware facts, each
yielding an Ironic resource class and a set of ``CUSTOM_`` traits.

``manifests/hardware-profiles.yaml`` (see docs/flavors-and-templates.md)::

    version: 1
    profiles:
      - name: compute
        resource_class: baremetal-compute        # Nova: CUSTOM_BAREMETAL_COMPUTE
        traits: [CUSTOM_NVME, CUSTOM_NIC_25G]
        match:
          cpu_count: {min: 2}
          memory_gib: {min: 192}
          disks: {count: {min: 1}, where: {kind: nvme, size_gb: {min: 400}}}
          nics: {count: {min: 2}, where: {speed_gbps: {min: 25}}}

Facts (:class:`Facts`) are read from Ironic's inspection data (``GET
/v1/nodes/{id}/inventory``, the shape ironic-python-agent and Redfish
inspection store), from node ``properties`` (no inspection data: fake
hardware, hand-enrolled nodes), or from the Redfish pre-flight
(:mod:`nodeforge.ironic.preflight`). A fact the source does not know is
``None`` and fails every condition on it, with a reason saying so.

:func:`evaluate` says, per profile, whether a node matches and why not:
each failed condition yields one human reason (``memory_gib 128 < min 192``).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path
from typing import Any

from nodeforge.errors import ConfigError
from nodeforge.imagebuild import yamlfile

DEFAULT_PATH = Path("manifests/hardware-profiles.yaml")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_RESOURCE_CLASS = re.compile(r"^[A-Za-z0-9._-]{1,80}$")
_CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]{1,248}$")
GB = 1000 ** 3

# PCI class codes (first two hex digits) of display controllers, and vendors.
_GPU_CLASS = "03"
PCI_VENDORS = {"10de": "nvidia", "1002": "amd", "8086": "intel", "1a03": "aspeed", "102b": "matrox"}


class Source(str, enum.Enum):
    INSPECTION = "inspection"   # Ironic inventory (agent or out-of-band inspection)
    PROPERTIES = "properties"   # node properties only (memory_mb, cpus, local_gb, ...)
    PREFLIGHT = "preflight"     # nodeforge's Redfish pre-flight
    FILE = "file"               # a facts file (tests, offline planning)


def placement_resource_class(resource_class: str) -> str:
    """The Placement resource class Nova's Ironic driver reports for an Ironic
    resource class: upper case, every non-alphanumeric character ``_``,
    prefixed ``CUSTOM_`` (``baremetal-compute`` -> ``CUSTOM_BAREMETAL_COMPUTE``)."""
    return "CUSTOM_" + re.sub(r"[^A-Z0-9]", "_", resource_class.upper())


# ----------------------------------------------------------------------------- facts

@dataclasses.dataclass(frozen=True)
class Disk:
    name: str | None
    size_gb: int | None          # decimal GB, as vendors label disks
    kind: str | None             # nvme | ssd | hdd
    vendor: str | None = None
    model: str | None = None

    def get(self, key: str):
        return getattr(self, key)


@dataclasses.dataclass(frozen=True)
class Nic:
    mac: str | None
    speed_gbps: float | None

    def get(self, key: str):
        return getattr(self, key)


@dataclasses.dataclass(frozen=True)
class Gpu:
    vendor: str | None
    model: str | None

    def get(self, key: str):
        return getattr(self, key)


LIST_FACTS = {"disks": Disk, "nics": Nic, "gpus": Gpu}
SCALAR_FACTS = ("cpu_model", "cpu_count", "cpu_arch", "memory_gib", "vendor", "model", "boot_mode")


@dataclasses.dataclass
class Facts:
    """What nodeforge knows about one node's hardware. ``None``: unknown."""

    source: Source
    cpu_model: str | None = None
    cpu_count: int | None = None      # logical CPUs (threads), as inspection counts them
    cpu_arch: str | None = None
    memory_gib: int | None = None
    vendor: str | None = None
    model: str | None = None
    boot_mode: str | None = None      # uefi | bios
    disks: list[Disk] | None = None
    nics: list[Nic] | None = None
    gpus: list[Gpu] | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["source"] = self.source.value
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "Facts":
        kw: dict[str, Any] = {k: data.get(k) for k in SCALAR_FACTS}
        for key, typ in LIST_FACTS.items():
            if data.get(key) is not None:
                kw[key] = [typ(**{f.name: item.get(f.name) for f in dataclasses.fields(typ)}) for item in data[key]]
        return cls(source=Source(data.get("source", "file")), **kw)


def _disk_kind(disk: dict) -> str | None:
    name = (disk.get("name") or "").lower()
    model = (disk.get("model") or "").lower()
    if "nvme" in name or "nvme" in model:
        return "nvme"
    if disk.get("rotational") is True:
        return "hdd"
    if disk.get("rotational") is False:
        return "ssd"
    return None


def facts_from_inventory(inventory: dict, properties: dict | None = None) -> Facts:
    """Facts from Ironic's stored inspection data (``{"inventory": ...}`` or the
    inventory itself). NVMe is told from SSD by the disk name or model, or by
    the protocol of the drive in ``storage_controllers`` (Redfish inspection)."""
    inv = inventory.get("inventory", inventory) or {}
    cpu = inv.get("cpu") or {}
    memory = inv.get("memory") or {}
    vendor = inv.get("system_vendor") or {}
    boot = inv.get("boot") or {}
    protocols: dict[str, str] = {}
    for ctrl in inv.get("storage_controllers") or []:
        for drive in ctrl.get("drives") or []:
            key = drive.get("serial_number") or drive.get("name")
            if key and drive.get("protocol"):
                protocols[str(key)] = str(drive["protocol"]).lower()
    disks = []
    for d in inv.get("disks") or []:
        kind = _disk_kind(d)
        proto = protocols.get(str(d.get("serial"))) or protocols.get(str(d.get("name")))
        if proto == "nvme":
            kind = "nvme"
        size = d.get("size")
        disks.append(Disk(name=d.get("name"), size_gb=round(int(size) / GB) if size else None, kind=kind,
                          vendor=d.get("vendor"), model=d.get("model")))
    nics = []
    for i in inv.get("interfaces") or []:
        speed = i.get("speed_mbps")
        nics.append(Nic(mac=(i.get("mac_address") or "").lower() or None,
                        speed_gbps=round(int(speed) / 1000, 1) if speed else None))
    gpus = []
    for dev in inv.get("pci_devices") or []:
        if str(dev.get("class") or "").startswith(_GPU_CLASS):
            vid = str(dev.get("vendor_id") or "").lower()
            gpus.append(Gpu(vendor=PCI_VENDORS.get(vid, vid or None), model=dev.get("product_id")))
    phys_mb = memory.get("physical_mb")
    count = cpu.get("count")
    facts = Facts(
        source=Source.INSPECTION,
        cpu_model=cpu.get("model_name"),
        cpu_count=int(count) if count else None,
        cpu_arch=cpu.get("architecture") or None,
        memory_gib=round(int(phys_mb) / 1024) if phys_mb else None,
        vendor=vendor.get("manufacturer"),
        model=vendor.get("product_name"),
        boot_mode=boot.get("current_boot_mode"),
        disks=disks,
        nics=nics,
        # Out-of-band inspection only lists PCI devices when the BMC does;
        # an absent list is "unknown", not "no GPU".
        gpus=gpus if inv.get("pci_devices") is not None else None,
    )
    if properties:
        fallback = facts_from_properties(properties)
        for key in ("cpu_arch", "memory_gib", "boot_mode"):
            if getattr(facts, key) is None:
                setattr(facts, key, getattr(fallback, key))
    return facts


def facts_from_properties(properties: dict) -> Facts:
    """Facts from node properties alone (``memory_mb``, ``cpus``, ``cpu_arch``,
    ``local_gb``, ``capabilities`` boot_mode, plus the optional
    ``vendor``/``model``/``cpu_model`` keys a hand-written inventory may set)."""
    caps = dict(kv.split(":", 1) for kv in str(properties.get("capabilities") or "").split(",") if ":" in kv)
    mem = properties.get("memory_mb")
    cpus = properties.get("cpus")
    return Facts(
        source=Source.PROPERTIES,
        cpu_model=properties.get("cpu_model"),
        cpu_count=int(cpus) if cpus not in (None, "") else None,
        cpu_arch=properties.get("cpu_arch"),
        memory_gib=round(int(mem) / 1024) if mem not in (None, "") else None,
        vendor=properties.get("vendor"),
        model=properties.get("model"),
        boot_mode=caps.get("boot_mode"),
    )


def facts_from_preflight(facts: dict) -> Facts:
    """Facts from a Redfish pre-flight check (``preflight.Check.facts``)."""
    boot = facts.get("boot_mode")
    return Facts(
        source=Source.PREFLIGHT,
        cpu_model=facts.get("cpu_model"),
        cpu_count=facts.get("cpu_count"),
        memory_gib=round(float(facts["memory_gib"])) if facts.get("memory_gib") is not None else None,
        vendor=facts.get("manufacturer"),
        model=facts.get("model"),
        boot_mode=str(boot).lower() if boot else None,
        nics=[Nic(mac=m, speed_gbps=None) for m in facts.get("macs") or []] if facts.get("macs") else None,
    )


# ----------------------------------------------------------------------------- conditions

_OPS = ("min", "max", "in", "contains", "regex", "equals")


@dataclasses.dataclass(frozen=True)
class Condition:
    """One test on one value: ``equals`` (strings compare case-insensitively),
    ``min``/``max`` (numbers), ``in`` (one of), ``contains`` (substring,
    case-insensitive), ``regex`` (Python ``re.search``)."""

    ops: tuple[tuple[str, Any], ...]

    @classmethod
    def parse(cls, raw, where: str, problems: list[str]) -> "Condition":
        if not isinstance(raw, dict):
            raw = {"equals": raw}
        ops = []
        for op, value in raw.items():
            if op not in _OPS:
                problems.append(f"{where}: unknown operator '{op}' (one of {', '.join(_OPS)})")
                continue
            if op in ("min", "max") and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                problems.append(f"{where}.{op}: must be a number")
                continue
            if op == "in" and not isinstance(value, list):
                problems.append(f"{where}.in: must be a list")
                continue
            if op == "regex":
                try:
                    re.compile(str(value))
                except re.error as exc:
                    problems.append(f"{where}.regex: {exc}")
                    continue
            ops.append((op, list(value) if isinstance(value, list) else value))
        return cls(tuple(ops))

    def failures(self, value) -> list[str]:
        """Why ``value`` fails this condition (empty: it passes)."""
        if value is None:
            return ["unknown"]
        out = []
        for op, want in self.ops:
            if op == "equals" and not _eq(value, want):
                out.append(f"{_show(value)} != {_show(want)}")
            elif op == "min" and not (_num(value) is not None and _num(value) >= want):
                out.append(f"{_show(value)} < min {want}")
            elif op == "max" and not (_num(value) is not None and _num(value) <= want):
                out.append(f"{_show(value)} > max {want}")
            elif op == "in" and not any(_eq(value, w) for w in want):
                out.append(f"{_show(value)} not in {want}")
            elif op == "contains" and str(want).lower() not in str(value).lower():
                out.append(f"{_show(value)} does not contain {_show(want)}")
            elif op == "regex" and not re.search(str(want), str(value)):
                out.append(f"{_show(value)} does not match /{want}/")
        return out

    def describe(self, subject: str = "") -> str:
        """``kind='ssd'``, ``size_gb>=4000``... (``subject`` prefixes each test)."""
        sym = {"equals": "=", "min": ">=", "max": "<=", "in": " in ", "contains": " contains ", "regex": " ~ "}
        return " and ".join(f"{subject}{sym[op]}{_show(v)}" for op, v in self.ops)

    def to_data(self):
        return {op: v for op, v in self.ops}


def _eq(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a).lower() == str(b).lower()
    return a == b


def _num(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _show(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)


@dataclasses.dataclass(frozen=True)
class ListRule:
    """``count`` of the items (disks, NICs, GPUs) that satisfy every ``where``
    condition; ``count`` defaults to ``{min: 1}``."""

    fact: str
    count: Condition
    where: tuple[tuple[str, Condition], ...]

    def failures(self, items) -> list[str]:
        where = " and ".join(c.describe(k) for k, c in self.where)
        what = f"{self.fact}" + (f" with {where}" if where else "")
        if items is None:
            return [f"{self.fact} unknown (needed: {self.count.describe('count')} {what})"]
        n = sum(1 for item in items if all(not c.failures(item.get(k)) for k, c in self.where))
        if self.count.failures(n):
            return [f"{n} {what}, need {self.count.describe('count')}"]
        return []

    def to_data(self):
        return {"count": self.count.to_data(), "where": {k: c.to_data() for k, c in self.where}}


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    resource_class: str
    traits: tuple[str, ...]
    scalars: tuple[tuple[str, Condition], ...]
    lists: tuple[ListRule, ...]
    description: str | None = None
    line: int | None = None

    @property
    def placement_class(self) -> str:
        return placement_resource_class(self.resource_class)

    def failures(self, facts: Facts) -> list[str]:
        """Every reason this profile does not match ``facts`` (empty: it matches)."""
        out = []
        for key, cond in self.scalars:
            out += [f"{key} {reason}" if reason != "unknown" else f"{key} unknown ({facts.source.value} data)"
                    for reason in cond.failures(getattr(facts, key))]
        for rule in self.lists:
            out += rule.failures(getattr(facts, rule.fact))
        return out

    def to_dict(self) -> dict:
        return {"name": self.name, "resource_class": self.resource_class,
                "placement_resource_class": self.placement_class, "traits": list(self.traits),
                "match": {**{k: c.to_data() for k, c in self.scalars},
                          **{r.fact: r.to_data() for r in self.lists}}}


@dataclasses.dataclass(frozen=True)
class ProfileSet:
    path: str
    profiles: tuple[Profile, ...]

    @property
    def managed_traits(self) -> frozenset[str]:
        """Every trait some profile sets: classify owns these on every node
        (adds its profile's, removes the others'); other traits are left alone."""
        return frozenset(t for p in self.profiles for t in p.traits)

    def by_name(self) -> dict[str, Profile]:
        return {p.name: p for p in self.profiles}

    def by_resource_class(self) -> dict[str, Profile]:
        return {p.resource_class: p for p in self.profiles}


@dataclasses.dataclass(frozen=True)
class Evaluation:
    profile: str
    matched: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"profile": self.profile, "matched": self.matched, "reasons": list(self.reasons)}


def evaluate(profiles: ProfileSet, facts: Facts) -> list[Evaluation]:
    return [Evaluation(p.name, not (r := p.failures(facts)), tuple(r)) for p in profiles.profiles]


# ----------------------------------------------------------------------------- loading

_PROFILE_KEYS = {"name", "resource_class", "traits", "match", "description"}
_LIST_KEYS = {"count", "where"}


def load(path: Path | str = DEFAULT_PATH) -> ProfileSet:
    """Read and validate the whole file; every problem is reported at once
    (``ConfigError`` naming file, line and key)."""
    path = Path(path)
    doc = yamlfile.load(path)
    return parse(doc, str(path))


def parse(doc, label: str = "<profiles>") -> ProfileSet:
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise ConfigError(path=label, detail="must be a mapping with 'version: 1' and 'profiles:'")
    if doc.get("version") != 1:
        problems.append("version: must be 1")
    raw_profiles = doc.get("profiles")
    if not isinstance(raw_profiles, list) or not raw_profiles:
        raise ConfigError(path=label, detail="profiles: must be a non-empty list")
    out: list[Profile] = []
    names: set[str] = set()
    classes: dict[str, str] = {}
    for i, raw in enumerate(raw_profiles):
        line = yamlfile.line_of(raw_profiles, i)
        at = f"line {line}: " if line else ""
        if not isinstance(raw, dict):
            problems.append(f"{at}profiles[{i}]: must be a mapping")
            continue
        name = raw.get("name")
        where = f"{at}profiles[{i}]" + (f" ({name})" if name else "")
        for key in sorted(set(raw) - _PROFILE_KEYS):
            problems.append(f"{where}: unknown key '{key}'")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{where}.name: required; lower case letters, digits, '.', '_', '-'")
        elif name in names:
            problems.append(f"{where}.name: duplicate profile '{name}'")
        names.add(str(name))
        rc = raw.get("resource_class")
        if not isinstance(rc, str) or not _RESOURCE_CLASS.match(rc):
            problems.append(f"{where}.resource_class: required; 1-80 characters of A-Z a-z 0-9 . _ -")
            rc = "?"
        elif placement_resource_class(rc) in classes and classes[placement_resource_class(rc)] != rc:
            problems.append(f"{where}.resource_class: '{rc}' and '{classes[placement_resource_class(rc)]}' "
                            f"are the same Placement class {placement_resource_class(rc)}")
        classes.setdefault(placement_resource_class(rc), rc)
        traits = raw.get("traits") or []
        if not isinstance(traits, list):
            problems.append(f"{where}.traits: must be a list")
            traits = []
        for t in traits:
            if not isinstance(t, str) or not _CUSTOM_TRAIT.match(t):
                problems.append(f"{where}.traits: {t!r} is not a custom trait (CUSTOM_ + A-Z 0-9 _)")
        match = raw.get("match")
        if not isinstance(match, dict) or not match:
            problems.append(f"{where}.match: required, a mapping of fact to condition "
                            f"(facts: {', '.join(SCALAR_FACTS + tuple(LIST_FACTS))})")
            match = {}
        scalars, lists = [], []
        for fact, cond in match.items():
            fwhere = f"{where}.match.{fact}"
            if fact in SCALAR_FACTS:
                scalars.append((fact, Condition.parse(cond, fwhere, problems)))
            elif fact in LIST_FACTS:
                rules = cond if isinstance(cond, list) else [cond]
                for j, rule in enumerate(rules):
                    rwhere = fwhere + (f"[{j}]" if isinstance(cond, list) else "")
                    if not isinstance(rule, dict):
                        problems.append(f"{rwhere}: must be a mapping with count and/or where")
                        continue
                    for key in sorted(set(rule) - _LIST_KEYS):
                        problems.append(f"{rwhere}: unknown key '{key}' (count, where)")
                    item_fields = {f.name for f in dataclasses.fields(LIST_FACTS[fact])}
                    wh = rule.get("where") or {}
                    if not isinstance(wh, dict):
                        problems.append(f"{rwhere}.where: must be a mapping")
                        wh = {}
                    conds = []
                    for k, c in wh.items():
                        if k not in item_fields:
                            problems.append(f"{rwhere}.where.{k}: unknown {fact} field "
                                            f"(one of {', '.join(sorted(item_fields))})")
                            continue
                        conds.append((k, Condition.parse(c, f"{rwhere}.where.{k}", problems)))
                    count = Condition.parse(rule.get("count", {"min": 1}), f"{rwhere}.count", problems)
                    lists.append(ListRule(fact, count, tuple(conds)))
            else:
                problems.append(f"{fwhere}: unknown fact (one of {', '.join(SCALAR_FACTS + tuple(LIST_FACTS))})")
        out.append(Profile(name=str(name), resource_class=str(rc), traits=tuple(sorted(set(map(str, traits)))),
                           scalars=tuple(scalars), lists=tuple(lists), description=raw.get("description"),
                           line=line))
    if problems:
        raise ConfigError(path=label, detail=f"{len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return ProfileSet(label, tuple(out))
