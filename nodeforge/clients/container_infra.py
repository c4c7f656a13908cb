"""A thin Magnum reader/writer over openstacksdk's session (plain dicts).

openstacksdk's ``ClusterTemplate`` resource has no ``driver`` nor ``tags``
field (Magnum 23 has both), so nodeforge speaks the REST API through the
service proxy (``conn.container_infrastructure_management``: auth, endpoint
from openstacksdk; calls, paging and retries from
:mod:`nodeforge.transport`) and returns Magnum's JSON as it is:

* :func:`read_templates` -> every cluster template (``/clustertemplates/detail``;
  an admin sees all projects'), each a dict with Magnum's field names
  (``uuid``, ``name``, ``image_id``, ``labels``, ``driver``, ``tags``,
  ``hidden``, ``public``, ``project_id``, ``created_at``, ``updated_at``, ...);
* :func:`read_clusters` -> every cluster (``/clusters/detail``), each with
  ``uuid``, ``name``, ``cluster_template_id``, ``status``, ``project_id``, ...

Stable API (shared with the template audit): ``read_templates(conn)``,
``read_clusters(conn)``; the writers (:func:`create_template`,
:func:`patch_template`, :func:`delete_template`, :func:`create_cluster`,
:func:`delete_cluster`) raise :class:`MagnumError` with Magnum's own message.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from nodeforge import transport
from nodeforge.errors import NodeforgeError

# 1.10: cluster create answers 202 with the uuid; every field nodeforge uses exists from 1.1 on.
MICROVERSION = "1.10"
HEADERS = {"OpenStack-API-Version": f"container-infra {MICROVERSION}"}

log = logging.getLogger(__name__)


class MagnumError(NodeforgeError):
    message = "Magnum {what} failed (HTTP {status}): {detail}"

    def __init__(self, *, what: str, status, detail: str, kind: transport.ErrorKind | None = None):
        self.kind = kind
        super().__init__(what=what, status=status, detail=detail)


SERVICE_TYPE = "container-infra"


def has_magnum(conn) -> bool:
    """True when the cloud's catalog has a container-infra endpoint."""
    try:
        return bool(conn.endpoint_for(SERVICE_TYPE))
    except Exception:  # noqa: BLE001 - keystoneauth raises for a catalog without the type on some paths
        return False


def _creating(failure: transport.Failure) -> bool:
    """Magnum 23's answer to a cluster listing while a cluster is being created."""
    return failure.kind is transport.ErrorKind.BAD_REQUEST and "master_count" in failure.detail


def _proxy(conn):
    return conn.container_infrastructure_management


def _error(failure: transport.Failure, what: str) -> MagnumError:
    # Magnum: {"errors": [{"title": ..., "detail": ...}]} (transport.detail_of reads it)
    return MagnumError(what=what, status=failure.status or "no answer", detail=failure.detail[:500],
                       kind=failure.kind)


def _call(conn, method: str, url: str, what: str, *, body: Any = None, expect: tuple[int, ...] | None = None,
          missing_ok: bool = False, retry: transport.RetryPolicy | None = None):
    """One Magnum call (:func:`nodeforge.transport.request`); ``expect``: the only statuses that
    succeed; ``missing_ok``: a 404 is None."""
    headers = dict(HEADERS)
    if method == "PATCH":
        headers["Content-Type"] = "application/json"
    resp = transport.request(_proxy(conn), method, url, what=what, error=_error, expect=expect, missing_ok=missing_ok,
                             retry=retry, json=body, headers=headers)
    return transport.json_of(resp)


def _list(conn, url: str, key: str, what: str, retry: transport.RetryPolicy | None = None) -> list[dict]:
    return transport.paged(_proxy(conn), f"{url}?limit=1000", key, what=what, next_url=transport.marker("uuid"),
                           error=_error, retry=retry, headers=dict(HEADERS))


def read_templates(conn) -> list[dict]:
    """Every cluster template Magnum shows this connection (an admin: all projects')."""
    return _list(conn, "/clustertemplates/detail", "clustertemplates", "cluster template list")


def read_clusters(conn, *, attempts: int = 6, pause: float = 0.5, retry: transport.RetryPolicy | None = None,
                  ) -> list[dict]:
    """Every cluster the connection can see (an admin: all projects').

    Magnum 23 answers the whole listing with HTTP 400 ("master_count ... Value: '0'") while
    any cluster is between its create call and the conductor making its node groups (a
    fraction of a second per cluster): the transport's retry policy retries that answer too,
    ``attempts`` times at most, from ``pause`` seconds on, doubling (with jitter)."""
    policy = retry or transport.API.replace(attempts=attempts, base=pause, cap=pause * 2 ** max(0, attempts - 2),
                                   also=_creating)
    return _list(conn, "/clusters/detail", "clusters", "cluster list", policy)


def get_template(conn, ident: str) -> dict:
    return _call(conn, "GET", f"/clustertemplates/{ident}", f"get cluster template {ident}")


def create_template(conn, body: dict) -> dict:
    return _call(conn, "POST", "/clustertemplates", f"create cluster template {body.get('name')}", body=body,
                 expect=(201,))


def patch_template(conn, ident: str, changes: dict, what: str | None = None) -> dict:
    """Replace top-level fields (JSON patch ``replace`` each)."""
    patch = [{"op": "replace", "path": f"/{k}", "value": v} for k, v in changes.items()]
    return _call(conn, "PATCH", f"/clustertemplates/{ident}", what or f"update cluster template {ident}",
                 body=patch)


def delete_template(conn, ident: str) -> None:
    _call(conn, "DELETE", f"/clustertemplates/{ident}", f"delete cluster template {ident}", expect=(204,),
          missing_ok=True)


def create_cluster(conn, body: dict) -> dict:
    """POST /clusters: 202 once Magnum's API (and the driver's validation) accepted it."""
    return _call(conn, "POST", "/clusters", f"create cluster {body.get('name')}", body=body, expect=(202,))


def get_cluster(conn, ident: str) -> dict | None:
    return _call(conn, "GET", f"/clusters/{ident}", f"get cluster {ident}", missing_ok=True)


def delete_cluster(conn, ident: str) -> None:
    _call(conn, "DELETE", f"/clusters/{ident}", f"delete cluster {ident}", expect=(204,), missing_ok=True)


# --- who uses an image (retention, the catalog) -----------------------------------------

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
