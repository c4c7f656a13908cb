#!/usr/bin/env python3
"""Redfish BMC emulator of the nodeforge local cloud.

A standalone launcher for sushy-tools' emulator (``sushy_tools.emulator.main``)
with its *fake* systems driver, extended so that it behaves like a small rack
of real servers. It runs under the ``bmc`` virtualenv's python and must not
import nodeforge.

    .devcloud/venvs/bmc/bin/python redfish_emulator.py --config FILE --port PORT

FILE is a JSON document (mode 0600, written by nodeforge.devcloud.bmc):

    {"listen_ip": "127.0.0.1",
     "state_dir": "/abs/path",          # wiped at every launch
     "tls": {"cert": "/abs/server.pem", "key": "/abs/server-key.pem"},
     "auth": {"username": "...", "password": "..."},
     "systems": [ { fleet.RedfishSystem as JSON }, ... ],
     "machine_tools": {"qemu": "...", "qemu_img": "...", "ovmf_code": "...", "ovmf_vars": "...",
                       "accel": "tcg", "machine_type": "q35", "cpu": "qemu64,svm=off,..."},  # accel.CPU["tcg"]
     "guest_forwards": [6385, 8089]}    # the guests' 10.0.2.100:P -> 127.0.0.1:P (machine.py)

A system whose entry has a ``machine`` (memory, vCPUs, disk, agent port) is
*machine-backed*: a real QEMU machine (``machine.py`` next to this script)
runs behind it while it is powered on; its files are under
``<state_dir>/machines/<name>/`` (console.log, qemu.log, disk.qcow2,
OVMF_VARS.fd). Power, the boot override (``BootSourceOverrideEnabled`` Once /
Continuous honoured) and the virtual CD act on the machine; the rest of the
system (inventory, BIOS, storage) is the fake driver's. Every QEMU is stopped
when the emulator stops.

What it changes compared to stock sushy-tools 2.2.0 (``--fake``):

* power changes land immediately (stock: after a random 1-11 s delay);
* Processors, Memory (a collection of DIMMs that stock does not route at
  all), EthernetInterfaces with the fleet's MACs and link speed,
  SimpleStorage, Storage with controllers, Drives and Volumes (stock: the
  Storage link is advertised but answers 500, Volumes 501), BIOS attributes
  and BIOS version, so Ironic's Redfish out-of-band inspection succeeds;
* system vendor, model, SKU and serial number, drive media type/model/serial
  (stock templates hard-code them) are overlaid on the rendered JSON;
* HTTP basic auth from an htpasswd file this script writes (bcrypt, low cost
  factor: sushy-tools checks the hash on *every* request);
* TLS 1.2+ with the local cloud's CA-signed certificate;
* system state lives in memory (stock: SQLite, ~20 ms per system GET); the
  SQLite state of the other resources (LEDs, virtual media) is wiped at
  every launch;
* a BIOS attribute registry (BIOS writes checked against it), volumes that
  POST creates and DELETE removes, and a firmware inventory with a
  SimpleUpdate that changes the BIOS or BMC version (``redfish_hardware.py``
  next to this script, imported as ``redfish_hardware``).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading

LOG = logging.getLogger("nodeforge.redfish_emulator")

DEFAULT_BIOS = {
    "BootMode": "Uefi",
    "EmbeddedSata": "Raid",
    "L2Cache": "10x256 KB",
    "NicBoot1": "NetworkBoot",
    "NumCores": "10",
    "ProcTurboMode": "Enabled",
    "QuietBoot": "true",
    "SecureBootStatus": "Enabled",
    "SerialNumber": "QPX12345",
    "SysPassword": "",
}

BCRYPT_ROUNDS = 5   # ~2 ms per request instead of ~250 ms at the default 12


def load_config(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_htpasswd(path: str, username: str, password: str) -> None:
    import bcrypt

    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=BCRYPT_ROUNDS)).decode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{username}:{digest}\n")


def deep_merge(target: dict, overlay: dict) -> dict:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_merge(target[key], value)
        else:
            target[key] = value
    return target


# -- translation of the fleet into sushy-tools configuration ------------------

def storage_id() -> str:
    return "1"


def volumes_for(system: dict) -> list[dict]:
    disks = system["disks"]
    if system["shape"] == "storage":
        ssd = [d for d in disks if d["media_type"] == "SSD"]
        hdd = [d for d in disks if d["media_type"] == "HDD"]
        vols = [{"Id": "1", "Name": "os-mirror", "VolumeType": "Mirrored", "RAIDType": "RAID1",
                 "CapacityBytes": ssd[0]["capacity_bytes"], "Drives": [d["id"] for d in ssd[:2]]}]
        if len(hdd) >= 4:
            vols.append({"Id": "2", "Name": "data-raid6", "VolumeType": "StripedWithParity", "RAIDType": "RAID6",
                         "CapacityBytes": hdd[0]["capacity_bytes"] * (len(hdd) - 2),
                         "Drives": [d["id"] for d in hdd]})
        return vols
    if system.get("machine") and len(disks) >= 2:       # the guest's disk: a mirror of the two drives
        return [{"Id": "1", "Name": "os-mirror", "VolumeType": "Mirrored", "RAIDType": "RAID1",
                 "CapacityBytes": disks[0]["capacity_bytes"], "Drives": [d["id"] for d in disks[:2]]}]
    return [{"Id": "1", "Name": "boot", "VolumeType": "RawDevice",
             "CapacityBytes": disks[0]["capacity_bytes"], "Drives": [disks[0]["id"]]}]


def sushy_config(cfg: dict, port: int) -> dict:
    systems = cfg["systems"]
    sid = storage_id()
    fake_systems, storage, drives, volumes = [], {}, {}, {}
    for s in systems:
        fake_systems.append({
            "uuid": s["uuid"],
            "name": s["name"],
            "power_state": s["power_state"],
            "boot_mode": s["boot_mode"],
            "external_notifier": False,
            "nics": [{"id": n["id"], "mac": n["mac"]} for n in s["nics"]],
        })
        storage[s["uuid"]] = [{
            "Id": sid,
            "Name": "Local Storage Controller",
            "StorageControllers": [{"MemberId": "0", "Name": "Contoso Integrated RAID",
                                    "SpeedGbps": 12}],
            "Drives": [d["id"] for d in s["disks"]],
        }]
        drives[(s["uuid"], sid)] = [
            {"Id": d["id"], "Name": d["name"], "CapacityBytes": d["capacity_bytes"],
             "Protocol": d["protocol"]} for d in s["disks"]]
        volumes[(s["uuid"], sid)] = volumes_for(s)
    result = {
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_FAKE_SYSTEMS": fake_systems,
        "SUSHY_EMULATOR_STORAGE": storage,
        "SUSHY_EMULATOR_DRIVES": drives,
        "SUSHY_EMULATOR_VOLUMES": volumes,
        "SUSHY_EMULATOR_STATE_DIR": cfg["state_dir"],
        "SUSHY_EMULATOR_LISTEN_IP": cfg.get("listen_ip", "127.0.0.1"),
        "SUSHY_EMULATOR_LISTEN_PORT": port,
        "SUSHY_EMULATOR_FEATURE_SET": "full",
    }
    if cfg.get("auth"):
        result["SUSHY_EMULATOR_AUTH_FILE"] = os.path.join(cfg["state_dir"], "htpasswd")
    return result


def overlays_for(systems: list[dict]) -> dict[str, dict]:
    """JSON fields merged into rendered responses, keyed by resource path."""
    result: dict[str, dict] = {}
    sid = storage_id()
    for s in systems:
        base = f"/redfish/v1/Systems/{s['uuid']}"
        cpu = s["cpu"]
        result[base] = {
            "Manufacturer": s["manufacturer"],
            "Model": s["model"],
            "SKU": s["sku"],
            "SerialNumber": s["serial"],
            "PartNumber": s["sku"],
            "SystemType": "Physical",
            "HostName": s["name"],
            "ProcessorSummary": {
                "Count": cpu["sockets"],
                "CoreCount": cpu["sockets"] * cpu["cores"],
                "LogicalProcessorCount": cpu["sockets"] * cpu["threads"],
                "Model": cpu["model"],
            },
        }
        for sock in range(cpu["sockets"]):
            result[f"{base}/Processors/CPU{sock}"] = {
                "TotalCores": cpu["cores"],
                "TotalThreads": cpu["threads"],
                "MaxSpeedMHz": cpu["max_speed_mhz"],
                "@odata.id": f"{base}/Processors/CPU{sock}",
            }
        result[f"{base}/Processors"] = {"@odata.id": f"{base}/Processors"}
        for n in s["nics"]:
            result[f"{base}/EthernetInterfaces/{n['id']}"] = {
                "SpeedMbps": n["speed_mbps"],
                "LinkStatus": "LinkUp",
                "InterfaceEnabled": True,
            }
        for d in s["disks"]:
            result[f"{base}/Storage/{sid}/Drives/{d['id']}"] = {
                "MediaType": d["media_type"],
                "Model": d["model"],
                "Manufacturer": d["manufacturer"],
                "SerialNumber": d["serial"],
                "RotationSpeedRPM": 7200 if d["media_type"] == "HDD" else None,
            }
    return result


# -- the extended fake driver --------------------------------------------------

class _FleetHardware:
    """What the fake driver answers from the fleet: NICs, memory, processors, storage, BIOS
    attributes and firmware versions. Mixed into the driver :func:`make_driver_class` makes
    (its ``_spec``, ``_get``, ``_update`` and ``_lock``)."""

    def get_nics(self, identity):
        return [{"id": n.get("id") or n["mac"], "mac": n["mac"]}
                for n in self._get(identity)["nics"]]

    def get_total_memory(self, identity):
        return self._spec(identity)["memory_gib"]

    def get_total_cpus(self, identity):
        return self._spec(identity)["cpu"]["sockets"]

    def get_processors(self, identity):
        cpu = self._spec(identity)["cpu"]
        return [{"id": f"CPU{i}", "socket": f"CPU {i}", "vendor": cpu["vendor"],
                 "model": cpu["model"], "cores": cpu["cores"], "threads": cpu["threads"]}
                for i in range(cpu["sockets"])]

    def get_simple_storage_collection(self, identity):
        spec = self._spec(identity)
        by_proto: dict[str, dict] = {}
        for d in spec["disks"]:
            ctl = by_proto.setdefault(d["protocol"], {"Id": d["protocol"], "Name": d["protocol"],
                                                      "DeviceList": []})
            ctl["DeviceList"].append({"Name": d["name"], "CapacityBytes": d["capacity_bytes"]})
        return by_proto

    def find_or_create_storage_volume(self, data):
        # Volumes are static (from the fleet); POSTed ones are accepted as is.
        return data.get("Id")

    def get_bios(self, identity):
        system = self._get(identity)
        return copy.deepcopy(system.get("bios") or DEFAULT_BIOS)

    def set_bios(self, identity, attributes):
        with self._lock:
            system = self._get(identity)
            bios = copy.deepcopy(system.get("bios") or DEFAULT_BIOS)
            bios.update(attributes or {})
            self._update(system, bios=bios)

    def reset_bios(self, identity):
        with self._lock:
            self._update(identity, bios=copy.deepcopy(DEFAULT_BIOS))

    def get_versions(self, identity):
        system = self._get(identity)
        return dict(system.get("versions") or {"BiosVersion": self._spec(identity)["bios_version"]})

    def set_versions(self, identity, firmware_versions):
        with self._lock:
            versions = self.get_versions(identity)
            versions.update(firmware_versions or {})
            self._update(identity, versions=versions)

    def reset_versions(self, identity):
        with self._lock:
            self._update(identity, versions=None)


def make_driver_class(base_cls, error, systems_by_uuid: dict[str, dict]):
    class NodeforgeFakeDriver(_FleetHardware, base_cls):
        """sushy-tools' FakeDriver with immediate power and full inventory."""

        _lock = threading.RLock()

        def __init__(self):
            # Stock FakeDriver keeps systems in a SQLite-backed PersistentDict
            # (one connection + pickle per access, ~18 reads per system GET,
            # ~20 ms). The emulator is one process, so a dict is enough.
            super(base_cls, self).__init__()
            self._systems = {s["uuid"]: copy.deepcopy(s)
                             for s in self._config["SUSHY_EMULATOR_FAKE_SYSTEMS"]}
            self._by_name = {s["name"]: u for u, s in self._systems.items()}

        def _spec(self, identity):
            return systems_by_uuid[self.uuid(identity)]

        # Power: apply at once, deterministically.
        def set_power_state(self, identity, state):
            with self._lock:
                system = self._get(identity)
                current = system["power_state"]
                if state in ("On", "ForceOn"):
                    new = "On"
                elif state in ("ForceOff", "GracefulShutdown"):
                    new = "Off"
                elif state in ("GracefulRestart", "ForceRestart", "PowerCycle"):
                    new = "On"
                elif state == "PushPowerButton":
                    new = "Off" if current == "On" else "On"
                elif state == "Nmi":
                    return
                else:
                    raise error.NotSupportedError(f"Power state {state} is not supported")
                self._update(system, power_state=new, pending_power=None)

        def set_boot_device(self, identity, boot_source):
            with self._lock:
                super().set_boot_device(identity, boot_source)

        def set_boot_mode(self, identity, boot_mode):
            with self._lock:
                super().set_boot_mode(identity, boot_mode)

    return NodeforgeFakeDriver


