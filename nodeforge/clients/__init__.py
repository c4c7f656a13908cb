"""One module per OpenStack service nodeforge calls, over openstacksdk's connection and
:mod:`nodeforge.transport`: the service's URLs, request bodies, paging, microversions and the
mapping of its failures to nodeforge's errors live here, not in the features that use them.

* :mod:`nodeforge.clients.baremetal`: Ironic (nodes, ports, chassis, port groups, allocations,
  provision states; a node's inventory, history, BIOS settings and firmware).
* :mod:`nodeforge.clients.compute`: Nova (flavors, extra specs, flavor access).
* :mod:`nodeforge.clients.container_infra`: Magnum (cluster templates and clusters).
* :mod:`nodeforge.clients.identity`: Keystone (projects).
* :mod:`nodeforge.clients.image`: Glance (images and their data).
* :mod:`nodeforge.clients.key_manager`: Barbican (secrets: the signing certificate).
* :mod:`nodeforge.clients.network`: Neutron (networks and subnets).
"""
