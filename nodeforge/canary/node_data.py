"""What a canary deploy gives the node (the config drive Ironic writes) and what it asks the
node's collector to report, and the checks only a deploy can fail.

The config drive is Ironic's JSON form (API 1.56): ``meta_data``, ``network_data`` and
``user_data``; Ironic builds the ISO 9660 ``config-2`` image and writes it to the node's disk
after the image. The user-data is :func:`nodeforge.imageverify.boottest.user_data` (the same
collector and probes ``image verify`` uses), with the report POSTed to the phone-home URL and a
few commands run once the boot has finished.

The checks here are only what ``image verify`` cannot see: the node booted from its own disk in
UEFI mode (not from the agent's virtual media), the root filesystem was grown to that disk, the
config drive was the datasource, and its hostname, instance id and network data were applied.
The image's own checks (artifacts, hardening, units) come from
:func:`nodeforge.imageverify.verifychecks.evaluate`, unchanged, except its ``rootfs-grown``
(which expects the verification boot's disk): :func:`all_checks` puts ``CANARY-GROW`` in its place.
"""

from __future__ import annotations

import dataclasses
import re

from nodeforge.errors import ConfigError
from nodeforge.imageverify import boottest
from nodeforge.imageverify import verifychecks as vc
from nodeforge.schema import loader

# A root partition counts as grown to the disk when at most this much of the disk lies
# outside it: the ESP and BIOS boot partitions, GPT's tail, and the config drive Ironic writes
# at the end of the disk (64 MiB at most).
GROW_SLACK_BYTES = 512 * 1024 * 1024

LATE_COMMANDS = {
    "hostname": ["hostname"],
    "instance_id": ["cat", "/var/lib/cloud/data/instance-id"],
    "ip_addr": ["ip", "-j", "-4", "addr", "show"],
    "ip_link": ["ip", "-j", "link", "show"],
    "efi_boot_current": ["sh", "-c", "od -An -tx1 /sys/firmware/efi/efivars/BootCurrent-* 2>/dev/null || echo none"],
    "datasource": ["cat", "/run/cloud-init/result.json"],
    "config_drive": ["blkid", "-t", "LABEL=config-2", "-o", "device"],
}


@dataclasses.dataclass(frozen=True)
class NodeIdentity:
    """What the config drive tells the node, and what its report must show back."""

    instance_id: str
    hostname: str
    mac: str | None             # the node's first port (network data), lower case


def hostname_for(node_name: str, image_id: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", f"canary-{node_name}".lower()).strip("-")[:50]
    return f"{base}-{image_id[:8]}".strip("-")


def network_data(mac: str | None) -> dict:
    """OpenStack network_data.json for one NIC by DHCP (what Neutron gives a provisioning network)."""
    if not mac:
        return {"links": [], "networks": [], "services": []}
    return {"links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": mac.lower(), "mtu": 1500}],
            "networks": [{"id": "net0", "link": "nic0", "type": "ipv4_dhcp", "network_id": "canary"}],
            "services": []}


def config_drive(identity: NodeIdentity, probes: dict) -> dict:
    """Ironic's JSON config drive (the ``configdrive`` of a deploy request)."""
    meta = {"uuid": identity.instance_id, "hostname": identity.hostname, "name": identity.hostname,
            "launch_index": 0, "availability_zone": "nova", "files": [], "meta": {"nodeforge": "canary"}}
    return {"meta_data": meta, "network_data": network_data(identity.mac),
            "user_data": boottest.user_data(probes)}


def probes(exp: vc.Expectations, *, report_url: str, probe_id: str, wait_seconds: int) -> dict:
    """The verify collector's probes for this image, sent home instead of to a serial port, the node
    left running, and the deploy's own facts collected once the boot has finished."""
    p = vc.probes(exp, probe_id=probe_id, wait_seconds=wait_seconds)
    p.update({"report_url": report_url, "poweroff": False, "late_commands": LATE_COMMANDS})
    return p


# -- checks ----------------------------------------------------------------------------------

def _out(guest: dict, name: str) -> str | None:
    value = (guest.get("late_commands") or {}).get(name)
    if not isinstance(value, dict) or value.get("rc") != 0:
        return None
    return str(value.get("output", "")).strip()


