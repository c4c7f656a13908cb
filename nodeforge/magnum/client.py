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

from typing import Any

from nodeforge import transport
from nodeforge.errors import NodeforgeError

# 1.10: cluster create answers 202 with the uuid; every field nodeforge uses exists from 1.1 on.
MICROVERSION = "1.10"
HEADERS = {"OpenStack-API-Version": f"container-infra {MICROVERSION}"}


class MagnumError(NodeforgeError):
    message = "Magnum {what} failed (HTTP {status}): {detail}"

    def __init__(self, *, what: str, status, detail: str, kind: transport.ErrorKind | None = None):
        self.kind = kind
        super().__init__(what=what, status=status, detail=detail)


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


def read_clusters(conn, retry: transport.RetryPolicy | None = None) -> list[dict]:
    """Every cluster Magnum shows this connection (an admin: all projects')."""
    return _list(conn, "/clusters/detail", "clusters", "cluster list", retry)


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
