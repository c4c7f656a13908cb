"""The live audit as a table: one change to a clean cloud -> the findings it must produce
(pure: plain dicts shaped like Magnum/Glance/Nova/Ironic answers)."""

from __future__ import annotations

import pytest

from nodeforge.magnum import audit as A
from nodeforge.magnum.live import users_of
from tests.magnum import state_factory as S

MAINTAINED = A.Maintained(("1.34", "1.35", "1.36"), "option")


def kinds(parts, maintained=MAINTAINED) -> list[tuple[str, str]]:
    return sorted((f.kind, f.subject) for f in A.audit(S.state_of(parts), maintained))


def test_clean_cloud_has_no_findings():
    parts = S.healthy()
    assert A.audit(S.state_of(parts), MAINTAINED) == []
    report = A.report(S.state_of(parts), MAINTAINED)
    assert report["ok"] is True and report["counts"] == {"templates": 1, "clusters": 1, "findings": 0}
    [t] = report["templates"]
    assert t["clusters"] == [{"name": "prod", "uuid": parts["clusters"][0]["uuid"], "status": "CREATE_COMPLETE",
                              "kube_tag": "v1.36.4", "template_version": None, "image_approved": True}]


def _hide(p):
    p["img"]["os_hidden"] = True


def _candidate(p):
    p["img"]["tags"] = [t for t in p["img"]["tags"] if t != "nodeforge-approved"] + ["nodeforge-candidate"]


def _foreign(p):
    p["img"]["tags"] = []


def _retired(p):
    p["img"]["tags"].append("nodeforge-superseded")
    p["img"]["os_hidden"] = True


def _deactivated(p):
    p["img"]["status"] = "deactivated"


def _deleted(p):
    p["images"].clear()


def _pending_delete(p):
    p["img"]["status"] = "pending_delete"


def _queued(p):
    p["img"]["status"] = "queued"


def _kube_mismatch(p):
    p["template"]["labels"]["kube_tag"] = "v1.36.3"


def _no_kube_tag(p):
    p["template"]["labels"] = {}


def _old_minor(p):
    p["img"]["kube_version"] = "v1.33.9"
    p["template"]["labels"]["kube_tag"] = "v1.33.9"


def _bad_tag(p):
    p["template"]["labels"]["kube_tag"] = "latest"


def _flavor_missing(p):
    p["template"]["flavor_id"] = "no-such-flavor"


def _not_bm_shaped(p):
    del p["flavor"]["extra_specs"]["resources:DISK_GB"]


def _no_node(p):
    p["nodes"][0]["provision_state"] = "active"


def _maintenance(p):
    p["nodes"][0]["maintenance"] = True


def _other_rc(p):
    p["nodes"][0]["resource_class"] = "baremetal-storage"


def _missing_trait(p):
    p["nodes"][0]["traits"] = []


def _zero_disk(p):
    p["flavor"]["disk"] = 0


def _bm_server_type(p):
    p["template"]["server_type"] = "bm"
    p["template"]["driver"] = None


def _unknown_driver(p):
    p["template"]["driver"] = "k8s_fedora_coreos_v1"


def _wrong_driver(p):
    p["template"]["driver"] = "k8s_capi_helm_v1"          # ubuntu and flatcar only


def _unserved_distro(p):
    p["template"]["driver"] = None
    p["template"]["cluster_distro"] = "fedora-coreos"


def _gone_template(p):
    p["clusters"][0]["cluster_template_id"] = "ct-gone"


