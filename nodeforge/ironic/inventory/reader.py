"""Reading a whole inventory: the format's entries, each node declared and checked, what
must be unique across nodes, every problem at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodeforge import schema
from nodeforge.ironic import constants as C
from nodeforge.base import secrets as secrets_mod
from nodeforge.ironic.inventory.model import Bmc, BmcKind, CleanMode, CleanStep, Cleaning, Format, Inventory, InventoryError, LIMITS, Location, NodeSpec, bmc_key, log, normalize_mac, parse_bmc_url
from nodeforge.ironic.inventory.declare import NodeEntry, _node_label, _of_node
from nodeforge.ironic.inventory.entries import _Entry, _Reader, _unique, detect_format
from nodeforge.ironic.inventory.fmt_nodeforge import _nodeforge_entries
from nodeforge.ironic.inventory.fmt_csv import _csv_document, _csv_entries
from nodeforge.ironic.inventory.fmt_bulk import _bulk_entries
from nodeforge.ironic.inventory.fmt_bifrost import _bifrost_csv_entries, _bifrost_entries


def load(path: Path | str, *, fmt: Format | str | None = None, allow_plaintext: bool = False,
         key_file: Path | None = None, environ: dict | None = None,
         secrets_dir: Path | None = None) -> Inventory:
    """Parse and validate a whole inventory; raise InventoryError listing every problem.
    ``file:`` references may point into the inventory's directory and ``secrets_dir``
    (default ``$NODEFORGE_SECRETS_DIR``); see :class:`secrets_mod.Policy`.

    The cycle collector is paused while the file is read: reading makes hundreds of thousands of
    objects and no cycles worth collecting, and its full passes made the time grow faster than the
    file (60,000 CSV rows: 7.7 s with it, 5.1 s without; bench/bench_inventory_load.py)."""
    with schema.collector_paused():
        return _load(path, fmt=fmt, allow_plaintext=allow_plaintext, key_file=key_file, environ=environ,
                     secrets_dir=secrets_dir)


def _load(path: Path | str, *, fmt: Format | str | None, allow_plaintext: bool, key_file: Path | None,
          environ: dict | None, secrets_dir: Path | None) -> Inventory:
    path = Path(path)
    fmt = Format(fmt) if fmt else None
    csv_file = fmt is Format.CSV or (path.suffix.lower() == ".csv" and fmt in (None, Format.BIFROST))
    if csv_file:
        document, rows = _csv_document(path, schema.read_text(path, LIMITS))
        fmt = fmt or (Format.BIFROST if rows and normalize_mac(rows[0][1][0]) else Format.CSV)
        if fmt is Format.BIFROST:       # no header: key path [N] is row N, as in a CSV with one
            document = dataclasses.replace(document, _csv_lines=[1, *document._csv_lines])
    else:
        document = schema.load(path, format="json" if path.suffix.lower() == ".json" else "yaml", limits=LIMITS)
        fmt = fmt or detect_format(path, document.data)
    key = secrets_mod.load_key(key_file) if key_file else None
    reader = _Reader(document, secrets_mod.Resolver(path.parent, allow_plaintext=allow_plaintext, key=key,
                                                    environ=environ, secrets_dir=secrets_dir))
    if fmt is Format.CSV:
        entries = _csv_entries(reader, rows)
    elif fmt is Format.BIFROST:
        entries = _bifrost_csv_entries(reader, rows) if csv_file else _bifrost_entries(reader, document.data)
    elif fmt is Format.IRONICCLIENT:
        entries = _bulk_entries(reader, document.data)
    else:
        entries = _nodeforge_entries(reader, document.data)
    nodes = [] if entries is None else _finish(reader, entries)
    if not reader.problems and not nodes and not reader.chassis:
        reader.problem((), "no nodes: the inventory lists no servers")
    if reader.problems:
        raise InventoryError(str(path), _unique(reader.problems))
    scope, scope_source = C.derive_scope(path), "derived"
    if fmt is Format.NODEFORGE and document.data.get("scope") is not None:
        scope, scope_source = document.data["scope"], "file"
    for item in (*nodes, *reader.chassis):
        item.scope = scope
    for w in reader.warnings:
        log.warning("%s", w)
    return Inventory(path=path, format=fmt, nodes=nodes, scope=scope, scope_source=scope_source,
                     chassis=reader.chassis, warnings=reader.warnings)


def _finish(reader: _Reader, entries: list[_Entry]) -> list[NodeSpec]:
    """Every entry as a NodeSpec (declaration, BMC, secrets); then what must be unique across nodes."""
    specs: list[tuple[NodeSpec, _Entry]] = []
    for entry in entries:
        label = _node_label(entry.data.get("name"), entry.remap(("bmc", "password")))
        context = {"resolver": reader.resolver, "node": label}
        before = len(reader.problems)
        node = reader.declared(entry.data, NodeEntry, entry.remap, context=context)
        spec = _spec(reader, node, entry) if node is not None else None
        if spec is not None:
            specs.append((spec, entry))
        _name_the_node(reader, before, label)
    _unique_across(reader, entries, specs)
    return [spec for spec, _ in specs] if not reader.problems else []


def _name_the_node(reader: _Reader, start: int, label: str | None) -> None:
    """Every problem from ``start`` on names the node (unless it does already, or its key path
    starts with the name)."""
    if label:
        reader.problems[start:] = [p if f"(node {label})" in p.detail else
                                   dataclasses.replace(p, detail=_of_node(p.detail, label))
                                   for p in reader.problems[start:]]


def _spec(reader: _Reader, node: NodeEntry, entry: _Entry) -> NodeSpec | None:
    """The node's BMC and the secrets among its driver_info (the rest the declaration holds)."""
    before = len(reader.problems)
    di_extra = dict(node.driver_info)
    for k, v in node.driver_info.items():
        if "password" in k or k in ("ipmi_address", "redfish_address", "redfish_system_id"):
            reader.problem(entry.remap(("driver_info", k)), "set BMC address and credentials under 'bmc', "
                                                            "not driver_info")
        elif k in C.SECRET_DRIVER_INFO_KEYS and v not in (None, ""):
            # ipmi_kg_key, snmp_auth_key, snmp_priv_key: references like the password, held as Secrets.
            where = entry.remap(("driver_info", k))
            if not isinstance(v, str):
                # YAML's implicit typing would change it (0123 -> 123, true -> "True"); the value is not shown.
                reader.problem(where, _of_node(f"expected a string, got {schema.kind_word(v)}; quote it; the value "
                                               "is not shown (a secret field)", _node_label(node.name, where)))
                continue
            try:
                di_extra[k] = reader.resolver.resolve(v)
            except secrets_mod.SecretRefError as exc:
                reader.problem(where, _of_node(str(exc), _node_label(node.name, where)))
    if len(reader.problems) > before:
        return None
    kind, host, port, transport, system_id = parse_bmc_url(node.bmc.address)
    c, bulk = node.cleaning, entry.bulk
    cleaning = Cleaning(CleanMode(c.mode), tuple(CleanStep(s.interface, s.step, dict(s.args)) for s in c.steps),
                        c.disable_ramdisk, c.erase, tuple(c.burn_in.items()))
    di_extra = {**cleaning.driver_info(), **di_extra}
    return NodeSpec(
        name=node.name, location=entry.location, macs=list(node.macs), resource_class=node.resource_class,
        bmc=Bmc(kind=kind, address=node.bmc.address, host=host, port=623 if kind is BmcKind.IPMI and port is None
                else port, transport=transport, system_id=system_id, username=node.bmc.username,
                password=node.bmc.password, verify_ca=node.bmc.verify_ca),
        properties=dict(node.properties), traits=sorted(set(node.traits)) if node.traits is not None else None,
        owner=node.owner, extra=dict(node.extra), interfaces=dict(node.interfaces), driver_info_extra=di_extra,
        inspect=node.inspect, description=node.description,
        cleaning=cleaning,
        chassis=bulk.get("chassis"), chassis_uuid=bulk.get("chassis_uuid"), ports=bulk.get("ports", []),
        portgroups=bulk.get("portgroups", []), ironic=bulk.get("ironic", {}),
        ironic_newer=bulk.get("ironic_newer", {}))


