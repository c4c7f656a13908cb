"""The adaptive pacer (nodeforge/ironic/pacing.py) on a deterministic clock: no sleeps, no timed asserts."""

from __future__ import annotations

import threading

import pytest

from nodeforge.ironic.pacing import Bounds, Pacer
from tests.support.clock import Clock



def pacer(**kw) -> tuple[Pacer, Clock]:
    clock = Clock()
    return Pacer(Bounds(**kw), clock=clock), clock


def good(p: Pacer, clock: Clock, n: int, latency: float = 0.1) -> None:
    for _ in range(n):
        clock.t += latency
        p.record(200, latency)


def test_additive_increase_one_per_window_up_to_the_bound():
    p, clock = pacer(start_inflight=4, max_inflight=6)
    good(p, clock, 3)
    assert p.limit == 4                 # a window is as many calls as the limit
    good(p, clock, 1)
    assert p.limit == 5
    good(p, clock, 5)
    assert p.limit == 6
    good(p, clock, 100)
    assert p.limit == 6 and p.stats.max_limit == 6


@pytest.mark.parametrize("status", [409, 503, None])
def test_congestion_cuts_once_per_round_trip(status):
    p, clock = pacer(start_inflight=16, max_inflight=32, backoff=0.5)
    good(p, clock, 5, latency=0.5)      # smoothed latency ~0.5 s: one round trip
    p.record(status, 0.5)
    assert p.limit == 8
    # the same burst (answers within one round trip) halves only once
    for _ in range(5):
        clock.t += 0.01
        p.record(status, 0.5)
    assert p.limit == 8
    clock.t += 1.0
    p.record(status, 0.5)
    assert p.limit == 4
    key = "network" if status is None else str(status)
    assert p.stats.congested == {key: 7} and p.stats.decreases == 2


def test_default_backoff_cuts_by_30_percent():
    p, clock = pacer(start_inflight=10)
    p.record(503, 0.1)
    assert p.limit == 7


def test_never_below_the_minimum_and_recovers():
    p, clock = pacer(start_inflight=4, min_inflight=2)
    for _ in range(10):
        clock.t += 5
        p.record(503, 0.1)
    assert p.limit == 2 and p.stats.min_limit == 2
    good(p, clock, 2 + 3)
    assert p.limit == 4


def test_sustained_high_latency_cuts_gently_without_refusals():
    p, clock = pacer(start_inflight=10, latency_high=2.0)
    for _ in range(30):
        clock.t += 3.0
        p.record(202, 3.0)              # every answer takes 3 s: Ironic is struggling
    assert 1 <= p.limit < 10
    assert p.stats.congested == {} and p.stats.increases == 0


def test_listings_set_the_poll_interval_not_the_limit():
    p, clock = pacer(min_poll=0.5, max_poll=10, poll_cost=2.0)
    assert p.poll_interval() == 0.5
    p.record(200, 1.5, listing=True)    # a listing that takes 1.5 s is not repeated every 0.5 s
    assert p.poll_interval() == pytest.approx(3.0)
    assert p.limit == 8 and p.stats.increases == 0
    p.record(200, 100, listing=True)
    assert p.poll_interval() == 10      # never above the bound


def test_poll_interval_backs_off_on_congestion_and_idles_out():
    p, clock = pacer(min_poll=0.5, max_poll=8)
    p.record(503, 0.1)                  # a refused write: the in-flight limit's business
    p.round_done(moved=True)
    assert p.poll_interval() == 0.5 and p.limit < 8
    for _ in range(20):
        clock.t += 1
        p.record(503, 0.1, listing=True)   # refused listings (retried by the provisioner)
    p.round_done(moved=True)
    assert p.poll_interval() == 0.5 and p.stats.decreases == 1
    p.round_done(moved=True, congested=True)   # a listing refused even after its retries
    assert p.poll_interval() == 1.0
    p.round_done(moved=True, congested=True)
    assert p.poll_interval() == 2.0
    p.round_done(moved=True, congested=False)
    assert p.poll_interval() == 1.0
    p.round_done(moved=True)
    assert p.poll_interval() == 0.5
    # nothing moving (a long cleaning): stretched by 25% a round, up to the bound
    seen = []
    for _ in range(20):
        p.round_done(moved=False)
        seen.append(p.poll_interval())
    assert seen[0] == pytest.approx(0.625) and seen == sorted(seen) and seen[-1] == 8
    p.round_done(moved=True)
    assert p.poll_interval() == 0.5


def test_slots_bound_the_calls_in_flight():
    p, _ = pacer(start_inflight=2)
    assert p.try_acquire() and p.try_acquire()
    assert not p.try_acquire()          # the third waits
    p.release()
    assert p.try_acquire()
    p.acquire(wait=False)               # a listing goes ahead of the writes waiting ...
    assert p.inflight == 3 and not p.try_acquire()   # ... and the writes after it wait for it
    p.release(), p.release(), p.release()
    assert p.inflight == 0


def test_threads_never_exceed_the_limit():
    p, _ = pacer(start_inflight=3, max_inflight=3)
    inside, most = [0], [0]
    lock = threading.Lock()
    gate = threading.Barrier(8)

    def worker():
        gate.wait()
        for _ in range(50):
            with p.slot():
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] <= 3 and p.inflight == 0


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="min_inflight"):
        Bounds(min_inflight=4, start_inflight=2)
    with pytest.raises(ValueError, match="min_poll"):
        Bounds(min_poll=5, max_poll=1)


def test_a_conflict_that_is_not_node_locked_is_no_congestion():
    # The provisioner reports a 409 that is not NodeLocked (duplicate, wrong state) as "409-conflict".
    p, clock = pacer(start_inflight=8)
    p.record("409-conflict", 0.1)
    p.record(404, 0.1)
    assert p.limit == 8 and p.stats.congested == {} and p.stats.decreases == 0
