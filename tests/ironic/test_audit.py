"""The baseline audit (nodeforge/ironic/audit.py): nodes (Ironic's views of them, or their BMC's)
against their profile's baseline, outliers within a resource class, the exit codes, and the
command (nodeforge/commands/baremetal_audit.py) on an in-memory Ironic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeforge import cli
from nodeforge.ironic import audit, profiles
from nodeforge.ironic.bmcview import BmcReadError, BmcView
from nodeforge.ironic.provisioner import ErrorKind, IronicError

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
SHA = "3b0c6e1a9f1d4f0a5c2e7b8d9a6f4e3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e"
GB = 10 ** 9


@pytest.fixture
def profile_file(tmp_path) -> Path:
    shutil.copy(EXAMPLES / "bios-registry-qemu.yaml", tmp_path / "registry.yaml")
    path = tmp_path / "profiles.yaml"
    path.write_text(f"""version: 1
profiles:
  - name: store
    resource_class: rc-store
    match: {{vendor: Contoso}}
    baseline:
      bios_registry: registry.yaml
      bios: {{ProcTurboMode: Disabled, QuietBoot: false}}
      raid:
        - {{size_gb: MAX, raid_level: "1", is_root_volume: true}}
        - {{size_gb: MAX, raid_level: "6"}}
      firmware:
        - {{component: bmc, version: "1.1.0", url: "https://fw.example/bmc-1.1.0.bin", sha256: {SHA}}}
  - name: plain
    resource_class: rc-plain
    match: {{vendor: Other}}
