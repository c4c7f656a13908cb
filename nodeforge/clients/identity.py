"""Keystone (the identity service): the projects nodeforge names, through openstacksdk's identity
proxy (auth and endpoint from ``clouds.yaml``).

* :func:`find_project`: a project named or numbered by a declaration (the flavors' ``projects``);
* :func:`read_projects`: every project this token may list (the template check's live state).
"""

from __future__ import annotations


def find_project(conn, ref: str) -> str | None:
    """The ID of the project named or numbered ``ref`` (None: Keystone has no such project)."""
    project = conn.identity.find_project(ref, ignore_missing=True)
    return None if project is None else project.id


def read_projects(conn) -> list[dict] | None:
    """Keystone's projects as {id, name}, or None when this token may not list them (not an admin)."""
    from openstack import exceptions

    try:
        return [{"id": p.id, "name": p.name} for p in conn.identity.projects()]
    except (exceptions.ForbiddenException, exceptions.HttpException):
        return None
