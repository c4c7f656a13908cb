"""The hardware baseline a profile declares: BIOS settings, the RAID layout and the root device
hints, and firmware versions, each pinned like every other input.

```yaml
baseline:
  bios_registry: bios-registries/contoso-cx1100.yaml   # beside the profiles file
  bios: {ProcTurboMode: Disabled, BootMode: Uefi}
  raid:
    - {size_gb: MAX, raid_level: "1", is_root_volume: true}
  root_device: {size: ">= 400", rotational: false}
  firmware:
    - {component: bmc, version: "2.10", match: minimum, url: https://..., sha256: <64 hex>}
```

What can be judged without a node is judged when the file is loaded, with the file, line and
field: a BIOS setting the declared registry does not name, or a value outside it (the registry
is the vendor's attribute registry, saved as YAML beside the profiles); a RAID level Ironic does
not know, two root volumes, drives without their controller; a root device hint Ironic does not take; a firmware image without its
sha256 or on a URL that is not http(s). What depends on a node (its own registry, its disks) is
judged at plan time against that node.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field

from nodeforge import schema
from nodeforge.schema import Declared, Rule, vocab

# Ironic's RAID levels (ironic.common.raid) and root device hint names (ironic_lib.utils).
RAID_LEVELS = ("0", "1", "2", "5", "6", "1+0", "5+0", "6+0", "JBOD")
HINT_OPERATOR = re.compile(r"^(?:(?:<=|>=|==|!=|<|>|s==|s!=|s<=|s>=|s<|s>|<in>|<or>)\s*)?\S.*$")
COMPONENTS = ("bmc", "bios", "nic")
REGISTRY_TYPES = ("enumeration", "string", "integer", "boolean")
MAX_REGISTRY = 2 << 20


class LogicalDiskDecl(Declared):
    """One logical disk of Ironic's target RAID configuration."""

    size_gb: Annotated[Union[vocab.PositiveInt, Literal["MAX"]], Rule("a size in GB, or MAX")]
    raid_level: Annotated[Literal[RAID_LEVELS], Rule(" | ".join(RAID_LEVELS))]  # type: ignore[valid-type]
    is_root_volume: bool = False
    controller: Optional[vocab.text(255)] = None
    physical_disks: Optional[list[vocab.text(255)]] = None
    volume_name: Optional[vocab.text(64)] = None


class RootDeviceDecl(Declared):
    """Ironic's root device hints: the disk the image goes on."""

    size: Annotated[Optional[Union[vocab.PositiveInt, str]], Rule("GiB, or an operator and a number ('>= 400')")] = None
    model: Optional[vocab.text(255)] = None
    vendor: Optional[vocab.text(255)] = None
    serial: Optional[vocab.text(255)] = None
    wwn: Optional[vocab.text(255)] = None
    wwn_with_extension: Optional[vocab.text(255)] = None
    wwn_vendor_extension: Optional[vocab.text(255)] = None
    rotational: Optional[bool] = None
    name: Optional[vocab.text(255)] = None
    hctl: Optional[vocab.text(64)] = None
    by_path: Optional[vocab.text(255)] = None


class FirmwareDecl(Declared):
    """A firmware version one component must run, with the update image pinned by its sha256."""

    component: Annotated[Literal[COMPONENTS], Rule(" | ".join(COMPONENTS))]  # type: ignore[valid-type]
    version: vocab.text(64)
    match: Annotated[Literal["minimum", "exact"], Rule("minimum | exact")] = "minimum"
    url: Annotated[str, Rule("the update image, http(s)://")]
    sha256: vocab.Sha256


