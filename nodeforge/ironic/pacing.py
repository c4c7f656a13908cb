"""Adaptive pacing of Ironic calls: how many are in flight, how often to poll.

One :class:`Pacer` per run is shared by every thread that talks to Ironic
(creates, port creates, lifecycle verbs, listings). Each answer is reported to
it (:meth:`Pacer.record`: latency and status) and it adapts, between the
bounds of :class:`Bounds`:

* **calls in flight** (:attr:`Pacer.limit`), AIMD-like: +1 per window of
  calls answered without trouble (one window = as many calls as the limit),
  cut by 30% (``backoff``) on a 409 NodeLocked, a 503 or a network error (at
  most once per round trip, so one burst of refusals cuts once), by 10% per round
  trip while the smoothed latency of writes stays above ``latency_high``
  (Ironic answering that slowly is struggling even without refusing).
  :meth:`slot` blocks a caller until a call may start. (Measured on the
  local Ironic: 24 provides took 7.9 s one at a time, 4.4 s four at a time,
  2.4 s eight at a time and 3.2 s sixteen at a time; a single call's
  latency varied from 0.03 to over 1 s at any concurrency, so latency
  relative to the best seen is no signal, only a sustained high one is.)
* **poll interval** (:meth:`Pacer.poll_interval`): at least ``min_poll`` and at
  least ``poll_cost`` times the last listing's latency (listings take at most
  a fifth of Ironic's time: the API and the conductor share one process);
  doubled after a round whose listing Ironic refused even after the
  retries (409/503; halved back per round without: refused writes are the
  in-flight limit's business), and stretched by 25% per
  round in which nothing moved (long cleanings are not polled every half
  second), back to the base as soon as something changes; never above
  ``max_poll``.

The clock is injected (``clock``), so the controller is unit-tested
deterministically without sleeping (tests/ironic/test_pacing.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Callable, Iterator

# Answers that mean "Ironic is busy, slow down" (HTTP status or "network").
CONGESTION = frozenset({"409", "503", "network"})


@dataclasses.dataclass(frozen=True)
class Bounds:
    min_inflight: int = 1
    max_inflight: int = 16
    start_inflight: int = 8
    min_poll: float = 0.5            # the API shares its process with the conductor
    max_poll: float = 10.0
    poll_cost: float = 4.0           # poll interval >= poll_cost x the last listing's latency
    latency_high: float = 2.0        # smoothed write latency above this (s): Ironic is struggling
    backoff: float = 0.7             # the limit's factor on a 409/503 (once per round trip)

    def __post_init__(self):
        if not 1 <= self.min_inflight <= self.start_inflight <= self.max_inflight:
            raise ValueError("pacing bounds: need 1 <= min_inflight <= start_inflight <= max_inflight")
        if not 0 < self.min_poll <= self.max_poll:
            raise ValueError("pacing bounds: need 0 < min_poll <= max_poll")


@dataclasses.dataclass
class Stats:
    calls: int = 0
    congested: dict[str, int] = dataclasses.field(default_factory=dict)   # by "409"/"503"/"network"
    decreases: int = 0
    increases: int = 0
    max_limit: int = 0
    min_limit: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Pacer:
    """Thread-safe adaptive limit on calls in flight, and the poll interval."""

    def __init__(self, bounds: Bounds | None = None, *, clock: Callable[[], float] = time.monotonic):
        self.bounds = b = bounds or Bounds()
        self.clock = clock
        self._limit = float(b.start_inflight)
        self._inflight = 0
        self._cond = threading.Condition()
        self._ewma: float | None = None          # smoothed latency of writes
        self._last_cut = float("-inf")           # when the limit was last decreased
        self._good_in_window = 0
        self._list_latency = 0.0
        self._poll_backoff = 1.0                 # x2 per round with a 409/503, /2 per round without

        self._idle_stretch = 1.0                 # x1.25 per round where nothing moved
        self.stats = Stats(max_limit=b.start_inflight, min_limit=b.start_inflight)

    # -- calls in flight -----------------------------------------------------
    @property
    def limit(self) -> int:
        return int(self._limit)

    @property
    def inflight(self) -> int:
        return self._inflight

    def try_acquire(self) -> bool:
        with self._cond:
            if self._inflight < self.limit:
                self._inflight += 1
                return True
            return False

    def acquire(self, *, wait: bool = True) -> None:
        """Take a slot; ``wait=False`` (a listing) takes it at once, ahead of the
        writes waiting (a poll is never starved by a queue of verbs), and the
        writes after it wait until it is answered."""
        with self._cond:
            while wait and self._inflight >= self.limit:
                self._cond.wait(0.5)
            self._inflight += 1

    def release(self) -> None:
        with self._cond:
            self._inflight = max(0, self._inflight - 1)
            self._cond.notify_all()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def _window(self) -> float:
        """One round trip: the smoothed latency (at least 0.1 s)."""
        return max(0.1, self._ewma or 0.0)

    def record(self, status: str | int | None, latency: float, *, listing: bool = False) -> None:
        """One answer from Ironic: ``status`` is the HTTP status (or "network"), ``latency`` seconds."""
        status = "network" if status is None else str(status)
        b = self.bounds
        with self._cond:
            now = self.clock()
            self.stats.calls += 1
            if status in CONGESTION:
                self.stats.congested[status] = self.stats.congested.get(status, 0) + 1
                if not listing and now - self._last_cut >= self._window():
                    self._cut(b.backoff, now)        # a write refused: fewer writes in flight
                return
            if listing:
                self._list_latency = latency
                return
            self._ewma = latency if self._ewma is None else 0.8 * self._ewma + 0.2 * latency
            if self._ewma > b.latency_high:
                if now - self._last_cut >= self._window():
                    self._cut(0.9, now)
                return
            self._good_in_window += 1
            if self._good_in_window >= self.limit and self._limit < b.max_inflight:
                self._good_in_window = 0
                self._limit = min(float(b.max_inflight), self._limit + 1)
                self.stats.increases += 1
                self.stats.max_limit = max(self.stats.max_limit, self.limit)
                self._cond.notify_all()

    def _cut(self, factor: float, now: float) -> None:
        b = self.bounds
        new = max(float(b.min_inflight), self._limit * factor)
        if new < self._limit:
            self._limit = new
            self.stats.decreases += 1
            self.stats.min_limit = min(self.stats.min_limit, self.limit)
        self._last_cut = now
        self._good_in_window = 0

    # -- polling -------------------------------------------------------------
    def round_done(self, *, moved: bool, congested: bool = False) -> None:
        """End of a poll round: did any node change state or get a verb? Was the listing
        refused even after its retries (``congested``)? Refused writes do not stretch the
        polls: the limit on writes in flight answers them."""
        b = self.bounds
        with self._cond:
            self._idle_stretch = 1.0 if moved else min(self._idle_stretch * 1.25, b.max_poll / b.min_poll)
            if congested:
                self._poll_backoff = min(self._poll_backoff * 2, b.max_poll / b.min_poll)
            else:
                self._poll_backoff = max(1.0, self._poll_backoff / 2)

    def poll_interval(self) -> float:
        b = self.bounds
        with self._cond:
            base = max(b.min_poll, b.poll_cost * self._list_latency)
            return min(b.max_poll, base * self._poll_backoff * self._idle_stretch)
