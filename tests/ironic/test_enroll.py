"""Plan/apply on the in-memory fake: matching, drift, rotation, zero-write re-run."""

from __future__ import annotations

import types

import pytest

from nodeforge.ironic import constants as C, enroll, inventory as inv, report
from nodeforge.ironic.pacing import Pacer
from nodeforge.ironic.provisioner import ErrorKind, IronicError, RetryPolicy, SdkProvisioner, classify
from tests.support.http import adapter_for, server  # noqa: F401 - server: the fixture
from tests.support.ironic import FakeProvisioner


@pytest.fixture
def inventory(data_dir, bmc_password):
    return inv.load(data_dir / "nodeforge.yaml")


def test_create_then_noop_with_zero_writes(inventory):
    fake = FakeProvisioner()
    plan = enroll.plan(inventory, fake)
    assert plan.counts()["create"] == 4
    results = enroll.apply(plan, fake)
    assert all(r.ok for r in results)
    created = fake.writes
    assert created > 4  # nodes + traits + ports
    again = enroll.plan(inventory, fake)
    assert again.counts() == {"create": 0, "update": 0, "no-op": 4, "error": 0}
    enroll.apply(again, fake)
    assert fake.writes == created


def test_drift_and_rotation_detected_field_by_field(inventory, monkeypatch):
    fake = FakeProvisioner()
    enroll.apply(enroll.plan(inventory, fake), fake)
    node = next(n for n in fake.nodes.values() if n["name"] == "rf-node-001")
    node["resource_class"] = "other"
    node["traits"] = ["CUSTOM_GPU"]
    monkeypatch.setenv("NF_TEST_BMC_PASSWORD", "rotated-pw-777")
    rotated = inv.load(inventory.path)
    plan = enroll.plan(rotated, fake)
    p = next(x for x in plan.nodes if x.spec.name == "rf-node-001")
    fields = {c.field for c in p.changes}
    assert p.action is enroll.Action.UPDATE
    assert {"resource_class", "traits", "driver_info.redfish_password", f"extra.{C.EXTRA_FINGERPRINT}"} <= fields
    assert "rotated-pw-777" not in str(plan.to_dict())
    writes = fake.writes
    enroll.apply(plan, fake)
    assert fake.writes > writes
    assert enroll.plan(rotated, fake).counts()["update"] == 0


def test_match_by_bmc_adopts_unnamed_and_refuses_named(inventory):
    fake = FakeProvisioner()
    info = inventory.by_name()["ipmi-node-01"].driver_info(reveal=True)
    fake.create_node({"name": None, "driver": "ipmi", "driver_info": info})
    fake.create_node({"name": "someone-else", "driver": "fake-hardware"})
    fake.create_port(next(n for n in fake.nodes.values() if n["name"] == "someone-else")["uuid"],
                     "52:54:00:00:00:01")
    plan = {p.spec.name: p for p in enroll.plan(inventory, fake).nodes}
    assert plan["ipmi-node-01"].matched_by == "bmc" and plan["ipmi-node-01"].action is enroll.Action.UPDATE
    assert plan["fake-0001"].action is enroll.Action.ERROR
    assert "someone-else" in plan["fake-0001"].error


def test_409_locked_vs_duplicate():
    body = '{"error_message": "{\\"faultstring\\": \\"A node with name n1 already exists.\\"}"}'
    assert classify(409, body)[0] is ErrorKind.DUPLICATE
    body = ('{"error_message": "{\\"faultstring\\": \\"Node abc is locked by host h, please retry after the '
            'current operation is completed.\\"}"}')
    assert classify(409, body)[0] is ErrorKind.LOCKED
    assert classify(503, "")[0] is ErrorKind.UNAVAILABLE
    assert ErrorKind.LOCKED.retriable and not ErrorKind.DUPLICATE.retriable


def _redfish_inventory(tmp_path, nodes: dict[str, list[str] | None]):
    import yaml

    doc = {"version": 1, "nodes": [
        {"name": name, "bmc": {"address": f"redfish+https://10.9.0.{i + 1}/redfish/v1/Systems/s{i}",
                               "username": "root", "password": "env:NF_TEST_BMC_PASSWORD"},
         "cleaning": "none", **({"macs": macs} if macs else {})}
        for i, (name, macs) in enumerate(nodes.items())]}
    path = tmp_path / "rf.yaml"
    path.write_text(yaml.safe_dump(doc))
    return inv.load(path)


