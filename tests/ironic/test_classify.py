"""classify: plan per node (matched profile and why not the others), flags
for no match / several matches / unused profiles before anything is
written, trait ownership, the active-node resource-class refusal, and the
CLI; against the in-memory fake Ironic fed with captured inspection data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeforge.ironic import classify as C
from nodeforge.ironic import profiles as P
from tests.support.ironic import FakeProvisioner

DATA = Path(__file__).parent / "data"
MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "hardware-profiles.yaml"


def inventory(name: str) -> dict:
    return json.loads((DATA / "facts" / f"{name}.json").read_text())["inventory"]


@pytest.fixture
def ironic() -> FakeProvisioner:
    fake = FakeProvisioner()
    for name, shape, state, rc, traits in [
        ("c1", "redfish-compute", "manageable", None, []),
        ("c2", "redfish-compute", "available", "baremetal-compute", ["CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"]),
        ("s1", "redfish-storage", "available", "baremetal-compute", ["CUSTOM_LOCAL_NVME", "CUSTOM_OWNED_ELSEWHERE"]),
        ("s2", "redfish-storage", "active", "baremetal-compute", []),
        ("g1", "gpu-node", "manageable", None, []),
    ]:
        node = fake.create_node({"name": name, "driver": "fake-hardware", "resource_class": rc})
        node = fake.nodes[node["uuid"]]
        node["provision_state"], node["traits"] = state, traits
        fake.inventories[name] = inventory(shape)
    bare = fake.create_node({"name": "bare", "driver": "fake-hardware"})
    fake.nodes[bare["uuid"]]["properties"] = {"memory_mb": 262144, "cpus": 128, "cpu_arch": "x86_64"}
    fake.create_node({"name": "unknown", "driver": "fake-hardware"})
    fake.writes, fake.calls = 0, []
    return fake


def test_plan_per_node(ironic):
    plan = C.plan(ironic, P.load(MANIFEST))
    by = {n.name: n for n in plan.nodes}
    assert ironic.writes == 0
    assert by["c1"].outcome is C.Outcome.UPDATE and by["c1"].profile == "compute"
    assert [(c.field, c.current, c.desired) for c in by["c1"].changes] == [
        ("resource_class", None, "baremetal-compute"),
        ("traits", [], ["CUSTOM_LOCAL_NVME", "CUSTOM_NIC_25G"])]
    assert by["c1"].why_not()["storage"] == ["0 disks with kind='ssd', need count>=2",
                                             "0 disks with kind='hdd' and size_gb>=4000, need count>=4"]
    assert by["c2"].outcome is C.Outcome.NOOP
    # s1 moves profile: the compute trait goes, a trait no profile owns stays.
    assert by["s1"].outcome is C.Outcome.UPDATE
    assert by["s1"].traits == ["CUSTOM_HDD_POOL", "CUSTOM_NIC_10G", "CUSTOM_OWNED_ELSEWHERE"]
    # s2 is deployed: Ironic forbids the resource class change, so it is refused, not attempted.
    assert by["s2"].outcome is C.Outcome.REFUSED
    assert "'active'" in by["s2"].detail and "not attempted" in by["s2"].detail
    assert by["g1"].outcome is C.Outcome.NO_MATCH and "compute:" in by["g1"].detail
    assert by["bare"].outcome is C.Outcome.NO_MATCH and "disks unknown" in by["bare"].detail
    assert by["unknown"].outcome is C.Outcome.NO_FACTS


def test_apply_writes_only_updates_and_a_second_plan_is_all_noop(ironic):
    profiles = P.load(MANIFEST)
    results = {r.name: r for r in C.apply(C.plan(ironic, profiles), ironic)}
    assert results["c1"].ok and results["s1"].ok and results["c2"].ok
    assert not results["s2"].ok and not results["g1"].ok
    assert sorted(ironic.calls) == sorted([("patch_node", ironic._node("c1")["uuid"]),
                                           ("set_traits", ironic._node("c1")["uuid"]),
                                           ("patch_node", ironic._node("s1")["uuid"]),
                                           ("set_traits", ironic._node("s1")["uuid"])])
    assert ironic._node("s2")["resource_class"] == "baremetal-compute"  # untouched
    writes = ironic.writes
    again = C.plan(ironic, profiles)
    C.apply(again, ironic)
    assert ironic.writes == writes
    assert {n.name for n in again.nodes if n.outcome is C.Outcome.NOOP} == {"c1", "c2", "s1"}


def test_overlap_and_unused_profiles_reported_before_any_write(ironic):
    plan = C.plan(ironic, P.load(DATA / "profiles" / "overlap.yaml"), nodes=["c*", "s*"])
    assert ironic.writes == 0
    assert {n.name: n.outcome for n in plan.nodes}["c1"] is C.Outcome.AMBIGUOUS
    assert plan.overlaps() == [{"profiles": ["compute", "big"], "nodes": ["c1", "c2"]}]
    assert plan.unused_profiles() == ["gpu"]


def test_select_by_glob_and_uuid(ironic):
    uuid = ironic._node("g1")["uuid"]
    assert [n.name for n in C.plan(ironic, P.load(MANIFEST), nodes=["c?", uuid]).nodes] == ["c1", "c2", "g1"]


def test_cli_dry_run_flags_overlap_and_writes_nothing(ironic, monkeypatch):
    from nodeforge import cli
    from nodeforge.ironic import provisioner

    monkeypatch.setattr(provisioner, "SdkProvisioner", lambda conn: ironic)
    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", lambda self: None)
    cli.options.add_common_options(cli.cli)
    result = CliRunner().invoke(cli.cli, ["baremetal", "classify", "--dry-run", "--profiles",
                                          str(DATA / "profiles" / "overlap.yaml"), "--node", "c*"])
    assert result.exit_code == 3, result.output
    assert "ambiguous" in result.output
    assert "profile 'gpu' matches none of the 2 nodes" in result.output
    assert "profiles compute, big overlap on c1, c2" in result.output
    assert ironic.writes == 0
    result = CliRunner().invoke(cli.cli, ["baremetal", "classify", "-o", "json", "--node", "c1"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert data["results"] == [{"name": "c1", "uuid": ironic._node("c1")["uuid"], "outcome": "update", "ok": True,
                                "error": None}]
    assert ironic._node("c1")["resource_class"] == "baremetal-compute"


def test_scope_plans_only_the_nodes_of_that_scope(ironic):
    """Two inventories' nodes side by side: with a scope, one team's profiles
    neither flag nor rewrite the other team's nodes (nor unscoped ones)."""
    from nodeforge.ironic import constants as IC

    for name, scope in (("c1", "team-a"), ("c2", "team-a"), ("s1", "team-b"), ("g1", "team-b")):
        ironic._node(name)["extra"][IC.EXTRA_SCOPE] = scope
    profiles = P.load(MANIFEST)
    a = C.plan(ironic, profiles, scope="team-a")
    assert [n.name for n in a.nodes] == ["c1", "c2"] and not a.flagged
    assert a.skipped == {"team-b": 2, "": 3} and a.to_dict()["scope"] == "team-a"
    b = C.plan(ironic, profiles, scope="team-b", nodes=["*1"])
    assert {n.name: n.outcome for n in b.nodes} == {"s1": C.Outcome.UPDATE, "g1": C.Outcome.NO_MATCH}
    assert b.skipped == {"team-a": 1}
    C.apply(a, ironic)
    assert {uuid for _, uuid in ironic.calls} == {ironic._node("c1")["uuid"]}
    assert ironic._node("s1")["resource_class"] == "baremetal-compute"     # team-b's: untouched
    # Without a scope: every node, as before.
    assert len(C.plan(ironic, profiles).nodes) == 7


def test_classify_refuses_a_bad_scope_before_connecting(capsys):
    from nodeforge import cli

    code = cli.main(["--os-cloud", "no-such-cloud", "baremetal", "classify", "--scope", "Not A Scope"])
    err = capsys.readouterr().err
    assert code == 2 and "--scope" in err