class BaselineDecl(Declared):
    """What every node of the profile must have set and run (applied through Ironic, audited)."""

    bios_registry: Annotated[Optional[str], Rule("the BIOS attribute registry (YAML) beside the profiles file")] = None
    bios: dict[str, Union[str, int, bool]] = Field(default_factory=dict,
                                                   description="BIOS attribute name: value (in the registry)")
    raid: Optional[Annotated[list[LogicalDiskDecl], Field(min_length=1)]] = None
    root_device: Optional[RootDeviceDecl] = None
    firmware: list[FirmwareDecl] = Field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class RegistryAttribute:
    name: str
    type: str
    values: tuple[str, ...] = ()
    read_only: bool = False
    lower: int | None = None
    upper: int | None = None

    def problem(self, value) -> str | None:
        """Why ``value`` cannot be set (None: it can)."""
        if self.read_only:
            return f"{self.name} is read-only in the registry"
        if self.type == "enumeration" and str(value) not in self.values:
            return f"{value!r} is not one of {', '.join(self.values)}"
        if self.type == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"expected an integer, got {schema.kind_of(value)}"
            if (self.lower is not None and value < self.lower) or (self.upper is not None and value > self.upper):
                return f"{value} is outside {self.lower}..{self.upper}"
        if self.type == "boolean" and not isinstance(value, bool):
            return f"expected true or false, got {schema.kind_of(value)}"
        if self.type == "string" and not isinstance(value, str):
            return f"expected text, got {schema.kind_of(value)}; quote it"
        return None


@dataclasses.dataclass(frozen=True)
class Baseline:
    bios: dict[str, Any]
    raid: tuple[dict, ...] | None
    root_device: dict | None
    firmware: tuple[dict, ...]
    registry: str | None = None
    # Where it was declared: the file, and the key path of each item (plan-time problems name them).
    path: str = ""
    at: tuple = ()
    lines: dict = dataclasses.field(default_factory=dict, compare=False)

    def problem(self, keypath: tuple, detail: str) -> schema.Problem:
        full = (*self.at, *keypath)
        return schema.Problem(self.path, self.lines.get(full), full, detail)

    def target_raid_config(self) -> dict | None:
        """Ironic's ``target_raid_config`` for this baseline (None: the profile sets no RAID)."""
        return {"logical_disks": [dict(d) for d in self.raid]} if self.raid else None


def load_registry(path: Path) -> dict[str, RegistryAttribute]:
    """A BIOS attribute registry saved as YAML: ``attributes: [{name, type, values, read_only,
    lower_bound, upper_bound}]`` (the fields of a Redfish AttributeRegistry, lower-cased)."""
    document = schema.load(path, limits=schema.Limits(max_bytes=MAX_REGISTRY))
    attrs = document.data.get("attributes") if isinstance(document.data, dict) else None
    if not isinstance(attrs, list):
        raise schema.SchemaError(str(path), [document.problem(("attributes",), "missing: a list of attributes")])
    out, problems = {}, []
    for i, a in enumerate(attrs):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or a.get("type") not in REGISTRY_TYPES:
            problems.append(document.problem(("attributes", i), f"needs name and type ({', '.join(REGISTRY_TYPES)})"))
            continue
        out[a["name"]] = RegistryAttribute(a["name"], a["type"], tuple(map(str, a.get("values") or ())),
                                           bool(a.get("read_only")), a.get("lower_bound"), a.get("upper_bound"))
    if problems:
        raise schema.SchemaError(str(path), problems)
    return out


