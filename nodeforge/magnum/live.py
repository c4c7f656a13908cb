"""What a live audit reads, once per resource type: Magnum cluster templates
and clusters, Glance images, Nova flavors, Ironic nodes.

Everything is plain dicts shaped like the services' API answers, so the
audit (:mod:`.audit`) and the upgrade planner (:mod:`.upgrade`) are pure
functions a test can feed from a table.

Reads are plain REST through the openstacksdk adapters (the SDK's Magnum
resources do not model every field Magnum 23 returns, e.g. ``driver``;
Magnum through :mod:`nodeforge.clients.container_infra`):

* ``GET /v1/clustertemplates/detail`` and ``GET /v1/clusters/detail`` (paged
  by Magnum's ``next`` link),
* Glance ``GET /v2/images`` (visible and hidden, every visibility; paged),
* Nova ``GET /v2.1/flavors/detail`` at microversion 2.86 (extra specs in the
  listing; no per-flavor access calls),
* Ironic ``GET /v1/nodes/detail`` (paged).

:class:`RequestCounter` counts the HTTP requests a connection makes
(a ``requests`` response hook), per service, for the benchmark and
``-o json``'s ``api_calls``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
from urllib.parse import urlsplit

from nodeforge.errors import NodeforgeError
from nodeforge.clients import container_infra as client
from nodeforge.clients.container_infra import (SERVICE_TYPE, has_magnum, image_users,  # noqa: F401 - re-exported
                                     read_clusters, users_of)

log = logging.getLogger(__name__)



class NoMagnum(NodeforgeError):
    message = "the cloud has no {service} (Magnum) endpoint in its catalog: {detail}"


def read_templates(conn) -> list[dict]:
    """Every cluster template the connection can see (:func:`nodeforge.clients.container_infra.read_templates`)."""
    return client.read_templates(conn)


def read_nodegroups(conn, cluster_id: str) -> list[dict]:
    """One cluster's node groups: Magnum lists them per cluster only, without their
    ``version``; each non-default group is then read on its own for it (the default ones
    move with the cluster)."""
    body = client._call(conn, "GET", f"/clusters/{cluster_id}/nodegroups", f"node group list of cluster {cluster_id}")
    groups = (body or {}).get("nodegroups") or []
    return [g if g.get("is_default") else
            client._call(conn, "GET", f"/clusters/{cluster_id}/nodegroups/{g['uuid']}",
                         f"node group {g.get('name')} of cluster {cluster_id}")
            for g in groups]


def read_flavors(conn) -> list[dict]:
    """Every flavor with its extra specs, in one paged listing (microversion 2.86 includes them)."""
    from nodeforge.compute import flavors as F

    return F.read_flavors(conn)


@dataclasses.dataclass
class LiveState:
    """Everything the audit and the upgrade plan look at, read once."""

    templates: list[dict]
    clusters: list[dict]
    images: list[dict]
    flavors: list[dict]
    nodes: list[dict]
    nodegroups: dict[str, list[dict]] = dataclasses.field(default_factory=dict)  # cluster uuid -> groups

    @classmethod
    def read(cls, conn, baremetal_conn=None, *, nodegroups: bool = False) -> "LiveState":
        """Read every resource type once (Ironic through ``baremetal_conn``, default ``conn``).
        ``nodegroups``: also each cluster's node groups (one call per cluster; the upgrade plan
        uses them for the kubelet skew of non-default groups)."""
        from nodeforge.publish import glance_api as g
        from nodeforge.ironic.provisioner import SdkProvisioner

        if not has_magnum(conn):
            raise NoMagnum(service=SERVICE_TYPE, detail="nothing to audit",
                           hint="check --live and upgrade-plan read Magnum; 'template check' without --live "
                                "checks the template files against Glance, Nova and Ironic only")
        templates = read_templates(conn)
        clusters = read_clusters(conn)
        images = g.list_images(conn)
        flavors = read_flavors(conn)
        nodes = SdkProvisioner(baremetal_conn or conn).list_nodes()
        groups = {c["uuid"]: read_nodegroups(conn, c["uuid"]) for c in clusters} if nodegroups else {}
        return cls(templates, clusters, images, flavors, nodes, groups)


_DISCOVERY = re.compile(r"/?(v\d+(\.\d+)?/?)?")


class RequestCounter:
    """Counts the HTTP requests of openstacksdk connections, by service (port of the URL mapped
    to the catalog type; version discovery documents as ``discovery``), through a
    ``requests`` response hook on each connection's session."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self._services: dict[str, str] = {}

    def attach(self, conn) -> "RequestCounter":
        for stype in ("identity", "image", "compute", "baremetal", SERVICE_TYPE, "placement", "network"):
            try:
                ep = conn.endpoint_for(stype)
            except Exception:  # noqa: BLE001 - absent service
                ep = None
            if ep:
                self._services.setdefault(urlsplit(ep).netloc, stype)
        auth = conn.config.get_auth_args().get("auth_url") or ""
        if auth:
            self._services.setdefault(urlsplit(auth).netloc, "identity")
        hooks = conn.session.session.hooks.setdefault("response", [])
        if self._hook not in hooks:       # two connections may share one session
            hooks.append(self._hook)
        return self

    def _hook(self, resp, *args, **kwargs):
        url = urlsplit(resp.request.url)
        # Version discovery (GET / or /vN of a service: once per service and connection) apart.
        if _DISCOVERY.fullmatch(url.path):
            self.counts["discovery"] += 1
        else:
            self.counts[self._services.get(url.netloc, "other")] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict:
        return {"total": self.total, **dict(sorted(self.counts.items()))}
