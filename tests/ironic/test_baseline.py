"""A hardware profile's baseline (nodeforge/ironic/baseline.py): the example loads; what can be
judged without a node is refused when the file is loaded, naming file, line and field."""

from __future__ import annotations

import dataclasses

import shutil
from pathlib import Path

import pytest

from nodeforge.ironic import profiles
from nodeforge.schema import SchemaError

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
SHA = "3b0c6e1a9f1d4f0a5c2e7b8d9a6f4e3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e"


def test_the_example_loads_with_its_baseline():
    [p] = profiles.load(EXAMPLES / "hardware-profiles-baseline.yaml").profiles
    assert p.baseline.bios == {"ProcTurboMode": "Disabled", "NumCores": 2, "QuietBoot": False}
    assert p.baseline.target_raid_config() == {"logical_disks": [{"size_gb": "MAX", "raid_level": "1",
                                                                   "is_root_volume": True}]}
    assert p.baseline.root_device == {"size": ">= 8", "rotational": False}
    assert [f["component"] for f in p.baseline.firmware] == ["bmc"]


def test_profiles_without_a_baseline_have_none():
    assert all(p.baseline is None for p in profiles.load("manifests/hardware-profiles.yaml").profiles)


def _profile(tmp_path, baseline: str) -> Path:
    shutil.copy(EXAMPLES / "bios-registry-qemu.yaml", tmp_path / "registry.yaml")
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nprofiles:\n  - name: a\n    resource_class: x\n    match: {vendor: QEMU}\n"
                    "    baseline:\n" + "".join(f"      {line}\n" for line in baseline.splitlines()))
    return path


REFUSED = {
    # baseline (indented under 'baseline:' from line 7), line, key path, words
    "unknown BIOS setting": ("bios_registry: registry.yaml\nbios: {TurboBoostX: Enabled}", 8,
                             "baseline.bios.TurboBoostX", "not in the BIOS registry registry.yaml"),
    "value outside the registry": ("bios_registry: registry.yaml\nbios: {ProcTurboMode: Maybe}", 8,
                                   "baseline.bios.ProcTurboMode", "'Maybe' is not one of Enabled, Disabled"),
    "integer out of bounds": ("bios_registry: registry.yaml\nbios: {NumCores: 500}", 8, "baseline.bios.NumCores",
                              "500 is outside 1..64"),
    "read-only setting": ("bios_registry: registry.yaml\nbios: {SerialNumber: X1}", 8, "baseline.bios.SerialNumber",
                          "read-only"),
    "settings without a registry": ("bios: {ProcTurboMode: Disabled}", 7, "baseline.bios", "need 'bios_registry'"),
    "registry missing": ("bios_registry: nowhere.yaml\nbios: {ProcTurboMode: Disabled}", 7,
                         "baseline.bios_registry", "file not found"),
    "unpinned firmware": ("firmware:\n  - {component: bmc, version: '1.1', url: 'https://fw.example/bmc.bin'}", 8,
                          "baseline.firmware[0].sha256", "missing key 'sha256'"),
    "firmware not on http(s)": (f"firmware:\n  - {{component: bmc, version: '1.1', url: 'file:///etc/x', "
                                f"sha256: {SHA}}}", 8, "baseline.firmware[0].url", "http(s)://"),
    "unknown RAID level": ("raid:\n  - {size_gb: 100, raid_level: '7'}", 8, "baseline.raid[0].raid_level", "'7'"),
    "two root volumes": ("raid:\n  - {size_gb: 100, raid_level: '1', is_root_volume: true}\n"
                         "  - {size_gb: 100, raid_level: '0', is_root_volume: true}", 9,
                         "baseline.raid[1].is_root_volume", "a second root volume"),
    "drives without their controller": ("raid:\n  - {size_gb: MAX, raid_level: '1', physical_disks: [Disk1, Disk2]}",
                                        8, "baseline.raid[0].physical_disks", "needs 'controller' too"),
    "unknown root device hint": ("root_device: {disk_label: sda}", 7, "baseline.root_device.disk_label",
                                 "unknown key"),
    "size hint without a number": ("root_device: {size: '>= big'}", 7, "baseline.root_device.size",
                                   "not a size hint"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_baseline_is_refused_when_loaded_naming_file_line_and_field(tmp_path, case):
    baseline, line, keypath, words = REFUSED[case]
    path = _profile(tmp_path, baseline)
    with pytest.raises(SchemaError) as exc:
        profiles.load(path)
    text = str(exc.value)
    assert f"{path}:{line}: profiles[0].{keypath}" in text and words in text, text


# --- plan: one node against the baseline (Ironic's views of the node as its API returns them) ----

def _bios(**values) -> list[dict]:
    registry = {"ProcTurboMode": ["Enabled", "Disabled"], "NumCores": None, "QuietBoot": None}
    return [{"name": k, "value": v, "allowable_values": registry.get(k), "read_only": False}
            for k, v in values.items()]


GB = 10 ** 9
DISKS = [{"name": "/dev/sda", "size": 480 * GB}, {"name": "/dev/sdb", "size": 480 * GB}]
FIRMWARE = [{"component": "bmc", "current_version": "1.0.9"}, {"component": "bios", "current_version": "2.4"}]


@pytest.fixture
def example():
    [p] = profiles.load(EXAMPLES / "hardware-profiles-baseline.yaml").profiles
    return p.baseline


def test_a_node_at_its_baseline_has_nothing_to_do(example):
    plan = profiles_plan(example, bios=_bios(ProcTurboMode="Disabled", NumCores="2", QuietBoot="false"),
                         raid_config={"logical_disks": [{"size_gb": "MAX", "raid_level": "1", "is_root_volume": True}]},
                         firmware=[{"component": "bmc", "current_version": "1.2.0"}],
                         root_device={"size": ">= 8", "rotational": False})
    assert plan.items == [] and plan.problems == [] and plan.clean_steps() == []


def test_each_difference_is_an_item_with_its_step_and_the_steps_are_ironic_s(example):
    plan = profiles_plan(example, bios=_bios(ProcTurboMode="Enabled", NumCores="2", QuietBoot="true"),
                         raid_config=None, firmware=FIRMWARE)
    assert [(i.item, i.current, i.steps) for i in plan.items] == [
        ("bios.ProcTurboMode", "Enabled", (("bios", "apply_configuration"),)),
        ("bios.QuietBoot", "true", (("bios", "apply_configuration"),)),
        ("raid", [], (("raid", "delete_configuration"), ("raid", "create_configuration"))),
        ("firmware.bmc", "1.0.9", (("firmware", "update"),)),
        ("root_device", None, ())]                  # a node property: set by a PATCH, not a step
    assert [i.needs_agent for i in plan.items] == [False, False, True, True, False]
    steps = plan.clean_steps()
    assert steps[0] == {"interface": "bios", "step": "apply_configuration",
                        "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"},
                                              {"name": "QuietBoot", "value": False}]}}
    assert [s["step"] for s in steps[1:]] == ["delete_configuration", "create_configuration", "update"]
    assert steps[3]["args"]["settings"] == [{"component": "bmc",
                                             "url": "http://10.0.2.100:8080/firmware/bmc-1.1.0.bin"}]


