"""clients/network.py: Neutron's networks and subnets as plain dicts, none at all without Neutron."""

from __future__ import annotations

from types import SimpleNamespace

from nodeforge.clients.network import read_networks


class _Session:
    def __init__(self, has_network: bool):
        self.has_network = has_network

    def get_endpoint(self, service_type, interface):
        assert (service_type, interface) == ("network", "public")
        if not self.has_network:
            raise LookupError("no network endpoint in the catalog")
        return "http://neutron.example:9696"


def _conn(has_network: bool = True):
    networks = [SimpleNamespace(id="n1", name="public", is_router_external=1),
                SimpleNamespace(id="n2", name="private", is_router_external=None)]
    subnets = [SimpleNamespace(id="s1", name="private-v4", network_id="n2")]
    return SimpleNamespace(session=_Session(has_network),
                           network=SimpleNamespace(networks=lambda: iter(networks), subnets=lambda: iter(subnets)))


def test_networks_and_subnets_are_plain_dicts():
    networks, subnets = read_networks(_conn())
    assert networks == [{"id": "n1", "name": "public", "is_router_external": True},
                        {"id": "n2", "name": "private", "is_router_external": False}]
    assert subnets == [{"id": "s1", "name": "private-v4", "network_id": "n2"}]


def test_a_cloud_without_neutron_reads_none():
    assert read_networks(_conn(has_network=False)) == (None, None)