# -- machine-backed systems ----------------------------------------------------------

LOOPBACK_HOSTS = ("localhost", "::1")


def is_loopback_url(url: str) -> bool:
    """An http(s) URL whose host is a loopback address (what a machine's virtual media may fetch)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url or "")
        host = parts.hostname or ""
    except ValueError:
        return False
    if parts.scheme not in ("http", "https"):
        return False
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_machines(cfg: dict, machine_mod) -> dict:
    """uuid -> machine.QemuMachine for every system that declares a machine."""
    tools = cfg.get("machine_tools") or {}
    root = os.path.join(cfg["state_dir"], "machines")
    forwards = cfg.get("guest_forwards") or []
    return {s["uuid"]: machine_mod.QemuMachine(s, tools, os.path.join(root, s["name"]), forwards)
            for s in cfg["systems"] if s.get("machine")}


class _MachineBacked:
    """Power, boot device and virtual CD of machine-backed systems acting on their QEMU machine;
    every other system is left to the driver below. Mixed into the driver
    :func:`make_machine_driver_class` makes (its ``_machines``, ``_machine_mod``, ``_error``)."""

    def machine(self, identity):
        return self._machines.get(self.uuid(identity))

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except self._machine_mod.MachineError as exc:
            raise self._error.FishyError(str(exc), code=500) from None

    def get_power_state(self, identity):
        m = self.machine(identity)
        return m.power_state() if m else super().get_power_state(identity)

    def set_power_state(self, identity, state):
        m = self.machine(identity)
        if m is None:
            return super().set_power_state(identity, state)
        if state not in ("On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart",
                         "ForceRestart", "PowerCycle", "PushPowerButton", "Nmi"):
            raise self._error.NotSupportedError(f"Power state {state} is not supported")
        self._call(m.set_power_state, state)

    def get_boot_device(self, identity):
        m = self.machine(identity)
        return m.boot_device if m else super().get_boot_device(identity)

    def set_boot_device(self, identity, boot_source):
        m = self.machine(identity)
        if m is None:
            return super().set_boot_device(identity, boot_source)
        if boot_source not in self._machine_mod.BOOT_TARGETS:
            raise self._error.BadRequest(f"boot target {boot_source!r}: a machine boots from "
                                         f"{', '.join(self._machine_mod.BOOT_TARGETS)}")
        self._call(m.set_boot, boot_source)

    def set_boot_enabled(self, identity, enabled):
        m = self.machine(identity)
        if enabled not in self._machine_mod.BOOT_ENABLED:
            raise self._error.BadRequest(f"BootSourceOverrideEnabled {enabled!r}: one of "
                                         f"{', '.join(self._machine_mod.BOOT_ENABLED)}")
        self._call(m.set_boot, None, enabled)

    def set_boot_mode(self, identity, boot_mode):
        if self.machine(identity) and boot_mode != "UEFI":
            raise self._error.BadRequest("a machine-backed system boots UEFI (OVMF) only")
        super().set_boot_mode(identity, boot_mode)

    def get_boot_image(self, identity, device):
        m = self.machine(identity)
        if m is None:
            return super().get_boot_image(identity, device)
        if device != "Cd" or not m.cd:
            return None, False, False
        return m.cd, m.cd_write_protected, True

    def set_boot_image(self, identity, device, boot_image=None, write_protected=True):
        m = self.machine(identity)
        if m is None:
            return super().set_boot_image(identity, device, boot_image, write_protected)
        if device != "Cd":
            if boot_image:
                raise self._error.NotSupportedError(f"virtual media device {device}: a machine has a CD only")
            return None
        self._call(m.set_cd, boot_image or None, write_protected)


def make_machine_driver_class(base_cls, error, machine_mod, machines: dict):
    """The fake driver, with power, boot device and virtual CD of machine-backed systems acting on
    their QEMU machine (every other system is left to ``base_cls`` untouched)."""

    class NodeforgeMachineDriver(_MachineBacked, base_cls):
        _machines, _machine_mod, _error = machines, machine_mod, error

    return NodeforgeMachineDriver


def build_app(cfg: dict, port: int, machine_mod=None):
    """Configure sushy-tools' Flask app; returns (app, ssl_context, machines)."""
    import flask
    from sushy_tools import error
    from sushy_tools.emulator import api_utils
    from sushy_tools.emulator import main as sushy_main
    from sushy_tools.emulator import memoize
    from sushy_tools.emulator.resources.systems import fakedriver

    systems = cfg["systems"]
    by_uuid = {s["uuid"]: s for s in systems}
    driver_cls = make_driver_class(fakedriver.FakeDriver, error, by_uuid)
    machines: dict = {}
    if any(s.get("machine") for s in systems):
        if machine_mod is None:
            import machine as machine_mod     # machine.py beside this script (sys.path[0])
        machines = make_machines(cfg, machine_mod)
        driver_cls = make_machine_driver_class(driver_cls, error, machine_mod, machines)
    import redfish_hardware as hw      # redfish_hardware.py beside this script: registry, volumes, firmware
    driver_cls = hw.extend_driver(driver_cls, error)

    class NodeforgeApplication(sushy_main.Application):
        @property
        @memoize.memoize()
        def systems(self):
            return driver_cls.initialize(self.config, self.logger)()

    app = sushy_main.app
    # The module-level app already carries every route; swap in the
    # subclass so its `systems` property builds our driver.
    app.__class__ = NodeforgeApplication
    app.configure(extra_config=(stock := sushy_config(cfg, port)))
    hw.install(app, flask=flask, error=error, api_utils=api_utils,
               volumes=hw.Volumes(stock["SUSHY_EMULATOR_VOLUMES"], stock["SUSHY_EMULATOR_DRIVES"]))

    _install_machine_requests(app, flask=flask, error=error, machines=machines)
    _install_overlays(app, flask=flask, error=error, overlays=overlays_for(systems), machines=machines,
                      machine_mod=machine_mod)
    _install_memory(app, flask=flask, error=error, api_utils=api_utils, by_uuid=by_uuid)
    return app, server_tls(cfg), machines


