"""Seed a freshly bootstrapped Keystone: projects, users, roles and the
service catalog the other services and nodeforge rely on. Idempotent."""

from __future__ import annotations

import logging

from nodeforge.devcloud import openstack
from nodeforge.devcloud.paths import Paths

LOG = logging.getLogger(__name__)

SERVICE_USERS = ("glance", "nova", "placement", "barbican", "ironic", "magnum", "neutron")
# Bump when the seed gains something: a state directory seeded by an older
# version is seeded again (every step is find-or-create).
SEED_VERSION = 2


def _role(conn, name):
    return conn.identity.find_role(name) or conn.identity.create_role(name=name)


def _project(conn, name, description):
    return conn.identity.find_project(name, domain_id="default") or conn.identity.create_project(
        name=name, domain_id="default", description=description)


def _user(conn, name, password, project):
    user = conn.identity.find_user(name, domain_id="default")
    if user is None:
        user = conn.identity.create_user(name=name, password=password, domain_id="default",
                                         default_project_id=project.id)
    return user


def keystone(paths: Paths, ctx: openstack.Context) -> None:
    marker = paths.data / "keystone-seed.done"
    if marker.exists() and marker.read_text().strip() == str(SEED_VERSION):
        return
    conn = ctx.admin_connection()
    ident = conn.identity
    roles = {name: _role(conn, name) for name in ("admin", "member", "reader", "service", "creator")}
    service_project = _project(conn, "service", "OpenStack service users")
    member_project = _project(conn, "nodeforge", "nodeforge member project")

    for name in SERVICE_USERS:
        user = _user(conn, name, ctx.creds[f"{name}_password"].reveal(), service_project)
        for role in ("admin", "service"):
            ident.assign_project_role_to_user(service_project, user, roles[role])

    member = _user(conn, "nodeforge-member", ctx.creds["member_password"].reveal(), member_project)
    for role in ("member", "reader", "creator"):
        ident.assign_project_role_to_user(member_project, member, roles[role])
    # The admin user works in the member project too (publishing, catalog).
    admin = ident.find_user("admin", domain_id="default")
    ident.assign_project_role_to_user(member_project, admin, roles["admin"])
    admin_project = ident.find_project("admin", domain_id="default")
    ident.assign_project_role_to_user(admin_project, admin, roles["creator"])

    # Magnum's trustee domain: a cluster's trustee user lives there, created
    # by the domain's own admin.
    from nodeforge.devcloud import magnum

    domain = ident.find_domain(magnum.TRUSTEE_DOMAIN) or ident.create_domain(
        name=magnum.TRUSTEE_DOMAIN, description="Magnum cluster trustees", enabled=True)
    trustee_admin = ident.find_user(magnum.TRUSTEE_ADMIN, domain_id=domain.id) or ident.create_user(
        name=magnum.TRUSTEE_ADMIN, password=ctx.creds[f"{magnum.TRUSTEE_ADMIN}_password"].reveal(),
        domain_id=domain.id)
    ident.assign_domain_role_to_user(domain, trustee_admin, roles["admin"])

    region = openstack.REGION
    for svc, (stype, sname, suffix) in openstack.CATALOG.items():
        service = next((s for s in ident.services() if s.type == stype), None)
        if service is None:
            service = ident.create_service(type=stype, name=sname, enabled=True)
        existing = {e.interface for e in ident.endpoints(service_id=service.id)}
        for interface in ("public", "internal", "admin"):
            if interface not in existing:
                ident.create_endpoint(service_id=service.id, interface=interface,
                                      url=openstack.url(svc) + suffix, region_id=region)
    marker.write_text(f"{SEED_VERSION}\n")
    LOG.info("keystone seeded")
