"""Ironic behind one interface: :class:`Provisioner` (a Protocol), with the
openstacksdk implementation :class:`SdkProvisioner` (the in-memory double
for state-machine unit tests is ``tests/support/ironic.py``).

Ironic's calls themselves (URLs, microversions, request bodies, paging, the
:class:`IronicError` an :class:`ErrorKind` read from the status *and the
body*) are :mod:`nodeforge.clients.baremetal`'s; its names are re-exported
here, so enrollment, the lifecycle, classify, audit, baseline apply and the
canary speak of Ironic through one module.

:class:`SdkProvisioner` is that client with what the domain adds: every
write attempt is counted (``writes``) so tests and the benchmark can prove
that a no-change run makes zero writes, retries are counted by status, the
lifecycle's :class:`~nodeforge.ironic.constants.Verb` is sent as Ironic's
target, and the adaptive pacing (:mod:`nodeforge.ironic.pacing`) sees every
attempt: a slot before it, status (409 NodeLocked, 503, network) and latency
after it.
"""

from __future__ import annotations

import threading
from typing import Protocol

from nodeforge import transport as T
from nodeforge.clients.baremetal import (  # noqa: F401 - re-exported: the domain's one Ironic module
    MARKERS, NODE_FIELDS, BaremetalClient, IronicError, classify)
from nodeforge.ironic import constants as C
from nodeforge.ironic.constants import Verb
from nodeforge.ironic.pacing import Pacer
from nodeforge.transport import ErrorKind, RetryPolicy

# ErrorKind and RetryPolicy are the transport's (re-exported here: callers read exc.kind).
__all__ = ["ErrorKind", "IronicError", "Provisioner", "RetryPolicy", "SdkProvisioner", "classify"]


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
    def set_target_raid_config(self, ident: str, config: dict) -> None: ...
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


class SdkProvisioner(BaremetalClient):
    """Ironic through an openstacksdk connection (:class:`~nodeforge.clients.baremetal.BaremetalClient`),
    its writes and retries counted and every attempt paced."""

    def __init__(self, conn, *, retry: RetryPolicy | None = None, api_version: str = C.API_VERSION,
                 pacer: Pacer | None = None):
        super().__init__(conn, retry=retry, api_version=api_version)
        self.writes = 0
        self.retries = 0
        self.retried: dict[str, int] = {}
        self._lock = threading.Lock()
        # Adaptive pacing (nodeforge/ironic/pacing.py): every request waits for a slot;
        # every answer (latency, status) is reported to it. None: unpaced.
        self.pacer = pacer

    def observer(self, write: bool) -> "_Attempts":
        return _Attempts(self, write)

    def on_retry(self, failure: T.Failure, delay: float) -> None:
        with self._lock:
            self.retries += 1
            self.retried[failure.key] = self.retried.get(failure.key, 0) + 1

    def set_provision_state(self, ident: str, verb: Verb, *, clean_steps=None, disable_ramdisk=None,
                            configdrive=None) -> None:
        super().set_provision_state(ident, verb.value, clean_steps=clean_steps, disable_ramdisk=disable_ramdisk,
                                    configdrive=configdrive)


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
