"""python-ironicclient's ``baremetal create`` file: chassis, nodes, ports and port groups."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from nodeforge import schema
from nodeforge.ironic.inventory.model import ChassisSpec, PortGroupSpec, PortSpec, _INTERFACES, _host_in_url
from nodeforge.ironic.inventory.declare import BulkFile, IC_NEWER_API, IC_NODE_PASSTHROUGH
from nodeforge.ironic.inventory.entries import Remap, _Entry, _Reader


def _bmc_from_driver_info(reader: _Reader, driver: str | None, info: dict, interfaces: dict, name: str,
                          at: Callable[[str], tuple]) -> tuple[dict, dict, dict] | None:
    """(nodeforge bmc fields, remaining driver_info, bmc field -> key path in the file) from
    Ironic's ``driver_info``; None (with a problem) when it names no BMC. ``at(key)``: the key path
    of ``driver_info.key`` in the file."""
    info = dict(info)
    if driver == "fake-hardware":
        return {"address": f"fake://{name}"}, info, {}
    for pre, addr in (("ipmi_", "ipmi_address"), ("redfish_", "redfish_address")):
        if addr in info:
            break
    else:
        reader.problem(at(""), "driver_info has neither ipmi_address nor redfish_address")
        return None
    if "ipmi_address" in info and "redfish_address" in info:
        reader.problem(at("redfish_address"), "driver_info has both ipmi_address and redfish_address: keep the "
                                              "one of the BMC this node is driven through")
        return None
    ipmi_drivers, redfish_drivers = ("ipmi", "ipmi_hardware", "ilo", "irmc"), ("redfish", "idrac")
    if driver and ((pre == "ipmi_" and driver in redfish_drivers) or (pre == "redfish_" and driver in ipmi_drivers)):
        # The address keys decide the BMC; a driver of the other kind was overridden without a word before.
        reader.problem(at(addr), f"an {'IPMI' if pre == 'ipmi_' else 'Redfish'} address, but driver is "
                                 f"{driver!r}: make them agree (driver ipmi with ipmi_*, redfish with redfish_*)")
        return None
    where = {"address": at(addr)}
    if pre == "ipmi_":
        host, port = info.pop("ipmi_address"), info.pop("ipmi_port", None)
        if port is not None and (isinstance(port, bool) or not re.fullmatch(r"\d{1,5}", str(port).strip())
                                 or not 1 <= int(str(port).strip()) <= 65535):
            reader.problem(at("ipmi_port"), f"must be a port number 1-65535, got {port!r}")
            return None
        bmc = {"address": f"ipmi://{_host_in_url(str(host))}" + (f":{int(str(port).strip())}" if port else "")}
    else:
        url = str(info.pop("redfish_address")).rstrip("/")
        transport, _, rest = (url if "://" in url else "https://" + url).partition("://")
        base = "idrac-redfish" if driver == "idrac" else "redfish"
        if interfaces.get("boot_interface") == "redfish-virtual-media" and base == "redfish":
            base = "redfish-virtualmedia"
        bmc = {"address": f"{base}+{transport}://{rest}{info.pop('redfish_system_id', '') or ''}"}
    for k in ("username", "password", "verify_ca"):
        if f"{pre}{k}" in info and (pre == "redfish_" or k != "verify_ca"):
            bmc[k] = info.pop(f"{pre}{k}")
            where[k] = at(f"{pre}{k}")
    return bmc, info, where


def _remap_driver_info(base: tuple, where: dict, mapping: dict) -> Remap:
    """Key paths of a node read from driver_info: ``bmc.x`` -> where it was read, the rest by ``mapping``
    (nodeforge field -> key in the file), else under ``base``."""
    def remap(kp: tuple) -> tuple:
        if kp[:1] == ("bmc",) and len(kp) > 1 and kp[1] in where:
            return where[kp[1]]
        if kp[:1] == ("interfaces",) and len(kp) > 1:
            return (*base, f"{str(kp[1]).removesuffix('_interface')}_interface")
        if kp[:1] and kp[0] in mapping:
            return (*base, *mapping[kp[0]])
        return (*base, *kp)
    return remap


def _node_from_ironic(reader: _Reader, item: Any, base: tuple, name: str, fields: Iterable[str],
                      driver_info: dict, mapping: dict, at: Callable[[str], tuple]) -> _Entry | None:
    """A node given in Ironic's terms (a validated python-ironicclient or Bifrost node) as a nodeforge node."""
    interfaces = {f"{i}_interface": getattr(item, f"{i}_interface") for i in _INTERFACES
                  if getattr(item, f"{i}_interface") is not None}
    got = _bmc_from_driver_info(reader, item.driver, driver_info, interfaces, name, at)
    if got is None:
        return None
    bmc, rest, where = got
    data = {k: getattr(item, k) for k in fields if getattr(item, k) is not None}
    data.update(name=name, bmc=bmc, interfaces=interfaces, driver_info=rest)
    return _Entry(data, _remap_driver_info(base, where, mapping), reader.location(base))


