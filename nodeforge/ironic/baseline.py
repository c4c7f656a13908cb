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
not know, two root volumes; a root device hint Ironic does not take; a firmware image without its
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
    return Baseline(dict(bios), tuple(raid) if raid else None, root_device, tuple(firmware),
                    registry_name if isinstance(registry_name, str) else None)


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
