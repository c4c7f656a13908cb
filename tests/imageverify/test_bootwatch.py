"""The console watch: stage markers, the timeline, and when a boot counts as stalled."""

from __future__ import annotations

from nodeforge.imageverify.bootwatch import ConsoleWatch, Limits, STAGES


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(tmp_path, clock):
    console, report = tmp_path / "console.log", tmp_path / "report.serial"
    console.write_bytes(b"")
    return ConsoleWatch(console, report, clock=clock), console, report


def _append(path, data: bytes):
    with open(path, "ab") as fh:
        fh.write(data)


def test_stages_are_timed_when_first_seen_and_a_later_stage_implies_the_earlier(tmp_path):
    clock = Clock()
    watch, console, report = _watch(tmp_path, clock)
    assert watch.timeline == {"firmware": 0.0} and watch.stage == "firmware"
    clock.now += 2
    _append(console, b"BdsDxe: starting Boot0001\r\nWelcome to GRUB!\r\n\x1b[2J  GNU GRUB  version 2.06\r\n")
    assert watch.poll() and watch.timeline == {"firmware": 0.0, "bootloader": 2.0}   # GRUB's welcome is not systemd's
    clock.now += 5
    _append(console, b"[    0.000000] Linux ver")
    watch.poll()
    clock.now += 1
    _append(console, b"sion 6.1.0-57-amd64 (debian-kernel@...)\r\n")   # a marker split over two reads
    watch.poll()
    assert watch.timeline["kernel"] in (7.0, 8.0)
    clock.now += 10
    _append(console, b"Welcome to Debian GNU/Linux 12 (bookworm)!\r\n")
    watch.poll()
    clock.now += 30
    _append(report, b"NODEFORGE-VERIFY-BEGIN 1 abc 10\r\n")
    watch.poll()
    assert set(watch.timeline) == set(STAGES)
    # The collector's start line never came: "checks" is implied by the report, no later than it.
    assert watch.timeline["checks"] == watch.timeline["report"] == 48.0
    assert watch.stage == "report"
    durations = watch.durations(end=48.0)
    assert durations["bootloader"] == 5.0 and durations["userspace"] == 30.0


def test_no_kernel_by_the_bound_is_a_stall_naming_the_stage_reached(tmp_path):
    clock = Clock()
    watch, console, _ = _watch(tmp_path, clock)
    limits = Limits(kernel_by=60, silence=None)
    _append(console, b"Booting `nodeforge Kubernetes 1.36.1 node (vm)'\r\n")
    clock.now += 1
    watch.poll()
    clock.now += 58.5
    assert watch.stalled(limits) is None          # 59.5 s
    clock.now += 1
    stall = watch.stalled(limits)
    assert stall.rule == "kernel_by" and stall.stage == "bootloader"
    assert "no kernel within 60 s" in stall.detail and "bootloader" in stall.detail


def test_silence_counts_from_the_last_output_and_output_resets_it(tmp_path):
    clock = Clock()
    watch, console, _ = _watch(tmp_path, clock)
    limits = Limits(kernel_by=None, silence=30)
    clock.now += 29
    assert watch.stalled(limits) is None
    _append(console, b"[    0.000000] Linux version 6.1\r\n")
    watch.poll()
    clock.now += 29
    assert watch.stalled(limits) is None
    assert not watch.poll()            # nothing new: the silence goes on
    clock.now += 2
    stall = watch.stalled(limits)
    assert stall.rule == "silence" and stall.stage == "kernel" and "no console output for 31 s" in stall.detail


def test_no_limits_never_stall(tmp_path):
    clock = Clock()
    watch, _, _ = _watch(tmp_path, clock)
    clock.now += 10_000
    assert watch.stalled(Limits()) is None
