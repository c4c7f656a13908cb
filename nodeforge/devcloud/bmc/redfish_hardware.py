"""What a baseline audit reads from a Redfish BMC, served by the local cloud's emulator.

Standalone like ``machine.py``: ``redfish_emulator.py`` imports it as ``redfish_hardware`` inside
the ``bmc`` virtualenv; it never imports nodeforge. Three parts:

* **the BIOS attribute registry** (``REGISTRY``, the same settings as
  ``docs/examples/bios-registry-qemu.yaml``) served where sushy looks for it
  (``/redfish/v1/Registries`` -> the registry file -> the registry), so Ironic's
  ``redfish`` bios interface caches each setting's registry fields; a PATCH of
  BIOS settings is checked against it as a real BMC does (an unknown or
  read-only setting, a value outside it: 400, nothing changed);
* **volumes** that really come and go: POST creates one (``RAIDType`` or
  ``VolumeType``, ``CapacityBytes`` or all the drives hold, ``Links.Drives``),
  DELETE removes it; each volume is served with its ``RAIDType``;
* **a firmware inventory** (``/redfish/v1/UpdateService/FirmwareInventory``:
  ``<system uuid>-BIOS`` and ``-BMC`` per system) and ``SimpleUpdate``, which
  installs the version in the image's file name (``bmc-1.1.0.bin`` -> 1.1.0;
  the image is not fetched) on each target: a System (its BIOS), a Manager
  (its BMC) or a firmware inventory item. The Manager's ``FirmwareVersion`` and
  the System's ``BiosVersion`` follow.
"""

from __future__ import annotations

import copy
import json
import re
import threading

BMC_VERSION = "1.0.0"          # every emulated BMC's firmware at launch (the BIOS' is the fleet's)
REGISTRY_ID = "BiosAttributeRegistryP89.v1_0_0"     # the name sushy-tools' BIOS resource points at
REGISTRY_FILE = "BiosAttributeRegistry.v1_0_0"
REGISTRY_PATH = "/redfish/v1/Systems/Bios/BiosRegistry"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
TASK = "/redfish/v1/TaskService/Tasks/42"


def _enum(name, values, **kw):
    return {"AttributeName": name, "Type": "Enumeration", "ReadOnly": False,
            "Value": [{"ValueName": v, "ValueDisplayName": v} for v in values], **kw}


REGISTRY = [
    _enum("BootMode", ["Uefi", "Bios"], ResetRequired=True),
    _enum("EmbeddedSata", ["Raid", "Ahci", "Off"], ResetRequired=True),
    {"AttributeName": "L2Cache", "Type": "String", "ReadOnly": True, "MaxLength": 16, "MinLength": 0},
    _enum("NicBoot1", ["NetworkBoot", "Disabled"], ResetRequired=True),
    {"AttributeName": "NumCores", "Type": "Integer", "ReadOnly": False, "LowerBound": 1, "UpperBound": 64,
     "ResetRequired": True},
    _enum("ProcTurboMode", ["Enabled", "Disabled"], ResetRequired=True),
    {"AttributeName": "QuietBoot", "Type": "Boolean", "ReadOnly": False},
    _enum("SecureBootStatus", ["Enabled", "Disabled"], ReadOnly=True),
    {"AttributeName": "SerialNumber", "Type": "String", "ReadOnly": True, "MaxLength": 16, "MinLength": 0,
     "IsSystemUniqueProperty": True},
    {"AttributeName": "SysPassword", "Type": "Password", "ReadOnly": False, "WriteOnly": True},
]
BY_NAME = {a["AttributeName"]: a for a in REGISTRY}