""")
    return path


def _bios(turbo="Disabled", quiet="false") -> list[dict]:
    return [{"name": "ProcTurboMode", "value": turbo, "allowable_values": ["Enabled", "Disabled"]},
            {"name": "QuietBoot", "value": quiet, "allowable_values": None}]


RAID = {"logical_disks": [{"size_gb": "MAX", "raid_level": "1", "is_root_volume": True},
                          {"size_gb": "MAX", "raid_level": "6"}]}
DISKS = [{"name": f"/dev/sd{c}", "size": 960 * GB, "rotational": False} for c in "ab"] + \
    [{"name": f"/dev/sd{c}", "size": 8000 * GB, "rotational": True} for c in "cdef"]


def _inventory(memory_mb=131072, cpu="AMD EPYC 7313P", disks=DISKS) -> dict:
    return {"inventory": {"cpu": {"model_name": cpu, "count": 32, "architecture": "x86_64"},
                          "memory": {"physical_mb": memory_mb}, "disks": disks,
                          "interfaces": [{"mac_address": "02:00:00:00:00:01", "speed_mbps": 10000}],
                          "system_vendor": {"manufacturer": "Contoso"}}}


class Ironic:
    """The reads the audit makes, from dicts; a node named in ``fail`` answers 503."""

    def __init__(self, nodes: list[dict], fail=()):
        self.nodes, self.fail, self.writes = nodes, set(fail), 0
        self.bios = {n["uuid"]: _bios() for n in nodes}
        self.firmware = {n["uuid"]: [{"component": "bmc", "current_version": "1.1.0"}] for n in nodes}
        self.inventory = {n["uuid"]: _inventory() for n in nodes}

    def _check(self, ident):
        if ident in self.fail:
            raise IronicError(operation=f"get {ident}", status=503, kind=ErrorKind.UNAVAILABLE,
                              detail="No free conductor workers available")

    def list_nodes(self, fields=None):
        return [dict(n) for n in self.nodes]

    def get_inventory(self, ident):
        self._check(ident)
        return self.inventory.get(ident)

    def get_bios(self, ident):
        self._check(ident)
        return self.bios[ident]

    def get_firmware(self, ident):
        self._check(ident)
        return self.firmware[ident]


def _node(name, state="available", rc="rc-store") -> dict:
    return {"uuid": f"uuid-{name}", "name": name, "provision_state": state, "resource_class": rc,
            "raid_config": RAID, "properties": {}, "extra": {}}


def _run(ironic, profile_file, **kw):
    return audit.run(ironic, profiles.load(profile_file), **kw)


def test_nodes_at_their_baseline_are_ok_and_the_exit_code_is_0(profile_file):
    ironic = Ironic([_node("s1"), _node("s2"), _node("s3")])
    result = _run(ironic, profile_file)
    assert [n.status for n in result.nodes] == ["ok"] * 3 and result.outliers == []
    assert result.exit_code() == 0 and ironic.writes == 0


def test_drift_is_reported_by_node_and_item_and_exits_with_its_own_code(profile_file):
    ironic = Ironic([_node("s1"), _node("s2")])
    ironic.bios["uuid-s2"] = _bios(turbo="Enabled")
    ironic.firmware["uuid-s2"] = [{"component": "bmc", "current_version": "1.0.9"}]
    result = _run(ironic, profile_file)
    s1, s2 = result.nodes
    assert s1.status == "ok" and s2.status == "drift"
    assert [(i.item, i.current) for i in s2.items] == [("bios.ProcTurboMode", "Enabled"), ("firmware.bmc", "1.0.9")]
    assert result.exit_code() == audit.DRIFT == 11
    doc = result.to_dict()
    assert doc["summary"]["drift"] == 1 and doc["exit_code"] == 11
    assert doc["nodes"][1]["items"][0] == {"item": "bios.ProcTurboMode", "current": "Enabled", "wanted": "Disabled",
                                           "steps": ["bios.apply_configuration"], "reboot": True,
                                           "needs_agent": False}
    rows = [r for r in result.rows() if r["node"] == "s2"]
    assert [(r["status"], r["item"], r["current"], r["wanted"]) for r in rows] == [
        ("drift", "bios.ProcTurboMode", "Enabled", "Disabled"), ("drift", "firmware.bmc", "1.0.9", "1.1.0 (minimum)")]


def test_an_active_node_s_drift_is_deferred_and_still_drift_for_the_exit_code(profile_file):
    ironic = Ironic([_node("s1", state="active")])
    ironic.bios["uuid-s1"] = _bios(quiet="true")
    [n] = _run(ironic, profile_file).nodes
    assert n.status == "deferred" and [i.item for i in n.items] == ["bios.QuietBoot"]
    assert _run(ironic, profile_file).exit_code() == audit.DRIFT


def test_unreadable_nodes_are_a_partial_failure_whatever_the_others_show(profile_file):
    ironic = Ironic([_node("s1"), _node("s2"), _node("s3")], fail={"uuid-s3"})
    ironic.bios["uuid-s2"] = _bios(turbo="Enabled")
    result = _run(ironic, profile_file)
    assert [n.status for n in result.nodes] == ["ok", "drift", "unreadable"]
    assert "No free conductor workers" in result.nodes[2].view.error
    assert result.exit_code() == 3
    assert _run(Ironic([_node("s1")], fail={"uuid-s1"}), profile_file).exit_code() == 1


def test_nothing_cached_where_the_baseline_pins_something_is_unreadable_not_drift(profile_file):
    ironic = Ironic([_node("s1")])
    ironic.bios["uuid-s1"] = []
    [n] = _run(ironic, profile_file).nodes
    assert n.status == "unreadable" and "Ironic holds no BIOS settings for node s1" in n.view.error


def test_a_node_without_a_baseline_is_not_judged(profile_file):
    result = _run(Ironic([_node("p1", rc="rc-plain"), _node("x1", rc="rc-unknown")]), profile_file)
    assert [(n.status, n.profile) for n in result.nodes] == [("no-baseline", "plain"), ("no-baseline", None)]
    assert result.exit_code() == 0


def test_a_value_outside_the_node_s_registry_is_a_problem_naming_the_profile_line(profile_file):
    ironic = Ironic([_node("s1")])
    ironic.bios["uuid-s1"] = [{"name": "ProcTurboMode", "value": "Enabled", "allowable_values": ["Enabled"]},
                              {"name": "QuietBoot", "value": "false"}]
    [n] = _run(ironic, profile_file).nodes
    assert n.status == "problem"
    assert n.problems[0].startswith(f"{profile_file}:8: profiles[0].baseline.bios.ProcTurboMode: 'Disabled' is "
                                    "outside node s1's registry")


def test_outliers_within_a_class_are_found_fact_by_fact(profile_file):
    ironic = Ironic([_node("s1"), _node("s2"), _node("s3"), _node("p1", rc="rc-plain"), _node("p2", rc="rc-plain")])
    ironic.inventory["uuid-s2"] = _inventory(memory_mb=65536, disks=DISKS[:5])
    ironic.inventory["uuid-p2"] = _inventory(cpu="Intel Xeon Gold 6338")
    result = _run(ironic, profile_file)
    got = {(o.resource_class, o.fact, o.node): (o.value, o.norm) for o in result.outliers}
    assert got[("rc-store", "memory_gib", "s2")] == (64, 128)
    assert got[("rc-store", "disks", "s2")][1] == ["hdd 8000 GB"] * 4 + ["ssd 960 GB"] * 2
    # Two nodes that differ: no majority, both are listed.
    assert got[("rc-plain", "cpu_model", "p1")] == ("AMD EPYC 7313P", None)
    assert got[("rc-plain", "cpu_model", "p2")] == ("Intel Xeon Gold 6338", None)
    assert len(got) == 4 and result.exit_code() == audit.DRIFT
    assert [n.status for n in result.nodes] == ["ok", "ok", "ok", "no-baseline", "no-baseline"]


def test_the_bmc_view_replaces_ironic_s_and_finds_what_changed_behind_its_back(profile_file):
    ironic = Ironic([_node("s1"), _node("s2")])
    live = {"s1": BmcView(_bios(turbo="Enabled"), [{"raid_level": "1", "size_gb": 894}],
                          [{"component": "bmc", "current_version": "1.0.0"}])}

    def reader_for(name):
        def read():
            if name not in live:
                raise BmcReadError(node=name, detail="ConnectionError: BMC unreachable")
            return live[name]
        return read

    prof = profiles.load(profile_file)
    views = [audit.read_view(n, ironic, prof.profiles[0], reader_for(n["name"])) for n in ironic.nodes]
    s1 = audit.judge(views[0], prof.profiles[0])
    assert s1.view.source == "bmc" and s1.status == "drift"
    assert [i.item for i in s1.items] == ["bios.ProcTurboMode", "raid", "firmware.bmc"]
    raid = next(i for i in s1.items if i.item == "raid")
    assert raid.current == [{"size_gb": "MAX", "raid_level": "1", "is_root_volume": True}]   # the RAID-6 is gone
    assert audit.judge(views[1], prof.profiles[0]).status == "unreadable"


def test_a_raid_layout_is_judged_against_physical_drives_never_an_in_band_disk_list(profile_file):
    """The agent's inventory lists what the OS sees (a controller's volume: one disk here); RAID 6
    over it would be a false problem. Out-of-band inspection lists the drives; the BMC too."""
    one = [{"name": "/dev/sda", "size": 960 * GB, "rotational": False}]
    prof = profiles.load(profile_file).profiles[0]
    inband, outband = dict(_node("in"), inspect_interface="agent"), dict(_node("out"), inspect_interface="redfish")
    ironic = Ironic([inband, outband])
    for n in ironic.nodes:
        ironic.inventory[n["uuid"]] = _inventory(disks=one)
    judged = {n["name"]: audit.judge(audit.read_view(n, ironic, prof), prof) for n in ironic.nodes}
    assert judged["in"].status == "ok" and judged["in"].view.disks is None
    assert judged["out"].status == "problem" and "RAID 1 needs 2 disks; node out has 1" in judged["out"].problems[0]
    drives = [{"name": f"Drive {i}", "size": 960 * GB} for i in range(2)]
    live = BmcView(_bios(), [{"raid_level": "1", "size_gb": 894}, {"raid_level": "6", "size_gb": 1788}],
                   [{"component": "bmc", "current_version": "1.1.0"}], drives)
    view = audit.read_view(inband, ironic, prof, lambda: live)
    assert view.disks == drives
    assert [p.split(": ", 2)[-1] for p in audit.judge(view, prof).problems] == ["RAID 6 needs 4 disks; node in has 2"]


def test_live_volumes_are_judged_as_far_as_redfish_shows_them():
    wanted = [{"size_gb": 400, "raid_level": "1", "is_root_volume": True}, {"size_gb": "MAX", "raid_level": "6"}]
    same = audit.live_raid_config([{"raid_level": "1", "size_gb": 401}, {"raid_level": "6", "size_gb": 14901}],
                                  wanted)
    assert same == {"logical_disks": [{"size_gb": 400, "raid_level": "1", "is_root_volume": True},
                                      {"size_gb": "MAX", "raid_level": "6", "is_root_volume": False}]}
    other = audit.live_raid_config([{"raid_level": "0", "size_gb": 300}], wanted)
    assert other == {"logical_disks": [{"size_gb": 300, "raid_level": "0", "is_root_volume": False}]}


def test_the_command_prints_json_and_exits_with_the_audit_s_code(profile_file, monkeypatch):
    from nodeforge.ironic import provisioner

    ironic = Ironic([_node("s1"), _node("s2", state="active")])
    ironic.bios["uuid-s2"] = _bios(turbo="Enabled")
    monkeypatch.setattr(provisioner, "SdkProvisioner", lambda conn: ironic)
    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", lambda self: None)
    result = CliRunner().invoke(cli.cli, ["baremetal", "audit", "-o", "json", "--profiles", str(profile_file)])
    assert result.exit_code == 11, result.output
    doc = json.loads(result.stdout)
    assert [(n["name"], n["status"]) for n in doc["nodes"]] == [("s1", "ok"), ("s2", "deferred")]
    assert doc["nodes"][1]["items"][0]["item"] == "bios.ProcTurboMode"
    report = profile_file.parent / "hardware-audit.json"
    table = CliRunner().invoke(cli.cli, ["baremetal", "audit", "--profiles", str(profile_file), "--report", str(report)])
    assert table.exit_code == 11 and "bios.ProcTurboMode" in table.output and "deferred" in table.output
    # --report writes what -o json prints, beside the table (one audit, one set of reads)
    assert json.loads(report.read_text())["nodes"] == doc["nodes"]
    plan = CliRunner().invoke(cli.cli, ["baremetal", "audit", "--dry-run", "-o", "json", "--profiles",
                                        str(profile_file)])
    assert plan.exit_code == 0, plan.output
    assert [(n["node"], n["profile"], n["source"]) for n in json.loads(plan.stdout)["nodes"]] == [
        ("s1", "store", "ironic"), ("s2", "store", "ironic")]


def test_ironic_s_raid_config_as_its_redfish_raid_interface_records_it_is_at_the_baseline(profile_file):
    """Ironic's redfish RAID writes each volume's size in GB and its level, no root mark and no MAX."""
    recorded = {"logical_disks": [
        {"id": "1", "name": "os", "controller": "1", "size_gb": 894, "raid_level": "1"},
        {"id": "2", "name": "data", "controller": "1", "size_gb": 29802, "raid_level": "6"}]}
    ironic = Ironic([dict(_node("s1"), raid_config=recorded)])
    assert audit.run(ironic, profiles.load(profile_file)).nodes[0].status == "ok"
    ironic.nodes[0]["raid_config"] = {"logical_disks": recorded["logical_disks"][:1]}
    [n] = audit.run(ironic, profiles.load(profile_file)).nodes
    assert n.status == "drift" and [i.item for i in n.items] == ["raid"]


def test_the_baseline_alone_reads_what_the_floor_reads(profile_file):
    """For `baseline apply` (no outliers, the caller's listing): no second listing and no inspection
    data unless a RAID layout is judged by it; the audit itself reads both."""
    calls = []

    class Counting(Ironic):
        def list_nodes(self, fields=None):
            calls.append("list")
            return super().list_nodes(fields)

        def get_inventory(self, ident):
            calls.append("inventory")
            return super().get_inventory(ident)

    inband = [dict(_node(f"n{i}"), inspect_interface="agent") for i in range(3)]
    ironic = Counting(inband)
    listed = ironic.list_nodes()
    calls.clear()
    result = audit.run(ironic, profiles.load(profile_file), listed=listed, outliers_too=False)
    assert calls == [] and [n.status for n in result.nodes] == ["ok"] * 3 and result.outliers == []
    audit.run(ironic, profiles.load(profile_file))
    assert calls == ["list"] + ["inventory"] * 3
