"""Bifrost's inventory (JSON/YAML) and its legacy header-less CSV."""

from __future__ import annotations

from typing import Any

from nodeforge import schema
from nodeforge.ironic.inventory.declare import BIFROST_CSV_COLUMNS, BIFROST_CSV_MIN_COLUMNS, BIFROST_IGNORED, BifrostNode
from nodeforge.ironic.inventory.entries import Remap, _Entry, _Reader
from nodeforge.ironic.inventory.fmt_bulk import _node_from_ironic


_BIFROST_NODE_FIELDS = ("resource_class", "traits", "owner", "extra", "description")


def _bifrost_entries(reader: _Reader, data: Any, remap: Remap = lambda kp: kp,
                     rows: dict | None = None) -> list[_Entry] | None:
    """Bifrost nodes; ``remap`` maps a key path of ``data`` to the file's (the CSV adapter's rows)."""
    if not isinstance(data, dict) or not data:
        what = "empty" if not data else f"a {'list' if isinstance(data, list) else 'scalar'}"
        reader.problem((), f"a Bifrost inventory is a mapping of node name to node; the file is {what}")
        return None
    entries = []
    for key, item in data.items():
        if not isinstance(item, dict):
            reader.problem(remap((key,)), f"a node must be a mapping, got {schema.kind_of(item)}")
            continue
        node = reader.declared(item, BifrostNode, lambda kp, key=key: remap((key, *kp)))
        if node is None:
            continue
        for k in BIFROST_IGNORED:
            if getattr(node, k) not in (None, "", [], {}):
                reader.problem(remap((key, k)), "Bifrost uses it when deploying, not enrolling: not enrolled "
                                                "into Ironic", warning=True)
        info = dict(node.driver_info)
        power = isinstance(info.get("power"), dict)
        if power:                                         # older Bifrost: driver_info.power.*
            info = {**{k: v for k, v in info.items() if k != "power"}, **info.pop("power")}
        if not node.name and not isinstance(key, str):
            # YAML read 1.30 as the number 1.3 and true as a boolean: the node would be named "1.3", "True".
            written = reader.document.source_text(remap((key,)), key=True) or schema.kind_of(key)
            reader.problem(remap((key,)), f"the node's name is {schema.kind_of(key)}, not text: quote it "
                                          f"(\"{written}\") or give 'name'")
            continue
        name = node.name or str(key)

        def at(k, key=key):
            return (key, "driver_info", *(("power",) if power and k else ()), *((k,) if k else ()))
        entry = _node_from_ironic(reader, node, (key,), name, _BIFROST_NODE_FIELDS, info, {"macs": ("nics",)}, at)
        if entry is None:
            continue
        renames = {"ram": "memory_mb", "disk_size": "local_gb"}
        entry.data["properties"] = {renames.get(k, k): (int(v) if k in ("ram", "disk_size", "cpus")
                                                        and str(v).isdigit() else v)
                                    for k, v in node.properties.items()}
        entry.data["macs"] = [n.mac for n in node.nics]
        entry.remap = lambda kp, r=entry.remap: remap(r(kp))
        entry.location = reader.location(remap((key,)), rows.get(key) if rows else None)
        if node.uuid is not None:        # Bifrost enrolls the node with it
            entry.bulk = {"ironic": {"uuid": node.uuid}}
        entries.append(entry)
    return entries


# --- Bifrost legacy CSV (bifrost/inventory.py, _process_baremetal_csv) --------------------------

_BIFROST_CSV_PATHS = {("driver_info", "power", "ipmi_address"): "address", ("driver_info", "power", "ipmi_username"):
                      "username", ("driver_info", "power", "ipmi_password"): "password", ("nics",): "mac",
                      ("properties",): "cpus", ("uuid",): "uuid", ("name",): "name", ("driver",): "driver",
                      ("ipv4_address",): "ipv4_address", ("provisioning_ipv4_address",): "provisioning_ipv4_address"}


def _bifrost_csv_entries(reader: _Reader, rows: list[tuple[int, list[str]]]) -> list[_Entry] | None:
    hosts: dict[str, dict] = {}
    index: dict[str, int] = {}
    for i, (_, cells) in enumerate(rows, start=1):
        if len(cells) > len(BIFROST_CSV_COLUMNS):
            reader.problem((i,), f"{len(cells)} cells: a Bifrost CSV row has at most {len(BIFROST_CSV_COLUMNS)} "
                                 "(the cells past it would be dropped)")
            continue
        if len(cells) < BIFROST_CSV_MIN_COLUMNS:
            reader.problem((i,), f"{len(cells)} cells: a Bifrost CSV row needs at least {BIFROST_CSV_MIN_COLUMNS} "
                                 "(mac ... name)")
            continue
        row = {c: v for c, v in zip(BIFROST_CSV_COLUMNS, cells) if v != ""}
        if "name" not in row:
            reader.problem((i, "name"), "column 11 (name) is empty")
            continue
        driver = row.get("driver", "ipmi")
        if "ipmi" not in driver:
            reader.problem((i, "driver"), f"driver {driver!r}: a Bifrost CSV row maps only to IPMI (use the "
                                          "JSON/YAML format for other drivers)")
            continue
        power = {f"ipmi_{k}": row[c] for k, c in (("address", "address"), ("username", "username"),
                                                 ("password", "password")) if c in row}
        power.update({k: row[k] for k in BIFROST_CSV_COLUMNS[12:16] if k in row})
        if row.get("ipmi_target_channel") and row.get("ipmi_target_address"):
            power["ipmi_bridging"] = "dual" if row.get("ipmi_transit_channel") and row.get("ipmi_transit_address") \
                else "single"
        props = {k: row[c] for k, c in (("cpus", "cpus"), ("ram", "ram"), ("disk_size", "disk")) if c in row}
        host = {"name": row["name"], "driver": "ipmi", "driver_info": {"power": power},
                "nics": [{"mac": row["mac"]}], "properties": {**props, "cpu_arch": "x86_64"},
                **{k: row[k] for k in ("uuid", "ipv4_address", "provisioning_ipv4_address") if k in row}}
        hosts[row["name"]] = host
        index[row["name"]] = i

    def remap(kp: tuple) -> tuple:
        i = index[kp[0]]
        rest = kp[1:]
        for n in range(len(rest), 0, -1):
            if rest[:n] in _BIFROST_CSV_PATHS:
                return (i, _BIFROST_CSV_PATHS[rest[:n]])
        return (i,)
    return _bifrost_entries(reader, hosts, remap, {n: i for n, i in index.items()}) if hosts else []


# --- every format: the nodeforge node, its BMC and secrets, uniqueness -----------------------------

