"""Ironic behind one interface: :class:`Provisioner` (a Protocol), with the
openstacksdk implementation :class:`SdkProvisioner` and the in-memory
:class:`FakeProvisioner` for state-machine unit tests.

Nodes and ports travel as plain dicts in Ironic's JSON shape. Every write
goes through :meth:`_write`, which counts it (``writes``) so tests and the
benchmark can prove that a no-change run makes zero writes.

Errors: one :class:`IronicError` with a :class:`ErrorKind` read from the
status *and the body*: Ironic answers 409 both for NodeLocked (transient:
retried with capped, jittered backoff) and for duplicates (permanent: never
retried). Messages are scrubbed; request bodies are never put in errors.
"""

from __future__ import annotations

import enum
import json
import logging
import random
import threading
import time
import uuid as uuidlib
from typing import Any, Protocol

from nodeforge.errors import NodeforgeError
from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import ProvisionState as PS, Verb
from nodeforge.ironic.pacing import Pacer
from nodeforge.redact import scrub

log = logging.getLogger(__name__)

NODE_FIELDS = ["uuid", "name", "driver", "driver_info", "properties", "resource_class", "traits", "owner",
               "extra", "provision_state", "target_provision_state", "last_error", "maintenance",
               "maintenance_reason", "automated_clean", "power_state", "description",
               *(f"{i}_interface" for i in ("bios", "boot", "console", "deploy", "firmware", "inspect",
                                            "management", "network", "power", "raid", "rescue", "storage",
                                            "vendor"))]


class ErrorKind(str, enum.Enum):
    LOCKED = "locked"            # 409 NodeLocked: retry
    UNAVAILABLE = "unavailable"  # 503 no free conductor: retry
    DUPLICATE = "duplicate"      # 409 already exists: never retry
    CONFLICT = "conflict"        # other 409 (invalid state transition)
    NOT_FOUND = "not_found"
    INVALID = "invalid"          # 400
    AUTH = "auth"                # 401/403
    NETWORK = "network"
    OTHER = "other"

    @property
    def retriable(self) -> bool:
        return self in (ErrorKind.LOCKED, ErrorKind.UNAVAILABLE, ErrorKind.NETWORK)


class IronicError(NodeforgeError):
    message = "Ironic {operation} failed ({status}): {detail}"

    def __init__(self, *, operation: str, status: int | None, kind: ErrorKind, detail: str):
        self.status = status
        self.kind = kind
        self.detail = scrub(detail)
        super().__init__(operation=operation, status=status or kind.value, detail=self.detail)


def classify(status: int, body: str) -> tuple[ErrorKind, str]:
    """ErrorKind and the human message (``faultstring``) of an Ironic error answer."""
    detail = body
    try:
        data = json.loads(body)
        inner = data.get("error_message", data)
        if isinstance(inner, str):
            inner = json.loads(inner)
        detail = inner.get("faultstring") or body
    except (ValueError, AttributeError, TypeError):
        pass
    low = detail.lower()
    if status == 409:
        if any(m in low for m in C.DUPLICATE_MARKERS):
            return ErrorKind.DUPLICATE, detail
        if any(m in low for m in C.LOCKED_MARKERS):
            return ErrorKind.LOCKED, detail
        return ErrorKind.CONFLICT, detail
    if status == 503:
        return ErrorKind.UNAVAILABLE, detail
    if status == 404:
        return ErrorKind.NOT_FOUND, detail
    if status in (401, 403):
        return ErrorKind.AUTH, detail
    if status == 400:
        return ErrorKind.INVALID, detail
    return ErrorKind.OTHER, detail


class RetryPolicy:
    """Capped exponential backoff with jitter for LOCKED/UNAVAILABLE answers."""

    def __init__(self, attempts: int = 6, base: float = 0.25, cap: float = 4.0):
        self.attempts, self.base, self.cap = attempts, base, cap

    def delay(self, attempt: int) -> float:
        return min(self.cap, self.base * 2 ** attempt) * (0.5 + random.random() / 2)


