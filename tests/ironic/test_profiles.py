"""Hardware profiles: facts from captured Ironic inspection data (Redfish
inspection of the local cloud's two fleet shapes, and an agent-style GPU
node), rule evaluation with reasons, and whole-file validation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodeforge.errors import ConfigError
from nodeforge.ironic import profiles as P

DATA = Path(__file__).parent / "data"
MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "hardware-profiles.yaml"


def facts(name: str) -> P.Facts:
    d = json.loads((DATA / "facts" / f"{name}.json").read_text())
    return P.facts_from_inventory(d["inventory"], d["node"]["properties"])


def test_facts_from_redfish_inspection():
    f = facts("redfish-compute")
    assert f.source is P.Source.INSPECTION
    assert (f.cpu_count, f.cpu_arch, f.memory_gib, f.boot_mode) == (128, "x86_64", 256, "uefi")
    assert "Xeon" in f.cpu_model and (f.vendor, f.model) == ("Contoso", "CX-1100 Compute")
    assert [(d.kind, d.size_gb) for d in f.disks] == [("nvme", 480)]
    assert [n.speed_gbps for n in f.nics] == [25.0, 25.0]
    assert f.gpus is None  # Redfish inspection listed no PCI devices: unknown, not zero
    s = facts("redfish-storage")
    assert sorted(d.kind for d in s.disks) == ["hdd"] * 4 + ["ssd"] * 2
    assert {d.size_gb for d in s.disks if d.kind == "hdd"} == {8000}


def test_facts_gpus_from_pci_devices():
    f = facts("gpu-node")
    assert [g.vendor for g in f.gpus] == ["nvidia", "nvidia", "aspeed"]
    assert f.disks[0].kind == "nvme"


def test_facts_from_properties_and_preflight():
    f = P.facts_from_properties({"memory_mb": 131072, "cpus": 32, "cpu_arch": "x86_64",
                                 "capabilities": "boot_mode:uefi,secure_boot:true"})
    assert (f.memory_gib, f.cpu_count, f.boot_mode, f.disks) == (128, 32, "uefi", None)
    p = P.facts_from_preflight({"memory_gib": 256.0, "cpu_count": 2, "manufacturer": "Contoso",
                                "model": "CX-1100 Compute", "boot_mode": "UEFI", "macs": ["02:4e:46:00:01:00"]})
    assert (p.source, p.memory_gib, p.vendor, p.boot_mode) == (P.Source.PREFLIGHT, 256, "Contoso", "uefi")


def test_manifest_classifies_the_two_fleet_shapes():
    profiles = P.load(MANIFEST)
    for shape in ("compute", "storage"):
        ev = {e.profile: e for e in P.evaluate(profiles, facts(f"redfish-{shape}"))}
        assert [p for p, e in ev.items() if e.matched] == [shape]
    ev = {e.profile: e for e in P.evaluate(profiles, facts("redfish-storage"))}
    assert ev["compute"].reasons == (
        "cpu_count 32 < min 96", "memory_gib 128 < min 192",
        "0 disks with kind='nvme' and size_gb>=400, need count>=1",
        "0 nics with speed_gbps>=25, need count>=2")


def test_unknown_facts_fail_with_a_reason_naming_the_source():
    profiles = P.load(MANIFEST)
    f = P.facts_from_properties({"memory_mb": 262144, "cpus": 128, "cpu_arch": "x86_64"})
    compute = next(e for e in P.evaluate(profiles, f) if e.profile == "compute")
    assert not compute.matched
    assert "boot_mode unknown (properties data)" in compute.reasons
    assert any(r.startswith("disks unknown") for r in compute.reasons)


@pytest.mark.parametrize("cond,value,ok", [
    ({"min": 4}, 4, True), ({"min": 4}, 3, False), ({"max": 4}, 5, False),
    ("UEFI", "uefi", True), ({"in": ["uefi", "bios"]}, "bios", True), ({"in": [1, 2]}, 3, False),
    ({"contains": "xeon"}, "Intel(R) Xeon(R) Gold", True), ({"regex": "^CX-"}, "SX-2400", False),
    ({"min": 1}, None, False),
])
def test_conditions(cond, value, ok):
    problems = []
    c = P.Condition.parse(cond, "x", problems)
    assert not problems
    assert (not c.failures(value)) is ok


def test_invalid_file_reports_every_problem_with_lines():
    path = DATA / "profiles" / "invalid.yaml"
    with pytest.raises(ConfigError) as exc:
        P.load(path)
    text = str(exc.value)
    for expected in (":3: profiles[0].name: ", ":4: profiles[0].resource_class: ", "got 'bad class!'",
                     ":5: profiles[0].traits[0]: ", "got 'LOCAL_NVME'", ":6: profiles[0].colour: unknown key",
                     ":8: profiles[0].match.memory: unknown fact", ":9: profiles[0].match.cpu_count.atleast: unknown "
                     "operator", ":10: profiles[0].match.disks.where.speed: unknown disks field",
                     ":14: profiles[2].name: duplicate profile 'dup'",
                     ":15: profiles[2].resource_class: 'a-b' and 'a.b' are the same Placement class CUSTOM_A_B",
                     ":16: profiles[2].match.cpu_model.regex: not a regular expression"):
        assert f"{path}{expected}" in text if expected.startswith(":") else expected in text, (expected, text)
    assert all(line.startswith(f"{path}:") for line in text.splitlines()), text
    assert len(exc.value.details["problems"]) == len(text.splitlines()) == 10


@pytest.mark.parametrize("cond,detail", [
    ("{min: .nan}", "match.cpu_count.min: a number out of range (more than 64 bits, or infinite / not a number)"),
    ("{max: .inf}", "match.cpu_count.max: a number out of range (more than 64 bits, or infinite / not a number)"),
    ("{min: 1e400}", "match.cpu_count.min: a number out of range (more than 64 bits, or infinite / not a number)"),
    ("{in: [[1]]}", "match.cpu_count.in: must be a list of values"),
    ("{equals: {a: 1}}", "match.cpu_count.equals: must be a single value"),
    ("[1, 2]", "match.cpu_count.equals: must be a single value"),
])
def test_condition_values_are_finite_scalars(tmp_path, cond, detail):
    """NaN/inf bounds matched nothing (or everything) silently before (the loader refuses them in every
    file now); a nested value as a condition too."""
    path = tmp_path / "p.yaml"
    path.write_text(f"version: 1\nprofiles:\n  - name: a\n    resource_class: x\n    match:\n"
                    f"      cpu_count: {cond}\n")
    with pytest.raises(ConfigError) as exc:
        P.load(path)
    assert str(exc.value).startswith(f"{path}:6: profiles[0].{detail}"), str(exc.value)


def test_placement_resource_class():
    assert P.placement_resource_class("baremetal-compute") == "CUSTOM_BAREMETAL_COMPUTE"
    assert P.placement_resource_class("bm.gpu_a100") == "CUSTOM_BM_GPU_A100"


@pytest.mark.parametrize("data,line,detail", [
    (b"version: 1\nprofiles:\n  - name: caf\xe9\n", 3, "not UTF-8 text"),
    (b"\x00\x01\x02binary", 1, "not a text file"),
    (b"version: 1\nprofiles: " + b"[" * 20000 + b"]" * 20000 + b"\n", 2, "nested more than 64 levels deep"),
])
def test_binary_non_utf8_or_deeply_nested_profiles_file(tmp_path, capsys, data, line, detail):
    from nodeforge import cli

    path = tmp_path / "profiles.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        P.load(path)
    assert str(exc.value).startswith(f"{path}:{line}: ") and detail in str(exc.value)
    capsys.readouterr()
    assert cli.main(["--os-cloud", "no-such-cloud", "baremetal", "classify", "--profiles", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}:{line}: " in err and "Traceback" not in err


@pytest.mark.parametrize("pattern, why", [
    ("(a+)+$", "a repeated part inside another repeated part"),
    ("^(a*)*x", "a repeated part inside another repeated part"),
    ("(?:x{1,3})+y", "a repeated part inside another repeated part"),
    ("^(a|ab)*c$", "alternatives inside a repeated part"),
    (r"(\w+)-\1", "backreferences are not allowed"),
    ("x" * 300, "at most 256 characters"),
])
def test_a_regex_that_can_backtrack_without_bound_is_refused_at_load(tmp_path, pattern, why):
    """Profiles may come from another team and facts from the hardware: a pattern that can take
    exponential time (nested or alternated repetition, backreferences) is refused when the
    profiles are loaded, naming the line; the others load and match as before."""
    path = tmp_path / "profiles.yaml"
    path.write_text("version: 1\nprofiles:\n  - name: p\n    resource_class: baremetal-p\n"
                    f"    match:\n      model: {{regex: {json.dumps(pattern)}}}\n")
    with pytest.raises(ConfigError, match=f"{path}:6: profiles\\[0\\].match.model.regex: .*{re.escape(why)}"):
        P.load(path)


@pytest.mark.parametrize("pattern", ["^CX-[0-9]+$", "^(Contoso|Fabrikam) [A-Z]{2}-[0-9]{4}$", "(?:ab){2}c",
                                     r"[a-z]+\s+[0-9]+", "Xeon.*Gold"])
def test_ordinary_patterns_load_and_match(tmp_path, pattern):
    assert P.regex_problem(pattern) is None
    cond = P.Condition.read({"regex": pattern}, lambda key, detail: pytest.fail(detail))
    assert cond.failures("no match here ~~") != []
