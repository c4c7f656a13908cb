"""Neutron (the network service): the networks and subnets nodeforge reads, through
openstacksdk's network proxy (auth and endpoint from ``clouds.yaml``).

* :func:`read_networks`: every network and subnet this token may list, or none at all when the
  cloud has no network service (the template check's live state).
"""

from __future__ import annotations


def read_networks(conn) -> tuple[list[dict] | None, list[dict] | None]:
    """Neutron's networks and subnets as plain dicts, or (None, None) without a network service."""
    try:
        conn.session.get_endpoint(service_type="network", interface="public")
    except Exception:      # keystoneauth EndpointNotFound and kin: no Neutron in this cloud
        return None, None
    networks = [{"id": n.id, "name": n.name, "is_router_external": bool(n.is_router_external)}
                for n in conn.network.networks()]
    subnets = [{"id": s.id, "name": s.name, "network_id": s.network_id} for s in conn.network.subnets()]
    return networks, subnets
