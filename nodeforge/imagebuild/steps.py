"""Named build steps and the small runner that runs them, as diskimage-builder's block device
layer runs its nodes: each step is logged and timed under its name, and when one fails, the
steps already finished are undone in reverse order (each that has an undo), then the failure
goes on up. An undo that fails itself is logged and does not hide the first failure.

Steps that do not depend on each other (the variants' disks) can run side by side
(:class:`Together`): each is timed under its own name, the group waits for all of them, and
when one fails the others still finish and are undone with the steps before them."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import logging
import os
import threading
import time
from typing import Callable, Generic, Iterable, TypeVar, Union

log = logging.getLogger(__name__)

S = TypeVar("S")


class BuildLog:
    """The build log file, plus optional progress lines. Steps side by side (:class:`Together`)
    write to it from their threads: each line is written whole, under a lock; the subprocesses
    they run write to the same file themselves (``fh``)."""

    def __init__(self, path, stream: Callable[[str], None] | None):
        self.fh = open(path, "a", buffering=1)   # noqa: SIM115 - closed by close()
        self.stream = stream
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self.fh.write(text if text.endswith("\n") else text + "\n")

    def step(self, text: str) -> None:
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        self.write(f"== {stamp} {text}")
        if self.stream:
            self.stream(f"[{stamp}] {text}")

    def close(self) -> None:
        self.fh.close()


@dataclasses.dataclass(frozen=True)
class Step(Generic[S]):
    name: str                                  # the key of its time in the build's ``seconds``
    run: Callable[[S], None]
    undo: Callable[[S], None] | None = None    # what takes back what ``run`` made outside the work dir


@dataclasses.dataclass(frozen=True)
class Together(Generic[S]):
    """Steps that share no output and may run side by side, on threads (their work is in
    subprocesses and I/O), at most ``workers`` at once (default: the CPU count); one worker runs
    them one after the other, in order."""
    steps: tuple[Step[S], ...]
    workers: int | None = None

    def width(self) -> int:
        return max(1, min(len(self.steps), self.workers or os.cpu_count() or 1))


def _timed(step: Step[S], state: S, seconds: dict[str, float]) -> None:
    t = time.monotonic()
    step.run(state)
    seconds[step.name] = seconds.get(step.name, 0.0) + time.monotonic() - t


def _together(group: Together[S], state: S, seconds: dict[str, float], done: list[Step[S]]) -> None:
    """Run ``group``'s steps side by side; the steps that finished go to ``done`` (in the group's
    order) even when another failed, so that they are undone; then the first failure in that
    order is raised."""
    pool = concurrent.futures.ThreadPoolExecutor(group.width(), thread_name_prefix="step")
    futures = [pool.submit(_timed, step, state, seconds) for step in group.steps]
    try:
        concurrent.futures.wait(futures)
    finally:    # Ctrl-C here as well: the running steps end (their subprocesses got it too) first
        pool.shutdown(wait=True, cancel_futures=True)
        ended = [(step, fut.exception()) for step, fut in zip(group.steps, futures) if not fut.cancelled()]
        done.extend(step for step, exc in ended if exc is None)
    failure = next((exc for _, exc in ended if exc is not None), None)
    if failure is not None:
        raise failure


def run_steps(steps: Iterable[Union[Step[S], Together[S]]], state: S, seconds: dict[str, float],
              note: Callable[[str], None] = lambda _m: None) -> None:
    """Run ``steps`` in order on ``state`` (a :class:`Together` group's side by side);
    ``seconds[step.name]`` is each one's time. On a failure (Ctrl-C included), undo the finished
    steps in reverse order, then raise it."""
    done: list[Step[S]] = []
    try:
        for step in steps:
            if isinstance(step, Together) and step.width() > 1:
                _together(step, state, seconds, done)
                continue
            for one in step.steps if isinstance(step, Together) else (step,):   # a group of width 1: in order
                _timed(one, state, seconds)
                done.append(one)
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
