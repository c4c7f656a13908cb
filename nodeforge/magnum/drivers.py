"""The Magnum cluster drivers nodeforge knows, and what each serves.

Magnum 23 ships no in-tree driver; the maintained drivers are external
packages registered under the ``magnum.drivers`` entry-point group. Each
driver's ``provides`` lists the (server_type, os, coe) tuples it builds;
at cluster create Magnum refuses a template whose tuple no loaded driver
serves. None serves ``server_type: bm``: bare-metal workers are reached by
giving a ``vm`` template a bare-metal Nova flavor.

The table below is checked against the drivers installed in the local
cloud's Magnum by a test (``tests/magnum/test_drivers_devcloud.py``), so a
driver upgrade that changes what it provides fails that test rather than a
user's cluster.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Provides:
    server_type: str
    os_distro: str
    coe: str = "kubernetes"


@dataclasses.dataclass(frozen=True)
class Driver:
    name: str                       # the entry-point name, Magnum's template field ``driver``
    package: str                    # the PyPI distribution that ships it
    provides: tuple[Provides, ...]

    def serves(self, server_type: str, os_distro: str, coe: str = "kubernetes") -> bool:
        return Provides(server_type, os_distro, coe) in self.provides


def _vm(*distros: str) -> tuple[Provides, ...]:
    return tuple(Provides("vm", d) for d in distros)


DRIVERS: dict[str, Driver] = {d.name: d for d in (
    Driver("k8s_cluster_api", "magnum-cluster-api",
           _vm("ubuntu", "ubuntu-focal", "debian", "flatcar", "rockylinux")),
    Driver("k8s_capi_helm_v1", "magnum-capi-helm", _vm("ubuntu", "flatcar")),
)}


def get(name: str) -> Driver | None:
    return DRIVERS.get(name)


def serving(server_type: str, os_distro: str | None, coe: str = "kubernetes") -> list[Driver]:
    """Every known driver that serves the tuple (empty when none does)."""
    return [d for d in DRIVERS.values() if os_distro and d.serves(server_type, os_distro, coe)]


def describe(server_type: str, os_distro: str | None, coe: str = "kubernetes") -> str:
    return f"({server_type}, {os_distro or '?'}, {coe})"
