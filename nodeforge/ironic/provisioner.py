"""Ironic behind one interface: :class:`Provisioner` (a Protocol), with the
openstacksdk implementation :class:`SdkProvisioner` (the in-memory double
for state-machine unit tests is ``tests/support/ironic.py``).

Nodes and ports travel as plain dicts in Ironic's JSON shape. Every write
attempt is counted (``writes``) so tests and the benchmark can prove that a
no-change run makes zero writes.

Calls, paging, error mapping and retries are :mod:`nodeforge.transport`'s:
one :class:`IronicError` with an :class:`ErrorKind` read from the status
*and the body*: Ironic answers 409 both for NodeLocked (transient: retried
by the API retry policy, capped jittered backoff) and for duplicates
(permanent: never retried). Messages are scrubbed; request bodies are never
put in errors. The adaptive pacing (:mod:`nodeforge.ironic.pacing`) sees
every attempt: a slot before it, status (409 NodeLocked, 503, network) and
latency after it.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from nodeforge import transport as T
from nodeforge.errors import NodeforgeError
from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import Verb
from nodeforge.ironic.pacing import Pacer
from nodeforge.redact import scrub
from nodeforge.transport import ErrorKind, RetryPolicy


NODE_FIELDS = ["uuid", "name", "driver", "driver_info", "properties", "resource_class", "traits", "owner",
               "extra", "provision_state", "target_provision_state", "last_error", "maintenance",
               "maintenance_reason", "automated_clean", "power_state", "description",
               *(f"{i}_interface" for i in ("bios", "boot", "console", "deploy", "firmware", "inspect",
                                            "management", "network", "power", "raid", "rescue", "storage",
                                            "vendor"))]


# ErrorKind and RetryPolicy are the transport's (re-exported here: callers read exc.kind).
__all__ = ["ErrorKind", "IronicError", "Provisioner", "RetryPolicy", "SdkProvisioner", "classify"]


class IronicError(NodeforgeError):
    message = "Ironic {operation} failed ({status}): {detail}"

    def __init__(self, *, operation: str, status: int | None, kind: ErrorKind, detail: str):
        self.status = status
        self.kind = kind
        self.detail = scrub(detail)
        super().__init__(operation=operation, status=status or kind.value, detail=self.detail)


# 409 bodies that say what the conflict is: a duplicate (never retried) or NodeLocked (retried).
MARKERS = {ErrorKind.DUPLICATE: C.DUPLICATE_MARKERS, ErrorKind.LOCKED: C.LOCKED_MARKERS}


def classify(status: int, body: str) -> tuple[ErrorKind, str]:
    """ErrorKind and the human message (``faultstring``) of an Ironic error answer."""
    failure = T.classify(status, body, markers=MARKERS)
    return failure.kind, failure.detail


def _error(failure: T.Failure, what: str) -> IronicError:
    return IronicError(operation=what, status=failure.status, kind=failure.kind, detail=failure.detail)


class Provisioner(Protocol):
    writes: int
    retries: int
    retried: dict[str, int]   # answers retried, by HTTP status ("409", "503") or "network"

    def list_nodes(self, fields: list[str] | None = None) -> list[dict]: ...
    def list_ports(self) -> list[dict]: ...
    def get_node(self, ident: str) -> dict: ...
    def get_inventory(self, ident: str) -> dict | None: ...
    def node_history(self, ident: str) -> list[dict]: ...
    def get_bios(self, ident: str) -> list[dict]: ...
    def get_firmware(self, ident: str) -> list[dict]: ...
    def create_node(self, body: dict) -> dict: ...
    def patch_node(self, ident: str, patch: list[dict]) -> dict: ...
    def set_traits(self, ident: str, traits: list[str]) -> None: ...
    def create_port(self, node_uuid: str, mac: str) -> dict: ...
    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps: list[dict] | None = None,
                            disable_ramdisk: bool | None = None, configdrive: dict | None = None) -> None: ...
    # Allocations (API 1.52): a node taken in someone's name for a resource class.
    def list_allocations(self, resource_class: str | None = None) -> list[dict]: ...
    def get_allocation(self, ident: str) -> dict | None: ...
    def create_allocation(self, body: dict) -> dict: ...
    def delete_allocation(self, ident: str) -> None: ...
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
              microversion: str | None = None, missing_ok: bool = False):
        # idempotent=True: a create that got no answer is sent again, as before the transport: Ironic
        # refuses a second node of the same name or a port of the same address (409), which
        # enrollment matches by name and address on its next listing.
        resp = T.request(self.adapter, method, url, what=operation, error=_error, retry=self.retry,
                         observer=_Attempts(self, write), on_retry=self._retried, markers=MARKERS,
                         missing_ok=missing_ok, idempotent=True, json=json_body,
                         microversion=microversion or self.version)
        return T.json_of(resp)

    def _retried(self, failure: T.Failure, delay: float) -> None:
        with self._lock:
            self.retries += 1
            self.retried[failure.key] = self.retried.get(failure.key, 0) + 1

    def _paged(self, url: str, key: str, microversion: str | None = None) -> list[dict]:
        return T.paged(self.adapter, url, key, what=f"list {key}", error=_error, retry=self.retry,
                       observer=_Attempts(self, False), on_retry=self._retried, markers=MARKERS,
                       microversion=microversion or self.version)

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
        return self._call("GET", f"/nodes/{ident}/inventory", f"get inventory of {ident}",
                          microversion=C.INVENTORY_API_VERSION, missing_ok=True)

    def node_history(self, ident: str) -> list[dict]:
        """The node's history events, oldest first (API 1.78, detailed: ``created_at``, ``severity``,
        ``event_type``, ``event``, ``conductor``, ``user``)."""
        return self._paged(f"/nodes/{ident}/history?detail=True&limit={C.PAGE_LIMIT}", "history",
                           microversion=C.HISTORY_API_VERSION)

    def get_bios(self, ident: str) -> list[dict]:
        """The BIOS settings Ironic cached (at verify, cleaning, servicing), each with its registry
        fields (``allowable_values``, ``read_only``, ``lower_bound``... API 1.74)."""
        data = self._call("GET", f"/nodes/{ident}/bios?detail=True", f"get BIOS settings of {ident}",
                          microversion=C.BIOS_API_VERSION)
        return list((data or {}).get("bios") or [])

    def get_firmware(self, ident: str) -> list[dict]:
        """The firmware components Ironic cached (``component``, ``current_version``... API 1.86)."""
        data = self._call("GET", f"/nodes/{ident}/firmware", f"get firmware of {ident}",
                          microversion=C.FIRMWARE_API_VERSION)
        return list((data or {}).get("firmware") or [])

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

    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps=None, disable_ramdisk=None,
                            configdrive=None) -> None:
        body: dict[str, Any] = {"target": verb.value}
        if configdrive is not None:     # Ironic's JSON config drive (API 1.56): it builds the ISO
            body["configdrive"] = configdrive
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

    # -- allocations
    def list_allocations(self, resource_class: str | None = None) -> list[dict]:
        query = f"?resource_class={resource_class}" if resource_class else ""
        return self._paged(f"/allocations{query}", "allocations")

    def get_allocation(self, ident: str) -> dict | None:
        """The allocation named or numbered ``ident``, or None."""
        return self._call("GET", f"/allocations/{ident}", f"get allocation {ident}", missing_ok=True)

    def create_allocation(self, body: dict) -> dict:
        return self._call("POST", "/allocations", f"create allocation {body.get('name')}", json_body=body,
                          write=True)

    def delete_allocation(self, ident: str) -> None:
        self._call("DELETE", f"/allocations/{ident}", f"delete allocation {ident}", write=True, missing_ok=True)

    # -- python-ironicclient bulk format: chassis, port groups, ports with their fields
    def list_chassis(self) -> list[dict]:
        return self._paged(f"/chassis/detail?limit={C.PAGE_LIMIT}", "chassis")

    def create_chassis(self, body: dict) -> dict:
        return self._call("POST", "/chassis", f"create chassis {body.get('description') or body.get('uuid')!r}",
                          json_body=body, write=True)

    def patch_chassis(self, ident: str, patch: list[dict]) -> dict:
        return self._call("PATCH", f"/chassis/{ident}", f"update chassis {ident}", json_body=patch, write=True)

    def list_portgroups(self, microversion: str | None = None) -> list[dict]:
        return self._paged(f"/portgroups/detail?limit={C.PAGE_LIMIT}", "portgroups", microversion)

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
        return self._paged(f"/nodes/detail?limit={C.PAGE_LIMIT}", "nodes", microversion)

    def list_ports_at(self, microversion: str) -> list[dict]:
        return self._paged(f"/ports/detail?limit={C.PAGE_LIMIT}", "ports", microversion)

    def patch_node_at(self, ident: str, patch: list[dict], microversion: str) -> dict:
        return self._call("PATCH", f"/nodes/{ident}", f"update node {ident}", json_body=patch, write=True,
                          microversion=microversion)


class _Attempts:
    """Every attempt of one call, seen by the provisioner: writes counted, and the pacer's
    slot taken before it and given back after it, with the answer's status and latency."""

    __slots__ = ("prov", "write")

    def __init__(self, prov: SdkProvisioner, write: bool):
        self.prov, self.write = prov, write

    def begin(self) -> None:
        if self.write:
            with self.prov._lock:
                self.prov.writes += 1
        if self.prov.pacer is not None:
            self.prov.pacer.acquire(wait=self.write)     # a read goes ahead of queued writes

    def end(self, status: int | None, failure: T.Failure | None, latency: float) -> None:
        pacer = self.prov.pacer
        if pacer is None:
            return
        pacer.release()
        if failure is None and status is None:
            return                                       # no answer at all: not a signal
        if failure is None:
            seen = status
        elif failure.kind in (ErrorKind.DUPLICATE, ErrorKind.CONFLICT):
            seen = "409-conflict"      # only NodeLocked among the 409s says "busy"
        else:
            seen = failure.status      # 409 NodeLocked, 503, ...; None: network
        pacer.record(seen, latency, listing=not self.write)