# --- python-ironicclient bulk -------------------------------------------------------------------

def _bulk_checks(reader: _Reader, data: dict) -> None:
    """What python-ironicclient refuses across a resource and what it is nested in (the
    declarations hold each resource alone): a nested resource's node_uuid, portgroup_uuid,
    chassis_uuid must be its parent's; chassis and port group keys unique."""
    def seq(x):
        return [(i, v) for i, v in enumerate(x) if isinstance(v, dict)] if isinstance(x, list) else []

    def same(a, b) -> bool:
        return str(a).lower() == str(b).lower()

    seen: dict[str, tuple] = {}
    nodes = [(("nodes", i), n, None) for i, n in seq(data.get("nodes"))]
    for ci, c in seq(data.get("chassis")):
        key = (f"uuid:{str(c['uuid']).lower()}" if c.get("uuid") is not None else
               f"description:{c['description']}" if isinstance(c.get("description"), str) else None)
        field = "uuid" if c.get("uuid") is not None else "description"
        if key is None or key == "description:":
            reader.problem(("chassis", ci), "a chassis needs a uuid or a description: Ironic chassis have no name, "
                                            "and nodeforge finds a chassis again by one of them (a re-run would "
                                            "make another)")
        elif key in seen:
            reader.problem(("chassis", ci, field), f"another chassis of this file has the same {field} "
                                                   f"(first at {schema.keypath_str(seen[key])})")
        elif key:
            seen[key] = ("chassis", ci)
        nodes += [(("chassis", ci, "nodes", i), n, c) for i, n in seq(c.get("nodes"))]
    for at, n, parent in nodes:
        if parent is not None and n.get("chassis_uuid") is not None and not same(n["chassis_uuid"], parent.get("uuid")):
            reader.problem((*at, "chassis_uuid"), "a node nested in a chassis takes that chassis "
                                                  "(python-ironicclient refuses a different chassis_uuid)")
        groups = seq(n.get("portgroups"))
        members = [((*at, "ports", i), p, None) for i, p in seq(n.get("ports"))] + \
            [((*at, "portgroups", gi, "ports", i), p, g) for gi, g in groups for i, p in seq(g.get("ports"))]
        for where, r, what in [((*at, "portgroups", gi), g, "port group") for gi, g in groups] + \
                [(w, p, "port") for w, p, _ in members]:
            if r.get("node_uuid") is not None and (n.get("uuid") is None or not same(r["node_uuid"], n["uuid"])):
                reader.problem((*where, "node_uuid"), f"a {what} nested in a node belongs to it (python-ironicclient "
                                                      "refuses a different node_uuid; give the node that uuid instead)")
        for where, p, g in members:
            if g is not None and p.get("portgroup_uuid") is not None and not same(p["portgroup_uuid"], g.get("uuid")):
                reader.problem((*where, "portgroup_uuid"), "a port nested in a port group belongs to it "
                                                           "(python-ironicclient refuses a different portgroup_uuid)")
        keys: dict[str, int] = {}
        for gi, g in groups:
            key = next((str(g[k]).lower() for k in ("name", "address", "uuid") if g.get(k) is not None), None)
            if key is None:
                reader.problem((*at, "portgroups", gi), "a port group needs a name, address or uuid: nodeforge "
                                                        "finds it again by one of them (a re-run would make another)")
            elif key in keys:
                reader.problem((*at, "portgroups", gi), f"same name/address as portgroups[{keys[key]}] of this node")
            elif key is not None:
                keys[key] = gi


