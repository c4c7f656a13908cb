"""Named build steps and the small runner that runs them, as diskimage-builder's block device
layer runs its nodes: each step is logged and timed under its name, and when one fails, the
steps already finished are undone in reverse order (each that has an undo), then the failure
goes on up. An undo that fails itself is logged and does not hide the first failure."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Generic, Iterable, TypeVar

log = logging.getLogger(__name__)

S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class Step(Generic[S]):
    name: str                                  # the key of its time in the build's ``seconds``
    run: Callable[[S], None]
    undo: Callable[[S], None] | None = None    # what takes back what ``run`` made outside the work dir


def run_steps(steps: Iterable[Step[S]], state: S, seconds: dict[str, float],
              note: Callable[[str], None] = lambda _m: None) -> None:
    """Run ``steps`` in order on ``state``; ``seconds[step.name]`` is each one's time. On a
    failure (Ctrl-C included), undo the finished steps in reverse order, then raise it."""
    done: list[Step[S]] = []
    try:
        for step in steps:
            t = time.monotonic()
            step.run(state)
            seconds[step.name] = seconds.get(step.name, 0.0) + time.monotonic() - t
            done.append(step)
    except BaseException:
        for step in reversed(done):
            if step.undo is None:
                continue
            try:
                step.undo(state)
                note(f"undone: {step.name}")
            except Exception as exc:  # noqa: BLE001 - the first failure is the one to report
                note(f"undoing {step.name} failed: {exc}")
                log.warning("undoing build step %s failed: %s", step.name, exc)
        raise
