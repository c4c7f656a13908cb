"""Driver-targeted rendering (pure): the driver named or derived from the
image's os_distro (an ambiguity names the candidates), server_type vm with
bare-metal flavors, kube_tag in the driver's format, only labels the driver
reads, boot_volume_size for zero-disk flavors, networks resolved by name or ID;
every bad input names file, line and field."""

from __future__ import annotations

import pytest

from nodeforge.magnum import templates as T
from nodeforge.errors import ConfigError
from nodeforge.schema.loader import load_yaml_tree
from tests.test_templates import NETWORKS, SUBNETS, flavor, image, node

TEXT = """\
name: t1
kubernetes: "1.36"
driver: k8s_cluster_api_debian
image: {os_distro: debian}
node_groups:
  - {name: default-master, role: master, variant: baremetal, flavor: bm.compute, count: 1}
  - {name: default-worker, role: worker, variant: baremetal, flavor: bm.compute, count: 1}
labels:
  keystone_auth_enabled: "true"
magnum:
  network_driver: calico
  external_network_id: public
  fixed_network: private
  fixed_subnet: private-subnet
"""
COMPUTE = ("baremetal-compute", ["CUSTOM_LOCAL_NVME"])


def state(os_distro="debian", disk=446, vm_os=None, scope=None):
    images = [image("bm", os_distro=os_distro, scope=scope)]
    if vm_os:
        images.append(image("vm", variant="vm", os_distro=vm_os, scope=scope))
    return T.CloudState(images=images, flavors=[flavor("bm.compute", *COMPUTE, disk=disk),
                                                {"id": "id-m1", "name": "m1.large", "disk": 40, "extra_specs": {}}],
                        nodes=[node(*COMPUTE) for _ in range(3)],
                        networks=[dict(n) for n in NETWORKS], subnets=[dict(s) for s in SUBNETS])


def parse(text=TEXT, path="tmpl.yaml") -> T.Template:
    return T.parse(load_yaml_tree(path, text), path)


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def issues(t, st):
    return T.resolve(t, st).issues


def test_a_bare_metal_template_is_a_vm_template_of_the_named_driver():
    out = T.render(T.resolve(parse(), state()))
    body = out["cluster_template"]
    assert body["server_type"] == "vm" and body["driver"] == "k8s_cluster_api_debian"
    assert body["flavor_id"] == body["master_flavor_id"] == "id-bm.compute"
    assert body["labels"] == {"keystone_auth_enabled": "true", "kube_tag": "v1.36.0"}
    assert body["external_network_id"] == "net-public" and body["fixed_subnet"] == "sub-private"
    assert out["cluster_type"]["os_distro"] == "debian" and out["driver_package"] == "magnum-cluster-api"


def test_driver_derived_from_os_distro_and_an_ambiguity_names_the_candidates():
    text = edit(TEXT, "driver: k8s_cluster_api_debian\n", "")
    assert T.render(T.resolve(parse(text), state()))["cluster_template"]["driver"] == "k8s_cluster_api_debian"
    # ubuntu is served by two drivers: refused, naming both.
    text_u = edit(text, "os_distro: debian", "os_distro: ubuntu")
    [i] = issues(parse(text_u), state("ubuntu"))
    assert i.kind == "driver" and i.input
    assert "several Magnum drivers serve (vm, ubuntu, kubernetes): k8s_cluster_api_ubuntu, k8s_capi_helm_v1" \
        in i.detail and "name one with 'driver:'" in i.detail
    # A driver package narrows it to one entry point.
    text_p = edit(text_u, 'kubernetes: "1.36"\n', 'kubernetes: "1.36"\ndriver: magnum-cluster-api\n')
    assert T.render(T.resolve(parse(text_p), state("ubuntu")))["cluster_template"]["driver"] == \
        "k8s_cluster_api_ubuntu"
    # An OS no driver serves.
    [i] = issues(parse(edit(text, "os_distro: debian", "os_distro: fedora-coreos")), state("fedora-coreos"))
    assert i.kind == "driver" and "no known Magnum driver serves (vm, fedora-coreos, kubernetes)" in i.detail


def test_an_unknown_driver_is_refused_naming_the_line():
    with pytest.raises(ConfigError) as exc:
        parse(edit(TEXT, "driver: k8s_cluster_api_debian", "driver: k8s_fedora_coreos_v1"))
    text = str(exc.value)
    assert text.startswith("tmpl.yaml:3: driver: unknown Magnum driver 'k8s_fedora_coreos_v1' (one of "
                           "k8s_cluster_api_ubuntu,") and len(text.splitlines()) == 1, text