def parse(document: schema.Document, at: tuple, raw, base_dir: Path, problems: list) -> Baseline | None:
    """The ``baseline`` at key path ``at`` (its shape already judged by :class:`BaselineDecl`); the
    checks across fields and against the registry append to ``problems``."""
    if not isinstance(raw, dict):
        return None
    bios = raw.get("bios") if isinstance(raw.get("bios"), dict) else {}
    registry_name = raw.get("bios_registry")
    if bios and not registry_name:
        problems.append(document.problem((*at, "bios"), "BIOS settings need 'bios_registry' (the names and values "
                                                        "are checked against it)"))
    elif bios and isinstance(registry_name, str):
        _check_bios(document, at, bios, base_dir / registry_name, problems)
    raid = raw.get("raid") if isinstance(raw.get("raid"), list) else None
    roots = [i for i, d in enumerate(raid or []) if isinstance(d, dict) and d.get("is_root_volume")]
    for i in roots[1:]:
        problems.append(document.problem((*at, "raid", i, "is_root_volume"), "a second root volume (one at most)"))
    for i, d in enumerate(raid or []):
        if isinstance(d, dict) and d.get("physical_disks") and not d.get("controller"):
            problems.append(document.problem((*at, "raid", i, "physical_disks"), "needs 'controller' too (Ironic's "
                                             "RAID schema: the controller the drives are on; on Redfish its "
                                             "Storage id)"))
    root_device = raw.get("root_device") if isinstance(raw.get("root_device"), dict) else None
    size = (root_device or {}).get("size")
    if isinstance(size, str) and not (HINT_OPERATOR.match(size) and re.search(r"\d", size)):
        problems.append(document.problem((*at, "root_device", "size"), f"{size!r} is not a size hint ('>= 400')"))
    firmware = [f for f in raw.get("firmware") or [] if isinstance(f, dict)]
    for i, f in enumerate(firmware):
        if isinstance(f.get("url"), str) and not f["url"].startswith(("https://", "http://")):
            problems.append(document.problem((*at, "firmware", i, "url"), "expected an http(s):// URL"))
    seen = [f.get("component") for f in firmware]
    for i, c in enumerate(seen):
        if c in seen[:i]:
            problems.append(document.problem((*at, "firmware", i, "component"), f"{c} is pinned twice"))
    keys = [("bios", n) for n in bios] + [("raid", i, "size_gb") for i in range(len(raid or []))] + \
        [("firmware", i) for i in range(len(firmware))] + [("raid",), ("firmware",)]
    lines = {(*at, *k): document.line((*at, *k)) for k in keys}
    return Baseline(dict(bios), tuple(raid) if raid else None, root_device, tuple(firmware),
                    registry_name if isinstance(registry_name, str) else None, document.path, at, lines)


def _check_bios(document, at: tuple, bios: dict, registry_path: Path, problems: list) -> None:
    try:
        registry = load_registry(registry_path)
    except schema.SchemaError as exc:
        problems.append(document.problem((*at, "bios_registry"), f"cannot be read: {exc}"))
        return
    except Exception as exc:  # noqa: BLE001 - a ConfigError (missing, too large, not UTF-8): named
        problems.append(document.problem((*at, "bios_registry"), str(exc)))
        return
    for name, value in bios.items():
        attr = registry.get(name)
        if attr is None:
            problems.append(document.problem((*at, "bios", name), f"not in the BIOS registry {registry_path.name}"))
            continue
        why = attr.problem(value)
        if why:
            problems.append(document.problem((*at, "bios", name), why))



# --- plan: one node against its profile's baseline ------------------------------------------

