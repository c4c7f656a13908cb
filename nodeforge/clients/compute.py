"""Nova (the compute service): flavors, their extra specs and project access, over
:mod:`nodeforge.transport` (its retry policy and status mapping; Nova's message in
:class:`NovaError`).

Every call sends compute microversion :data:`MICROVERSION` (2.86): from 2.86 on, Nova validates
extra specs and refuses a malformed one (HTTP 400) instead of storing it, and the flavor listing
includes each flavor's extra specs.
"""

from __future__ import annotations

from typing import Any

from nodeforge import transport
from nodeforge.errors import NodeforgeError

MICROVERSION = "2.86"


class NovaError(NodeforgeError):
    message = "Nova {what} failed (HTTP {status}): {detail}"


def _error(failure: transport.Failure, what: str) -> NovaError:
    return NovaError(what=what, status=failure.status or "no answer", detail=failure.detail[:500])


def call(conn, method: str, url: str, what: str, *, body: Any = None, missing_ok: bool = False):
    """One Nova call (:func:`nodeforge.transport.request`: the API retry policy, Nova's
    message in :class:`NovaError`); ``missing_ok``: a 404 is None."""
    resp = transport.request(conn.compute, method, url, what=what, error=_error, missing_ok=missing_ok, json=body,
                             microversion=MICROVERSION)
    return transport.json_of(resp)


def read_flavors(conn) -> list[dict]:
    """Every flavor (public and private) with its extra specs, in one paged listing."""
    out = transport.paged(conn.compute, "/flavors/detail?is_public=None&limit=1000", "flavors", what="flavor list",
                          next_url=transport.links_next("flavors_links"), error=_error, microversion=MICROVERSION)
    for f in out:
        f.setdefault("extra_specs", {})
    return out


def flavor_access(conn, flavor_id: str) -> list[str]:
    """The projects a private flavor is shared with (sorted ids)."""
    data = call(conn, "GET", f"/flavors/{flavor_id}/os-flavor-access", "flavor access list")
    return sorted(a["tenant_id"] for a in data.get("flavor_access", []))


def create_flavor(conn, flavor: dict) -> dict:
    return call(conn, "POST", "/flavors", f"create flavor {flavor.get('name')}", body={"flavor": flavor})["flavor"]


def delete_flavor(conn, flavor_id: str, name: str) -> None:
    call(conn, "DELETE", f"/flavors/{flavor_id}", f"delete flavor {name}", missing_ok=True)


def set_description(conn, flavor_id: str, name: str, description: str | None) -> None:
    call(conn, "PUT", f"/flavors/{flavor_id}", f"description of {name}", body={"flavor": {"description": description}})


def set_extra_specs(conn, flavor_id: str, what: str, specs: dict[str, str]) -> None:
    call(conn, "POST", f"/flavors/{flavor_id}/os-extra_specs", what, body={"extra_specs": specs})


def unset_extra_spec(conn, flavor_id: str, name: str, key: str) -> None:
    call(conn, "DELETE", f"/flavors/{flavor_id}/os-extra_specs/{key}", f"unset {key} of {name}", missing_ok=True)


def add_access(conn, flavor_id: str, name: str, project_id: str) -> None:
    call(conn, "POST", f"/flavors/{flavor_id}/action", f"access of {name}",
         body={"addTenantAccess": {"tenant": project_id}})


def remove_access(conn, flavor_id: str, name: str, project_id: str) -> None:
    call(conn, "POST", f"/flavors/{flavor_id}/action", f"access of {name}",
         body={"removeTenantAccess": {"tenant": project_id}})
