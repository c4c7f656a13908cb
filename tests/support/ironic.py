"""An in-memory Ironic for state-machine unit tests (was ``nodeforge.ironic.provisioner.FakeProvisioner``).

It implements :class:`nodeforge.ironic.provisioner.Provisioner` over dicts;
the product code only ever talks to the real Ironic (``SdkProvisioner``).
"""

from __future__ import annotations

import json
import uuid as uuidlib

from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import ProvisionState as PS, Verb
from nodeforge.ironic.provisioner import NODE_FIELDS, ErrorKind, IronicError


class FakeProvisioner:
    """In-memory Ironic for state-machine unit tests.

    ``behaviour[name][verb]`` scripts what a verb does: ``"ok"`` (default),
    ``"fail:<message>"`` (ends in the verb's failure state), ``"hang"`` (stays
    transient), ``"locked:N"`` (the first N calls answer LOCKED). A verb moves
    the node to its transient state; the next read lands it."""

    TRANSIENT = {Verb.MANAGE: PS.VERIFYING, Verb.INSPECT: PS.INSPECTING, Verb.CLEAN: PS.CLEANING,
                 Verb.PROVIDE: PS.CLEANING}
    FAILED = {Verb.MANAGE: PS.ENROLL, Verb.INSPECT: PS.INSPECT_FAILED, Verb.CLEAN: PS.CLEAN_FAILED,
              Verb.PROVIDE: PS.CLEAN_FAILED}

    def __init__(self, behaviour: dict | None = None):
        self.behaviour = behaviour or {}
        self.nodes: dict[str, dict] = {}
        self.ports: dict[str, dict] = {}
        self.pending: dict[str, Verb] = {}
        self.calls: list[tuple[str, str]] = []
        self.inventories: dict[str, dict] = {}   # node name -> stored inspection data
        self.history: dict[str, list[dict]] = {}  # node uuid -> its events, as Ironic records failures
        self.writes = 0
        self.retries = 0
        self.retried: dict[str, int] = {}
        self._locked: dict[tuple[str, Verb], int] = {}
        self.cleanings: list[tuple[str, list | None, bool | None]] = []   # (node, clean_steps, disable_ramdisk)

    def _node(self, ident: str) -> dict:
        for n in self.nodes.values():
            if ident in (n["uuid"], n["name"]):
                return n
        raise IronicError(operation="get node", status=404, kind=ErrorKind.NOT_FOUND, detail=f"node {ident} not found")

    def _land(self, n: dict) -> None:
        verb = self.pending.get(n["uuid"])
        if verb is None:
            return
        mode = self.behaviour.get(n["name"], {}).get(verb.value, "ok")
        if mode == "hang":
            return
        del self.pending[n["uuid"]]
        n["target_provision_state"] = None
        if mode.startswith("fail:"):
            n["provision_state"] = self.FAILED[verb].value
            n["last_error"] = mode[5:]
            self.history.setdefault(n["uuid"], []).append(
                {"uuid": f"ev-{len(self.calls)}", "created_at": "2026-12-04T00:00:00+00:00", "severity": "ERROR",
                 "event_type": verb.value, "event": mode[5:], "conductor": "fake", "user": None})
        else:
            n["provision_state"] = C.EXPECTED_STATE[verb].value
            n["last_error"] = None

    def list_nodes(self, fields: list[str] | None = None) -> list[dict]:
        for n in self.nodes.values():
            self._land(n)
        nodes = [json.loads(json.dumps(n)) for n in self.nodes.values()]
        return [{k: n.get(k) for k in fields} for n in nodes] if fields else nodes

    def list_ports(self) -> list[dict]:
        return [dict(p) for p in self.ports.values()]

    def get_node(self, ident: str) -> dict:
        n = self._node(ident)
        self._land(n)
        return json.loads(json.dumps(n))

    def get_inventory(self, ident: str) -> dict | None:
        return self.inventories.get(self._node(ident)["name"])

    def node_history(self, ident: str) -> list[dict]:
        return [dict(e) for e in self.history.get(self._node(ident)["uuid"], [])]

    def _write(self, what: str, ident: str) -> None:
        self.writes += 1
        self.calls.append((what, ident))

    def create_node(self, body: dict) -> dict:
        self._write("create_node", body.get("name"))
        if any(n["name"] == body.get("name") for n in self.nodes.values()):
            raise IronicError(operation="create node", status=409, kind=ErrorKind.DUPLICATE,
                              detail=f"A node with name {body.get('name')} already exists.")
        n = {f: None for f in NODE_FIELDS}
        n.update({"extra": {}, "properties": {}, "driver_info": {}, "traits": [], "maintenance": False})
        n.update(json.loads(json.dumps(body)))
        n["uuid"] = str(uuidlib.uuid4())
        n["provision_state"] = PS.ENROLL.value
        for k in n["driver_info"]:
            if k in C.SECRET_DRIVER_INFO_KEYS:
                n["driver_info"][k] = "******"
        self.nodes[n["uuid"]] = n
        return dict(n)

    def patch_node(self, ident: str, patch: list[dict]) -> dict:
        self._write("patch_node", ident)
        n = self._node(ident)
        for op in patch:
            parts = op["path"].strip("/").split("/")
            target = n
            for p in parts[:-1]:
                target = target.setdefault(p, {})
            if op["op"] == "remove":
                target.pop(parts[-1], None)
            else:
                value = op["value"]
                if parts[0] == "driver_info" and parts[-1] in C.SECRET_DRIVER_INFO_KEYS:
                    value = "******"
                target[parts[-1]] = value
        return dict(n)

    def set_traits(self, ident: str, traits: list[str]) -> None:
        self._write("set_traits", ident)
        self._node(ident)["traits"] = list(traits)

    def set_target_raid_config(self, ident: str, config: dict) -> None:
        self._write("set_target_raid_config", ident)
        self._node(ident)["target_raid_config"] = dict(config)

    def create_port(self, node_uuid: str, mac: str) -> dict:
        self._write("create_port", mac)
        if any(p["address"] == mac for p in self.ports.values()):
            raise IronicError(operation="create port", status=409, kind=ErrorKind.DUPLICATE,
                              detail=f"A port with MAC address {mac} already exists.")
        p = {"uuid": str(uuidlib.uuid4()), "address": mac, "node_uuid": node_uuid}
        self.ports[p["uuid"]] = p
        return dict(p)

    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps=None, disable_ramdisk=None) -> None:
        n = self._node(ident)
        self._write(f"provision:{verb.value}", n["name"])
        if verb is Verb.CLEAN:
            self.cleanings.append((n["name"], clean_steps, disable_ramdisk))
        mode = self.behaviour.get(n["name"], {}).get(verb.value, "ok")
        if mode.startswith("locked:"):
            left = self._locked.setdefault((n["uuid"], verb), int(mode.split(":")[1]))
            if left > 0:
                self._locked[(n["uuid"], verb)] = left - 1
                raise IronicError(operation=verb.value, status=409, kind=ErrorKind.LOCKED,
                                  detail=f"Node {n['uuid']} is locked by host fake, please retry after the "
                                         "current operation is completed.")
        if verb is Verb.ABORT:
            self.pending.pop(n["uuid"], None)
            n["provision_state"] = {PS.CLEAN_WAIT.value: PS.CLEAN_FAILED.value,
                                    PS.CLEANING.value: PS.CLEAN_FAILED.value,
                                    PS.INSPECT_WAIT.value: PS.INSPECT_FAILED.value,
                                    PS.INSPECTING.value: PS.INSPECT_FAILED.value}.get(n["provision_state"],
                                                                                       n["provision_state"])
            return
        if verb is Verb.MANAGE and n["provision_state"] in (PS.CLEAN_FAILED.value, PS.INSPECT_FAILED.value):
            n["provision_state"] = PS.MANAGEABLE.value
            return
        if verb is Verb.PROVIDE and n.get("automated_clean") is False:
            n["provision_state"] = PS.AVAILABLE.value
            return
        n["provision_state"] = self.TRANSIENT[verb].value
        n["target_provision_state"] = C.EXPECTED_STATE[verb].value
        self.pending[n["uuid"]] = verb

    def set_maintenance(self, ident: str, reason: str | None) -> None:
        self._write("maintenance", ident)
        n = self._node(ident)
        n["maintenance"] = reason is not None
        n["maintenance_reason"] = reason

    def delete_node(self, ident: str) -> None:
        self._write("delete_node", ident)
        n = self._node(ident)
        del self.nodes[n["uuid"]]
        for k in [k for k, p in self.ports.items() if p["node_uuid"] == n["uuid"]]:
            del self.ports[k]

    # -- python-ironicclient bulk format (in memory)
    def _store(self, name: str) -> dict:
        return self.__dict__.setdefault(f"_{name}", {})

    @staticmethod
    def _apply_patch(obj: dict, patch: list[dict]) -> None:
        for op in patch:
            parts = op["path"].strip("/").split("/")
            target = obj
            for p in parts[:-1]:
                target = target.setdefault(p, {})
            if op["op"] == "remove":
                target.pop(parts[-1], None)
            else:
                target[parts[-1]] = json.loads(json.dumps(op["value"]))

    def list_chassis(self) -> list[dict]:
        return [json.loads(json.dumps(c)) for c in self._store("chassis").values()]

    def create_chassis(self, body: dict) -> dict:
        self._write("create_chassis", body.get("description") or body.get("uuid"))
        c = {"uuid": str(uuidlib.uuid4()), "description": None, "extra": {}, **json.loads(json.dumps(body))}
        self._store("chassis")[c["uuid"]] = c
        return dict(c)

    def patch_chassis(self, ident: str, patch: list[dict]) -> dict:
        self._write("patch_chassis", ident)
        c = self._store("chassis")[ident]
        self._apply_patch(c, patch)
        return dict(c)

    def list_portgroups(self, microversion: str | None = None) -> list[dict]:
        return [json.loads(json.dumps(g)) for g in self._store("portgroups").values()]

    def create_portgroup(self, body: dict, microversion: str | None = None) -> dict:
        self._write("create_portgroup", body.get("name") or body.get("address"))
        groups = self._store("portgroups")
        for k in ("name", "address"):
            if body.get(k) and any(g.get(k) == body[k] for g in groups.values()):
                raise IronicError(operation="create port group", status=409, kind=ErrorKind.DUPLICATE,
                                  detail=f"A port group with {k} {body[k]} already exists.")
        g = {"uuid": str(uuidlib.uuid4()), "name": None, "address": None, "mode": "active-backup",
             "properties": {}, "extra": {}, "standalone_ports_supported": True, **json.loads(json.dumps(body))}
        groups[g["uuid"]] = g
        return dict(g)

    def patch_portgroup(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        self._write("patch_portgroup", ident)
        g = self._store("portgroups")[ident]
        self._apply_patch(g, patch)
        return dict(g)

    def create_port_body(self, body: dict, microversion: str | None = None) -> dict:
        self._write("create_port", body.get("address"))
        if any(p["address"] == body.get("address") for p in self.ports.values()):
            raise IronicError(operation="create port", status=409, kind=ErrorKind.DUPLICATE,
                              detail=f"A port with MAC address {body.get('address')} already exists.")
        p = {"uuid": str(uuidlib.uuid4()), "pxe_enabled": True, "local_link_connection": {}, "extra": {},
             "physical_network": None, "portgroup_uuid": None, "is_smartnic": False,
             **json.loads(json.dumps(body))}
        self.ports[p["uuid"]] = p
        return dict(p)

    def patch_port(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        self._write("patch_port", ident)
        p = self.ports[ident]
        self._apply_patch(p, patch)
        return dict(p)

    def list_nodes_at(self, microversion: str) -> list[dict]:
        return self.list_nodes()

    def list_ports_at(self, microversion: str) -> list[dict]:
        return self.list_ports()

    def patch_node_at(self, ident: str, patch: list[dict], microversion: str) -> dict:
        return self.patch_node(ident, patch)