class Provisioner(Protocol):
    writes: int
    retries: int
    retried: dict[str, int]   # answers retried, by HTTP status ("409", "503") or "network"

    def list_nodes(self, fields: list[str] | None = None) -> list[dict]: ...
    def list_ports(self) -> list[dict]: ...
    def get_node(self, ident: str) -> dict: ...
    def get_inventory(self, ident: str) -> dict | None: ...
    def create_node(self, body: dict) -> dict: ...
    def patch_node(self, ident: str, patch: list[dict]) -> dict: ...
    def set_traits(self, ident: str, traits: list[str]) -> None: ...
    def create_port(self, node_uuid: str, mac: str) -> dict: ...
    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps: list[dict] | None = None,
                            disable_ramdisk: bool | None = None) -> None: ...
    def set_maintenance(self, ident: str, reason: str | None) -> None: ...
    def delete_node(self, ident: str) -> None: ...
    # python-ironicclient bulk format: chassis, port groups, ports with their fields.
    def list_chassis(self) -> list[dict]: ...
    def create_chassis(self, body: dict) -> dict: ...
    def patch_chassis(self, ident: str, patch: list[dict]) -> dict: ...
    def list_portgroups(self, microversion: str | None = None) -> list[dict]: ...
    def create_portgroup(self, body: dict, microversion: str | None = None) -> dict: ...
    def patch_portgroup(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict: ...
    def create_port_body(self, body: dict, microversion: str | None = None) -> dict: ...
    def patch_port(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict: ...
    # Fields of a newer Ironic API than C.API_VERSION (inventory.IC_NEWER_API), read and written at it.
    def list_nodes_at(self, microversion: str) -> list[dict]: ...
    def list_ports_at(self, microversion: str) -> list[dict]: ...
    def patch_node_at(self, ident: str, patch: list[dict], microversion: str) -> dict: ...


class SdkProvisioner:
    """Ironic's REST API through an openstacksdk connection (its baremetal
    adapter: auth, endpoint, TLS from clouds.yaml); nodeforge's own retries."""

    def __init__(self, conn, *, retry: RetryPolicy | None = None, api_version: str = C.API_VERSION,
                 pacer: Pacer | None = None):
        self.conn = conn
        self.adapter = conn.baremetal
        self.retry = retry or RetryPolicy()
        self.version = api_version
        self.writes = 0
        self.retries = 0
        self.retried: dict[str, int] = {}
        self._lock = threading.Lock()
        # Adaptive pacing (nodeforge/ironic/pacing.py): every request waits for a slot;
        # every answer (latency, status) is reported to it. None: unpaced.
        self.pacer = pacer

    # -- transport
    def _call(self, method: str, url: str, operation: str, *, json_body: Any = None, write: bool = False,
              microversion: str | None = None):
        from keystoneauth1 import exceptions as ks_exc

        attempt = 0
        while True:
            if write:
                with self._lock:
                    self.writes += 1
            pacer = self.pacer
            if pacer is not None:
                pacer.acquire(wait=write)       # a read goes ahead of queued writes
            started, status = time.monotonic(), None
            try:
                resp = self.adapter.request(url, method, json=json_body, microversion=microversion or self.version,
                                            raise_exc=False, status_code_retries=0, connect_retries=2)
            except ks_exc.ConnectionError as exc:
                kind, detail, status = ErrorKind.NETWORK, type(exc).__name__, None
            else:
                status = resp.status_code
            finally:
                if pacer is not None:
                    pacer.release()
            latency = time.monotonic() - started
            if status is not None:
                if status < 400:
                    if pacer is not None:
                        pacer.record(status, latency, listing=not write)
                    return resp.json() if resp.content else None
                kind, detail = classify(status, resp.text)
            if pacer is not None:
                # Only NodeLocked among the 409s says "busy" (a duplicate or a wrong state does not).
                seen = "409-conflict" if status == 409 and kind is not ErrorKind.LOCKED else status
                pacer.record(seen, latency, listing=not write)
            if kind.retriable and attempt + 1 < self.retry.attempts:
                delay = self.retry.delay(attempt)
                log.info("%s: %s (%s); retrying in %.1fs", operation, kind.value, scrub(detail), delay)
                with self._lock:
                    self.retries += 1
                    key = str(status) if status else kind.value
                    self.retried[key] = self.retried.get(key, 0) + 1
                time.sleep(delay)
                attempt += 1
                continue
            raise IronicError(operation=operation, status=status, kind=kind, detail=detail)

    def _paged(self, url: str, key: str) -> list[dict]:
        out: list[dict] = []
        while url:
            data = self._call("GET", url, f"list {key}")
            out.extend(data.get(key, []))
            nxt = data.get("next")
            url = nxt.split("/v1", 1)[1] if nxt else None
        return out

    # -- reads
    def list_nodes(self, fields: list[str] | None = None) -> list[dict]:
        """Every node; with ``fields`` only those (a much cheaper listing for polls)."""
        if fields:
            return self._paged(f"/nodes?fields={','.join(fields)}&limit={C.PAGE_LIMIT}", "nodes")
        return self._paged(f"/nodes/detail?limit={C.PAGE_LIMIT}", "nodes")

    def list_ports(self) -> list[dict]:
        return self._paged(f"/ports/detail?limit={C.PAGE_LIMIT}", "ports")

    def get_node(self, ident: str) -> dict:
        return self._call("GET", f"/nodes/{ident}", "get node")

    def get_inventory(self, ident: str) -> dict | None:
        """Stored inspection data (``{"inventory": ..., "plugin_data": ...}``),
        or None when the node was never inspected (API 1.81)."""
        try:
            return self._call("GET", f"/nodes/{ident}/inventory", f"get inventory of {ident}",
                              microversion=C.INVENTORY_API_VERSION)
        except IronicError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return None
            raise

    # -- writes
    def create_node(self, body: dict) -> dict:
        return self._call("POST", "/nodes", f"create node {body.get('name')}", json_body=body, write=True)

    def patch_node(self, ident: str, patch: list[dict]) -> dict:
        return self._call("PATCH", f"/nodes/{ident}", f"update node {ident}", json_body=patch, write=True)

    def set_traits(self, ident: str, traits: list[str]) -> None:
        self._call("PUT", f"/nodes/{ident}/traits", f"set traits of {ident}", json_body={"traits": traits},
                   write=True)

    def create_port(self, node_uuid: str, mac: str) -> dict:
        return self._call("POST", "/ports", f"create port {mac}", json_body={"node_uuid": node_uuid, "address": mac},
                          write=True)

    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps=None, disable_ramdisk=None) -> None:
        body: dict[str, Any] = {"target": verb.value}
        if clean_steps is not None:
            body["clean_steps"] = clean_steps
        if disable_ramdisk is not None:
            body["disable_ramdisk"] = disable_ramdisk
        self._call("PUT", f"/nodes/{ident}/states/provision", f"{verb.value} {ident}", json_body=body, write=True)

    def set_maintenance(self, ident: str, reason: str | None) -> None:
        if reason is None:
            self._call("DELETE", f"/nodes/{ident}/maintenance", f"unset maintenance {ident}", write=True)
        else:
            self._call("PUT", f"/nodes/{ident}/maintenance", f"set maintenance {ident}",
                       json_body={"reason": scrub(reason)}, write=True)

    def delete_node(self, ident: str) -> None:
        self._call("DELETE", f"/nodes/{ident}", f"delete node {ident}", write=True)

    # -- python-ironicclient bulk format: chassis, port groups, ports with their fields
    def list_chassis(self) -> list[dict]:
        return self._paged(f"/chassis/detail?limit={C.PAGE_LIMIT}", "chassis")

    def create_chassis(self, body: dict) -> dict:
        return self._call("POST", "/chassis", f"create chassis {body.get('description') or body.get('uuid')!r}",
                          json_body=body, write=True)

    def patch_chassis(self, ident: str, patch: list[dict]) -> dict:
        return self._call("PATCH", f"/chassis/{ident}", f"update chassis {ident}", json_body=patch, write=True)

    def list_portgroups(self, microversion: str | None = None) -> list[dict]:
        return self._paged_at(f"/portgroups/detail?limit={C.PAGE_LIMIT}", "portgroups", microversion)

    def create_portgroup(self, body: dict, microversion: str | None = None) -> dict:
        return self._call("POST", "/portgroups", f"create port group {body.get('name') or body.get('address')}",
                          json_body=body, write=True, microversion=microversion)

    def patch_portgroup(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        return self._call("PATCH", f"/portgroups/{ident}", f"update port group {ident}", json_body=patch,
                          write=True, microversion=microversion)

    def create_port_body(self, body: dict, microversion: str | None = None) -> dict:
        """A port with every field of ``body`` (pxe_enabled, local_link_connection, portgroup_uuid, ...)."""
        return self._call("POST", "/ports", f"create port {body.get('address')}", json_body=body, write=True,
                          microversion=microversion)

    def patch_port(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        return self._call("PATCH", f"/ports/{ident}", f"update port {ident}", json_body=patch, write=True,
                          microversion=microversion)

    def list_nodes_at(self, microversion: str) -> list[dict]:
        return self._paged_at(f"/nodes/detail?limit={C.PAGE_LIMIT}", "nodes", microversion)

    def list_ports_at(self, microversion: str) -> list[dict]:
        return self._paged_at(f"/ports/detail?limit={C.PAGE_LIMIT}", "ports", microversion)

    def patch_node_at(self, ident: str, patch: list[dict], microversion: str) -> dict:
        return self._call("PATCH", f"/nodes/{ident}", f"update node {ident}", json_body=patch, write=True,
                          microversion=microversion)

    def _paged_at(self, url: str, key: str, microversion: str | None) -> list[dict]:
        out: list[dict] = []
        while url:
            data = self._call("GET", url, f"list {key}", microversion=microversion)
            out.extend(data.get(key, []))
            nxt = data.get("next")
            url = nxt.split("/v1", 1)[1] if nxt else None
        return out


# ------------------------------------------------------------------------------ fake

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
        self.writes = 0
        self.retries = 0
        self.retried: dict[str, int] = {}
        self._locked: dict[tuple[str, Verb], int] = {}

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
