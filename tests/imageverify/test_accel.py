"""Choosing the accelerator (nodeforge.imageverify.accel): what wins, the probe guest, the cached answer.

Stand-in QEMU programs play each kind of host: a KVM that runs the probe
kernel to its end, one that hangs after "Probing EDD" (the nested hosts where
a vCPU runs but a guest never reaches its kernel proper), one that prints
nothing at all (OVMF on those hosts), and one that aborts on its first vCPU
run ("failed to set MSR 0x10a"). They write to the ``-serial file:`` the probe
gives them and count their starts, so the tests also see how often QEMU ran.
"""

from __future__ import annotations

import json
import stat
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from nodeforge.imageverify import accel
from nodeforge.imageverify.bootwatch import Limits

QEMU = '''
import os, sys, time
MODE = {mode!r}
COUNT = {count!r}
args = sys.argv[1:]
if args == ["--version"]:
    print("QEMU emulator version 7.2.99 (stand-in {mode})"); sys.exit(0)
with open(COUNT, "a") as fh:
    fh.write(" ".join(args) + "\\n")
serial = next(a[5:] for a in args if a.startswith("file:"))
def say(text):
    with open(serial, "a") as fh:
        fh.write(text)
if MODE == "works":
    say("Probing EDD (edd=off to disable)... ok\\r\\n[    0.000000] Linux version 6.1.0\\r\\n")
    time.sleep(0.3)
    say("[    0.500000] Kernel panic - not syncing: VFS: Unable to mount root fs\\r\\n")
    sys.exit(0)
if MODE == "hang-after-edd":
    say("Probing EDD (edd=off to disable)... ok\\r\\n")
    time.sleep(3600)
if MODE == "silent":
    time.sleep(3600)
if MODE == "abort":
    sys.stderr.write("qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\\n"); sys.exit(134)
'''
FAST = accel.Watchdog(probe_bound=10.0, probe=Limits(silence=1.5))


def stand_in(tmp_path: Path, mode: str) -> tuple[str, Path]:
    path, count = tmp_path / f"qemu-{mode}", tmp_path / f"qemu-{mode}.starts"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(QEMU.format(mode=mode, count=str(count))))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), count


