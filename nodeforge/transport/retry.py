"""The one retry policy (tenacity): which failures retry, how long to wait, how often.

A call is wrapped in :meth:`RetryPolicy.run`; it raises :class:`Refused`
carrying a :class:`~nodeforge.transport.errors.Failure` when the answer was
not a success. The policy retries the failures whose kind is in
``retry_on`` (or that ``also`` accepts), waiting a capped exponential backoff
with jitter (``base * 2**n``, at most ``cap``, times 0.5-1.0) or the
answer's ``Retry-After`` when longer (at most ``max_retry_after``), at most
``attempts`` calls in all; then the last :class:`Refused` is raised.

* :data:`API` (OpenStack API calls): 409 NodeLocked, 503, 429, no answer
  (no answer: not for a POST unless the caller says it is safe to repeat, see
  :func:`nodeforge.transport.rest.request`); 6 attempts, 0.25 s doubling to 4 s.
* :data:`DOWNLOAD` (artifact and archive downloads): also any 5xx;
  5 attempts, 0.5 s doubling to 10 s.

``sleep`` is injectable, so a test retries without waiting.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from typing import Callable, TypeVar

import tenacity

from nodeforge.redact import scrub
from nodeforge.transport.errors import API_RETRIABLE, DOWNLOAD_RETRIABLE, Failure

log = logging.getLogger(__name__)

T = TypeVar("T")



class Refused(Exception):
    """An attempt that did not succeed (raised inside :meth:`RetryPolicy.run`)."""

    def __init__(self, failure: Failure, response=None):
        super().__init__(f"{failure.key}: {failure.detail}")
        self.failure = failure
        self.response = response


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base: float = 0.25                   # seconds before the 2nd attempt, doubled each time
    cap: float = 4.0                     # longest backoff
    retry_on: frozenset = API_RETRIABLE
    also: Callable[[Failure], bool] | None = None     # more failures worth retrying (a service's quirk)
    max_retry_after: float = 60.0        # a longer Retry-After is cut to this
    jitter: bool = True
    sleep: Callable[[float], None] = time.sleep

    def should_retry(self, failure: Failure) -> bool:
        return failure.kind in self.retry_on or bool(self.also and self.also(failure))

    def delay(self, attempt: int, failure: Failure | None = None) -> float:
        """Seconds to wait after the ``attempt``-th (0-based) attempt failed with ``failure``."""
        wait = min(self.cap, self.base * 2 ** attempt)
        if self.jitter:
            wait *= 0.5 + random.random() / 2
        if failure is not None and failure.retry_after is not None:
            wait = max(wait, min(failure.retry_after, self.max_retry_after))
        return wait

    def replace(self, **changes) -> "RetryPolicy":
        return dataclasses.replace(self, **changes)

    def run(self, fn: Callable[[], T], *, what: str = "", on_retry: Callable[[Failure, float], None] | None = None,
            logger: logging.Logger | None = None) -> T:
        """``fn()``, again while it raises a :class:`Refused` this policy retries; each retry is
        logged (INFO, on ``logger``: the caller's, else this module's) as
        ``retrying <what> in <s>s (attempt <n> of <attempts>): <kind> (<detail>)``."""

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception()
            return self.delay(state.attempt_number - 1, getattr(exc, "failure", None))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            failure = state.outcome.exception().failure
            delay = state.next_action.sleep if state.next_action else 0.0
            (logger or log).info("retrying %s in %.1fs (attempt %d of %d): %s (%s)", what or "call", delay,
                                 state.attempt_number + 1, self.attempts, failure.kind.value, scrub(failure.detail))
            if on_retry is not None:
                on_retry(failure, delay)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, self.attempts)),
            wait=wait,
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, Refused) and self.should_retry(e.failure)),
            before_sleep=before_sleep,
            sleep=self.sleep,
            reraise=True,
        )
        return retrying(fn)


API = RetryPolicy()
DOWNLOAD = RetryPolicy(attempts=5, base=0.5, cap=10.0, retry_on=DOWNLOAD_RETRIABLE)
ONCE = RetryPolicy(attempts=1)          # a call that must not be repeated (a streamed upload)