_BULK_NODE_FIELDS = ("properties", "resource_class", "traits", "owner", "extra", "description")


def _bulk_entries(reader: _Reader, data: Any) -> list[_Entry] | None:
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {'list' if isinstance(data, list) else 'scalar'}"
        reader.problem((), f"a python-ironicclient resources file is a mapping with 'chassis' and/or 'nodes'; "
                           f"the file is {what}")
        return None
    bulk = reader.declared(data, BulkFile)
    _bulk_checks(reader, data)
    if bulk is None or reader.problems:
        return None
    if not bulk.nodes and not bulk.chassis:
        reader.problem((), "no nodes and no chassis: the file creates nothing")
        return None
    nodes = []
    for ci, c in enumerate(bulk.chassis):
        spec = ChassisSpec(f"uuid:{c.uuid}" if c.uuid else f"description:{c.description}",
                           reader.location(("chassis", ci)), c.description, dict(c.extra), c.uuid)
        reader.chassis.append(spec)
        nodes += [(("chassis", ci, "nodes", i), n, spec) for i, n in enumerate(c.nodes)]
    nodes += [(("nodes", i), n, None) for i, n in enumerate(bulk.nodes)]
    entries = []
    for at, n, chassis in nodes:
        entry = _node_from_ironic(reader, n, at, n.name, _BULK_NODE_FIELDS, n.driver_info,
                                  {"cleaning": ("automated_clean",), "macs": ("ports",)},
                                  lambda k, at=at: (*at, "driver_info", k) if k else (*at, "driver_info"))
        if entry is None:
            continue
        if n.automated_clean is not None:
            entry.data["cleaning"] = "automated" if n.automated_clean else "none"
        groups = [PortGroupSpec(g.name or g.address or g.uuid, reader.location((*at, "portgroups", gi)),
                                g.model_dump(exclude_none=True, exclude={"ports", "node_uuid"}))
                  for gi, g in enumerate(n.portgroups)]
        by_uuid = {g.fields["uuid"]: g.key for g in groups if "uuid" in g.fields}
        ports = []
        for where, p, group in [((*at, "ports", i), p, None) for i, p in enumerate(n.ports)] + \
                [((*at, "portgroups", gi, "ports", i), p, groups[gi].key)
                 for gi, g in enumerate(n.portgroups) for i, p in enumerate(g.ports)]:
            pg_uuid = p.portgroup_uuid if group is None and p.portgroup_uuid not in by_uuid else None
            ports.append(PortSpec(p.address, reader.location(where),
                                  p.model_dump(exclude_none=True, exclude={"address", "node_uuid", "portgroup_uuid"}),
                                  group or by_uuid.get(p.portgroup_uuid), pg_uuid))
        entry.data["macs"] = [p.address for p in ports]
        entry.bulk = {"chassis": chassis.key if chassis else None,
                      "chassis_uuid": n.chassis_uuid if chassis is None else None,
                      "ports": ports, "portgroups": groups,
                      "ironic": {k: getattr(n, k) for k in IC_NODE_PASSTHROUGH if getattr(n, k) is not None},
                      "ironic_newer": {k: getattr(n, k) for k in IC_NEWER_API["node"] if getattr(n, k) is not None}}
        entries.append(entry)
    return entries


# --- Bifrost JSON/YAML ------------------------------------------------------------------------