CASES = [
    ("hidden image", _hide, [("cluster_image", "prod"), ("image_hidden", "image_id")]),
    ("candidate image", _candidate, [("cluster_image", "prod"), ("image_not_approved", "image_id")]),
    ("image not nodeforge's", _foreign, [("cluster_image", "prod"), ("image_not_approved", "image_id")]),
    ("retired (superseded) image", _retired, [("cluster_image", "prod"), ("image_retired", "image_id")]),
    ("deactivated image", _deactivated, [("cluster_image", "prod"), ("image_retired", "image_id")]),
    ("deleted image", _deleted, [("cluster_image", "prod"), ("image_missing", "image_id")]),
    ("pending_delete image", _pending_delete, [("cluster_image", "prod"), ("image_deleted", "image_id")]),
    ("queued image", _queued, [("cluster_image", "prod"), ("image_status", "image_id")]),
    ("kube_tag not the image's", _kube_mismatch, [("kube_version", "image_id")]),
    ("no kube_tag", _no_kube_tag, [("kube_tag", "labels.kube_tag")]),
    ("unmaintained minor", _old_minor, [("kube_tag", "labels.kube_tag")]),
    ("kube_tag not a version", _bad_tag, [("kube_tag", "labels.kube_tag")]),
    ("flavor missing", _flavor_missing, [("flavor_missing", "flavor_id")]),
    ("flavor not bare-metal-shaped", _not_bm_shaped, [("flavor_shape", "flavor_id"), ("flavor_shape", "master_flavor_id")]),
    ("node deployed", _no_node, [("capacity", "flavor_id"), ("capacity", "master_flavor_id")]),
    ("node in maintenance", _maintenance, [("capacity", "flavor_id"), ("capacity", "master_flavor_id")]),
    ("node of another resource class", _other_rc, [("capacity", "flavor_id"), ("capacity", "master_flavor_id")]),
    ("node without the required trait", _missing_trait, [("capacity", "flavor_id"), ("capacity", "master_flavor_id")]),
    ("zero root disk, no boot_volume_size", _zero_disk, [("boot_volume", "flavor_id"), ("boot_volume", "master_flavor_id")]),
    ("server_type bm", _bm_server_type, [("driver", "server_type")]),
    ("unknown driver", _unknown_driver, [("driver", "driver")]),
    ("driver does not serve the distro", _wrong_driver, [("driver", "driver")]),
    ("no driver serves the distro", _unserved_distro, [("driver", "server_type")]),
    ("cluster's template gone", _gone_template, [("cluster_template", "prod")]),
]


