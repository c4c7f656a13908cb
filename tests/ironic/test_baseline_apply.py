"""Applying the baseline through manual cleaning (nodeforge/ironic/baseline_apply.py): the plan per
node, the run against an in-memory Ironic that moves nodes as Ironic does (manage, clean with the
BIOS step, provide), resuming an interrupted run, a failed cleaning, and a second run writing
nothing."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nodeforge import cli
from nodeforge.ironic import audit, baseline_apply as ba, profiles
from tests.ironic.test_audit import RAID, Ironic, _bios, _node, profile_file  # noqa: F401 - the fixture


class MovingIronic(Ironic):
    """Ironic's states for the verbs the apply sends; a clean runs for one listing, then lands
    (its BIOS step applied, the cache refreshed as Ironic does at the end of cleaning)."""

    def __init__(self, nodes, clean_fails=()):
        super().__init__(nodes)
        self.clean_fails, self.calls = set(clean_fails), []

    def _n(self, ident):
        return next(n for n in self.nodes if n["uuid"] == ident)

    def list_nodes(self, fields=None):
        for n in self.nodes:                       # a clean issued before this listing lands now
            if n["provision_state"] == "cleaning" and n.get("_listed"):
                self._finish_clean(n)
            elif n["provision_state"] == "cleaning":
                n["_listed"] = True
        return [{k: v for k, v in n.items() if not k.startswith("_")} for n in self.nodes]

    def _finish_clean(self, n):
        n.pop("_listed", None)
        if n["uuid"] in self.clean_fails:
            n.update(provision_state="clean failed", target_provision_state=None, last_error="BIOS refused")
            return
        for step in n.pop("_steps"):
            if (step["interface"], step["step"]) == ("raid", "create_configuration"):
                n["raid_config"] = dict(n["target_raid_config"])       # Ironic's update_raid_config
                continue
            if step["interface"] == "firmware":
                for s in step["args"]["settings"]:
                    version = s["url"].rsplit("-", 1)[1].removesuffix(".bin")
                    self.firmware[n["uuid"]] = [{"component": s["component"], "current_version": version}]
                continue
            for s in (step.get("args") or {}).get("settings", []):
                for b in self.bios[n["uuid"]]:
                    if b["name"] == s["name"]:
                        b["value"] = str(s["value"]).lower() if isinstance(s["value"], bool) else str(s["value"])
        n.update(provision_state="manageable", target_provision_state=None)

    def patch_node(self, ident, patch):
        self.writes += 1
        self.calls.append(("patch", ident, patch[0]["op"]))
        n = self._n(ident)
        for p in patch:
            section, key = p["path"].strip("/").split("/")
            if p["op"] == "add":
                n.setdefault(section, {})[key] = p["value"]
            else:
                n[section].pop(key)
        return n

    def set_target_raid_config(self, ident, config):
        self.writes += 1
        self.calls.append(("raid", ident, None))
        self._n(ident)["target_raid_config"] = config

    def set_provision_state(self, ident, verb, *, clean_steps=None, disable_ramdisk=None, configdrive=None):
        self.writes += 1
        self.calls.append((verb.value, ident, disable_ramdisk))
        n = self._n(ident)
        moves = {("manage", "available"): "manageable", ("manage", "clean failed"): "manageable",
                 ("provide", "manageable"): "available", ("clean", "manageable"): "cleaning"}
        n["provision_state"] = moves[(verb.value, n["provision_state"])]
        n["target_provision_state"] = "manageable" if verb.value == "clean" else None
        if verb.value == "clean":
            n["_steps"] = clean_steps


def _apply(ironic, profile_file, **kw):
    result = audit.run(ironic, profiles.load(profile_file))
    plans = ba.plan(result, {n["uuid"]: n for n in ironic.nodes})
    ba.run(plans, ironic, poll=0, sleep=lambda s: None, **kw)
    return plans


def test_the_plan_per_node(profile_file):
    nodes = [_node("ok"), _node("avail"), _node("manag", state="manageable"), _node("act", state="active"),
             _node("raid"), _node("busy", state="deploying")]
    ironic = Ironic(nodes)
    for name in ("avail", "manag", "act", "busy"):
        ironic.bios[f"uuid-{name}"] = _bios(turbo="Enabled")
    nodes[4]["raid_config"] = {}
    plans = ba.plan(audit.run(ironic, profiles.load(profile_file)), {n["uuid"]: n for n in nodes})
    assert [(p.name, p.action, p.return_to) for p in plans] == [
        ("ok", "no-op", None), ("avail", "apply", "available"), ("manag", "apply", None), ("act", "deferred", None),
        ("raid", "needs-agent", None), ("busy", "busy", None)]
    assert plans[1].steps == [{"interface": "bios", "step": "apply_configuration",
                               "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}}]
    assert [i.item for i in plans[4].pending] == ["raid"] and plans[4].steps == []
    assert ba.exit_code(plans, dry_run=True) == 3            # the busy node
    assert ironic.writes == 0


def test_apply_cleans_gives_back_and_a_second_run_writes_nothing(profile_file):
    ironic = MovingIronic([_node("a1"), _node("m1", state="manageable"), _node("ok")])
    ironic.bios["uuid-a1"] = _bios(turbo="Enabled")
    ironic.bios["uuid-m1"] = _bios(quiet="true")
    plans = _apply(ironic, profile_file)
    assert [(p.name, p.action, p.ok, p.stage) for p in plans] == [
        ("a1", "apply", True, "done"), ("m1", "apply", True, "done"), ("ok", "no-op", None, "")]
    assert [c for c in ironic.calls if c[1] == "uuid-a1"] == [
        ("patch", "uuid-a1", "add"), ("manage", "uuid-a1", None), ("clean", "uuid-a1", True),
        ("provide", "uuid-a1", None), ("patch", "uuid-a1", "remove")]
    assert [c[0] for c in ironic.calls if c[1] == "uuid-m1"] == ["clean"]
    states = {n["name"]: (n["provision_state"], n["extra"]) for n in ironic.nodes}
    assert states == {"a1": ("available", {}), "m1": ("manageable", {}), "ok": ("available", {})}
    assert ba.exit_code(plans, dry_run=False) == 0
    before = ironic.writes
    again = _apply(ironic, profile_file)
    assert [p.action for p in again] == ["no-op"] * 3 and ironic.writes == before


def test_an_interrupted_run_is_resumed(profile_file):
    ironic = MovingIronic([_node("cleaned", state="manageable"), _node("failed", state="clean failed"),
                           _node("marked")])
    for n in ironic.nodes:
        n["extra"] = {"nodeforge_baseline": "available"}
    ironic.bios["uuid-failed"] = _bios(turbo="Enabled")      # its cleaning failed: still drifted
    plans = _apply(ironic, profile_file)
    assert [(p.name, p.action, p.ok) for p in plans] == [("cleaned", "return", True), ("failed", "apply", True),
                                                         ("marked", "return", True)]
    assert [c[0] for c in ironic.calls if c[1] == "uuid-failed"] == ["manage", "clean", "provide", "patch"]
    assert [c[0] for c in ironic.calls if c[1] == "uuid-cleaned"] == ["provide", "patch"]
    assert [c[0] for c in ironic.calls if c[1] == "uuid-marked"] == ["patch"]
    assert {n["name"]: (n["provision_state"], n["extra"]) for n in ironic.nodes} == {
        "cleaned": ("available", {}), "failed": ("available", {}), "marked": ("available", {})}


def test_a_failed_cleaning_is_reported_and_the_mark_kept_for_the_next_run(profile_file):
    ironic = MovingIronic([_node("bad"), _node("good")], clean_fails={"uuid-bad"})
    ironic.bios["uuid-bad"] = _bios(turbo="Enabled")
    ironic.bios["uuid-good"] = _bios(turbo="Enabled")
    plans = _apply(ironic, profile_file)
    bad = plans[0]
    assert (bad.ok, bad.stage) == (False, "failed") and "cleaning failed: BIOS refused" in bad.error
    assert ironic._n("uuid-bad")["extra"] == {"nodeforge_baseline": "available"}
    assert ba.exit_code(plans, dry_run=False) == 3
    assert ba.plan(audit.run(ironic, profiles.load(profile_file)),
                   {n["uuid"]: n for n in ironic.nodes})[0].action == "apply"


def test_a_node_stuck_cleaning_times_out_for_the_next_run(profile_file):
    ironic = MovingIronic([_node("slow", state="manageable")])
    ironic.list_nodes = lambda fields=None: [dict(ironic.nodes[0], provision_state="clean wait",
                                                  target_provision_state="manageable")]
    steps = [{"interface": "bios", "step": "apply_configuration", "args": {"settings": []}}]
    plans = [ba.NodeApply("slow", "uuid-slow", "manageable", ba.APPLY, steps=steps)]
    ticks = iter(range(0, 10000, 10))
    ba.run(plans, ironic, timeout=30, poll=0, sleep=lambda s: None, clock=lambda: next(ticks))
    assert plans[0].ok is False and "timed out after 30 s in 'clean wait'" in plans[0].error
    assert "the next run resumes it" in plans[0].error


def test_the_command_dry_run_writes_nothing_and_apply_reports_per_node(profile_file, monkeypatch):
    from nodeforge.ironic import provisioner

    ironic = MovingIronic([_node("a1"), _node("act", state="active")])
    ironic.bios["uuid-a1"] = _bios(turbo="Enabled")
    ironic.bios["uuid-act"] = _bios(turbo="Enabled")
    monkeypatch.setattr(provisioner, "SdkProvisioner", lambda conn: ironic)
    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", lambda self: None)
    monkeypatch.setattr(ba.time, "sleep", lambda s: None)
    args = ["baremetal", "baseline", "apply", "-o", "json", "--profiles", str(profile_file)]
    dry = CliRunner().invoke(cli.cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    assert [(n["name"], n["action"]) for n in doc["nodes"]] == [("a1", "apply"), ("act", "deferred")]
    assert doc["writes"] == 0 and ironic.writes == 0
    done = CliRunner().invoke(cli.cli, args)
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert [(n["name"], n["ok"]) for n in doc["nodes"]] == [("a1", True), ("act", None)] and doc["writes"] == 5
    assert ironic._n("uuid-act")["provision_state"] == "active"


class LimitedIronic(MovingIronic):
    """Ironic with its ``[conductor] max_concurrent_clean``: a clean beyond ``limit`` nodes in
    cleaning is refused with a 503, as the conductor's ConcurrentActionLimit is."""

    def __init__(self, nodes, limit):
        super().__init__(nodes)
        self.limit, self.peak, self.refused = limit, 0, 0

    def set_provision_state(self, ident, verb, **kw):
        from nodeforge.ironic.provisioner import IronicError
        from nodeforge.transport import ErrorKind

        cleaning = sum(n["provision_state"] == "cleaning" for n in self.nodes)
        if verb.value == "clean" and cleaning >= self.limit:
            self.refused += 1
            raise IronicError(operation="set provision state", status=503, kind=ErrorKind.UNAVAILABLE,
                              detail=f"Maximum number of concurrent actions exceeded ({self.limit})")
        super().set_provision_state(ident, verb, **kw)

    def patch_node(self, ident, patch):          # a node is in flight from its mark to its mark's removal
        n = super().patch_node(ident, patch)
        self.peak = max(self.peak, sum(bool((m.get("extra") or {}).get("nodeforge_baseline")) for m in self.nodes))
        return n


