"""Progress of an enrollment while it runs: nodes per state, on standard error.

On a terminal one line updated in place (``rich.progress``: a bar of the
nodes done and the count per state); otherwise (a pipe, a CI log) a plain
line whenever the counts changed, at most one per ``every`` seconds, and a
last one at the end. Never on standard output, so ``--output json`` stays
one valid JSON document.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def state_counts(works) -> dict[str, int]:
    """Nodes per state: the final state, "failed", or Ironic's provision state."""
    counts: dict[str, int] = {}
    for w in works:
        key = w.result.value if w.result else ("failed" if w.error_type else w.node.get("provision_state") or "?")
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def describe(counts: dict[str, int]) -> str:
    return "  ".join(f"{k}: {v}" for k, v in counts.items())


class Progress:
    """``created(done, total)`` during create/update, ``update(works)`` per poll round; ``close()`` at the end."""

    def __init__(self, *, stream: TextIO | None = None, live: bool | None = None, every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.every, self.clock = every, clock
        self._last_text = ""
        self._last_at = float("-inf")
        self._pending = ""
        self._bar = None
        self._task = None

    # -- terminal --------------------------------------------------------------
    def _show(self, phase: str, done: int, total: int, text: str) -> None:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self._bar = Bar(TextColumn("{task.fields[phase]}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("{task.description}"),
                            console=Console(file=self.stream), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(text, total=total, phase=phase)
        self._bar.update(self._task, completed=done, total=total, description=text, phase=phase)

    # -- plain lines -----------------------------------------------------------
    def _line(self, text: str, *, force: bool = False) -> None:
        if text == self._last_text:
            return
        now = self.clock()
        force = force or text.split(":", 1)[0] != self._last_text.split(":", 1)[0]   # a new phase: shown
        if not force and now - self._last_at < self.every:
            self._pending = text
            return
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_text, self._last_at, self._pending = text, now, ""

    # -- API -------------------------------------------------------------------
    def created(self, done: int, total: int) -> None:
        text = f"enroll: {done}/{total} nodes created or updated"
        if self.live:
            self._show("enroll", done, total, "")
        else:
            self._line(text, force=done == total)

    def update(self, works) -> None:
        counts = state_counts(works)
        text = describe(counts)
        if self.live:
            done = sum(1 for w in works if w.done)
            self._show("lifecycle", done, len(works), text)
        else:
            self._line(f"lifecycle: {text}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._pending:
            self._line(self._pending, force=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
