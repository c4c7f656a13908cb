"""Cluster templates: declarations validated, image chosen by selector from
catalog records, every broken link reported precisely, render body and
command. Pure: Glance/Nova/Ironic records in (tests/data/templates)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from nodeforge.magnum import templates as T
from nodeforge.compute import flavors as F
from nodeforge.errors import ConfigError
from nodeforge.schema.loader import load_yaml_tree

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "templates"


def image(id_, minor="1.36", patch="0", variant="baremetal", approved=True, hidden=False, promoted="2026-01-02",
          scope="platform", os_distro="debian"):
    return {"id": id_, "name": f"nodeforge-k8s-{minor}.{patch}-{variant}", "status": "active",
            "tags": ["nodeforge", f"nodeforge-k8s-{minor}", f"nodeforge-{variant}",
                     "nodeforge-approved" if approved else "nodeforge-candidate"],
            "os_hidden": hidden, "kube_version": f"v{minor}.{patch}", "os_distro": os_distro, "os_version": "12",
            "nodeforge_k8s_minor": minor, "nodeforge_variant": variant, "nodeforge_role": "image",
            "nodeforge_promoted_at": promoted, **({"nodeforge_scope": scope} if scope else {})}


def flavor(name, rc, traits, disk=446):
    s = F.FlavorSpec(name=name, resource_class=rc, required_traits=tuple(traits))
    return {"id": f"id-{name}", "name": name, "disk": disk, "extra_specs": s.extra_specs()}


# Neutron as the local cloud seeds it: an external 'public', a tenant 'private' with 'private-subnet'.
NETWORKS = [{"id": "net-public", "name": "public", "is_router_external": True},
            {"id": "net-private", "name": "private", "is_router_external": False}]
SUBNETS = [{"id": "sub-private", "name": "private-subnet", "network_id": "net-private"}]


def node(rc, traits, state="available", maintenance=False):
    return {"resource_class": rc, "traits": traits, "provision_state": state, "maintenance": maintenance}


@pytest.fixture
def state() -> T.CloudState:
    return T.CloudState(
        images=[image("old", promoted="2026-01-01", hidden=True), image("new"), image("cand", approved=False),
                image("other", minor="1.35")],
        flavors=[flavor("bm.compute", "baremetal-compute", ["CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"]),
                 flavor("bm.storage", "baremetal-storage", ["CUSTOM_HDD_POOL", "CUSTOM_NIC_10G"]),
                 {"id": "id-m1", "name": "m1.large", "disk": 40, "extra_specs": {}}],
        nodes=[node("baremetal-compute", ["CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"]) for _ in range(3)]
        + [node("baremetal-compute", ["CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"], maintenance=True),
           node("baremetal-storage", ["CUSTOM_HDD_POOL", "CUSTOM_NIC_10G"])],
        networks=[dict(n) for n in NETWORKS], subnets=[dict(s) for s in SUBNETS])


SHIPPED = ROOT / "manifests" / "templates" / "k8s-1.36-baremetal.yaml"


def shipped_doc(**changes):
    """The shipped template's document (line numbers kept), without its scope: any scope's image qualifies."""
    doc = load_yaml_tree(SHIPPED)
    del doc["scope"]
    doc.update(changes)
    return doc


@pytest.fixture
def template() -> T.Template:
    assert "k8s-1.36-baremetal" in T.load_all(ROOT / "manifests" / "templates")
    return T.parse(shipped_doc(), str(SHIPPED))


def test_render_picks_the_newest_approved_visible_image(template, state):
    res = T.resolve(template, state)
    assert res.ok, res.issues
    out = T.render(res)
    body = out["cluster_template"]
    assert body["image_id"] == "new" and body["flavor_id"] == "id-bm.compute"
    # No Magnum driver serves 'bm': a vm template of the cluster-api driver, with bare-metal flavors.
    assert body["server_type"] == "vm" and body["driver"] == "k8s_cluster_api_debian"
    assert out["cluster_type"] == {"server_type": "vm", "os_distro": "debian", "coe": "kubernetes"}
    assert "os_distro" not in body          # not a Magnum field: Magnum takes it from the image
    assert body["labels"] == {"kube_tag": "v1.36.0", "auto_healing_enabled": "false",
                              "keystone_auth_enabled": "true"}
    # Networks by name in the file, by Neutron ID in the body.
    assert (body["external_network_id"], body["fixed_network"], body["fixed_subnet"]) == \
        ("net-public", "net-private", "sub-private")
    assert out["cluster_defaults"] == {"master_count": 1, "node_count": 2}
    cmd = shlex.split(out["commands"][0])
    assert cmd[:6] == ["openstack", "coe", "cluster", "template", "create", "k8s-1.36-baremetal"]
    assert cmd[cmd.index("--image") + 1] == "new" and "kube_tag=v1.36.0" in cmd
    assert cmd[cmd.index("--server-type") + 1] == "vm" and cmd[cmd.index("--driver") + 1] == "k8s_cluster_api_debian"
    assert "--floating-ip-disabled" in cmd
    assert out["commands"][1].startswith("openstack coe nodegroup create CLUSTER storage --flavor id-bm.storage")
    assert json.dumps(out)  # serialisable for -o json


def test_every_broken_link_is_reported(template, state):
    state.images = [i for i in state.images if i["id"] != "new"]
    state.flavors = [f for f in state.flavors if f["name"] != "bm.storage"]
    state.nodes[0]["provision_state"] = "active"
    issues = [str(i) for i in T.resolve(template, state).issues]
    assert issues == [
        "image (default-master, default-worker, storage): no approved image for Kubernetes 1.36, variant "
        "baremetal, os debian 12: old (nodeforge-k8s-1.36.0-baremetal) is hidden (superseded or withdrawn); "
        "cand (nodeforge-k8s-1.36.0-baremetal) is not approved (candidate)",
        "flavor (storage): flavor 'bm.storage' not found in Nova",
        "capacity (default-master, default-worker): flavor 'bm.compute' has 2 available node(s) (resource class "
        "CUSTOM_BAREMETAL_COMPUTE, traits CUSTOM_LOCAL_NVME, CUSTOM_NIC_25G; 'available', not in maintenance); "
        "the template needs 3 (default-master 1 + default-worker 2)"]
    with pytest.raises(T.TemplateBroken, match="3 broken link"):
        T.render(T.resolve(template, state))


def test_kube_tag_minor_mismatch_and_vm_flavor_not_baremetal(template, state):
    doc = shipped_doc()
    doc["labels"]["kube_tag"] = "v1.35.4"
    doc["node_groups"][2]["flavor"] = "m1.large"
    issues = [str(i) for i in T.resolve(T.parse(doc, "t"), state).issues]
    assert issues[0] == ("kube_version (default-master, default-worker, storage): image new "
                         "(nodeforge-k8s-1.36.0-baremetal) is Kubernetes v1.36.0 (minor 1.36) but the template's "
                         "kube_tag v1.35.4 is minor 1.35")
    assert issues[1].startswith("flavor (storage): flavor 'm1.large' is not bare-metal-shaped: no resources:CUSTOM_")
    # The template's own minor moves on: 1.35 picks the 1.35 image, whose version the kube_tag contradicts ...
    doc["labels"]["kube_tag"] = "v1.36.0"
    doc["kubernetes"] = "1.35"
    issues = [str(i) for i in T.resolve(T.parse(doc, "t"), state).issues]
    assert issues[0].endswith("image other (nodeforge-k8s-1.35.0-baremetal) is Kubernetes v1.35.0 (minor 1.35) "
                              "but the template's kube_tag v1.36.0 is minor 1.36")
    # ... and without a 1.35 image the selector finds nothing, saying which minors exist.
    del doc["labels"]["kube_tag"]
    state.images = [i for i in state.images if i["id"] != "other"]
    issues = [str(i) for i in T.resolve(T.parse(doc, "t"), state).issues]
    assert "no approved image for Kubernetes 1.35, variant baremetal, os debian 12: the catalog has none" \
        in issues[0] and "approved baremetal images exist for Kubernetes 1.36" in issues[0]


def test_invalid_template_reports_every_problem():
    with pytest.raises(ConfigError) as exc:
        T.parse(load_yaml_tree(DATA / "invalid.yaml"), "invalid.yaml")
    text = str(exc.value)
    for expected in ('invalid.yaml:2: kubernetes: expected a Kubernetes minor like "1.36"',
                     "invalid.yaml:3: image.id: unknown key (allowed: k8s, os_distro, os_version); images are "
                     "chosen by selector, never by ID",
                     "invalid.yaml:4: node_groups: exactly one master group and at least one worker group",
                     "invalid.yaml:5: node_groups[0].variant: got the string 'metal', expected 'vm' or 'baremetal'",
                     "invalid.yaml:6: magnum.image_id: unknown key (allowed: keypair_id,",
                     "not a cluster-template field nodeforge passes through"):
        assert expected in text, (expected, text)
    assert len(text.splitlines()) == len(exc.value.details["problems"]) == 5, text


@pytest.mark.parametrize("change,key,detail", [
    ({"kubernetes": 1.3}, "kubernetes", "expected a string, got the number 1.3"),      # unquoted 1.30
    ({"labels": {"auto_healing_enabled": True}}, "labels.auto_healing_enabled", "got the boolean true"),
    ({"labels": {"x": 1.5}}, "labels.x", "got the number 1.5"),
    ({"image": {"os_distro": "debian", "os_version": 12.10}}, "image.os_version", "got the number 12.1"),
    ({"magnum": {"apiserver_port": 0}}, "magnum.apiserver_port", "1-65535"),
    ({"magnum": {"http_proxy": "http://u:pw@proxy:3128"}}, "magnum.http_proxy", "credentials"),
    ({"magnum": {"docker_volume_size": float("inf")}}, "magnum.docker_volume_size", "inf"),
    ({"node_groups": [{"role": "master", "variant": "vm", "flavor": "f", "count": 0},
                      {"variant": "vm", "flavor": "f"}]}, "node_groups[0].count", "a master group needs count >= 1"),
])
def test_implicit_typing_and_ranges_never_change_a_value_silently(change, key, detail):
    """Before, an unquoted 1.30 became the minor "1.3", a label true became "True", os_version 12.10 "12.1",
    a port 0 and a proxy URL with its password went through (each accepted before)."""
    doc = {**shipped_doc(), **change}
    with pytest.raises(ConfigError) as exc:
        T.parse(doc, "t.yaml")
    assert any(f": {key}: " in line and detail in line for line in str(exc.value).splitlines()), str(exc.value)
    assert "pw@" not in str(exc.value)


def test_scope_restricts_the_image_choice_and_the_chosen_scope_is_said(template, state):
    def scoped(img, scope):
        return dict(img, nodeforge_scope=scope)

    # Another declaration's image, promoted later, is the newest of the group.
    state.images = [scoped(i, "platform") if i["id"] != "other" else i for i in state.images] + [
        scoped(image("theirs", promoted="2026-01-05"), "team-b")]
    # Without scope: any scope's image qualifies (the newest), and the output says whose it is.
    res = T.resolve(template, state)
    assert res.images["baremetal"]["id"] == "theirs"
    out = T.render(res)
    assert out["image_scope"] == "any" and out["images"] == {"baremetal": {"id": "theirs", "scope": "team-b"}}
    assert res.to_dict()["images"]["baremetal"]["scope"] == "team-b"
    # With scope: only that scope's images.
    doc = shipped_doc()
    doc["scope"] = "platform"
    res = T.resolve(T.parse(doc, "t"), state)
    out = T.render(res)
    assert out["cluster_template"]["image_id"] == "new"
    assert out["image_scope"] == "platform" and out["images"]["baremetal"] == {"id": "new", "scope": "platform"}
    # A scope with no approved image of the group says so, and names the scopes that have one.
    doc["scope"] = "team-c"
    [issue] = [str(i) for i in T.resolve(T.parse(doc, "t"), state).issues if i.kind == "image"]
    assert "no approved image for Kubernetes 1.36, variant baremetal, os debian 12, scope team-c: the catalog " \
           "has none" in issue and "approved ones of other scopes: platform, team-b" in issue
    doc["scope"] = "Not Valid"
    with pytest.raises(ConfigError, match="scope: .*1-63 characters of a-z 0-9"):
        T.parse(doc, "t")


@pytest.mark.parametrize("data,line,detail", [
    (b"name: k8s\ndescription: caf\xe9\n", 2, "not UTF-8 text"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", 1, "not a text file"),
    (b"name: k8s\nlabels: " + b"{a: " * 20000 + b"1" + b"}" * 20000 + b"\n", 2, "nested more than 64 levels deep"),
])
def test_binary_non_utf8_or_deeply_nested_template_file(tmp_path, capsys, data, line, detail):
    from nodeforge import cli

    path = tmp_path / "t.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        T.load_all(tmp_path)
    assert str(exc.value).startswith(f"{path}:{line}: ") and detail in str(exc.value)
    capsys.readouterr()
    assert cli.main(["--os-cloud", "no-such-cloud", "template", "check", "--templates", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}:{line}: " in err and "Traceback" not in err
