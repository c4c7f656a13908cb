"""State-machine table tests on the in-memory fake (real Ironic: test_enroll_devcloud.py)."""

from __future__ import annotations

import pytest

from nodeforge.ironic import constants as C
from nodeforge.ironic import lifecycle as lc
from nodeforge.ironic.inventory import Bmc, BmcKind, Cleaning, CleanMode, CleanStep, Location, NodeSpec
from nodeforge.ironic.provisioner import ErrorKind, IronicError
from tests.support.ironic import FakeProvisioner
from tests.support.clock import Clock


def spec(name, *, inspect=False, cleaning=Cleaning()):
    bmc = Bmc(BmcKind.FAKE, f"fake://{name}", name, None, None, None)
    return NodeSpec(name=name, bmc=bmc, location=Location("t.yaml", 1), inspect=inspect, cleaning=cleaning)



def drive(fake, specs, policy=None, start_state="enroll", automated_clean=True):
    works = []
    for s in specs:
        n = fake.create_node({"name": s.name, "driver": "fake-hardware", "automated_clean": automated_clean})
        fake.nodes[n["uuid"]]["provision_state"] = start_state
        works.append(lc.Work(spec=s, uuid=n["uuid"]))
    clock = Clock()
    lc.run(fake, works, policy or lc.Policy(poll_interval=1), clock=clock, sleep=clock.sleep)
    return {w.spec.name: w for w in works}


MANUAL = Cleaning(CleanMode.MANUAL, (CleanStep("deploy", "erase_devices_metadata"),), disable_ramdisk=True)


@pytest.mark.parametrize("name,kw,behaviour,result,error_type,verbs", [
    ("plain", {}, {}, "available", None, ["manage", "provide"]),
    ("inspected", {"inspect": True}, {}, "available", None, ["manage", "inspect", "provide"]),
    ("manual", {"cleaning": MANUAL}, {}, "available", None, ["manage", "clean", "provide"]),
    ("badcreds", {}, {"manage": "fail:Failed to get power state: 401"}, None, "power-credentials", ["manage"]),
    # clean fails once, the recovery policy re-manages and provides again
    ("cleanfail", {}, {"provide": "fail:clean step failed"}, None, "clean-failed",
     ["manage", "provide", "manage", "provide", "manage"]),
    ("inspectfail", {"inspect": True}, {"inspect": "fail:no BMC answer"}, None, "inspect-failed",
     ["manage", "inspect", "manage", "inspect", "manage"]),
    ("hang", {}, {"provide": "hang"}, None, "provide-timeout", ["manage", "provide"]),
    ("locked", {}, {"manage": "locked:2"}, "available", None, ["manage", "manage", "manage", "provide"]),
])
def test_state_table(name, kw, behaviour, result, error_type, verbs):
    fake = FakeProvisioner({name: behaviour})
    policy = lc.Policy(poll_interval=1)
    policy.timeouts[lc.Stage.PROVIDE] = 30
    w = drive(fake, [spec(name, **kw)], policy)[name]
    assert (w.result.value if w.result else None) == result
    assert w.error_type == error_type
    assert [c[0].split(":")[1] for c in fake.calls if c[0].startswith("provision:")] == verbs
    node = next(iter(fake.nodes.values()))
    if error_type in ("clean-failed", "inspect-failed"):
        # parked: manageable, in maintenance, with the reason
        assert node["maintenance"] and error_type in node["maintenance_reason"]
    if kw.get("inspect") and result:
        assert node["extra"][C.EXTRA_CHECKPOINT] == "inspected"