def test_an_active_node_is_planned_but_deferred(example):
    plan = profiles_plan(example, bios=_bios(ProcTurboMode="Enabled", NumCores="2", QuietBoot="false"),
                         provision_state="active")
    assert plan.deferred and [i.item for i in plan.items][0] == "bios.ProcTurboMode" and plan.clean_steps() == []


def test_plan_time_problems_name_the_profile_file_line_and_field(example):
    path = EXAMPLES / "hardware-profiles-baseline.yaml"
    narrow = [{"name": "ProcTurboMode", "value": "Enabled", "allowable_values": ["Enabled"]},
              {"name": "NumCores", "value": "2"}]          # no QuietBoot on this node
    plan = profiles_plan(example, bios=narrow, disks=DISKS[:1])
    text = [str(p) for p in plan.problems]
    assert any(t.startswith(f"{path}:16: profiles[0].baseline.bios.ProcTurboMode: 'Disabled' is outside node n1's "
                            "registry (Enabled)") for t in text), text
    assert any("baseline.bios.QuietBoot: node n1's BIOS has no setting QuietBoot" in t for t in text), text
    assert any(t.startswith(f"{path}:18: profiles[0].baseline.raid[0].size_gb: RAID 1 needs 2 disks; node n1 has 1")
               for t in text), text
    assert plan.clean_steps() == []                       # nothing is applied while the plan has problems


def test_a_raid_size_larger_than_the_disks_hold_is_a_plan_problem(tmp_path):
    path = _profile(tmp_path, "raid:\n  - {size_gb: 900, raid_level: '1', is_root_volume: true}")
    [p] = profiles.load(path).profiles
    plan = profiles_plan(p.baseline, disks=DISKS)
    [problem] = plan.problems
    assert str(problem).startswith(f"{path}:8: profiles[0].baseline.raid[0].size_gb: 900 GB is more than RAID 1 "
                                   "over node n1's disks holds (480 GB)"), str(problem)


def test_firmware_exact_and_minimum(tmp_path):
    from nodeforge.ironic import baseline as bl

    for match, current, differs in (("minimum", "1.10", False), ("minimum", "1.1.9", True), ("exact", "1.10", True),
                                    ("exact", "1.2", False)):
        path = _profile(tmp_path, f"firmware:\n  - {{component: bmc, version: '1.2', match: {match}, "
                                  f"url: 'https://fw.example/bmc.bin', sha256: {SHA}}}")
        [p] = profiles.load(path).profiles
        plan = bl.plan_node(p.baseline, "n1", firmware=[{"component": "bmc", "current_version": current}])
        assert bool(plan.items) is differs, (match, current)


def profiles_plan(baseline, **node):
    from nodeforge.ironic import baseline as bl

    return bl.plan_node(baseline, "n1", **node)


def test_what_ironic_s_redfish_raid_refuses_mid_cleaning_is_a_problem_at_plan_time(example):
    """A MAX volume without its drives, and drives the controller does not have (ids from the BMC)."""
    drives = [{"id": f"Disk{i}", "size": 960 * 10 ** 9} for i in (1, 2)]
    plan = profiles_plan(example, raid_config=None, disks=drives, raid_interface="redfish")
    assert [str(p).split(": ", 2)[1:] for p in plan.problems] == [
        ["profiles[0].baseline.raid[0].size_gb", "MAX needs physical_disks on node n1 (Ironic's redfish RAID "
                                                 "interface picks the drives itself only for a size in GB)"]]
    assert profiles_plan(example, raid_config=None, disks=drives, raid_interface="agent").problems == []
    named = dataclasses.replace(example, raid=({**example.raid[0], "controller": "1",
                                                 "physical_disks": ["Disk1", "Disk9"]},))
    [problem] = profiles_plan(named, raid_config=None, disks=drives, raid_interface="redfish").problems
    assert str(problem).endswith("raid[0].physical_disks: node n1 has no drive Disk9 (it has Disk1, Disk2)")
