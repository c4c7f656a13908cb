"""A Redfish node's hardware as its BMC reports it now, in the shapes Ironic's API gives.

Ironic reads a node's BIOS settings and firmware versions at verify, cleaning and servicing
only, and never the volumes a controller holds, so a change made behind its back (at the BMC,
in the BIOS set-up screen, by a vendor tool) is not in its view until the next cleaning. The
baseline audit therefore reads the BMC itself when the inventory gives its credentials
(:func:`read`): the BIOS settings with their registry fields (as ``GET /nodes/{node}/bios
?detail=True`` lists them), the volumes as a RAID layout (``raid_config``'s logical disks), and
the BIOS and BMC firmware versions (as ``GET /nodes/{node}/firmware`` lists them: the System's
``BiosVersion``, its Manager's ``FirmwareVersion``, which is where Ironic reads them too).

Credentials come from the inventory (the same references and policy as enrollment) and are
used only in the sushy session; failures are named without them.
"""

from __future__ import annotations

import dataclasses

from nodeforge.errors import NodeforgeError
from nodeforge.ironic.inventory import NodeSpec
from nodeforge.ironic.preflight import redfish_limits
from nodeforge.redact import scrub

# Redfish RAIDType -> Ironic's RAID level (ironic.common.raid); a volume without one is a raw device.
RAID_LEVELS = {"RAID0": "0", "RAID1": "1", "RAID5": "5", "RAID6": "6", "RAID10": "1+0", "RAID50": "5+0",
               "RAID60": "6+0"}
GIB = 1024 ** 3
# The registry fields Ironic copies onto each cached setting (ironic/drivers/modules/redfish/bios.py).
REGISTRY_FIELDS = ("attribute_type", "allowable_values", "lower_bound", "upper_bound", "read_only", "reset_required")


class BmcReadError(NodeforgeError):
    message = "BMC of node {node} could not be read: {detail}"


@dataclasses.dataclass
class BmcView:
    bios: list[dict]             # [{name, value, allowable_values, read_only, ...}]
    volumes: list[dict]          # [{raid_level, size_gb, name}] in the controller's order
    firmware: list[dict]         # [{component: bios|bmc, current_version}]
    drives: list[dict] = dataclasses.field(default_factory=list)   # physical drives: [{id, name, size}] (bytes)


def _value(v):
    return getattr(v, "value", v)


def _bios(system) -> list[dict]:
    attributes = system.bios.attributes or {}
    registry = {}
    try:
        found = system.bios.get_attribute_registry()
        registry = {a.name: a for a in found.registry_entries.attributes} if found else {}
    except Exception:  # noqa: BLE001 - a BMC without a registry: settings without their fields, as Ironic caches them
        registry = {}
    out = []
    for name, value in sorted(attributes.items()):
        setting = {"name": name, "value": None if value is None else str(value)}
        reg = registry.get(name)
        if reg is not None:
            for key in REGISTRY_FIELDS:
                setting[key] = _value(getattr(reg, key, None))
            if isinstance(setting.get("allowable_values"), list):
                setting["allowable_values"] = [v.get("ValueName") or v.get("ValueDisplayName")
                                               for v in setting["allowable_values"] if isinstance(v, dict)]
        out.append(setting)
    return out


def _storage(system) -> tuple[list[dict], list[dict]]:
    """The volumes and the physical drives of every storage controller, read in one pass."""
    volumes, drives = [], []
    for storage in system.storage.get_members():
        for vol in storage.volumes.get_members():
            raid = _value(getattr(vol, "raid_type", None))
            level = RAID_LEVELS.get(str(raid), "JBOD" if raid is None else str(raid))
            volumes.append({"name": vol.name, "raid_level": level, "size_gb": int(vol.capacity_bytes or 0) // GIB})
        drives += [{"id": d.identity, "name": d.name or d.identity, "size": int(d.capacity_bytes or 0)}
                   for d in storage.drives]
    return volumes, drives


def _firmware(system) -> list[dict]:
    out = [{"component": "bios", "current_version": system.bios_version}] if system.bios_version else []
    for manager in system.managers or []:
        if manager.firmware_version:
            out.append({"component": "bmc", "current_version": manager.firmware_version})
            break
    return out


def read(spec: NodeSpec, timeout: float = 10.0) -> BmcView:
    """What ``spec``'s Redfish BMC reports now (BmcReadError: unreachable, refused, not Redfish)."""
    import sushy

    b = spec.bmc
    if not b.is_redfish:
        raise BmcReadError(node=spec.name, detail=f"{b.kind.value} BMC: only Redfish BMCs are read")
    try:
        root = sushy.Sushy(f"{b.redfish_address}/redfish/v1", verify=b.verify_ca,
                           auth=sushy.auth.BasicAuth(b.username, b.password.reveal()), **redfish_limits(timeout))
        system = root.get_system(b.system_id) if b.system_id else \
            root.get_system(root.get_system_collection().members_identities[0])
        volumes, drives = _storage(system)
        return BmcView(_bios(system), volumes, _firmware(system), drives)
    except Exception as exc:  # noqa: BLE001 - any failure is this node's, named without its credentials
        raise BmcReadError(node=spec.name, detail=f"{type(exc).__name__}: {scrub(str(exc))[:200]}") from None
