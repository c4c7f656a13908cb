"""Bare-metal flavors: the file (profiles-derived), the pure plan (field by
field; immutable drift needs --replace), the flavor shape, capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.compute import flavors as F
from nodeforge.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "flavors.yaml"


def spec(**kw) -> F.FlavorSpec:
    return F.FlavorSpec(**{"name": "bm.x", "resource_class": "baremetal-x", "required_traits": ("CUSTOM_A",),
                           "vcpus": 8, "ram": 8192, "disk": 100, **kw})


def nova(s: F.FlavorSpec, **kw) -> dict:
    """The flavor Nova would return for ``s``."""
    return {"id": "f-1", "name": s.name, "vcpus": s.vcpus, "ram": s.ram, "disk": s.disk, "swap": 0,
            "OS-FLV-EXT-DATA:ephemeral": 0, "os-flavor-access:is_public": s.is_public,
            "description": s.description, "extra_specs": s.extra_specs(), "projects": [], **kw}


def test_manifest_derives_resource_class_and_traits_from_profiles():
    ff = F.load(MANIFEST)
    compute = ff.by_name()["bm.compute"]
    assert compute.extra_specs() == {
        "resources:CUSTOM_BAREMETAL_COMPUTE": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
        "resources:DISK_GB": "0", "trait:CUSTOM_LOCAL_NVME": "required", "trait:CUSTOM_NIC_25G": "required",
        "nodeforge:managed": "true"}
    assert ff.by_name()["bm.storage"].resource_class == "baremetal-storage"


def test_invalid_file_lists_every_problem(tmp_path):
    f = tmp_path / "flavors.yaml"
    f.write_text("version: 1\nprofiles: " + str(ROOT / "manifests" / "hardware-profiles.yaml") + "\nflavors:\n"
                 "  - {name: a, profile: nope}\n"
                 "  - {name: b, vcpus: 0, access: private}\n"
                 "  - {name: a, resource_class: x, extra_specs: {'resources:VCPU': '1'}, colour: red}\n")
    with pytest.raises(ConfigError) as exc:
        F.load(f)
    text = str(exc.value)
    for expected in ("'nope' is not in", "flavors[1] (b): needs resource_class or profile", "vcpus: must be",
                     "access: 'public' or", "duplicate flavor 'a'", "'resources:VCPU' is set by nodeforge",
                     "unknown key 'colour'"):
        assert expected in text, (expected, text)


def test_plan_create_noop_update_drift_replace():
    s = spec(description="d")
    assert F.plan_flavor(s, None, ()).action is F.Action.CREATE
    assert F.plan_flavor(s, nova(s), ()).action is F.Action.NOOP
    p = F.plan_flavor(s, nova(s, description="old", extra_specs={**s.extra_specs(), "trait:CUSTOM_B": "required"}),
                      ())
    assert p.action is F.Action.UPDATE
    assert [(c.field, c.current, c.desired) for c in p.changes] == [
        ("description", "old", "d"), ("extra_specs.trait:CUSTOM_B", "required", None)]
    drifted = nova(s, vcpus=4, ram=4096)
    p = F.plan_flavor(s, drifted, ())
    assert p.action is F.Action.DRIFT and "--replace" in p.note
    assert [(c.field, c.current, c.desired, c.mutable) for c in p.changes] == [
        ("vcpus", 4, 8, False), ("ram", 4096, 8192, False)]
    assert F.plan_flavor(s, drifted, (), replace=True).action is F.Action.REPLACE


def test_plan_private_access_by_project():
    s = spec(is_public=False, projects=("p1",))
    p = F.plan_flavor(s, nova(s, projects=["p0"]), ("p1",))
    assert p.action is F.Action.UPDATE
    assert [(c.field, c.current, c.desired) for c in p.changes] == [("projects", ["p0"], ["p1"])]


def test_shape_problems_and_capacity():
    good = nova(spec())
    assert F.Shape.of(good).problems() == []
    vm = {"id": "v", "name": "m1.small", "extra_specs": {}}
    assert "not a bare-metal flavor" in F.Shape.of(vm).problems()[0]
    half = nova(spec(), extra_specs={"resources:CUSTOM_BAREMETAL_X": "1", "resources:VCPU": "0"})
    assert "does not zero resources:MEMORY_MB, resources:DISK_GB" in F.Shape.of(half).problems()[0]
    nodes = [{"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": False},
             {"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": True},
             {"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "active",
              "maintenance": False},
             {"resource_class": "baremetal-x", "traits": [], "provision_state": "available", "maintenance": False},
             {"resource_class": "other", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": False}]
    [row] = F.capacity([good, vm], nodes)
    assert (row["flavor"], row["available"], row["active"], row["maintenance"], row["total"]) == ("bm.x", 1, 1, 1, 3)
