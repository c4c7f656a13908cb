"""The enroll orchestration in the library (nodeforge/ironic/batch.py), called
without click, on the in-memory fake (the real Ironic: test_enroll_devcloud.py)."""

from __future__ import annotations

import json

import pytest

from nodeforge.errors import ExitCode
from nodeforge.ironic import batch, inventory as inv
from nodeforge.ironic.errorkind import ErrorKind
from nodeforge.ironic.report import HINTS
from tests.support.ironic import FakeProvisioner
from tests.support.clock import Clock



@pytest.fixture
def inventory(data_dir, bmc_password):
    return inv.load(data_dir / "nodeforge.yaml")


def run(inventory, fake, **settings):
    s = batch.Settings(**settings)
    clock = Clock()
    plan = batch.plan(inventory, fake, s)
    return plan, batch.apply(plan, inventory, fake, s, clock=clock, sleep=clock.sleep)


def test_plan_apply_lifecycle_one_report_then_zero_writes(inventory):
    fake = FakeProvisioner()
    plan, report = run(inventory, fake, macs_from_bmc=False)
    assert plan.counts()["create"] == len(inventory.nodes)
    assert [n.name for n in report.nodes] == [s.name for s in inventory.nodes]
    assert all(n.ok and n.action == "create" and n.state == "available" for n in report.nodes), report.to_dict()
    assert report.exit_code() is ExitCode.OK and report.writes == fake.writes > 0
    # the second run of the same file: every node a no-op, nothing written
    writes = fake.writes
    again, second = run(inventory, fake, macs_from_bmc=False)
    assert again.counts() == {"create": 0, "update": 0, "no-op": len(inventory.nodes), "error": 0}
    assert fake.writes == writes and second.writes == writes   # the report counts the provisioner's writes
    assert all(n.ok and n.action == "no-op" for n in second.nodes)


def test_no_lifecycle_leaves_nodes_enrolled(inventory):
    fake = FakeProvisioner()
    _, report = run(inventory, fake, lifecycle=False, macs_from_bmc=False)
    assert {n.state for n in report.nodes} == {"enroll"} and {n.stage for n in report.nodes} == {"enroll"}
    assert not any(c[0].startswith("provision:") for c in fake.calls)


def test_failures_carry_one_error_kind_and_its_hint(inventory):
    fake = FakeProvisioner({"ipmi-node-01": {"manage": "fail:Failed to get power state: 401"}})
    # fake-0001's MAC already belongs to another node: the plan refuses it
    other = fake.create_node({"name": "someone-else", "driver": "fake-hardware"})
    fake.create_port(other["uuid"], "52:54:00:00:00:01")
    _, report = run(inventory, fake, macs_from_bmc=False)
    by = {n.name: n for n in report.nodes}
    assert by["fake-0001"].error_type == ErrorKind.CONFLICT and not by["fake-0001"].ok
    assert by["fake-0001"].hint == HINTS[ErrorKind.CONFLICT]
    assert by["ipmi-node-01"].error_type == "power-credentials"
    assert by["ipmi-node-01"].hint == HINTS[ErrorKind.POWER_CREDENTIALS]
    assert by["rf-node-001"].ok
    assert report.exit_code() is ExitCode.PARTIAL
    doc = json.loads(json.dumps(report.to_dict()))       # plain strings in the document
    assert {n["name"]: n["error_type"] for n in doc["nodes"]}["ipmi-node-01"] == "power-credentials"
    assert 'type="conflict"' in report.junit()


def test_every_node_failing_is_exit_1(inventory):
    fake = FakeProvisioner({s.name: {"manage": "fail:no BMC"} for s in inventory.nodes})
    _, report = run(inventory, fake, macs_from_bmc=False)
    assert not any(n.ok for n in report.nodes)
    assert report.exit_code() is ExitCode.FAILURE


def test_plan_rows_mask_secrets(inventory, monkeypatch):
    fake = FakeProvisioner()
    run(inventory, fake, lifecycle=False, macs_from_bmc=False)
    monkeypatch.setenv("NF_TEST_BMC_PASSWORD", "rotated-pw-4242")
    plan = batch.plan(inv.load(inventory.path), fake, batch.Settings(macs_from_bmc=False))
    rows = batch.plan_rows(plan)
    assert any("(rotated)" in r["changes"] for r in rows)
    assert "rotated-pw-4242" not in json.dumps(rows) + json.dumps(plan.to_dict())