def test_burn_in_and_full_erase_run_once_at_enrollment_then_automated_cleaning():
    """The agent's burn-in (in BURN_IN's order) and a full-disk erase, as one manual cleaning after
    inspection; then provide, where Ironic's automated cleaning (metadata) runs as on every provide."""
    policy = Cleaning(CleanMode.AUTOMATED, erase="full", burn_in=(("disk", 20), ("cpu", 30)))
    fake = FakeProvisioner()
    w = drive(fake, [spec("burn", inspect=True, cleaning=policy)])["burn"]
    assert w.result is lc.NodeState.AVAILABLE
    assert [c[0].split(":")[1] for c in fake.calls if c[0].startswith("provision:")] == [
        "manage", "inspect", "clean", "provide"]
    [(name, steps, no_ramdisk)] = fake.cleanings
    assert [(s["interface"], s["step"]) for s in steps] == [
        ("deploy", "burnin_cpu"), ("deploy", "burnin_disk"), ("deploy", "erase_devices")]
    assert no_ramdisk is None                              # the steps run in the agent
    assert policy.driver_info() == {"agent_burnin_cpu_timeout": 30, "agent_burnin_fio_disk_runtime": 20,
                                    "agent_burnin_fio_disk_loops": 1}
    assert Cleaning().enrollment_steps() == [] and Cleaning().driver_info() == {}


def test_resume_from_checkpoint_skips_done_stages():
    fake = FakeProvisioner()
    s = spec("resumed", inspect=True, cleaning=MANUAL)
    n = fake.create_node({"name": "resumed", "driver": "fake-hardware", "extra": {C.EXTRA_CHECKPOINT: "cleaned"}})
    fake.nodes[n["uuid"]]["provision_state"] = "manageable"
    clock = Clock()
    w = lc.run(fake, [lc.Work(spec=s, uuid=n["uuid"])], lc.Policy(), clock=clock, sleep=clock.sleep)[0]
    assert w.result is lc.NodeState.AVAILABLE
    assert [c[0] for c in fake.calls if c[0].startswith("provision:")] == ["provision:provide"]


def test_concurrency_limit_per_stage():
    fake = FakeProvisioner({f"n{i}": {"provide": "hang"} for i in range(5)})
    policy = lc.Policy(poll_interval=1)
    policy.concurrency[lc.Stage.PROVIDE] = 2
    policy.timeouts[lc.Stage.PROVIDE] = 5
    policy.overall_timeout = 100
    drive(fake, [spec(f"n{i}") for i in range(5)], policy)
    # Never more than 2 nodes cleaning at once: provides are issued in waves.
    provides = [c for c in fake.calls if c[0] == "provision:provide"]
    assert len(provides) == 5
    first_wave = fake.calls.index(provides[2])
    assert sum(1 for c in fake.calls[:first_wave] if c[0] == "provision:provide") == 2


def test_in_use_nodes_untouched():
    fake = FakeProvisioner()
    w = drive(fake, [spec("busy")], start_state="active")["busy"]
    assert w.result is lc.NodeState.IN_USE
    assert not [c for c in fake.calls if c[0].startswith("provision:")]


def _run_one(fake, s, *, state, extra=None, policy=None):
    n = fake.create_node({"name": s.name, "driver": "fake-hardware", "automated_clean": True, "extra": extra or {}})
    fake.nodes[n["uuid"]]["provision_state"] = state
    clock = Clock()
    w = lc.run(fake, [lc.Work(spec=s, uuid=n["uuid"])], policy or lc.Policy(poll_interval=1),
               clock=clock, sleep=clock.sleep)[0]
    return w, fake.nodes[n["uuid"]]


def _verbs(fake):
    return [c[0].split(":")[1] for c in fake.calls if c[0].startswith("provision:")]


def test_recovery_count_is_kept_on_the_node():
    fake = FakeProvisioner({"cf": {"provide": "fail:clean step failed"}})
    w, node = _run_one(fake, spec("cf"), state="enroll")
    assert w.error_type == "clean-failed"
    assert node["extra"][C.EXTRA_RETRIES] == 1


def test_resumed_run_never_retries_beyond_max_recoveries():
    # A killed run had spent the node's only recovery: the next run parks it
    # at once, and so does every run after that (no provide, ever).
    fake = FakeProvisioner({"cf": {"provide": "fail:clean step failed"}})
    w, node = _run_one(fake, spec("cf"), state="clean failed", extra={C.EXTRA_RETRIES: 1})
    assert w.error_type == "clean-failed"
    assert _verbs(fake) == ["manage"]            # the parking manage only
    assert node["maintenance"] and node["extra"][C.EXTRA_RETRIES] == 1
    w2 = lc.run(fake, [lc.Work(spec=spec("cf"), uuid=node["uuid"])], lc.Policy(poll_interval=1),
                clock=Clock(), sleep=lambda s: None)[0]
    # Parked: later runs report it and leave it alone (no verb at all).
    assert w2.error_type == "clean-failed" and "parked" in w2.error
    assert _verbs(fake) == ["manage"]


