"""What a live audit reads, once per resource type: Magnum cluster templates
and clusters, Glance images, Nova flavors, Ironic nodes.

Everything is plain dicts shaped like the services' API answers, so the
audit (:mod:`.audit`) and the upgrade planner (:mod:`.upgrade`) are pure
functions a test can feed from a table.

Reads are plain REST through the openstacksdk adapters (the SDK's Magnum
resources do not model every field Magnum 23 returns, e.g. ``driver``;
Magnum through :mod:`nodeforge.magnum.client`):

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

from nodeforge import transport
from nodeforge.errors import NodeforgeError
from nodeforge.magnum import client

log = logging.getLogger(__name__)

SERVICE_TYPE = "container-infra"


class NoMagnum(NodeforgeError):
    message = "the cloud has no {service} (Magnum) endpoint in its catalog: {detail}"


def has_magnum(conn) -> bool:
    """True when the cloud's catalog has a container-infra endpoint."""
    try:
        return bool(conn.endpoint_for(SERVICE_TYPE))
    except Exception:  # noqa: BLE001 - keystoneauth raises for a catalog without the type on some paths
        return False


def read_templates(conn) -> list[dict]:
    """Every cluster template the connection can see (:func:`nodeforge.magnum.client.read_templates`)."""
    return client.read_templates(conn)


def _creating(failure: transport.Failure) -> bool:
    """Magnum 23's answer to a cluster listing while a cluster is being created."""
    return failure.kind is transport.ErrorKind.BAD_REQUEST and "master_count" in failure.detail


def read_clusters(conn, *, attempts: int = 6, pause: float = 0.5) -> list[dict]:
    """Every cluster the connection can see (:func:`nodeforge.magnum.client.read_clusters`).

    Magnum 23 answers the whole listing with HTTP 400 ("master_count ... Value: '0'") while
    any cluster is between its create call and the conductor making its node groups (a
    fraction of a second per cluster): the transport's retry policy retries that answer too,
    ``attempts`` times at most, from ``pause`` seconds on, doubling (with jitter)."""
    policy = transport.API.replace(attempts=attempts, base=pause, cap=pause * 2 ** max(0, attempts - 2),
                                   also=_creating)
    return client.read_clusters(conn, retry=policy)


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
        from nodeforge.publish import glance as g
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


def image_users(conn, images: list[dict] | None = None) -> dict[str, list[str]] | None:
    """Image ID -> the Magnum templates and clusters that use it (``template NAME (ID)``,
    ``cluster NAME``), from one template and one cluster listing. ``None`` when the cloud
    has no container-infra endpoint (said in the log). A template may name its image by
    name: ``images`` (Glance records) resolve names to IDs."""
    if not has_magnum(conn):
        log.info("the cloud has no %s (Magnum) endpoint: no template or cluster can use an image; "
                 "retention proceeds without that check", SERVICE_TYPE)
        return None
    return users_of(read_templates(conn), read_clusters(conn), images or [])


def users_of(templates: list[dict], clusters: list[dict], images: list[dict]) -> dict[str, list[str]]:
    """Pure part of :func:`image_users`."""
    by_name: dict[str, list[str]] = collections.defaultdict(list)
    for i in images:
        if i.get("name"):
            by_name[i["name"]].append(i["id"])
    ids = {i["id"] for i in images}
    out: dict[str, list[str]] = collections.defaultdict(list)
    image_of: dict[str, str] = {}
    for t in templates:
        ref = t.get("image_id")
        if not ref:
            continue
        image_id = ref if ref in ids or ref not in by_name else (by_name[ref][0] if len(by_name[ref]) == 1 else ref)
        image_of[t["uuid"]] = image_id
        out[image_id].append(f"template {t.get('name')} ({t['uuid']})")
    for c in clusters:
        image_id = image_of.get(c.get("cluster_template_id"))
        if image_id:
            out[image_id].append(f"cluster {c.get('name')} ({c.get('status')})")
    return dict(out)


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
