"""Build inventories for the local cloud's emulated BMCs (integration tests).

Passwords go into 0600 files referenced with ``file:``; nothing is inlined."""

from __future__ import annotations

import os
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


def ipmi_node(paths, tmp: Path, index: int, *, prefix: str, password: str | None = None, **extra) -> dict:
    ep = bmc.ipmi_endpoints(paths)[index - 1]
    pw = password if password is not None else ep.password.reveal()
    return {"name": f"{prefix}ipmi-{index:02d}",
            "bmc": {"address": ep.address, "username": ep.username,
                    "password": write_secret(tmp, f"ipmi-{index}.pw", pw)},
            "macs": list(ep.bmc.macs) if hasattr(ep.bmc, "macs") else [],
            "resource_class": "baremetal-ipmi", "cleaning": "none", **extra}


def fake_node(i: int, *, prefix: str, **extra) -> dict:
    return {"name": f"{prefix}fake-{i:04d}", "bmc": {"address": f"fake://{prefix}fake-{i:04d}"},
            "macs": [f"52:54:{(i >> 24) & 0xff:02x}:{(i >> 16) & 0xff:02x}:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}"],
            "resource_class": "baremetal-fake", **extra}


def write_inventory(path: Path, nodes: list[dict]) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "nodes": nodes}, sort_keys=False))
    return path