@pytest.mark.parametrize("change,expected", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_one_change_one_kind_of_finding(change, expected):
    parts = S.healthy()
    change(parts)
    assert kinds(parts) == sorted(expected)


def test_boot_volume_size_label_satisfies_zero_disk():
    parts = S.healthy()
    parts["flavor"]["disk"] = 0
    parts["template"]["labels"]["boot_volume_size"] = "40"
    assert kinds(parts) == []


def test_vm_flavor_needs_no_nodes():
    parts = S.healthy()
    vm = S.vm_flavor()
    parts["flavors"].append(vm)
    parts["template"]["flavor_id"] = vm["name"]          # by name, as Magnum allows
    parts["template"]["master_flavor_id"] = vm["id"]
    parts["nodes"].clear()
    assert kinds(parts) == []


def test_image_by_name_and_ambiguous_name():
    parts = S.healthy()
    parts["template"]["image_id"] = parts["img"]["name"]
    assert kinds(parts) == []
    twin = dict(parts["img"], id="img-twin")
    parts["images"].append(twin)
    findings = A.audit(S.state_of(parts), MAINTAINED)
    assert [(f.kind, f.subject) for f in findings] == [("image_missing", "image_id"), ("cluster_image", "prod")]
    assert "2 images are named" in findings[0].detail


def test_hand_made_template_is_audited_like_nodeforge_s():
    """A template made by hand (no nodeforge label, no driver) on a hidden image: flagged the same."""
    parts = S.healthy()
    hand = {"uuid": "ct-hand", "name": "by-hand", "coe": "kubernetes", "image_id": parts["img"]["id"],
            "flavor_id": parts["flavor"]["id"], "master_flavor_id": None, "labels": {"kube_tag": "v1.36.4"},
            "server_type": "vm", "cluster_distro": "debian", "driver": None}
    parts["templates"].append(hand)
    parts["img"]["os_hidden"] = True
    got = [(f.template, f.kind) for f in A.audit(S.state_of(parts), MAINTAINED)]
    assert ("by-hand", "image_hidden") in got and ("k8s-1.36-baremetal", "image_hidden") in got


def test_clusters_listed_per_template_and_flagged():
    parts = S.healthy()
    other = S.template(parts["img"], parts["flavor"], name="k8s-1.36-v2",
                       labels={"kube_tag": "v1.36.4", A.VERSION_LABEL: "2"})
    parts["templates"].append(other)
    parts["clusters"] += [S.cluster(other, name="b", status="CREATE_FAILED"),
                          S.cluster(other, name="a", kube_tag="v1.36.3")]
    parts["img"]["os_hidden"] = True
    report = A.report(S.state_of(parts), MAINTAINED)
    by = {t["template"]: t for t in report["templates"]}
    assert [(c["name"], c["status"], c["kube_tag"], c["template_version"], c["image_approved"])
            for c in by["k8s-1.36-v2"]["clusters"]] == [
        ("a", "CREATE_COMPLETE", "v1.36.3", "2", False), ("b", "CREATE_FAILED", "v1.36.4", "2", False)]
    flagged = sorted(f["cluster"] for f in report["findings"] if f["kind"] == "cluster_image")
    assert flagged == ["a", "b", "prod"]


@pytest.mark.parametrize("option,lock,images,expected", [
    (["1.30", "1.29"], ["1.34", "1.35", "1.36"], [], (("1.29", "1.30"), "option")),
    (None, ["1.33", "1.34", "1.35", "1.36"], [], (("1.34", "1.35", "1.36"), "lockfile")),
    (None, None, [S.image("1.31.1"), S.image("1.32.0"), S.image("1.33.2"), S.image("1.30.9"),
                  S.image("1.34.0", approved=False)], (("1.31", "1.32", "1.33"), "approved images")),
    (None, [], [], ((), "none")),
], ids=["option wins", "lockfile newest three", "approved images newest three", "nothing known"])
def test_maintained_minors_rule(option, lock, images, expected):
    m = A.maintained_minors(option, lock, images)
    assert (m.minors, m.source) == expected


def test_maintained_minor_sorting_is_numeric():
    m = A.maintained_minors(None, ["1.9", "1.10", "1.8", "1.11"], [])
    assert m.minors == ("1.9", "1.10", "1.11")


def test_no_maintained_minors_known_flags_nothing_about_minors():
    parts = S.healthy()
    parts["img"]["kube_version"] = parts["template"]["labels"]["kube_tag"] = "v1.20.1"
    assert kinds(parts, A.Maintained((), "none")) == []


def test_users_of_images():
    parts = S.healthy()
    by_name = S.template(parts["img"], parts["flavor"], name="by-name", image_id=parts["img"]["name"])
    users = users_of(parts["templates"] + [by_name], parts["clusters"], parts["images"])
    assert sorted(users[parts["img"]["id"]]) == sorted([
        f"template k8s-1.36-baremetal ({parts['template']['uuid']})", f"template by-name ({by_name['uuid']})",
        "cluster prod (CREATE_COMPLETE)"])


@pytest.mark.parametrize("text,version", [("v1.36.1", (1, 36, 1)), ("1.36", (1, 36, 0)), ("v1.36.1-rc.1", (1, 36, 1)),
                                          ("latest", None), ("", None), (None, None)])
def test_parse_version(text, version):
    assert A.parse_version(text) == version


@pytest.mark.parametrize("value", ["1.36.1", "latest", "1", ","])
def test_bad_maintained_option_is_a_usage_error_before_any_call(value, monkeypatch, capsys):
    from nodeforge import cli

    monkeypatch.setenv("OS_CLOUD", "no-such-cloud-anywhere")
    for cmd in (["template", "check", "--live"], ["template", "upgrade-plan"]):
        assert cli.main([*cmd, "--maintained", value]) == 2
        assert "--maintained" in capsys.readouterr().err