def _machine_of(app, error, machines: dict, identity):
    """The machine behind the system ``identity`` (None: a fake system, or no such system)."""
    try:
        return machines.get(app.systems.uuid(identity))
    except error.FishyError:
        return None


def _install_machine_requests(app, *, flask, error, machines: dict) -> None:
    @app.before_request
    def _machine_requests():
        """What sushy-tools' own routes would get wrong for a machine: BootSourceOverrideEnabled
        (stock ignores it), and virtual media from anywhere but loopback."""
        if not machines or flask.request.method not in ("PATCH", "POST"):
            return None
        parts = flask.request.path.rstrip("/").split("/")
        if len(parts) < 5 or parts[1:4] != ["redfish", "v1", "Systems"]:
            return None
        m = _machine_of(app, error, machines, parts[4])
        if m is None:
            return None
        body = flask.request.get_json(silent=True) or {}
        if flask.request.method == "PATCH" and len(parts) == 5 and isinstance(body.get("Boot"), dict):
            boot = body["Boot"]
            if boot.get("HttpBootUri") and not is_loopback_url(boot["HttpBootUri"]):
                raise error.BadRequest("a machine-backed system fetches HttpBootUri from http(s) URLs "
                                       "on loopback only")
            if "BootSourceOverrideEnabled" in boot:
                app.systems.set_boot_enabled(parts[4], boot["BootSourceOverrideEnabled"])
                if not any(boot.get(k) for k in ("BootSourceOverrideTarget", "BootSourceOverrideMode",
                                                 "HttpBootUri")) and "IndicatorLED" not in body:
                    return "", 204
        if flask.request.method == "POST" and parts[5:6] == ["VirtualMedia"] \
                and parts[-1] == "VirtualMedia.InsertMedia":
            if parts[6] != "Cd":
                raise error.BadRequest(f"virtual media device {parts[6]}: a machine-backed system has a CD only")
            if not is_loopback_url(body.get("Image", "")):
                raise error.BadRequest("a machine-backed system fetches virtual media from http(s) URLs "
                                       "on loopback only")
        return None


