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
import math
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, ValidationError

from nodeforge.ironic import baseline as bl
from nodeforge import schema
from nodeforge.schema import Declared, Rule, register, vocab
from nodeforge.schema.loader import plain

DEFAULT_PATH = Path("manifests/hardware-profiles.yaml")
GB = 1000 ** 3

# PCI class codes (first two hex digits) of display controllers, and vendors.
_GPU_CLASS = "03"
PCI_VENDORS = {"10de": "nvidia", "1002": "amd", "8086": "intel", "1a03": "aspeed", "102b": "matrox"}


class Source(str, enum.Enum):
    INSPECTION = "inspection"   # Ironic inventory (agent or out-of-band inspection)
    PROPERTIES = "properties"   # node properties only (memory_mb, cpus, local_gb, ...)
    PREFLIGHT = "preflight"     # nodeforge's Redfish pre-flight
    FILE = "file"               # a facts file (tests, offline planning)


# The Placement resource class Nova's Ironic driver reports for an Ironic
# resource class (``baremetal-compute`` -> ``CUSTOM_BAREMETAL_COMPUTE``): the shared vocabulary's.
placement_resource_class = vocab.placement_resource_class


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

# ``regex`` conditions run on Python's backtracking engine over facts that come from the hardware;
# profiles may come from another team. A pattern is refused when it can backtrack without bound
# (a repeated part that itself repeats or has alternatives: ``(a+)+``, ``(a|ab)*``; a
# backreference), and a fact is matched on its first MATCH_CHARS characters: what is left is
# polynomial in a bounded length.
REGEX_CHARS = 256
MATCH_CHARS = 1024
_REPEATS = frozenset({"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"})


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` may not be a profile's ``regex`` (None: it may)."""
    import re._parser as sre

    if len(pattern) > REGEX_CHARS:
        return f"a regular expression of at most {REGEX_CHARS} characters, got {len(pattern)}"
    try:
        tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"not a regular expression: {exc}"

    def walk(items, under_repeat: bool) -> str | None:
        for op, av in items:
            name = str(op)
            if name.startswith("GROUPREF"):
                return "backreferences are not allowed (they can take exponential time)"
            subs: list = []
            repeat = False
            if name in _REPEATS:
                lo, hi, sub = av
                repeat = hi != lo and (hi is sre.MAXREPEAT or hi > 1)      # a{3} is a fixed count
                if repeat and under_repeat:
                    return ("a repeated part inside another repeated part (like (a+)+) can take exponential "
                            "time; write it without the nesting")
                subs = [sub]
            elif name == "BRANCH":
                if under_repeat:
                    return ("alternatives inside a repeated part (like (a|ab)*) can take exponential time; "
                            "repeat a character class instead")
                subs = list(av[1])
            elif name == "SUBPATTERN":
                subs = [av[-1]]
            elif name in ("ASSERT", "ASSERT_NOT"):
                subs = [av[1]]
            for sub in subs:
                why = walk(sub, under_repeat or repeat)
                if why:
                    return why
        return None

    return walk(tree, False)


@dataclasses.dataclass(frozen=True)
class Condition:
    """One test on one value: ``equals`` (strings compare case-insensitively),
    ``min``/``max`` (numbers), ``in`` (one of), ``contains`` (substring,
    case-insensitive), ``regex`` (Python ``re.search``)."""

    ops: tuple[tuple[str, Any], ...]

    @classmethod
    def parse(cls, raw, where: str, problems: list[str]) -> "Condition":
        """``raw`` as a condition; each problem appended to ``problems`` as ``where.op: detail``."""
        return cls.read(raw, lambda key, detail: problems.append(
            f"{where}{''.join('.' + k for k in key)}: {detail}"))

    @classmethod
    def read(cls, raw, add) -> "Condition":
        """``raw`` as a condition; each problem reported as ``add(key_suffix, detail)``
        (``key_suffix``: the operator's key, or ``()``)."""
        if not isinstance(raw, dict):
            raw = {"equals": raw}
        ops = []
        for op, value in raw.items():
            if op not in _OPS:
                add((str(op),), f"unknown operator (one of {', '.join(_OPS)})")
                continue
            if op in ("min", "max"):
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                    add((op,), f"must be a finite number, got {schema.kind_of(value)}")
                    continue
            elif op == "in":
                if not isinstance(value, list) or not all(_is_scalar(v) for v in value):
                    add((op,), "must be a list of values (text, numbers, true/false)")
                    continue
            elif not _is_scalar(value):
                add((op,), f"must be a single value (text, a number, true/false), got {schema.kind_of(value)}")
                continue
            if op == "regex":
                why = regex_problem(str(value))
                if why:
                    add((op,), why)
                    continue
            if isinstance(value, float) and not math.isfinite(value):
                add((op,), f"must be a finite number, got {schema.kind_of(value)}")
                continue
            ops.append((op, list(value) if isinstance(value, list) else value))
        bounds = dict((op, v) for op, v in ops if op in ("min", "max"))
        if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
            add(("min",), f"min {bounds['min']} is above max {bounds['max']}: no node can match")
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
            elif op == "regex" and not re.search(str(want), str(value)[:MATCH_CHARS]):
                out.append(f"{_show(value)} does not match /{want}/")
        return out

    def describe(self, subject: str = "") -> str:
        """``kind='ssd'``, ``size_gb>=4000``... (``subject`` prefixes each test)."""
        sym = {"equals": "=", "min": ">=", "max": "<=", "in": " in ", "contains": " contains ", "regex": " ~ "}
        return " and ".join(f"{subject}{sym[op]}{_show(v)}" for op, v in self.ops)

    def to_data(self):
        return {op: v for op, v in self.ops}


def _is_scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and not math.isfinite(v))


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
    baseline: bl.Baseline | None = None

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

_LIST_KEYS = {"count", "where"}
FACTS_RULE = (f"a mapping of fact to condition; facts: {', '.join(SCALAR_FACTS + tuple(LIST_FACTS))}; a condition "
              f"is a value (equals) or a mapping of {', '.join(_OPS)}; list facts take {{count: COND, where: "
              "{field: COND}}} or a list of those")


class ProfileDecl(Declared):
    """One hardware profile: the resource class and traits of the nodes it matches."""

    name: vocab.Slug
    description: Optional[vocab.text(1000)] = None
    resource_class: vocab.ResourceClass = Field(description="Ironic resource class; Nova sees CUSTOM_<upper case>")
    traits: list[vocab.CustomTrait] = Field(default_factory=list, description="traits a matching node gets")
    match: Annotated[dict[str, Any], Field(min_length=1), Rule(FACTS_RULE)]
    baseline: Optional[bl.BaselineDecl] = Field(None, description="BIOS, RAID and root device, firmware its nodes "
                                                                  "must have (nodeforge/ironic/baseline.py)")


class ProfilesFile(Declared):
    """``manifests/hardware-profiles.yaml``: rules over a node's hardware facts."""

    version: Literal[1]
    profiles: Annotated[list[ProfileDecl], Field(min_length=1)]


KIND = register("hardware-profiles", ProfilesFile, title="Hardware profiles", path=str(DEFAULT_PATH),
                description="Which resource class and CUSTOM_ traits a bare-metal node gets from its hardware "
                            "facts (docs/flavors-and-templates.md).")


def load(path: Path | str = DEFAULT_PATH) -> ProfileSet:
    """Read and validate the whole file; every problem is reported at once
    (:class:`~nodeforge.schema.SchemaError`: ``file:line: key.path: detail``)."""
    document = schema.load(Path(path), limits=KIND.limits)
    return _parse(document)


def parse(doc, label: str = "<profiles>") -> ProfileSet:
    """Validate a parsed document (a round-trip tree keeps its lines; plain data has none)."""
    return _parse(schema.Document(label, "yaml", doc, plain(doc)))


def _parse(document: schema.Document) -> ProfileSet:
    label, data = document.path, document.data
    base_dir = Path(label).parent
    if not isinstance(data, dict):
        raise schema.SchemaError(label, [document.problem((), "must be a mapping with 'version: 1' and 'profiles:'")])
    problems: list[schema.Problem] = []
    try:
        ProfilesFile.model_validate(data)
    except ValidationError as exc:
        problems += schema.problems_of(exc, document, ProfilesFile)
    raw_profiles = data.get("profiles")
    if not isinstance(raw_profiles, list):
        raw_profiles = []
    out: list[Profile] = []
    names: set[str] = set()
    classes: dict[str, str] = {}
    for i, raw in enumerate(raw_profiles):
        if not isinstance(raw, dict):
            continue                                  # reported by the declaration
        at = ("profiles", i)
        name = raw.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(document.problem((*at, "name"), f"duplicate profile '{name}'"))
            names.add(name)
        rc = raw.get("resource_class")
        if isinstance(rc, str) and rc:
            pc = placement_resource_class(rc)
            if pc in classes and classes[pc] != rc:
                problems.append(document.problem((*at, "resource_class"), f"'{rc}' and '{classes[pc]}' are the "
                                                                          f"same Placement class {pc}"))
            classes.setdefault(pc, rc)
        scalars, lists = _match_rules(document, at, raw, problems)
        baseline = bl.parse(document, (*at, "baseline"), raw.get("baseline"), base_dir, problems)
        out.append(Profile(name=str(name), resource_class=str(rc),
                           traits=tuple(sorted(set(map(str, raw.get("traits") or [])))) if isinstance(
                               raw.get("traits"), list) else (),
                           scalars=tuple(scalars), lists=tuple(lists), description=raw.get("description"),
                           line=document.line(at), baseline=baseline))
    if problems:
        raise schema.SchemaError(label, sorted(problems, key=lambda p: p.line or 0))
    return ProfileSet(label, tuple(out))


def _match_rules(document: schema.Document, at: tuple, raw: dict, problems: list) -> tuple[list, list]:
    """A profile's ``match``: its scalar conditions and its list rules (problems appended)."""
    match = raw.get("match") if isinstance(raw.get("match"), dict) else {}
    scalars, lists = [], []
    for fact, cond in match.items():
        fkey = (*at, "match", fact)
        if fact in SCALAR_FACTS:
            scalars.append((fact, _condition(document, fkey, cond, problems)))
        elif fact in LIST_FACTS:
            rules = cond if isinstance(cond, list) else [cond]
            for j, rule in enumerate(rules):
                rkey = (*fkey, j) if isinstance(cond, list) else fkey
                if not isinstance(rule, dict):
                    problems.append(document.problem(rkey, "must be a mapping with count and/or where"))
                    continue
                for key in sorted(set(map(str, rule)) - _LIST_KEYS):
                    problems.append(document.problem((*rkey, key), "unknown key (allowed: count, where)"))
                item_fields = {f.name for f in dataclasses.fields(LIST_FACTS[fact])}
                wh = rule.get("where") or {}
                if not isinstance(wh, dict):
                    problems.append(document.problem((*rkey, "where"), "must be a mapping"))
                    wh = {}
                conds = []
                for k, c in wh.items():
                    if k not in item_fields:
                        problems.append(document.problem((*rkey, "where", k), f"unknown {fact} field "
                                                         f"(one of {', '.join(sorted(item_fields))})"))
                        continue
                    conds.append((k, _condition(document, (*rkey, "where", k), c, problems)))
                count = _condition(document, (*rkey, "count"), rule.get("count", {"min": 1}), problems)
                lists.append(ListRule(fact, count, tuple(conds)))
        else:
            problems.append(document.problem(fkey, "unknown fact (one of "
                                                   f"{', '.join(SCALAR_FACTS + tuple(LIST_FACTS))})"))
    return scalars, lists


def _condition(document, keypath: tuple, raw, problems: list) -> Condition:
    return Condition.read(raw, lambda key, detail: problems.append(document.problem((*keypath, *key), detail)))