def test_recovered_node_clears_its_count_and_a_locked_manage_spends_one_recovery():
    fake = FakeProvisioner({"cf": {"manage": "locked:2"}})
    w, node = _run_one(fake, spec("cf"), state="clean failed")
    assert w.result is lc.NodeState.AVAILABLE
    assert _verbs(fake) == ["manage", "manage", "manage", "provide"]
    # one write of the count (1), one removal when available; nothing left behind
    assert [c for c in fake.calls if c[0] == "patch_node"] == [("patch_node", node["uuid"])] * 2
    assert C.EXTRA_RETRIES not in node["extra"]


# -- handlers decide, one place writes, all of a round's writes at once ----------------------------

class NoWrites(FakeProvisioner):
    """A provisioner whose writes fail the test: handlers must only decide."""

    def set_provision_state(self, *a, **kw):
        raise AssertionError("a handler wrote")

    def patch_node(self, *a, **kw):
        raise AssertionError("a handler wrote")

    def set_maintenance(self, *a, **kw):
        raise AssertionError("a handler wrote")


@pytest.mark.parametrize("state,kw,issued,extra,expect", [
    ("enroll", {}, None, {}, [("manage", None)]),
    ("manageable", {"inspect": True}, None, {}, [("inspect", None)]),
    # an inspection landed: the checkpoint first, then the next stage's verb, in that order
    ("manageable", {"inspect": True}, "inspect", {}, [(None, "/extra/nodeforge_stage"), ("provide", None)]),
    ("manageable", {"cleaning": MANUAL}, None, {}, [("clean", None)]),
    # recovery: the count written before the manage
    ("clean failed", {}, None, {}, [(None, "/extra/nodeforge_retries"), ("manage", None)]),
    # recoveries spent: maintenance (parked) before the manage
    ("clean failed", {}, None, {C.EXTRA_RETRIES: 1}, [("maintenance", None), ("manage", None)]),
    ("available", {}, None, {C.EXTRA_RETRIES: 1}, [(None, "/extra/nodeforge_retries")]),
])
def test_handlers_return_the_writes_they_want(state, kw, issued, extra, expect):
    s = spec("d", **kw)
    w = lc.Work(spec=s, uuid="u-1", node={"uuid": "u-1", "provision_state": state, "extra": dict(extra)})
    if issued:
        w.issued, w.issued_at = C.Verb(issued), 0.0
    ctx = lc.Ctx(NoWrites(), lc.Policy(), {}, 1.0)
    out = lc.decide(w, ctx)
    assert isinstance(out, lc.Act), out
    got = [("maintenance" if x.maintenance else (x.verb.value if x.verb else None),
            x.patch[0]["path"] if x.patch else None) for x in out.writes]
    assert got == expect
    assert w.node["extra"] == extra     # nothing recorded before Ironic accepted it


def test_a_full_stage_reserves_no_write():
    w = lc.Work(spec=spec("full"), uuid="u", node={"uuid": "u", "provision_state": "manageable"})
    policy = lc.Policy()
    policy.concurrency[lc.Stage.PROVIDE] = 2
    ctx = lc.Ctx(NoWrites(), policy, {lc.Stage.PROVIDE: 2}, 0.0)
    assert lc.decide(w, ctx) == lc.Continue()