def test_ports_from_redfish_macs_when_the_inventory_lists_none(tmp_path, bmc_password):
    inventory = _redfish_inventory(tmp_path, {"rf-a": None, "rf-b": ["52:54:00:bb:00:01"]})
    bmc_macs = {"rf-a": ["02:4e:46:00:09:00", "02:4e:46:00:09:01"]}
    asked: list[str] = []

    def discover(spec):
        asked.append(spec.name)
        return bmc_macs.get(spec.name)

    fake = FakeProvisioner()
    plan = {p.spec.name: p for p in enroll.plan(inventory, fake, discover=discover).nodes}
    assert asked == ["rf-a"]                       # rf-b lists its MACs: the BMC is not asked
    assert plan["rf-a"].ports_to_add == bmc_macs["rf-a"] and plan["rf-a"].macs_from_bmc
    assert plan["rf-a"].to_dict()["macs_from_bmc"] is True
    assert plan["rf-b"].ports_to_add == ["52:54:00:bb:00:01"] and not plan["rf-b"].macs_from_bmc
    enroll.apply(enroll.plan(inventory, fake, discover=discover), fake)
    uuid = next(n["uuid"] for n in fake.nodes.values() if n["name"] == "rf-a")
    assert sorted(p["address"] for p in fake.ports.values() if p["node_uuid"] == uuid) == bmc_macs["rf-a"]
    # Re-run: the node has its ports, no BMC is asked, nothing is written.
    asked.clear()
    writes = fake.writes
    again = enroll.plan(inventory, fake, discover=discover)
    assert asked == [] and again.counts()["no-op"] == 2
    enroll.apply(again, fake)
    assert fake.writes == writes


def test_redfish_macs_conflict_or_unreadable_bmc_is_per_node(tmp_path, bmc_password):
    inventory = _redfish_inventory(tmp_path, {"rf-a": None, "rf-c": None, "rf-d": None})
    fake = FakeProvisioner()
    other = fake.create_node({"name": "someone-else", "driver": "fake-hardware"})
    fake.create_port(other["uuid"], "02:4e:46:00:0c:00")
    found = {"rf-a": ["02:4e:46:00:0a:00"], "rf-c": ["02:4e:46:00:0c:00"], "rf-d": None}
    plan = {p.spec.name: p for p in enroll.plan(inventory, fake, discover=lambda s: found[s.name]).nodes}
    assert plan["rf-a"].action is enroll.Action.CREATE
    assert plan["rf-c"].action is enroll.Action.ERROR and "someone-else" in plan["rf-c"].error
    # BMC unreadable: the node is created without ports (manage reports the BMC problem).
    assert plan["rf-d"].action is enroll.Action.CREATE and plan["rf-d"].ports_to_add == []
    # Without discovery nothing is asked and no ports are planned.
    plain = {p.spec.name: p for p in enroll.plan(inventory, fake).nodes}
    assert plain["rf-a"].ports_to_add == []


