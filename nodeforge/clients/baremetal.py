"""Ironic (the bare-metal service): nodes, ports, chassis, port groups, allocations, provision
states and maintenance, and what Ironic keeps of a node (inspection inventory, history, BIOS
settings, firmware), over :mod:`nodeforge.transport` (its retry policy and status mapping;
Ironic's message in :class:`IronicError`).

Every call sends baremetal microversion :data:`API_VERSION` (1.70) unless it needs a newer one
(the inventory, history, BIOS and firmware reads; the bulk format's fields of a newer API, read
and written at the version they need). Listings page by Ironic's ``next`` link,
:data:`PAGE_LIMIT` items a page.

Ironic answers 409 both for NodeLocked (transient: retried by the API retry policy) and for a
duplicate (permanent: never retried); :data:`MARKERS` tells them apart by the body. Messages
are scrubbed; request bodies are never put in errors. A create that got no answer is sent again
(``idempotent=True``): Ironic refuses a second node of the same name or a port of the same
address (409), which enrollment matches by name and address on its next listing.

:class:`BaremetalClient` holds one connection's settings (retry policy, microversion); every
attempt of a call is shown to :meth:`BaremetalClient.observer`, every retry to
:meth:`BaremetalClient.on_retry`. Both do nothing here: the provisioner
(:class:`nodeforge.ironic.provisioner.SdkProvisioner`) counts writes and retries and paces
through them. Nodes and ports travel as plain dicts in Ironic's JSON shape.
"""

from __future__ import annotations

from typing import Any

from nodeforge import transport
from nodeforge.errors import NodeforgeError
from nodeforge.redact import scrub
from nodeforge.transport import ErrorKind, RetryPolicy

# 1.70: manual cleaning with ``disable_ramdisk`` (cleaning without an agent).
# 1.47 brought ``automated_clean`` per node; 1.37 traits; 1.50 owner.
API_VERSION = "1.70"
# 1.81: GET /nodes/{node}/inventory (stored inspection data).
INVENTORY_API_VERSION = "1.81"
# Node history (the conductor's record of a node's errors and events): API 1.78.
HISTORY_API_VERSION = "1.78"
# GET /nodes/{node}/bios?detail=True (each setting with its registry fields): API 1.74.
BIOS_API_VERSION = "1.74"
# GET /nodes/{node}/firmware (the firmware components Ironic cached): API 1.86.
FIRMWARE_API_VERSION = "1.86"

# Ironic lists at most this many items per page (``[api] max_limit``).
PAGE_LIMIT = 1000

# 409 bodies that are *not* transient: retrying cannot help.
DUPLICATE_MARKERS = ("already exists",)
# 409 bodies that are transient (NodeLocked; "node is busy" from some versions).
LOCKED_MARKERS = ("is locked by host", "please retry after the current operation",
                  "locked")
# 409 bodies that say what the conflict is: a duplicate (never retried) or NodeLocked (retried).
MARKERS = {ErrorKind.DUPLICATE: DUPLICATE_MARKERS, ErrorKind.LOCKED: LOCKED_MARKERS}

# The fields of a node as Ironic shows it at API_VERSION.
NODE_FIELDS = ["uuid", "name", "driver", "driver_info", "properties", "resource_class", "traits", "owner",
               "extra", "provision_state", "target_provision_state", "last_error", "maintenance",
               "maintenance_reason", "automated_clean", "power_state", "description",
               *(f"{i}_interface" for i in ("bios", "boot", "console", "deploy", "firmware", "inspect",
                                            "management", "network", "power", "raid", "rescue", "storage",
                                            "vendor"))]


class IronicError(NodeforgeError):
    message = "Ironic {operation} failed ({status}): {detail}"

    def __init__(self, *, operation: str, status: int | None, kind: ErrorKind, detail: str):
        self.status = status
        self.kind = kind
        self.detail = scrub(detail)
        super().__init__(operation=operation, status=status or kind.value, detail=self.detail)


def classify(status: int, body: str) -> tuple[ErrorKind, str]:
    """ErrorKind and the human message (``faultstring``) of an Ironic error answer."""
    failure = transport.classify(status, body, markers=MARKERS)
    return failure.kind, failure.detail


def error(failure: transport.Failure, what: str) -> IronicError:
    """The error of a refused Ironic call."""
    return IronicError(operation=what, status=failure.status, kind=failure.kind, detail=failure.detail)