class Overlap(FakeProvisioner):
    """Counts verbs in flight at once and lists (a round's verbs must overlap)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        import threading

        self.inside = self.most = self.listings = 0
        self._gate = threading.Lock()
        self._both = threading.Barrier(4, timeout=10)

    def list_nodes(self, fields=None):
        self.listings += 1
        return super().list_nodes(fields)

    def set_provision_state(self, ident, verb, **kw):
        with self._gate:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            if verb is C.Verb.MANAGE:
                self._both.wait()       # four manages must be in flight together, or this times out
            return super().set_provision_state(ident, verb, **kw)
        finally:
            with self._gate:
                self.inside -= 1


def test_a_rounds_writes_are_made_concurrently_one_listing_per_round():
    fake = Overlap()
    policy = lc.Policy(poll_interval=1)
    works = drive(fake, [spec(f"c{i}") for i in range(4)], policy)
    assert all(w.result is lc.NodeState.AVAILABLE for w in works.values())
    assert fake.most >= 4
    # manage round, provide round, then the round that sees them available: one listing each
    assert fake.listings == 3


def test_progress_sees_every_round():
    fake = FakeProvisioner()
    seen = []
    n = fake.create_node({"name": "p", "driver": "fake-hardware"})
    clock = Clock()
    lc.run(fake, [lc.Work(spec=spec("p"), uuid=n["uuid"])], lc.Policy(), clock=clock, sleep=clock.sleep,
           progress=lambda ws: seen.append(ws[0].node.get("provision_state")))
    assert seen == ["enroll", "manageable", "available"]


class SlowManage(FakeProvisioner):
    """The 'slow' node's manage is answered only once the 'fast' node is available."""

    def __init__(self):
        super().__init__()
        import threading

        self.fast_available = threading.Event()

    def list_nodes(self, fields=None):
        nodes = super().list_nodes(fields)
        if any(n["name"] == "fast" and n["provision_state"] == "available" for n in nodes):
            self.fast_available.set()
        return nodes

    def set_provision_state(self, ident, verb, **kw):
        if self._node(ident)["name"] == "slow" and verb is C.Verb.MANAGE:
            assert self.fast_available.wait(60), "the slow answer held back the other node"
        return super().set_provision_state(ident, verb, **kw)


def test_a_slow_answer_does_not_hold_back_the_other_nodes():
    from nodeforge.ironic.pacing import Bounds, Pacer

    fake = SlowManage()
    works = []
    for name in ("slow", "fast"):
        n = fake.create_node({"name": name, "driver": "fake-hardware", "automated_clean": True})
        works.append(lc.Work(spec=spec(name), uuid=n["uuid"]))
    clock = Clock()
    lc.run(fake, works, lc.Policy(poll_interval=0.01), clock=clock, sleep=clock.sleep,
           pacer=Pacer(Bounds(min_poll=0.01, max_poll=0.05)))
    assert [w.result for w in works] == [lc.NodeState.AVAILABLE] * 2
    # the fast node was provided while the slow one's manage was still unanswered
    provide_fast = fake.calls.index(("provision:provide", "fast"))
    assert ("provision:manage", "slow") not in fake.calls[:provide_fast]


class BusyListing(FakeProvisioner):
    """Ironic refuses the first two listings with 503 (its retries spent)."""

    def __init__(self):
        super().__init__()
        self.refusals = 2

    def list_nodes(self, fields=None):
        if self.refusals:
            self.refusals -= 1
            raise IronicError(operation="list nodes", status=503, kind=ErrorKind.UNAVAILABLE,
                              detail="No free conductor workers available")
        return super().list_nodes(fields)


def test_a_refused_listing_skips_the_round_and_spaces_the_polls():
    from nodeforge.ironic.pacing import Pacer

    fake = BusyListing()
    pacer = Pacer()
    w = drive_with(fake, "busy", pacer)
    assert w.result is lc.NodeState.AVAILABLE and fake.refusals == 0
    assert _verbs(fake) == ["manage", "provide"]


def drive_with(fake, name, pacer):
    n = fake.create_node({"name": name, "driver": "fake-hardware", "automated_clean": True})
    clock = Clock()
    slept = []

    def sleep(s):
        slept.append(s)
        clock.sleep(s)
    w = lc.run(fake, [lc.Work(spec=spec(name), uuid=n["uuid"])], lc.Policy(), clock=clock, sleep=sleep,
               pacer=pacer)[0]
    assert slept[0] < slept[1]          # the second refusal waited longer than the first
    return w