@pytest.mark.parametrize("concurrency,limit", [(2, 50), (8, 3)])
def test_a_batch_is_paced_and_ironic_s_refusals_for_now_are_sent_again(profile_file, concurrency, limit):
    names = [f"n{i}" for i in range(8)]
    ironic = LimitedIronic([_node(n) for n in names], limit=limit)
    for n in names:
        ironic.bios[f"uuid-{n}"] = _bios(turbo="Enabled")
    plans = _apply(ironic, profile_file, concurrency=concurrency)
    assert [(p.name, p.ok, p.stage) for p in plans] == [(n, True, "done") for n in names], \
        [p.error for p in plans]
    assert {n["name"]: n["provision_state"] for n in ironic.nodes} == {n: "available" for n in names}
    assert ironic.peak <= concurrency
    if concurrency <= limit:
        assert ironic.refused == 0 and not any(p.refusals for p in plans)
    else:                                # more asked at once than Ironic takes: refused, sent again, done
        assert ironic.refused > 0 and sum(p.refusals for p in plans) == ironic.refused
    assert ba.exit_code(plans, dry_run=False) == 0


AGENT_INFO = {"deploy_kernel": "img-kernel", "deploy_ramdisk": "img-ramdisk"}


@pytest.fixture
def hinted_profile(profile_file):
    """The store profile with root device hints too."""
    text = profile_file.read_text().replace("      firmware:\n", "      root_device: {size: \">= 900\"}\n      firmware:\n", 1)
    profile_file.write_text(text)
    return profile_file


