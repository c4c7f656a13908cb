"""A thin Magnum reader/writer over openstacksdk's session (plain dicts).

openstacksdk's ``ClusterTemplate`` resource has no ``driver`` nor ``tags``
field (Magnum 23 has both), so nodeforge speaks the REST API through the
service proxy (``conn.container_infrastructure_management``: auth, endpoint
and retries from openstacksdk) and returns Magnum's JSON as it is:

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

from nodeforge.errors import NodeforgeError

# 1.10: cluster create answers 202 with the uuid; every field nodeforge uses exists from 1.1 on.
MICROVERSION = "1.10"


class MagnumError(NodeforgeError):
    message = "Magnum {what} failed (HTTP {status}): {detail}"


def _proxy(conn):
    return conn.container_infrastructure_management


def _detail(resp) -> str:
    try:
        data = resp.json()
    except ValueError:
        return (resp.text or "")[:500]
    # Magnum: {"errors": [{"title": ..., "detail": ...}]}
    errors = data.get("errors") if isinstance(data, dict) else None
    if errors:
        return "; ".join(str(e.get("detail") or e.get("title")) for e in errors)[:500]
    return str(data)[:500]


def _call(conn, method: str, url: str, what: str, *, body: Any = None, ok=(200, 201, 202, 204)):
    headers = {"OpenStack-API-Version": f"container-infra {MICROVERSION}"}
    if method == "PATCH":
        headers["Content-Type"] = "application/json"
    resp = _proxy(conn).request(url, method, json=body, headers=headers, raise_exc=False)
    if resp.status_code not in ok:
        raise MagnumError(what=what, status=resp.status_code, detail=_detail(resp))
    return resp.json() if resp.content else None


def _list(conn, url: str, key: str, what: str) -> list[dict]:
    out, marker = [], None
    while True:
        page = _call(conn, "GET", f"{url}?limit=1000" + (f"&marker={marker}" if marker else ""), what)
        items = page.get(key) or []
        out.extend(items)
        if not page.get("next") or not items:
            return out
        marker = items[-1]["uuid"]


def read_templates(conn) -> list[dict]:
    """Every cluster template Magnum shows this connection (an admin: all projects')."""
    return _list(conn, "/clustertemplates/detail", "clustertemplates", "cluster template list")


def read_clusters(conn) -> list[dict]:
    """Every cluster Magnum shows this connection (an admin: all projects')."""
    return _list(conn, "/clusters/detail", "clusters", "cluster list")


def get_template(conn, ident: str) -> dict:
    return _call(conn, "GET", f"/clustertemplates/{ident}", f"get cluster template {ident}")


def create_template(conn, body: dict) -> dict:
    return _call(conn, "POST", "/clustertemplates", f"create cluster template {body.get('name')}", body=body,
                 ok=(201,))


def patch_template(conn, ident: str, changes: dict, what: str | None = None) -> dict:
    """Replace top-level fields (JSON patch ``replace`` each)."""
    patch = [{"op": "replace", "path": f"/{k}", "value": v} for k, v in changes.items()]
    return _call(conn, "PATCH", f"/clustertemplates/{ident}", what or f"update cluster template {ident}",
                 body=patch)


def delete_template(conn, ident: str) -> None:
    _call(conn, "DELETE", f"/clustertemplates/{ident}", f"delete cluster template {ident}", ok=(204, 404))


def create_cluster(conn, body: dict) -> dict:
    """POST /clusters: 202 once Magnum's API (and the driver's validation) accepted it."""
    return _call(conn, "POST", "/clusters", f"create cluster {body.get('name')}", body=body, ok=(202,))


def get_cluster(conn, ident: str) -> dict | None:
    try:
        return _call(conn, "GET", f"/clusters/{ident}", f"get cluster {ident}")
    except MagnumError as exc:
        if "(HTTP 404)" in str(exc):
            return None
        raise


def delete_cluster(conn, ident: str) -> None:
    _call(conn, "DELETE", f"/clusters/{ident}", f"delete cluster {ident}", ok=(204, 404))