def _install_overlays(app, *, flask, error, overlays: dict, machines: dict, machine_mod) -> None:
    """The fleet's fields (:func:`overlays_for`) and a machine's boot override merged into rendered GETs."""

    @app.after_request
    def _overlay(response):
        if flask.request.method != "GET" or response.status_code != 200:
            return response
        path = flask.request.path.rstrip("/")
        extra = overlays.get(path)
        if machines and path.count("/") == 4 and path.startswith("/redfish/v1/Systems/"):
            m = _machine_of(app, error, machines, path.rsplit("/", 1)[1])
            if m is not None:
                extra = deep_merge(copy.deepcopy(extra or {}), {"Boot": {
                    "BootSourceOverrideEnabled": m.boot_enabled,
                    "BootSourceOverrideEnabled@Redfish.AllowableValues": list(machine_mod.BOOT_ENABLED)}})
        if not extra:
            return response
        try:
            body = json.loads(response.get_data())
        except ValueError:
            return response
        deep_merge(body, copy.deepcopy(extra))
        response.set_data(json.dumps(body, indent=4))
        return response


def _install_memory(app, *, flask, error, api_utils, by_uuid: dict) -> None:
    """Memory: a collection of the system's DIMMs, and each DIMM (stock sushy-tools routes neither)."""

    def _memory_collection(identity):
        uuid = app.systems.uuid(identity)
        spec = by_uuid[uuid]
        base = f"/redfish/v1/Systems/{identity}/Memory"
        return flask.jsonify({
            "@odata.type": "#MemoryCollection.MemoryCollection",
            "@odata.id": base,
            "Name": "Memory Module Collection",
            "Members@odata.count": len(spec["dimms"]),
            "Members": [{"@odata.id": f"{base}/{d['id']}"} for d in spec["dimms"]],
        })

    def _memory(identity, dimm_id):
        uuid = app.systems.uuid(identity)
        for d in by_uuid[uuid]["dimms"]:
            if d["id"] == dimm_id:
                return flask.jsonify({
                    "@odata.type": "#Memory.v1_7_0.Memory",
                    "@odata.id": f"/redfish/v1/Systems/{identity}/Memory/{dimm_id}",
                    "Id": dimm_id,
                    "Name": f"DIMM {dimm_id}",
                    "MemoryType": "DRAM",
                    "MemoryDeviceType": "DDR4",
                    "BaseModuleType": "RDIMM",
                    "CapacityMiB": d["capacity_mib"],
                    "OperatingSpeedMhz": d["speed_mhz"],
                    "AllowedSpeedsMHz": [d["speed_mhz"]],
                    "DataWidthBits": 64,
                    "BusWidthBits": 72,
                    "Manufacturer": d["manufacturer"],
                    "PartNumber": d["part_number"],
                    "SerialNumber": d["serial"],
                    "DeviceLocator": dimm_id,
                    "ErrorCorrection": "MultiBitECC",
                    "Status": {"State": "Enabled", "Health": "OK"},
                })
        raise error.NotFound()

    app.add_url_rule("/redfish/v1/Systems/<identity>/Memory", "nf_memory_collection",
                     api_utils.ensure_instance_access(api_utils.returns_json(_memory_collection)))
    app.add_url_rule("/redfish/v1/Systems/<identity>/Memory/<dimm_id>", "nf_memory",
                     api_utils.ensure_instance_access(api_utils.returns_json(_memory)))