def test_a_node_that_boots_the_agent_gets_raid_firmware_and_hints_in_one_cleaning(hinted_profile):
    node = dict(_node("agent"), driver_info=dict(AGENT_INFO), raid_config={})
    ironic = MovingIronic([node])
    ironic.bios["uuid-agent"] = _bios(turbo="Enabled")
    ironic.firmware["uuid-agent"] = [{"component": "bmc", "current_version": "1.0.2"}]
    plans = _apply(ironic, hinted_profile)
    [p] = plans
    assert (p.action, p.ok, p.stage, p.agent, p.pending) == ("apply", True, "done", True, []), p.error
    assert [f"{s['interface']}.{s['step']}" for s in p.steps] == [
        "bios.apply_configuration", "raid.delete_configuration", "raid.create_configuration", "firmware.update"]
    # The hints and the target layout first, then the mark, and one cleaning that boots the agent
    # (no disable_ramdisk: Ironic 39 runs Redfish RAID and firmware steps with the ramdisk up).
    assert ironic.calls == [("patch", "uuid-agent", "add"), ("raid", "uuid-agent", None),
                            ("patch", "uuid-agent", "add"), ("manage", "uuid-agent", None),
                            ("clean", "uuid-agent", None), ("provide", "uuid-agent", None),
                            ("patch", "uuid-agent", "remove")]
    assert node["properties"]["root_device"] == {"size": ">= 900"}
    assert node["target_raid_config"]["logical_disks"][0] == {"size_gb": "MAX", "raid_level": "1",
                                                             "is_root_volume": True}
    assert audit.run(ironic, profiles.load(hinted_profile)).nodes[0].status == "ok"
    before = ironic.writes
    assert [q.action for q in _apply(ironic, hinted_profile)] == ["no-op"] and ironic.writes == before