def _ident(entry: _Entry) -> tuple[str | None, list[str], str | None]:
    """(name, MACs, BMC key) of an entry, valid or not (duplicates are named even beside other problems)."""
    data = entry.data
    name = data.get("name") if isinstance(data.get("name"), str) else None
    macs = data.get("macs") if isinstance(data.get("macs"), list) else []
    macs = list(dict.fromkeys(m for m in (normalize_mac(x) for x in macs if isinstance(x, str)) if m))
    address = data["bmc"].get("address") if isinstance(data.get("bmc"), dict) else None
    try:
        kind, host, port, transport, system_id = parse_bmc_url(address)
    except (ValueError, TypeError):
        return name, macs, None
    return name, macs, bmc_key(Bmc(kind, address, host, port, transport, system_id))


def _unique_across(reader: _Reader, entries: list[_Entry], specs: list[tuple[NodeSpec, _Entry]]) -> None:
    """Names, MACs and BMCs are unique in the inventory; port group names and addresses, and
    uuids, in all of Ironic (a file that repeats one could never be enrolled)."""
    seen: dict[tuple, tuple[str | None, Location]] = {}

    def once(what: str, value, name, keypath: tuple, loc: Location, detail: str) -> None:
        if value is None:
            return
        if (what, value) in seen:
            other, where = seen[(what, value)]
            reader.problem(keypath, detail.format(value=value, other=other, where=where))
        else:
            seen[(what, value)] = (name, loc)

    for entry in entries:
        name, macs, key = _ident(entry)
        r, loc = entry.remap, entry.location
        before = len(reader.problems)
        folded = name.casefold() if isinstance(name, str) else name
        if isinstance(name, str) and ("name", folded) in seen and seen[("name", folded)][0] != name:
            other, where = seen[("name", folded)]
            reader.problem(r(("name",)), f"differs from node {other!r} ({where}) only by case: one name to "
                                         "Ironic's database where it compares names without case")
        else:
            once("name", folded, name, r(("name",)), loc, "duplicate name (first at {where})")
        for mac in macs:
            once("mac", mac, name, r(("macs",)), loc, "MAC {value} also belongs to node {other!r} ({where})")
        once("bmc", key, name, r(("bmc", "address")), loc, "BMC also used by node {other!r} ({where})")
        _name_the_node(reader, before, _node_label(name, r(("name",))))
    for spec, entry in specs:
        r = entry.remap
        once("uuid", spec.ironic.get("uuid"), spec.name, r(("uuid",)), spec.location,
             "uuid {value} also given to node {other!r} ({where})")
        for g in spec.portgroups:
            for what in ("name", "address", "uuid"):
                once(f"port group {what}", g.fields.get(what), spec.name, r(("portgroups",)), g.location,
                     f"port group {what} {{value}} also given to node {{other!r}} ({{where}})")
        for p in spec.ports:
            once("uuid", p.fields.get("uuid"), spec.name, r(("ports",)), p.location,
                 "uuid {value} also given to node {other!r} ({where})")
    for c in reader.chassis:
        if c.uuid and ("uuid", c.uuid) in seen:
            reader.problem((), f"chassis uuid {c.uuid} also given to node {seen[('uuid', c.uuid)][0]!r}")