def starts(count: Path) -> list[str]:
    return count.read_text().splitlines() if count.exists() else []


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host whose /dev/kvm opens, with a boot id of its own; no accelerator variable set."""
    kvm, boot_id = tmp_path / "kvm", tmp_path / "boot_id"
    kvm.write_text("")
    boot_id.write_text("11111111-2222-3333-4444-555555555555\n")
    monkeypatch.setattr(accel, "KVM_DEVICE", str(kvm))
    monkeypatch.setattr(accel, "BOOT_ID", boot_id)
    monkeypatch.delenv(accel.ENV_ACCEL, raising=False)
    return boot_id


def decide(tmp_path, qemu, **kw):
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"kernel")
    code, vars_ = tmp_path / "OVMF_CODE.fd", tmp_path / "OVMF_VARS.fd"
    code.write_bytes(b"code")
    vars_.write_bytes(b"vars")
    return accel.decide(kw.pop("option", None), qemu=qemu, kernel=lambda: kernel, firmware=(code, vars_),
                        cache_dir=tmp_path / "cache", work_dir=tmp_path, watchdog=kw.pop("watchdog", FAST), **kw)


def test_an_explicit_option_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv(accel.ENV_ACCEL, "tcg")
    assert accel.requested("kvm") == ("kvm", "option")
    assert accel.requested(None) == ("tcg", "environment")
    monkeypatch.delenv(accel.ENV_ACCEL)
    assert accel.requested(None) == ("auto", "default")


def test_a_bad_value_names_where_it_came_from(monkeypatch):
    monkeypatch.setenv(accel.ENV_ACCEL, "xen")
    with pytest.raises(accel.AccelError, match=r"\$NODEFORGE_VERIFY_ACCEL: unknown accelerator 'xen'"):
        accel.requested(None)


def test_forced_accelerators_start_no_qemu(tmp_path, host):
    qemu, count = stand_in(tmp_path, "works")
    d = decide(tmp_path, qemu, option="kvm")
    assert (d.accel, d.automatic, d.reason) == ("kvm", False, "forced by --accel kvm")
    assert starts(count) == []


def test_no_kvm_device_means_tcg_without_starting_qemu(tmp_path, host, monkeypatch):
    monkeypatch.setattr(accel, "KVM_DEVICE", str(tmp_path / "no-such-device"))
    qemu, count = stand_in(tmp_path, "works")
    d = decide(tmp_path, qemu)
    assert d.accel == "tcg" and d.automatic and "not usable" in d.reason and starts(count) == []


def test_kvm_that_runs_the_probe_kernel_through_both_firmware_paths_is_trusted(tmp_path, host):
    qemu, count = stand_in(tmp_path, "works")
    d = decide(tmp_path, qemu)
    assert d.accel == "kvm" and d.automatic and not d.cached
    assert [p["firmware"] for p in d.probes] == ["bios", "uefi"] and all(p["ok"] for p in d.probes)
    lines = starts(count)
    assert len(lines) == 2 and all("accel=kvm" in line and "-kernel" in line for line in lines)
    assert sum("if=pflash" in line for line in lines) == 1          # one of them through OVMF
    assert all(accel.PROBE_NAME in line for line in lines)


@pytest.mark.parametrize("mode, detail", [
    ("hang-after-edd", "no console output for"),
    ("silent", "no console output for"),
    ("abort", "QEMU exited with 134 before the kernel finished: qemu-system-x86_64: error: failed to set MSR"),
])
def test_kvm_whose_guest_hangs_or_dies_is_refused_within_the_bound(tmp_path, host, mode, detail):
    qemu, _ = stand_in(tmp_path, mode)
    d = decide(tmp_path, qemu)
    assert d.accel == "tcg" and d.automatic
    assert d.reason.startswith("auto: KVM probe failed: bios") and detail in d.reason
    if mode in ("silent", "abort"):                      # the same detail for both paths: said once
        assert "bios and uefi: " in d.reason and d.reason.count(detail) == 1
    assert d.seconds < FAST.probe_bound                  # both probes at once, each stopped by its bound


def test_the_answer_is_cached_per_host_boot_and_qemu(tmp_path, host):
    qemu, count = stand_in(tmp_path, "hang-after-edd")
    first = decide(tmp_path, qemu)
    assert len(starts(count)) == 2
    again = decide(tmp_path, qemu)
    assert again.cached and again.accel == "tcg" and len(starts(count)) == 2     # no QEMU started
    assert "cached for this host boot and QEMU" in again.reason and first.reason[6:] in again.reason
    cached = json.loads(next((tmp_path / "cache").glob("*.json")).read_text())
    assert cached["key"]["boot_id"] == "11111111-2222-3333-4444-555555555555"
    assert cached["key"]["qemu_version"].endswith("(stand-in hang-after-edd)")
    host.write_text("99999999-2222-3333-4444-555555555555\n")        # the host rebooted
    assert not decide(tmp_path, qemu).cached and len(starts(count)) == 4


def test_parallel_runs_share_one_probe(tmp_path, host):
    qemu, count = stand_in(tmp_path, "works")
    results = []
    threads = [threading.Thread(target=lambda: results.append(decide(tmp_path, qemu))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.accel for r in results] == ["kvm"] * 3
    assert sorted(r.cached for r in results) == [False, True, True] and len(starts(count)) == 2


def test_a_stalled_boot_rewrites_the_answer(tmp_path, host):
    qemu, count = stand_in(tmp_path, "works")
    assert decide(tmp_path, qemu).accel == "kvm"
    accel.record_stall(qemu, "no kernel within 60 s (the boot reached: bootloader)", tmp_path / "cache")
    d = decide(tmp_path, qemu)
    assert d.cached and d.accel == "tcg" and "a verification boot under KVM stalled: no kernel" in d.reason
    assert len(starts(count)) == 2


def test_the_default_bounds_keep_an_idle_decision_under_ten_seconds():
    w = accel.Watchdog()
    # A hanging KVM is refused by its silence (both probes at once), never by the longer bound.
    assert w.probe.silence < 10 and w.probe_bound <= 30
    assert w.limits("kvm").kernel_by and w.limits("tcg").kernel_by is None
    assert w.limits("tcg").silence > w.limits("kvm").silence