def _json(text: str | None):
    try:
        return loader.parse_json("the node's data", text) if text else None
    except ConfigError:
        return None


def _check(check_id: str, title: str, items: list[dict]) -> dict:
    """A check in verify's shape (``verify.json``'s checks), so one report reader shows both."""
    return {"id": check_id, "title": title, "passed": bool(items) and all(i["passed"] for i in items),
            "expected": {i["what"]: i["expected"] for i in items},
            "observed": {i["what"]: i["observed"] for i in items}, "items": items, "evidence": []}


def _item(what: str, expected, observed, passed: bool) -> dict:
    return {"what": what, "expected": expected, "observed": observed, "passed": bool(passed)}


def evaluate(identity: NodeIdentity, guest: dict) -> list[dict]:
    """The deploy-only checks on the node's report (each: id, title, passed, items)."""
    rootfs = guest.get("rootfs") or {}
    source = str(rootfs.get("source") or "")
    disk = rootfs.get("disk") or ""
    checks = []
    # Booted from its own disk: the root filesystem is a partition of a disk, not the agent's
    # virtual media, a RAM disk or a loop device.
    on_disk = bool(disk) and not re.match(r"^(sr|ram|loop|zram)", disk) and "/dev/sr" not in source
    efi = _out(guest, "efi_boot_current")
    checks.append(_check("CANARY-BOOT", "booted from the node's own disk, in UEFI mode", [
        _item("root filesystem's disk", "a local disk", disk or source or None, on_disk),
        _item("UEFI BootCurrent", "set (booted by the firmware's boot manager)", efi,
              bool(efi) and efi != "none")]))
    disk_bytes, part_bytes = rootfs.get("disk_bytes"), rootfs.get("partition_bytes")
    grown = isinstance(disk_bytes, int) and isinstance(part_bytes, int) and part_bytes >= disk_bytes - GROW_SLACK_BYTES
    checks.append(_check("CANARY-GROW", "root partition grown to the node's disk", [
        _item("root partition bytes", f">= disk bytes - {GROW_SLACK_BYTES}",
              {"partition": part_bytes, "disk": disk_bytes}, grown)]))
    result = _json(_out(guest, "datasource")) or {}
    ds = str(((result.get("v1") or {}).get("datasource")) or "")
    errors = (result.get("v1") or {}).get("errors")
    checks.append(_check("CANARY-CONFIGDRIVE", "cloud-init read Ironic's config drive", [
        _item("datasource", "ConfigDrive", ds or None, "ConfigDrive" in ds),
        _item("cloud-init errors", [], errors, errors == []),
        _item("config-2 partition", "present on the node's disk", _out(guest, "config_drive"),
              bool(_out(guest, "config_drive")) and disk in (_out(guest, "config_drive") or ""))]))
    checks.append(_check("CANARY-IDENTITY", "hostname and instance id from the config drive", [
        _item("hostname", identity.hostname, _out(guest, "hostname"), _out(guest, "hostname") == identity.hostname),
        _item("instance id", identity.instance_id, _out(guest, "instance_id"),
              _out(guest, "instance_id") == identity.instance_id)]))
    links = _json(_out(guest, "ip_link")) or []
    addrs = _json(_out(guest, "ip_addr")) or []
    nic = next((link for link in links if identity.mac and str(link.get("address", "")).lower() == identity.mac), None)
    ifname = nic.get("ifname") if nic else None
    v4 = [a.get("local") for entry in addrs if entry.get("ifname") == ifname
          for a in entry.get("addr_info", []) if a.get("family") == "inet"]
    checks.append(_check("CANARY-NETWORK", "network data applied: the node's NIC is up with an address", [
        _item("interface with the port's MAC", identity.mac, ifname, nic is not None),
        _item("state", "UP", nic.get("operstate") if nic else None, bool(nic) and nic.get("operstate") == "UP"),
        _item("IPv4 address", "one or more", v4 or None, bool(v4))]))
    return checks


def all_checks(exp: vc.Expectations, facts: dict, identity: NodeIdentity, guest: dict) -> list[dict]:
    """The image's own checks from the deployed node's report, then the deploy-only ones."""
    image = [c for c in vc.evaluate(exp, guest, facts) if c["id"] != "rootfs-grown"]
    return image + evaluate(identity, guest)
