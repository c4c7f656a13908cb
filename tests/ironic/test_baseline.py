"""A hardware profile's baseline (nodeforge/ironic/baseline.py): the example loads; what can be
judged without a node is refused when the file is loaded, naming file, line and field."""

from __future__ import annotations

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
