"""Build inventories for the local cloud's emulated BMCs (integration tests).

Passwords go into 0600 files referenced with ``file:``; nothing is inlined."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import yaml

from nodeforge.devcloud import bmc


def write_secret(directory: Path, name: str, value: str) -> str:
    path = directory / name
    path.write_text(value)
    os.chmod(path, 0o600)
    return f"file:{path}"


def redfish_node(paths, tmp: Path, index: int, *, prefix: str, password: str | None = None, **extra) -> dict:
    system = bmc.redfish_systems()[index - 1]
    creds = bmc.credentials(paths)
    pw = password if password is not None else creds.redfish.password.reveal()
    return {"name": f"{prefix}rf-{index:03d}",
            "bmc": {"address": f"redfish+https://127.0.0.1:{bmc.redfish_port()}/redfish/v1/Systems/{system.uuid}",
                    "username": creds.redfish.username,
                    "password": write_secret(tmp, f"rf-{index}.pw", pw),
                    "verify_ca": str(bmc.ca_bundle(paths))},
            "macs": list(system.macs), "resource_class": "baremetal-rf", "cleaning": "none", **extra}


def ipmi_node(paths, tmp: Path, index, *, prefix: str, password: str | None = None, **extra) -> dict:
    """``index``: 1-based position in the simulator's endpoints, or an endpoint
    (e.g. from the ``bmc_pool`` fixture)."""
    endpoints = bmc.ipmi_endpoints(paths)
    if isinstance(index, int):
        ep = endpoints[index - 1]
    else:
        ep = index
        index = next(i for i, e in enumerate(endpoints, 1) if e.port == ep.port)
    pw = password if password is not None else ep.password.reveal()
    return {"name": f"{prefix}ipmi-{index:02d}",
            "bmc": {"address": ep.address, "username": ep.username,
                    "password": write_secret(tmp, f"ipmi-{index}.pw", pw)},
            "macs": list(ep.bmc.macs) if hasattr(ep.bmc, "macs") else [],
            "resource_class": "baremetal-ipmi", "cleaning": "none", **extra}


def fake_mac(prefix: str, i: int) -> str:
    """A locally administered MAC unique to (prefix, i): tests with different
    prefixes never share one (the fleet's emulated systems use 52:54:00)."""
    h = hashlib.sha256(f"{prefix}/{i}".encode()).digest()
    return "52:55:" + ":".join(f"{b:02x}" for b in h[:4])


def fake_node(i: int, *, prefix: str, **extra) -> dict:
    return {"name": f"{prefix}fake-{i:04d}", "bmc": {"address": f"fake://{prefix}fake-{i:04d}"},
            "macs": [fake_mac(prefix, i)], "resource_class": "baremetal-fake", **extra}


def write_inventory(path: Path, nodes: list[dict], *, scope: str | None = None) -> Path:
    """A nodeforge inventory; ``scope`` names its ownership scope (without it the
    scope is derived from the file's path, so a copy under another name is
    another scope)."""
    doc = {"version": 1, **({"scope": scope} if scope else {}), "nodes": nodes}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def delete_nodes(conn, prefix: str, attempts: int = 60) -> None:
    """Delete every Ironic node whose name starts with ``prefix``; a node still
    locked (e.g. cleaning finishing) is retried once a second, and one that
    cannot be deleted fails the teardown with Ironic's last answer."""
    failed = {}
    for n in [n for n in conn.baremetal.nodes(details=True) if (n.name or "").startswith(prefix)]:
        for _ in range(attempts):
            try:
                if n.is_maintenance:
                    conn.baremetal.unset_node_maintenance(n.id)
                conn.baremetal.delete_node(n.id, ignore_missing=True)
                failed.pop(n.name, None)
                break
            except Exception as exc:  # noqa: BLE001 - locked for a moment; reported if it stays
                failed[n.name] = str(exc)
                time.sleep(1)
                n = conn.baremetal.get_node(n.id)
    assert not failed, f"teardown could not delete nodes: {failed}"