def test_a_node_group_the_driver_cannot_serve_names_its_line():
    text = edit(TEXT, "  - {name: default-worker, role: worker, variant: baremetal, flavor: bm.compute, count: 1}\n",
                "  - {name: default-worker, role: worker, variant: baremetal, flavor: bm.compute, count: 1}\n"
                "  - {name: gpu, role: worker, variant: vm, flavor: m1.large, count: 1}\n")
    text = edit(text, "image: {os_distro: debian}", "image: {}")
    [i] = issues(parse(text), state(vm_os="ubuntu"))
    assert (i.kind, i.path, i.line, i.field) == ("node_group", "tmpl.yaml", 8, "node_groups[2].variant")
    assert i.located().startswith("tmpl.yaml:8: node_groups[2].variant: driver k8s_cluster_api_debian cannot "
                                  "serve node group 'gpu': its image vm is os_distro ubuntu, cluster type "
                                  "(vm, ubuntu, kubernetes); the driver serves (vm, debian, kubernetes)")


def test_labels_the_driver_does_not_read_and_kube_tag_format():
    t = parse(edit(TEXT, '  keystone_auth_enabled: "true"\n',
                   '  keystone_auth_enabled: "true"\n  container_runtime: containerd\n  kube_tag: "1.36.0"\n'))
    got = {i.field: i for i in issues(t, state())}
    assert set(got) == {"labels.container_runtime", "labels.kube_tag"}
    assert got["labels.container_runtime"].line == 10 and "not read by Magnum driver k8s_cluster_api_debian" \
        in got["labels.container_runtime"].detail
    assert got["labels.kube_tag"].line == 11 and "expects 'v' and a full version (e.g. v1.36.1)" \
        in got["labels.kube_tag"].detail
    # magnum-capi-helm takes the version from the image: kube_tag is not its label, nor rendered.
    helm = parse(edit(edit(TEXT, "k8s_cluster_api_debian", "k8s_capi_helm_v1"), "os_distro: debian",
                      "os_distro: ubuntu"))
    out = T.render(T.resolve(helm, state("ubuntu")))
    assert "kube_tag" not in out["cluster_template"]["labels"]
    assert out["cluster_template"]["driver"] == "k8s_capi_helm_v1"
    # Labels nodeforge sets are refused in the file.
    with pytest.raises(ConfigError, match=r"tmpl.yaml:10: labels.nodeforge_scope: key 'nodeforge_scope': labels "
                                          r"starting 'nodeforge_' are set by nodeforge"):
        parse(edit(TEXT, '  keystone_auth_enabled: "true"\n', '  keystone_auth_enabled: "true"\n'
                   '  nodeforge_scope: x\n'))


def test_zero_disk_flavor_needs_boot_volume_size():
    found = issues(parse(), state(disk=0))
    assert [(i.kind, i.subject, i.field, i.line) for i in found] == [
        ("boot_volume", "default-master", "node_groups[0].flavor", 6),
        ("boot_volume", "default-worker", "node_groups[1].flavor", 7)]
    assert "has no root disk (disk 0): Magnum refuses it unless the label boot_volume_size is > 0" in found[0].detail
    ok = parse(edit(TEXT, '  keystone_auth_enabled: "true"\n', '  keystone_auth_enabled: "true"\n'
                    '  boot_volume_size: 40\n'))
    assert T.render(T.resolve(ok, state(disk=0)))["cluster_template"]["labels"]["boot_volume_size"] == "40"


def test_networks_missing_not_external_ambiguous_and_by_id():
    t = parse(edit(edit(TEXT, "external_network_id: public", "external_network_id: private"),
                   "fixed_subnet: private-subnet", "fixed_subnet: nope"))
    got = {i.field: i for i in issues(t, state())}
    assert got["magnum.external_network_id"].line == 12 and got["magnum.external_network_id"].detail == (
        "external network 'private' not found in Neutron (a network of that name exists but is not external: "
        "router:external is false)")
    assert got["magnum.fixed_subnet"].located() == "tmpl.yaml:14: magnum.fixed_subnet: subnet 'nope' not found " \
                                                   "in Neutron"
    st = state()
    st.networks.append({"id": "net-private-2", "name": "private", "is_router_external": False})
    [i] = issues(parse(), st)
    assert "2 networks are named 'private' (net-private, net-private-2): use the ID" in i.detail
    by_id = parse(edit(TEXT, "fixed_network: private", "fixed_network: net-private-2"))
    assert T.resolve(by_id, st).networks["fixed_network"] == "net-private-2"
    # ... whose subnet is not on it.
    assert any("subnet 'private-subnet' is not on network 'net-private-2'" in i.detail for i in issues(by_id, st))
    # Without Neutron in the catalog, a template naming networks cannot be checked: said so.
    st.networks = st.subnets = None
    assert {i.field for i in issues(parse(), st)} == {"magnum.external_network_id", "magnum.fixed_network",
                                                       "magnum.fixed_subnet"}


def test_network_driver_the_driver_does_not_support():
    [i] = issues(parse(edit(TEXT, "network_driver: calico", "network_driver: flannel")), state())
    assert i.located() == ("tmpl.yaml:11: magnum.network_driver: network_driver 'flannel': k8s_cluster_api_debian "
                           "supports calico, cilium only")