def test_each_node_row_carries_its_newest_history_events(inventory):
    """What a report's node opens to: Ironic's history of the node (here the fake's record of the failed
    manage), the newest C.HISTORY_EVENTS only, oldest first; a node the run created and took through
    without an error has none read (Ironic records errors there: it would be an empty list)."""
    from nodeforge.ironic import constants as C

    fake = FakeProvisioner({"ipmi-node-01": {"manage": "fail:Failed to get power state: 401"}})
    _, report = run(inventory, fake, macs_from_bmc=False)
    by = {n.name: n.to_dict() for n in report.nodes}
    [event] = by["ipmi-node-01"]["history"]
    assert event == {"created_at": "2026-12-04T00:00:00+00:00", "severity": "ERROR", "event_type": "manage",
                     "event": "Failed to get power state: 401"}
    assert by["rf-node-001"]["history"] is None and by["rf-node-001"]["ok"]
    uuid = by["ipmi-node-01"]["uuid"]
    fake.history[uuid] = [dict(event, event=f"event {i}") for i in range(C.HISTORY_EVENTS + 5)]
    _, again = run(inventory, fake, macs_from_bmc=False)
    kept = {n.name: n for n in again.nodes}["ipmi-node-01"].history
    recorded = fake.history[uuid]              # the 25 planted, and the re-run's failed manage
    assert len(recorded) > C.HISTORY_EVENTS and [e["event"] for e in kept] == \
        [e["event"] for e in recorded[-C.HISTORY_EVENTS:]]
    _, off = run(inventory, fake, macs_from_bmc=False, history=False)
    assert all(n.to_dict()["history"] is None for n in off.nodes)       # not read


def test_a_history_that_cannot_be_read_leaves_the_row_without_one(inventory, monkeypatch):
    from nodeforge.ironic.errorkind import ErrorKind
    from nodeforge.ironic.provisioner import IronicError

    behaviour = {"ipmi-node-01": {"manage": "fail:Failed to get power state: 401"}}
    _, readable = run(inventory, FakeProvisioner(behaviour), macs_from_bmc=False)
    fake = FakeProvisioner(behaviour)
    asked = []

    def refused(ident):
        asked.append(ident)
        raise IronicError(operation="history", status=403, kind=ErrorKind.AUTH, detail="policy")

    monkeypatch.setattr(fake, "node_history", refused)
    _, report = run(inventory, fake, macs_from_bmc=False)
    assert asked and all(n.history is None for n in report.nodes)
    assert [(n.name, n.ok, n.error_type) for n in report.nodes] == \
        [(n.name, n.ok, n.error_type) for n in readable.nodes]      # the verdicts as with a readable history


def test_histories_are_read_where_ironic_can_have_recorded_something():
    """Failed, met an error on the way, or existed before the run and changed or moved: read. Created
    by the run and taken through cleanly, or left as it was: not read."""
    from nodeforge.ironic.report import NodeReport

    from nodeforge.ironic import lifecycle
    from nodeforge.ironic.lifecycle import Verb

    def rep(action, ok=True):
        return NodeReport("n", "uuid-1", action, "lifecycle", "available", ok)

    def work(**fields):
        return lifecycle.Work(spec=None, uuid="uuid-1", **fields)

    assert batch.history_worth_reading(rep("create", ok=False), None)
    assert batch.history_worth_reading(rep("create"), work(recoveries=1))
    assert batch.history_worth_reading(rep("create"), work(error_seen=True))
    assert not batch.history_worth_reading(rep("create"), work(issued=Verb.PROVIDE))   # created, moved, nothing met
    assert batch.history_worth_reading(rep("update"), None)
    assert batch.history_worth_reading(rep("no-op"), work(issued=Verb.MANAGE))         # an existing node moved on
    assert not batch.history_worth_reading(rep("no-op"), work())
    assert not batch.history_worth_reading(rep("no-op"), None)


def test_a_last_error_seen_in_a_poll_marks_the_node(inventory):
    """A node that shows a last_error in a poll and still ends available (Ironic recorded an error
    on the way) has its history read."""
    fake = FakeProvisioner()
    listed = fake.list_nodes
    marked = []

    def list_nodes(fields=None):
        nodes = listed(fields)
        for n in nodes:
            if n.get("name") == "rf-node-001" and not marked:
                marked.append(n["uuid"])
                n["last_error"] = "power state sync: BMC timed out"
        return nodes

    fake.list_nodes = list_nodes
    _, report = run(inventory, fake, macs_from_bmc=False)
    by = {n.name: n for n in report.nodes}
    assert marked and by["rf-node-001"].ok and by["rf-node-001"].history == []
    assert all(n.history is None for n in report.nodes if n.name != "rf-node-001")


def test_a_no_change_re_run_reads_no_history(inventory):
    """The histories are of what a run did: nodes left as they were have none read (the earlier run's
    report has them), so a re-run costs no call per node."""
    fake = FakeProvisioner({"ipmi-node-01": {"manage": "fail:Failed to get power state: 401"}})
    _, first = run(inventory, fake, macs_from_bmc=False)
    assert {n.name for n in first.nodes if n.to_dict()["history"] is not None} == {"ipmi-node-01"}
    fake.behaviour.clear()
    _, mended = run(inventory, fake, macs_from_bmc=False)        # the failed node taken through again
    assert {n.name for n in mended.nodes if n.to_dict()["history"] is not None} == {"ipmi-node-01"}
    reads = []
    history = fake.node_history
    fake.node_history = lambda ident: reads.append(ident) or history(ident)
    _, again = run(inventory, fake, macs_from_bmc=False)
    assert {n.to_dict()["action"] for n in again.nodes} == {"no-op"}
    assert reads == [] and all(n.to_dict()["history"] is None for n in again.nodes)