def test_root_device_hints_alone_are_a_patch_without_cleaning_and_agent_items_stay_pending(hinted_profile):
    ironic = MovingIronic([_node("hints"), dict(_node("noagent"), raid_config={})])
    plans = _apply(ironic, hinted_profile)
    assert [(p.name, p.action, p.ok, [i.item for i in p.pending]) for p in plans] == [
        ("hints", "apply", True, []), ("noagent", "apply", True, ["raid"])]
    assert [c[0] for c in ironic.calls if c[1] == "uuid-hints"] == ["patch"]
    # Without deploy images the RAID step cannot run: the hints are set, the RAID listed as pending.
    assert [c[0] for c in ironic.calls if c[1] == "uuid-noagent"] == ["patch"]
    assert ironic._n("uuid-noagent")["properties"]["root_device"] == {"size": ">= 900"}
    assert "target_raid_config" not in ironic._n("uuid-noagent")


def test_a_firmware_image_that_does_not_match_its_sha256_fails_the_node_before_any_write(hinted_profile):
    from nodeforge.pins.cache import ChecksumMismatch

    ironic = MovingIronic([dict(_node("fw"), driver_info=dict(AGENT_INFO))])
    ironic.firmware["uuid-fw"] = [{"component": "bmc", "current_version": "1.0.2"}]
    fetched = []

    def fetch(url, sha256):
        fetched.append(url)
        raise ChecksumMismatch(artifact="firmware image", expected_from="the baseline", expected=sha256,
                               actual="0" * 64, url=url)

    result = audit.run(ironic, profiles.load(hinted_profile))
    plans = ba.plan(result, {n["uuid"]: n for n in ironic.nodes})
    ba.run(plans, ironic, poll=0, sleep=lambda s: None, fetch_image=fetch)
    [p] = plans
    assert fetched == ["https://fw.example/bmc-1.1.0.bin"]
    assert p.ok is False and p.error.startswith("firmware.bmc: its update image was refused before any write:")
    assert "fw.example/bmc-1.1.0.bin" in p.error and ironic.writes == 0