# Disks a RAID level needs at least, and the share of their capacity it offers.
_RAID = {"0": (1, lambda n: n), "1": (2, lambda n: 1), "2": (3, lambda n: n - 1), "5": (3, lambda n: n - 1),
         "6": (4, lambda n: n - 2), "1+0": (4, lambda n: n // 2), "5+0": (6, lambda n: n - 2),
         "6+0": (8, lambda n: n - 4), "JBOD": (1, lambda n: n)}
BIOS_STEP = ("bios", "apply_configuration")
RAID_STEPS = (("raid", "delete_configuration"), ("raid", "create_configuration"))
FIRMWARE_STEP = ("firmware", "update")


@dataclasses.dataclass
class Item:
    """One difference between a node and its baseline, and the Ironic step that removes it."""

    item: str                     # bios.ProcTurboMode, raid, firmware.bmc
    current: Any
    wanted: Any
    steps: tuple[tuple[str, str], ...]
    reboot: bool = True           # the step reboots the node (BIOS, RAID, firmware all do)
    needs_agent: bool = False     # Ironic 39: Redfish RAID and firmware steps run with the agent

    def to_dict(self) -> dict:
        return {"item": self.item, "current": self.current, "wanted": self.wanted,
                "steps": [f"{i}.{s}" for i, s in self.steps], "reboot": self.reboot, "needs_agent": self.needs_agent}


@dataclasses.dataclass
class NodePlan:
    node: str
    items: list[Item]
    problems: list[schema.Problem]
    deferred: bool = False        # the node is active (serving a cluster): drift reported, not changed

    def clean_steps(self) -> list[dict]:
        """The manual cleaning steps that bring the node to its baseline (none when deferred)."""
        if self.deferred or self.problems:
            return []
        return clean_steps(self.items)


def clean_steps(items: list[Item]) -> list[dict]:
    """Ironic's manual cleaning steps for ``items``: every BIOS setting in one
    ``bios.apply_configuration``, the RAID layout as ``raid.delete_configuration`` then
    ``create_configuration`` (from the node's ``target_raid_config``), the firmware images in one
    ``firmware.update``. Root device hints are a node property, not a step."""
    out = []
    bios = {i.item.split(".", 1)[1]: i.wanted for i in items if i.item.startswith("bios.")}
    if bios:
        out.append({"interface": "bios", "step": "apply_configuration",
                    "args": {"settings": [{"name": k, "value": v} for k, v in sorted(bios.items())]}})
    if any(i.item == "raid" for i in items):
        out += [{"interface": "raid", "step": "delete_configuration"},
                {"interface": "raid", "step": "create_configuration"}]
    fw = [i.wanted for i in items if i.item.startswith("firmware.")]
    if fw:
        out.append({"interface": "firmware", "step": "update",
                    "args": {"settings": [{"component": f["component"], "url": f["url"]} for f in fw]}})
    return out


def _version(v) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", str(v))) or (str(v),)


def raid_capacity_gb(level: str, disk_sizes_gb: list[int]) -> int | None:
    """What ``level`` offers over these disks (None: too few disks for it)."""
    need, share = _RAID[level]
    if len(disk_sizes_gb) < need:
        return None
    return share(len(disk_sizes_gb)) * min(disk_sizes_gb) if level not in ("0", "JBOD") else sum(disk_sizes_gb)


def plan_node(baseline: Baseline, node: str, *, bios: list[dict] | None = None, disks: list[dict] | None = None,
              raid_config: dict | None = None, firmware: list[dict] | None = None,
              provision_state: str | None = None, root_device: dict | None = None,
              raid_interface: str | None = None) -> NodePlan:
    """``node`` (Ironic's views: its BIOS settings with their registry fields, the physical disks
    in bytes, its current ``raid_config``, its firmware components, its ``root_device`` hints)
    against ``baseline``: each
    difference with the step that removes it; a value outside the node's own registry, or a RAID
    layout its disks cannot hold, is a problem naming the profile's file, line and field. An
    ``active`` node (serving a cluster) is planned but deferred: drift reported, nothing changed."""
    plan = NodePlan(node, [], [], deferred=provision_state == "active")
    _plan_bios(plan, baseline, bios)
    if baseline.raid:
        _plan_raid(plan, baseline, disks, raid_config)
        _plan_raid_drives(plan, baseline, disks, raid_interface)
    _plan_firmware(plan, baseline, firmware)
    if baseline.root_device and hints(root_device) != hints(baseline.root_device):
        plan.items.append(Item("root_device", root_device or None, dict(baseline.root_device), (), reboot=False))
    return plan


def hints(root_device: dict | None) -> dict[str, str]:
    """Root device hints as Ironic compares them: the given ones, values as text (true, not True)."""
    return {k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in (root_device or {}).items() if v is not None}


def _differs(current, wanted) -> bool:
    if isinstance(wanted, bool):
        return str(current).lower() != str(wanted).lower()
    return str(current) != str(wanted)


def _plan_bios(plan: NodePlan, baseline: Baseline, bios: list[dict] | None) -> None:
    settings = {b.get("name"): b for b in bios or []}
    for name, wanted in baseline.bios.items():
        have = settings.get(name)
        if bios is not None and have is None:
            plan.problems.append(baseline.problem(("bios", name), f"node {plan.node}'s BIOS has no setting {name}"))
            continue
        allowed = (have or {}).get("allowable_values")
        if allowed and str(wanted) not in map(str, allowed):
            plan.problems.append(baseline.problem(("bios", name), f"{wanted!r} is outside node {plan.node}'s "
                                                                  f"registry ({', '.join(map(str, allowed))})"))
            continue
        current = (have or {}).get("value")
        if _differs(current, wanted):
            plan.items.append(Item(f"bios.{name}", current, wanted, (BIOS_STEP,)))


def _raid_key(d: dict) -> dict:
    return {"size_gb": d.get("size_gb"), "raid_level": d.get("raid_level"),
            "is_root_volume": bool(d.get("is_root_volume"))}


def _plan_raid(plan: NodePlan, baseline: Baseline, disks: list[dict] | None, raid_config: dict | None) -> None:
    sizes = sorted(int(d.get("size") or 0) // 10 ** 9 for d in disks or [])
    for i, ld in enumerate(baseline.raid):
        if disks is None:
            break
        level, cap = ld["raid_level"], raid_capacity_gb(ld["raid_level"], sizes)
        if cap is None:
            plan.problems.append(baseline.problem(("raid", i, "size_gb"), f"RAID {level} needs {_RAID[level][0]} "
                                                                          f"disks; node {plan.node} has {len(sizes)}"))
        elif ld["size_gb"] != "MAX" and ld["size_gb"] > cap:
            plan.problems.append(baseline.problem(("raid", i, "size_gb"), f"{ld['size_gb']} GB is more than RAID "
                                                  f"{level} over node {plan.node}'s disks holds ({cap} GB)"))
    current = list((raid_config or {}).get("logical_disks") or [])
    if [_raid_key(d) for d in current] != [_raid_key(d) for d in baseline.raid]:
        plan.items.append(Item("raid", current, [dict(d) for d in baseline.raid], RAID_STEPS, needs_agent=True))


def _plan_raid_drives(plan: NodePlan, baseline: Baseline, disks: list[dict] | None, raid_interface: str | None) -> None:
    """What Ironic's Redfish RAID interface refuses in the middle of a cleaning, said before: a
    ``MAX`` volume without its drives (it picks drives itself only for a given size), and drives
    the node's controller does not have (when its drives are known by their ids)."""
    ids = {d["id"] for d in disks or [] if d.get("id")}
    for i, ld in enumerate(baseline.raid):
        named = ld.get("physical_disks") or []
        if raid_interface == "redfish" and ld["size_gb"] == "MAX" and not named:
            plan.problems.append(baseline.problem(("raid", i, "size_gb"), f"MAX needs physical_disks on node "
                                                  f"{plan.node} (Ironic's redfish RAID interface picks the drives "
                                                  f"itself only for a size in GB)"))
        unknown = [d for d in named if ids and d not in ids]
        if unknown:
            plan.problems.append(baseline.problem(("raid", i, "physical_disks"), f"node {plan.node} has no drive "
                                                  f"{', '.join(unknown)} (it has {', '.join(sorted(ids))})"))


def _plan_firmware(plan: NodePlan, baseline: Baseline, firmware: list[dict] | None) -> None:
    have = {f.get("component"): f.get("current_version") for f in firmware or []}
    for f in baseline.firmware:
        current = have.get(f["component"])
        if f.get("match", "minimum") == "minimum":
            ok = current is not None and _version(current) >= _version(f["version"])
        else:
            ok = str(current) == str(f["version"])
        if not ok:
            plan.items.append(Item(f"firmware.{f['component']}", current, dict(f), (FIRMWARE_STEP,),
                                   needs_agent=True))