# Redfish RAIDType -> (drives it needs at least, the drives' share of capacity it offers).
RAID = {"RAID0": (1, lambda n: n), "RAID1": (2, lambda n: 1), "RAID5": (3, lambda n: n - 1),
        "RAID6": (4, lambda n: n - 2), "RAID10": (4, lambda n: n // 2)}
VOLUME_TYPES = {"RawDevice": None, "NonRedundant": "RAID0", "Mirrored": "RAID1",
                "StripedWithParity": "RAID5", "SpannedMirrors": "RAID10"}


def bios_problem(name: str, value) -> str | None:
    """Why the BMC refuses ``name = value`` (None: it takes it)."""
    attr = BY_NAME.get(name)
    if attr is None:
        return f"{name} is not in the attribute registry {REGISTRY_ID}"
    if attr.get("ReadOnly"):
        return f"{name} is read-only"
    kind = attr["Type"]
    if kind == "Enumeration" and str(value) not in [v["ValueName"] for v in attr["Value"]]:
        return f"{name}: {value!r} is not one of " + ", ".join(v["ValueName"] for v in attr["Value"])
    if kind == "Integer":
        try:
            number = int(str(value), 10)
        except ValueError:
            return f"{name}: {value!r} is not an integer"
        if not attr["LowerBound"] <= number <= attr["UpperBound"]:
            return f"{name}: {number} is outside {attr['LowerBound']}..{attr['UpperBound']}"
    if kind == "Boolean" and str(value).lower() not in ("true", "false"):
        return f"{name}: {value!r} is not true or false"
    return None


def registry_document() -> dict:
    return {"@odata.type": "#AttributeRegistry.v1_3_0.AttributeRegistry", "@odata.id": REGISTRY_PATH,
            "Id": REGISTRY_ID, "Name": "nodeforge emulated BIOS attribute registry", "Language": "en",
            "OwningEntity": "nodeforge", "RegistryVersion": "1.0.0",
            "SupportedSystems": [{"ProductName": "nodeforge emulated systems", "SystemId": "NF-EMU"}],
            "RegistryEntries": {"Attributes": [dict(a, DisplayName=a["AttributeName"], Hidden=False,
                                                    Immutable=bool(a.get("ReadOnly")))
                                               for a in REGISTRY]}}


def registry_file_document() -> dict:
    return {"@odata.type": "#MessageRegistryFile.v1_1_0.MessageRegistryFile",
            "@odata.id": f"/redfish/v1/Registries/{REGISTRY_FILE}", "Id": REGISTRY_FILE,
            "Name": "BIOS Attribute Registry File", "Registry": REGISTRY_ID.rsplit(".", 1)[0] + ".1.0",
            "Languages": ["en"], "Location": [{"Language": "en", "Uri": REGISTRY_PATH}]}


def version_from_image(image_uri: str, current: str) -> str:
    """The version an update image installs: the dotted number in its file name, else the current
    version with its second number raised (sushy-tools' own rule)."""
    name = image_uri.rstrip("/").rsplit("/", 1)[-1]
    found = re.search(r"(\d+(?:\.\d+)+)", name)
    if found:
        return found.group(1)
    parts = (current or "1.0").split(".")
    parts[1:2] = [str(int(parts[1]) + 1) if len(parts) > 1 and parts[1].isdigit() else "1"]
    return ".".join(parts)


# -- the driver: BIOS checked against the registry, a BMC version beside the BIOS one -----------

def extend_driver(base_cls, error):
    """``base_cls`` (the emulator's fake driver) with BIOS writes checked against the registry and
    a BMC firmware version in its versions."""

    class HardwareDriver(base_cls):
        def set_bios(self, identity, attributes):
            problems = [p for name, value in (attributes or {}).items() if (p := bios_problem(name, value))]
            if problems:
                raise error.BadRequest("; ".join(problems))
            super().set_bios(identity, attributes)

        def get_versions(self, identity):
            versions = super().get_versions(identity)
            versions.setdefault("BmcVersion", BMC_VERSION)
            return versions

    return HardwareDriver


# -- routes -----------------------------------------------------------------------------------

class Volumes:
    """The volumes of every system's storage: the fleet's to start with, then what POST and
    DELETE make of them (in memory, one process; a lock per write)."""

    def __init__(self, initial: dict, drives: dict):
        self._lock = threading.Lock()
        self._vols = {key: [dict(v) for v in vols] for key, vols in initial.items()}
        self._drives = drives          # (uuid, storage id) -> [{Id, CapacityBytes, ...}]

    def list(self, uuid: str, sid: str) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._vols.get((uuid, sid), []))

    def create(self, uuid: str, sid: str, body: dict, error) -> dict:
        drives = {d["Id"]: d for d in self._drives.get((uuid, sid), [])}
        raid = body.get("RAIDType") or VOLUME_TYPES.get(body.get("VolumeType") or "", "?")
        if raid not in RAID and not (raid is None and body.get("VolumeType") == "RawDevice"):
            raise error.BadRequest(f"RAIDType {body.get('RAIDType')!r} / VolumeType {body.get('VolumeType')!r}: "
                                   f"one of {', '.join(RAID)} (or VolumeType {', '.join(VOLUME_TYPES)})")
        links = ((body.get("Links") or {}).get("Drives") or [])
        wanted = [str(d.get("@odata.id", "")).rstrip("/").rsplit("/", 1)[-1] for d in links if isinstance(d, dict)]
        unknown = [w for w in wanted if w not in drives]
        if unknown:
            raise error.BadRequest(f"drives not in storage {sid}: {', '.join(unknown)}")
        used = wanted or list(drives)
        need, share = RAID.get(raid, (1, lambda n: 1))
        if len(used) < need:
            raise error.BadRequest(f"{raid} needs {need} drives, {len(used)} given")
        holds = share(len(used)) * min(drives[d]["CapacityBytes"] for d in used) if used else 0
        size = body.get("CapacityBytes") or holds
        if not isinstance(size, int) or size <= 0 or size > holds:
            raise error.BadRequest(f"CapacityBytes {size!r}: at most {holds} over {len(used)} drives")
        with self._lock:
            vols = self._vols.setdefault((uuid, sid), [])
            new_id = str(max([int(v["Id"]) for v in vols if str(v["Id"]).isdigit()] + [0]) + 1)
            vol = {"Id": new_id, "Name": body.get("Name") or f"volume-{new_id}", "RAIDType": raid,
                   "VolumeType": body.get("VolumeType") or _volume_type(raid), "CapacityBytes": size,
                   "Drives": used}
            vols.append(vol)
        return dict(vol)

    def delete(self, uuid: str, sid: str, vol_id: str) -> bool:
        with self._lock:
            vols = self._vols.get((uuid, sid), [])
            kept = [v for v in vols if v["Id"] != vol_id]
            self._vols[(uuid, sid)] = kept
            return len(kept) != len(vols)


def _volume_type(raid: str | None) -> str:
    return {None: "RawDevice", "RAID0": "NonRedundant", "RAID1": "Mirrored", "RAID10": "SpannedMirrors"}.get(
        raid, "StripedWithParity")


def volume_document(identity: str, sid: str, vol: dict) -> dict:
    base = f"/redfish/v1/Systems/{identity}/Storage/{sid}"
    doc = {"@odata.type": "#Volume.v1_6_0.Volume", "@odata.id": f"{base}/Volumes/{vol['Id']}", "Id": vol["Id"],
           "Name": vol["Name"], "VolumeType": vol.get("VolumeType") or _volume_type(vol.get("RAIDType")),
           "CapacityBytes": vol["CapacityBytes"], "Encrypted": False,
           "Status": {"State": "Enabled", "Health": "OK"},
           "Links": {"Drives": [{"@odata.id": f"{base}/Drives/{d}"} for d in vol.get("Drives") or []]}}
    if vol.get("RAIDType"):
        doc["RAIDType"] = vol["RAIDType"]
    return doc


def inventory_item(app, item_id: str, error) -> dict:
    uuid, _, component = item_id.rpartition("-")
    if component not in ("BIOS", "BMC") or uuid not in app.systems.systems:
        raise error.NotFound()
    versions = app.systems.get_versions(uuid)
    related = f"/redfish/v1/Systems/{uuid}" if component == "BIOS" else f"/redfish/v1/Managers/{uuid}"
    return {"@odata.type": "#SoftwareInventory.v1_3_0.SoftwareInventory", "@odata.id": f"{INVENTORY}/{item_id}",
            "Id": item_id, "Name": f"{component} firmware", "Updateable": True,
            "Version": versions["BiosVersion" if component == "BIOS" else "BmcVersion"],
            "RelatedItem": [{"@odata.id": related}], "Status": {"State": "Enabled", "Health": "OK"}}


def _target(app, uri: str, error) -> tuple[str, str]:
    """(system uuid, "BiosVersion" | "BmcVersion") a SimpleUpdate target names."""
    parts = uri.rstrip("/").split("/")
    try:
        if "/UpdateService/FirmwareInventory/" in uri:
            uuid, _, component = parts[-1].rpartition("-")
            key = {"BIOS": "BiosVersion", "BMC": "BmcVersion"}[component]
        elif "/Systems/" in uri or "/Managers/" in uri:
            uuid, key = app.systems.uuid(parts[-1]), "BiosVersion" if "/Systems/" in uri else "BmcVersion"
        else:
            raise KeyError(uri)
    except (KeyError, error.FishyError):
        raise error.BadRequest(f"target {uri!r}: a System, a Manager or a firmware inventory item") from None
    if uuid not in app.systems.systems:
        raise error.BadRequest(f"target {uri!r}: no such system")
    return uuid, key


def install(app, *, flask, error, api_utils, volumes: Volumes) -> None:
    """The routes above on sushy-tools' app (the stock views of the same URLs replaced)."""

    def reply(doc, status=200, headers=None):
        return flask.Response(json.dumps(doc, indent=2), status=status, content_type="application/json",
                              headers=headers or {})

    _install_registry(app, reply)
    _install_volumes(app, flask, error, api_utils, volumes, reply)
    _install_firmware(app, flask, error, reply)


def _install_registry(app, reply) -> None:
    def registries():
        members = ["/redfish/v1/Registries/Messages", f"/redfish/v1/Registries/{REGISTRY_FILE}"]
        return reply({"@odata.type": "#MessageRegistryFileCollection.MessageRegistryFileCollection",
                      "@odata.id": "/redfish/v1/Registries", "Name": "Registry File Collection",
                      "Members": [{"@odata.id": m} for m in members], "Members@odata.count": len(members)})

    app.view_functions["registry_file_collection"] = registries
    app.view_functions["bios_attribute_registry_file"] = lambda: reply(registry_file_document())
    app.view_functions["bios_registry"] = lambda: reply(registry_document())
    app.add_url_rule(f"/redfish/v1/Registries/{REGISTRY_FILE}", "nf_registry_file",
                     lambda: reply(registry_file_document()))


def _install_volumes(app, flask, error, api_utils, volumes: Volumes, reply) -> None:
    guarded = lambda fn: api_utils.ensure_instance_access(api_utils.returns_json(fn))  # noqa: E731

    def volume_collection(identity, storage_id):
        uuid = app.systems.uuid(identity)
        if flask.request.method == "POST":
            vol = volumes.create(uuid, storage_id, flask.request.get_json(silent=True) or {}, error)
            doc = volume_document(identity, storage_id, vol)
            return reply(doc, 201, {"Location": doc["@odata.id"]})
        vols = volumes.list(uuid, storage_id)
        base = f"/redfish/v1/Systems/{identity}/Storage/{storage_id}/Volumes"
        return reply({"@odata.type": "#VolumeCollection.VolumeCollection", "@odata.id": base,
                      "Name": "Storage Volume Collection", "Members@odata.count": len(vols),
                      "Members": [{"@odata.id": f"{base}/{v['Id']}"} for v in vols]})

    def volume(identity, stg_id, vol_id):
        uuid = app.systems.uuid(identity)
        if flask.request.method == "DELETE":
            if not volumes.delete(uuid, stg_id, vol_id):
                raise error.NotFound()
            return flask.Response(status=204)
        for vol in volumes.list(uuid, stg_id):
            if vol["Id"] == vol_id:
                return reply(volume_document(identity, stg_id, vol))
        raise error.NotFound()

    app.view_functions["volumes_collection"] = guarded(volume_collection)
    app.view_functions["volume"] = guarded(volume)
    app.add_url_rule("/redfish/v1/Systems/<identity>/Storage/<stg_id>/Volumes/<vol_id>", "nf_volume_delete",
                     guarded(volume), methods=["DELETE"])


def _install_firmware(app, flask, error, reply) -> None:
    def inventory():
        ids = [f"{u}-{c}" for u in sorted(app.systems.systems) for c in ("BIOS", "BMC")]
        return reply({"@odata.type": "#SoftwareInventoryCollection.SoftwareInventoryCollection",
                      "@odata.id": INVENTORY, "Name": "Firmware Inventory", "Members@odata.count": len(ids),
                      "Members": [{"@odata.id": f"{INVENTORY}/{i}"} for i in ids]})

    def simple_update():
        body = flask.request.get_json(silent=True) or {}
        image, targets = body.get("ImageURI"), body.get("Targets")
        if not isinstance(image, str) or not image.startswith(("http://", "https://")) or not targets:
            raise error.BadRequest("SimpleUpdate needs ImageURI (http or https) and Targets")
        for uuid, key in [_target(app, str(t), error) for t in targets]:
            versions = app.systems.get_versions(uuid)
            app.systems.set_versions(uuid, {key: version_from_image(image, versions.get(key))})
        return flask.Response(status=202, headers={"Location": TASK})

    app.add_url_rule(INVENTORY, "nf_firmware_inventory", inventory)
    app.add_url_rule(f"{INVENTORY}/<item_id>", "nf_firmware_item",
                     lambda item_id: reply(inventory_item(app, item_id, error)))
    app.view_functions["UpdateService.update_service_simple_update"] = simple_update

    @app.after_request
    def _manager_firmware(response):
        path = flask.request.path.rstrip("/").split("/")
        if flask.request.method != "GET" or len(path) != 5 or path[1:4] != ["redfish", "v1", "Managers"] \
                or path[4] not in app.systems.systems or not response.is_json:
            return response
        doc = response.get_json(silent=True)
        if isinstance(doc, dict) and "FirmwareVersion" in doc:
            doc["FirmwareVersion"] = app.systems.get_versions(path[4])["BmcVersion"]
            response.set_data(json.dumps(doc, indent=4))
        return response