def _scoped(tmp_path, name: str, scope: str | None, nodes: list[str]):
    import yaml

    doc = {"version": 1, **({"scope": scope} if scope else {}),
           "nodes": [{"name": n, "bmc": {"address": f"fake://{n}"}} for n in nodes]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return inv.load(path)


def test_nodes_carry_the_inventory_scope_and_another_scope_is_never_touched(tmp_path):
    fake = FakeProvisioner()
    a = _scoped(tmp_path, "a.yaml", "team-a", ["a1", "shared"])
    b = _scoped(tmp_path, "b.yaml", "team-b", ["b1", "shared"])
    assert all(r.ok for r in enroll.apply(enroll.plan(a, fake), fake))
    scopes = {n["name"]: n["extra"][C.EXTRA_SCOPE] for n in fake.nodes.values()}
    assert scopes == {"a1": "team-a", "shared": "team-a"}
    plan = {p.spec.name: p for p in enroll.plan(b, fake).nodes}
    assert plan["b1"].action is enroll.Action.CREATE
    assert plan["shared"].action is enroll.Action.ERROR
    assert "belongs to scope 'team-a' (extra.nodeforge_scope), not this inventory's 'team-b'" in plan["shared"].error
    writes = fake.writes
    results = {r.name: r for r in enroll.apply(enroll.Plan(list(plan.values())), fake)}
    assert not results["shared"].ok and results["shared"].error_kind == "scope"
    assert "another inventory" in report.HINTS[results["shared"].error_kind]
    assert fake.writes == writes + 1                          # b1 created; shared not written
    shared = next(n for n in fake.nodes.values() if n["name"] == "shared")
    assert shared["extra"][C.EXTRA_SCOPE] == "team-a"
    # team-a's re-run: nothing to write.
    assert enroll.plan(a, fake).counts() == {"create": 0, "update": 0, "no-op": 2, "error": 0}


def test_an_unscoped_node_is_taken_into_the_scope_of_the_inventory_listing_it(tmp_path):
    fake = FakeProvisioner()
    fake.create_node({"name": "old", "driver": "fake-hardware", "extra": {"team": "x"}, "automated_clean": True})
    i = _scoped(tmp_path, "inv.yaml", None, ["old"])          # derived scope
    [p] = enroll.plan(i, fake).nodes
    assert p.action is enroll.Action.UPDATE
    assert (f"extra.{C.EXTRA_SCOPE}", None, i.scope) in {(c.field, c.current, c.desired) for c in p.changes}
    enroll.apply(enroll.Plan([p]), fake)
    [node] = fake.nodes.values()
    assert node["extra"] == {"team": "x", C.EXTRA_SCOPE: i.scope}
    assert enroll.plan(i, fake).counts()["no-op"] == 1


def test_apply_reports_progress_per_node_and_keeps_inventory_order(inventory):
    fake = FakeProvisioner()
    seen = []
    results = enroll.apply(enroll.plan(inventory, fake), fake, jobs=3, progress=lambda d, t: seen.append((d, t)))
    assert [r.name for r in results] == [n.name for n in inventory.nodes]
    assert seen == [(i, len(inventory.nodes)) for i in range(1, len(inventory.nodes) + 1)]
    assert enroll.DEFAULT_JOBS == 16


# ------------------------------------------------------------------------------ SdkProvisioner over HTTP

class RecordingPacer(Pacer):
    def __init__(self):
        super().__init__()
        self.seen: list[tuple[object, bool]] = []

    def record(self, status, latency, *, listing=False):
        assert latency >= 0
        self.seen.append((status, listing))
        super().record(status, latency, listing=listing)


def _sdk(url: str, pacer: Pacer, attempts: int = 6) -> SdkProvisioner:
    conn = types.SimpleNamespace(baremetal=adapter_for(url, "baremetal"))
    return SdkProvisioner(conn, retry=RetryPolicy(attempts=attempts, sleep=lambda s: None), pacer=pacer)


LOCKED_BODY = ('{"error_message": "{\\"faultstring\\": \\"Node u1 is locked by host c1, please retry after the '
               'current operation is completed.\\"}"}')
DUPLICATE_BODY = '{"error_message": "{\\"faultstring\\": \\"A node with name n1 already exists.\\"}"}'


def test_pacer_sees_every_attempt_with_its_signal(server):
    """Pacing keeps its signals through the transport: 503, 409 NodeLocked, success, a duplicate
    (not congestion), each with its latency; retries are counted by status; slots given back."""
    server.answers = [(503, "No free conductor workers available", {}), (409, LOCKED_BODY, {}),
                      (201, '{"uuid": "u1", "name": "n1"}', {}), (409, DUPLICATE_BODY, {}),
                      (200, '{"nodes": [{"uuid": "u1"}], "next": null}', {})]
    pacer = RecordingPacer()
    prov = _sdk(server.url, pacer)
    assert prov.create_node({"name": "n1"})["uuid"] == "u1"
    with pytest.raises(IronicError) as info:
        prov.create_node({"name": "n1"})
    assert info.value.kind is ErrorKind.DUPLICATE and "(409)" in str(info.value)
    assert [n["uuid"] for n in prov.list_nodes()] == ["u1"]
    assert pacer.seen == [(503, False), (409, False), (201, False), ("409-conflict", False), (200, True)]
    assert pacer.stats.congested == {"503": 1, "409": 1}
    assert prov.writes == 4 and prov.retries == 2 and prov.retried == {"503": 1, "409": 1}
    assert pacer.inflight == 0
    assert server.seen[-1] == ("GET", f"/v1/nodes/detail?limit={C.PAGE_LIMIT}")


def test_no_answer_reaches_the_pacer_as_network(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pacer = RecordingPacer()
    prov = _sdk(f"http://127.0.0.1:{port}/v1", pacer, attempts=3)
    with pytest.raises(IronicError) as info:
        prov.set_provision_state("u1", C.Verb.MANAGE)
    assert info.value.kind is ErrorKind.NETWORK and "(network)" in str(info.value)
    assert pacer.seen == [(None, False)] * 3 and pacer.stats.congested == {"network": 3}
    assert prov.retried == {"network": 2} and prov.writes == 3 and pacer.inflight == 0
