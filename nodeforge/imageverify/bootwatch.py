"""Watching a QEMU guest's serial output: how far a boot got, when, and whether it still moves.

A boot shows its stages on the console (serial port 1) before the guest's
report arrives on serial port 2:

============  =============================================================
stage         first seen when
============  =============================================================
firmware      QEMU started (SeaBIOS prints nothing on the serial port; OVMF does)
bootloader    GRUB's first words (``Welcome to GRUB``, ``Booting `...'``)
kernel        the kernel's first line (``Linux version ...``, or its EFI stub)
userspace     the init system's first line (``systemd[1]``, ``Welcome to ...``)
checks        the verification collector's start line (``nodeforge verify: ...``)
report        the framed report on serial port 2 (or the console)
============  =============================================================

:class:`ConsoleWatch` reads the growing files incrementally and keeps, per
stage, the seconds since QEMU started when it was first seen (the boot's
*timeline*), and when any output last arrived. :class:`Limits` says when a
boot counts as stalled: no kernel within ``kernel_by`` seconds, or no new
output for ``silence`` seconds. :meth:`ConsoleWatch.stalled` applies them.
The same watch decides the accelerator probe (:mod:`.accel`) and the
verification boots (:func:`.boottest.boot`).
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

STAGES = ("firmware", "bootloader", "kernel", "userspace", "checks", "report")
# The first marker of each stage after firmware, in boot order. A later stage seen implies the
# earlier ones happened (SeaBIOS and a quiet GRUB may print nothing at all).
MARKERS: tuple[tuple[str, re.Pattern], ...] = (
    ("bootloader", re.compile(rb"GRUB|Booting `|Loading Linux")),
    ("kernel", re.compile(rb"Linux version \d|EFI stub: |Decompressing Linux|\[ +0\.0+\] ")),
    # systemd's "Welcome to <distribution>!", not GRUB's "Welcome to GRUB!".
    ("userspace", re.compile(rb"systemd\[1\]|Welcome to (?!GRUB)|Run /init as init process|Run /sbin/init")),
    ("checks", re.compile(rb"nodeforge verify: ")),
    ("report", re.compile(rb"NODEFORGE-VERIFY-BEGIN ")),
)
# Bytes kept from each stream to look for markers split across two reads.
_OVERLAP = 64


@dataclasses.dataclass(frozen=True)
class Limits:
    """When a boot counts as stalled (None: no such bound)."""

    kernel_by: float | None = None   # seconds from QEMU's start until the kernel's first line
    silence: float | None = None     # seconds without any new output (from QEMU's start until the first)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Stall:
    """Why a boot was taken for hung: the rule, the stage it had reached, and the seconds."""

    rule: str           # "kernel_by" | "silence"
    stage: str          # the last stage seen
    seconds: float      # since QEMU started
    detail: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class ConsoleWatch:
    """Incremental reader of a guest's serial files (``files[0]`` is the console)."""

    def __init__(self, *files: Path, start: float | None = None, clock=time.monotonic):
        self.files = [Path(f) for f in files]
        self.clock = clock
        self.start = clock() if start is None else start
        self.offsets = [0] * len(self.files)
        self.tails = [b""] * len(self.files)
        self.timeline: dict[str, float] = {"firmware": 0.0}
        self.last_output = self.start
        self.longest_silence = 0.0       # the longest wait for output so far (evidence for Limits.silence)
        self.output_bytes = 0

    @property
    def stage(self) -> str:
        """The furthest stage seen so far."""
        return max(self.timeline, key=STAGES.index)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def poll(self) -> bool:
        """Read what was appended since the last call; True if anything was."""
        grew = False
        for i, path in enumerate(self.files):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets[i])
                    chunk = fh.read()
            except OSError:
                continue
            if not chunk:
                continue
            grew = True
            self.offsets[i] += len(chunk)
            self.output_bytes += len(chunk)
            self._markers(self.tails[i] + chunk)
            self.tails[i] = (self.tails[i] + chunk)[-_OVERLAP:]
        if grew:
            now = self.clock()
            self.longest_silence = max(self.longest_silence, now - self.last_output)
            self.last_output = now
        return grew

    def _markers(self, data: bytes) -> None:
        now = round(self.elapsed(), 1)
        for stage, pattern in MARKERS:
            if stage not in self.timeline and pattern.search(data):
                self.timeline[stage] = now
        # A stage seen implies every earlier stage began no later than it.
        seen = [STAGES.index(s) for s in self.timeline]
        for stage in STAGES[1:max(seen)]:
            self.timeline.setdefault(stage, self.timeline[STAGES[max(seen)]])

    def stalled(self, limits: Limits) -> Stall | None:
        """The :class:`Stall` if ``limits`` say this boot is hung, else None."""
        now = self.elapsed()
        stage = self.stage
        if limits.kernel_by is not None and "kernel" not in self.timeline and now > limits.kernel_by:
            return Stall("kernel_by", stage, round(now, 1),
                         f"no kernel within {limits.kernel_by:.0f} s (the boot reached: {stage})")
        quiet = self.clock() - self.last_output
        if limits.silence is not None and quiet > limits.silence:
            return Stall("silence", stage, round(now, 1),
                         f"no console output for {quiet:.0f} s (bound {limits.silence:.0f} s; the boot "
                         f"reached: {stage})")
        return None

    def durations(self, end: float | None = None) -> dict[str, float]:
        """Seconds spent in each stage seen (from its start to the next stage's, the last one to
        ``end``, default now)."""
        end = self.elapsed() if end is None else end
        seen = sorted(self.timeline.items(), key=lambda kv: (kv[1], STAGES.index(kv[0])))
        out = {}
        for (stage, t), nxt in zip(seen, [*seen[1:], (None, end)]):
            out[stage] = round(max(0.0, nxt[1] - t), 1)
        return out