def server_tls(cfg: dict):
    """TLS 1.2+ with the configured certificate (None: plain HTTP)."""
    tls = cfg.get("tls") or {}
    if not (tls.get("cert") and tls.get("key")):
        return None
    ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2
    ssl_context.load_cert_chain(tls["cert"], tls["key"])
    return ssl_context


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON config file (0600)")
    parser.add_argument("--port", type=int, required=True, help="TCP port on the listen IP")
    parser.add_argument("--debug", action="store_true", help="log every emulator decision")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_config(args.config)

    state_dir = cfg["state_dir"]
    # Fresh state per launch: power states, BIOS, volumes and indicator LEDs
    # of the previous run must not leak into this one.
    shutil.rmtree(state_dir, ignore_errors=True)
    os.makedirs(state_dir, mode=0o700)
    auth = cfg.get("auth")
    if auth:
        write_htpasswd(os.path.join(state_dir, "htpasswd"), auth["username"], auth["password"])

    # Virtual media downloads (sushy-tools writes them through tempfile) land in the state
    # directory, not in /tmp: removed when the emulator stops, and wiped at the next launch anyway.
    vmedia_dir = os.path.join(state_dir, "vmedia")
    os.makedirs(vmedia_dir, mode=0o700)
    tempfile.tempdir = vmedia_dir

    app, ssl_context, machines = build_app(cfg, args.port)

    # Create the driver (and its SQLite state) before accepting requests.
    count = len(app.systems.systems)
    LOG.info("serving %d systems on %s://%s:%d (auth %s)", count,
             "https" if ssl_context else "http", cfg.get("listen_ip", "127.0.0.1"), args.port,
             "on" if auth else "off")

    def _stop(signum, frame):
        LOG.info("signal %d received, exiting", signum)
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)

    from werkzeug.serving import WSGIRequestHandler, run_simple

    class Handler(WSGIRequestHandler):
        # Keep-alive responses are written in several sends; without
        # TCP_NODELAY every request waits ~40 ms for the client's delayed ACK.
        disable_nagle_algorithm = True

    try:
        run_simple(cfg.get("listen_ip", "127.0.0.1"), args.port, app, threaded=True,
                   ssl_context=ssl_context, use_reloader=False, use_debugger=False,
                   request_handler=Handler)
    finally:
        # Every QEMU this emulator started goes with it (machine.py: PR_SET_PDEATHSIG covers
        # an emulator that dies without getting here).
        if machines:
            import machine as machine_mod

            machine_mod.stop_all(machines.values())
        shutil.rmtree(vmedia_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