class BaremetalClient:
    """Ironic's REST API through an openstacksdk connection (its baremetal adapter: auth,
    endpoint, TLS from clouds.yaml); nodeforge's own retries."""

    def __init__(self, conn, *, retry: RetryPolicy | None = None, api_version: str = API_VERSION):
        self.conn = conn
        self.adapter = conn.baremetal
        self.retry = retry or RetryPolicy()
        self.version = api_version

    # -- what sees every call
    def observer(self, write: bool) -> transport.Observer | None:
        """The observer of one call's attempts (``write``: the call changes Ironic); None here."""
        return None

    def on_retry(self, failure: transport.Failure, delay: float) -> None:
        """Before each retry of a refused attempt; nothing here."""

    # -- transport
    def call(self, method: str, url: str, what: str, *, body: Any = None, write: bool = False,
             microversion: str | None = None, missing_ok: bool = False):
        """One Ironic call, its JSON answer (None: none, or a 404 with ``missing_ok``)."""
        resp = transport.request(self.adapter, method, url, what=what, error=error, retry=self.retry,
                                 observer=self.observer(write), on_retry=self.on_retry, markers=MARKERS,
                                 missing_ok=missing_ok, idempotent=True, json=body,
                                 microversion=microversion or self.version)
        return transport.json_of(resp)

    def paged(self, url: str, key: str, microversion: str | None = None) -> list[dict]:
        """Every item of the collection ``key``, page after page."""
        return transport.paged(self.adapter, url, key, what=f"list {key}", error=error, retry=self.retry,
                               observer=self.observer(False), on_retry=self.on_retry, markers=MARKERS,
                               microversion=microversion or self.version)

    # -- reads
    def list_nodes(self, fields: list[str] | None = None) -> list[dict]:
        """Every node; with ``fields`` only those (a much cheaper listing for polls)."""
        if fields:
            return self.paged(f"/nodes?fields={','.join(fields)}&limit={PAGE_LIMIT}", "nodes")
        return self.paged(f"/nodes/detail?limit={PAGE_LIMIT}", "nodes")

    def list_ports(self) -> list[dict]:
        return self.paged(f"/ports/detail?limit={PAGE_LIMIT}", "ports")

    def get_node(self, ident: str) -> dict:
        return self.call("GET", f"/nodes/{ident}", "get node")

    def get_inventory(self, ident: str) -> dict | None:
        """Stored inspection data (``{"inventory": ..., "plugin_data": ...}``),
        or None when the node was never inspected (API 1.81)."""
        return self.call("GET", f"/nodes/{ident}/inventory", f"get inventory of {ident}",
                         microversion=INVENTORY_API_VERSION, missing_ok=True)

    def node_history(self, ident: str) -> list[dict]:
        """The node's history events, oldest first (API 1.78, detailed: ``created_at``, ``severity``,
        ``event_type``, ``event``, ``conductor``, ``user``)."""
        return self.paged(f"/nodes/{ident}/history?detail=True&limit={PAGE_LIMIT}", "history",
                          microversion=HISTORY_API_VERSION)

    def get_bios(self, ident: str) -> list[dict]:
        """The BIOS settings Ironic cached (at verify, cleaning, servicing), each with its registry
        fields (``allowable_values``, ``read_only``, ``lower_bound``... API 1.74)."""
        data = self.call("GET", f"/nodes/{ident}/bios?detail=True", f"get BIOS settings of {ident}",
                         microversion=BIOS_API_VERSION)
        return list((data or {}).get("bios") or [])

    def get_firmware(self, ident: str) -> list[dict]:
        """The firmware components Ironic cached (``component``, ``current_version``... API 1.86)."""
        data = self.call("GET", f"/nodes/{ident}/firmware", f"get firmware of {ident}",
                         microversion=FIRMWARE_API_VERSION)
        return list((data or {}).get("firmware") or [])

    # -- writes
    def create_node(self, body: dict) -> dict:
        return self.call("POST", "/nodes", f"create node {body.get('name')}", body=body, write=True)

    def patch_node(self, ident: str, patch: list[dict]) -> dict:
        return self.call("PATCH", f"/nodes/{ident}", f"update node {ident}", body=patch, write=True)

    def set_target_raid_config(self, ident: str, config: dict) -> None:
        """The RAID layout ``raid.create_configuration`` builds (``{"logical_disks": [...]}``)."""
        self.call("PUT", f"/nodes/{ident}/states/raid", f"set target RAID configuration of {ident}", body=config,
                  write=True)

    def set_traits(self, ident: str, traits: list[str]) -> None:
        self.call("PUT", f"/nodes/{ident}/traits", f"set traits of {ident}", body={"traits": traits}, write=True)

    def create_port(self, node_uuid: str, mac: str) -> dict:
        return self.call("POST", "/ports", f"create port {mac}", body={"node_uuid": node_uuid, "address": mac},
                         write=True)

    def set_provision_state(self, ident: str, target: str, *, clean_steps: list[dict] | None = None,
                            disable_ramdisk: bool | None = None, configdrive: dict | None = None) -> None:
        """Move the node towards ``target`` (Ironic's verb: ``manage``, ``active``, ``deleted``...)."""
        body: dict[str, Any] = {"target": target}
        if configdrive is not None:     # Ironic's JSON config drive (API 1.56): it builds the ISO
            body["configdrive"] = configdrive
        if clean_steps is not None:
            body["clean_steps"] = clean_steps
        if disable_ramdisk is not None:
            body["disable_ramdisk"] = disable_ramdisk
        self.call("PUT", f"/nodes/{ident}/states/provision", f"{target} {ident}", body=body, write=True)

    def set_power_state(self, ident: str, target: str) -> None:
        """Ask for ``target`` (``power on``, ``power off``, ``rebooting``...); Ironic answers at
        once and the conductor acts on it (poll :meth:`get_node`'s ``power_state``)."""
        self.call("PUT", f"/nodes/{ident}/states/power", f"{target} {ident}", body={"target": target}, write=True)

    def set_maintenance(self, ident: str, reason: str | None) -> None:
        if reason is None:
            self.call("DELETE", f"/nodes/{ident}/maintenance", f"unset maintenance {ident}", write=True)
        else:
            self.call("PUT", f"/nodes/{ident}/maintenance", f"set maintenance {ident}",
                      body={"reason": scrub(reason)}, write=True)

    def delete_node(self, ident: str) -> None:
        self.call("DELETE", f"/nodes/{ident}", f"delete node {ident}", write=True)

    # -- allocations (API 1.52): a node taken in someone's name for a resource class
    def list_allocations(self, resource_class: str | None = None) -> list[dict]:
        query = f"?resource_class={resource_class}" if resource_class else ""
        return self.paged(f"/allocations{query}", "allocations")

    def get_allocation(self, ident: str) -> dict | None:
        """The allocation named or numbered ``ident``, or None."""
        return self.call("GET", f"/allocations/{ident}", f"get allocation {ident}", missing_ok=True)

    def create_allocation(self, body: dict) -> dict:
        return self.call("POST", "/allocations", f"create allocation {body.get('name')}", body=body, write=True)

    def delete_allocation(self, ident: str) -> None:
        self.call("DELETE", f"/allocations/{ident}", f"delete allocation {ident}", write=True, missing_ok=True)

    # -- python-ironicclient bulk format: chassis, port groups, ports with their fields
    def list_chassis(self) -> list[dict]:
        return self.paged(f"/chassis/detail?limit={PAGE_LIMIT}", "chassis")

    def create_chassis(self, body: dict) -> dict:
        return self.call("POST", "/chassis", f"create chassis {body.get('description') or body.get('uuid')!r}",
                         body=body, write=True)

    def patch_chassis(self, ident: str, patch: list[dict]) -> dict:
        return self.call("PATCH", f"/chassis/{ident}", f"update chassis {ident}", body=patch, write=True)

    def list_portgroups(self, microversion: str | None = None) -> list[dict]:
        return self.paged(f"/portgroups/detail?limit={PAGE_LIMIT}", "portgroups", microversion)

    def create_portgroup(self, body: dict, microversion: str | None = None) -> dict:
        return self.call("POST", "/portgroups", f"create port group {body.get('name') or body.get('address')}",
                         body=body, write=True, microversion=microversion)

    def patch_portgroup(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        return self.call("PATCH", f"/portgroups/{ident}", f"update port group {ident}", body=patch, write=True,
                         microversion=microversion)

    def create_port_body(self, body: dict, microversion: str | None = None) -> dict:
        """A port with every field of ``body`` (pxe_enabled, local_link_connection, portgroup_uuid, ...)."""
        return self.call("POST", "/ports", f"create port {body.get('address')}", body=body, write=True,
                         microversion=microversion)

    def patch_port(self, ident: str, patch: list[dict], microversion: str | None = None) -> dict:
        return self.call("PATCH", f"/ports/{ident}", f"update port {ident}", body=patch, write=True,
                         microversion=microversion)

    # -- fields of a newer API than API_VERSION, read and written at the version they need
    def list_nodes_at(self, microversion: str) -> list[dict]:
        return self.paged(f"/nodes/detail?limit={PAGE_LIMIT}", "nodes", microversion)

    def list_ports_at(self, microversion: str) -> list[dict]:
        return self.paged(f"/ports/detail?limit={PAGE_LIMIT}", "ports", microversion)

    def patch_node_at(self, ident: str, patch: list[dict], microversion: str) -> dict:
        return self.call("PATCH", f"/nodes/{ident}", f"update node {ident}", body=patch, write=True,
                         microversion=microversion)
