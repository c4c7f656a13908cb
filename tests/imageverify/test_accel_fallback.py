"""Boot verification on a host whose KVM half-works: the probe and the watchdog, against real boots.

A stand-in "accelerator that hangs": a wrapper around the real QEMU, first on
PATH, that runs every guest asked to use KVM under TCG instead (this
machine's KVM may not work at all) and, where it freezes a guest, gives it a
firmware that halts its CPU at the reset vector. Such a guest is running as
far as QEMU is concerned, and prints nothing, as the hanging hosts' guests
did (docs/boot-verification.md).

* ``freeze-all`` freezes every KVM guest: the accelerator probe rejects KVM,
  and the boot runs under TCG from the start.
* ``freeze-boots`` lets the probe's guests run (told apart by their
  ``-name``) and freezes only the verification boot: the probe trusts KVM,
  the boot's watchdog stops it in bounded time, ``auto`` boots the variant
  again under TCG and passes, and the report says why. A forced ``--accel
  kvm`` fails fast instead, naming the way out.

Each boots a hard-linked copy of the test run's one build (``built_image``).
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nodeforge.imageverify import accel, boottest, builddir
from nodeforge.imageverify.bootwatch import Limits
from tests.imagebuild.realbuild import linked_copy, verify
from tests.prereq import require_tools

WRAPPER = '''
import os, sys
REAL, MODE, HALT, TCG_CPU = {real!r}, {mode!r}, {halt!r}, {tcg_cpu!r}
args = sys.argv[1:]
if any("accel=kvm" in a for a in args):
    args = [a.replace("accel=kvm", "accel=tcg") for a in args]
    args[args.index("-cpu") + 1] = TCG_CPU
    name = args[args.index("-name") + 1] if "-name" in args else ""
    if MODE == "freeze-all" or not name.startswith("nodeforge-accel-probe"):
        kept, i = [], 0
        while i < len(args):
            if args[i] in ("-kernel", "-initrd", "-append") or (args[i] == "-drive" and "if=pflash" in args[i + 1]):
                i += 2
                continue
            kept.append(args[i])
            i += 1
        args = kept + ["-bios", HALT]
os.execv(REAL, [REAL] + args)
'''
# The probe guest under TCG is slower than under a real KVM (UEFI about 15 s on a loaded machine):
# bounds for this stand-in; the verification boot's KVM bounds are short so the test is quick.
WATCHDOG = accel.Watchdog(probe_bound=180.0, probe=Limits(silence=90.0), kvm=Limits(kernel_by=30.0, silence=30.0))


def halt_firmware(path: Path) -> Path:
    """A 64 KiB BIOS image whose reset vector is ``cli; hlt; jmp $-1``: a vCPU that never prints."""
    rom = bytearray(b"\xff" * 65536)
    rom[-16:-12] = b"\xfa\xf4\xeb\xfd"
    path.write_bytes(bytes(rom))
    return path


@pytest.fixture
def hanging_kvm(tmp_path, monkeypatch):
    """Install the stand-in as ``qemu-system-x86_64`` on PATH; returns a function taking the mode."""
    real = require_tools(boottest.QEMU)[boottest.QEMU]
    kvm = tmp_path / "kvm"
    kvm.write_text("")
    monkeypatch.setattr(accel, "KVM_DEVICE", str(kvm))      # a /dev/kvm that opens, on any host
    monkeypatch.delenv(accel.ENV_ACCEL, raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()

    def install(mode: str) -> Path:
        wrapper = bindir / boottest.QEMU
        wrapper.write_text(f"#!{sys.executable}\n" + textwrap.dedent(
            WRAPPER.format(real=real, mode=mode, halt=str(halt_firmware(tmp_path / "halt.rom")),
                           tcg_cpu=accel.CPU["tcg"])))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
        return wrapper

    return install


def _section(d: Path, variant: str) -> dict:
    return json.loads((d / "verify.json").read_text())["variants"][variant]


@pytest.mark.slow
@pytest.mark.devcloud
def test_a_kvm_that_freezes_every_guest_is_refused_by_the_probe(built_image, hanging_kvm, tmp_path):
    hanging_kvm("freeze-all")
    d = linked_copy(built_image.path, tmp_path / "frozen")
    lines: list[str] = []
    t0 = time.monotonic()
    [result] = verify(d, variants=("vm",), accel_cache=tmp_path / "accel", stream=lines.append)
    assert result.passed, result.error
    assert result.accel == "tcg" and result.fallback is None
    assert result.accel_reason.startswith("auto: KVM probe failed: bios")
    assert "uefi" in result.accel_reason and "the guest stopped making progress" in result.accel_reason
    probe_line = next(line for line in lines if line.startswith("accelerator: tcg"))
    decided = float(probe_line.rsplit("decided in ", 1)[1].split(" s")[0])
    assert decided < accel.Watchdog().probe_bound          # the default bounds: refused by the silence
    section = _section(d, "vm")
    assert section["accel"] == "tcg" and section["accel_reason"] == result.accel_reason
    assert {"kernel", "userspace", "checks", "report"} <= set(section["timeline"])
    assert builddir.load(d).variant("vm").verify is builddir.VerifyStatus.PASSED
    print(f"freeze-all: decided in {decided:.1f} s, verify {time.monotonic() - t0:.0f} s")


@pytest.mark.slow
@pytest.mark.devcloud
def test_a_kvm_boot_that_stalls_falls_back_to_tcg_in_bounded_time(built_image, hanging_kvm, tmp_path):
    hanging_kvm("freeze-boots")
    d = linked_copy(built_image.path, tmp_path / "stalls")
    lines: list[str] = []
    [result] = verify(d, variants=("baremetal",), accel_cache=tmp_path / "accel", watchdog=WATCHDOG,
                      stream=lines.append)
    assert result.passed, result.error
    assert any(line.startswith("accelerator: kvm (auto: KVM probe passed") for line in lines)
    fb = result.fallback
    assert result.accel == "tcg" and fb is not None and fb["from"] == "kvm"
    assert fb["stage"] == "firmware" and fb["reason"].startswith("no kernel within 30 s")
    assert fb["seconds"] < 30 + 15                        # stopped by the watchdog, not the 900 s timeout
    assert "a boot under KVM stalled" in result.accel_reason
    section = _section(d, "baremetal")
    assert section["fallback"] == fb and section["accel"] == "tcg" and section["accel_reason"] == result.accel_reason
    assert {"kernel", "userspace", "checks", "report"} <= set(section["timeline"])
    assert builddir.load(d).variant("baremetal").verify is builddir.VerifyStatus.PASSED
    # The host remembers: the next run on this host boot goes straight to TCG, without a probe.
    again = accel.decide(None, qemu=boottest.QEMU, kernel=lambda: pytest.fail("probed again"), firmware=None,
                         cache_dir=tmp_path / "accel")
    assert again.cached and again.accel == "tcg"


@pytest.mark.slow
@pytest.mark.devcloud
def test_a_forced_kvm_boot_that_stalls_fails_fast_naming_the_way_out(built_image, hanging_kvm, tmp_path):
    hanging_kvm("freeze-boots")
    d = linked_copy(built_image.path, tmp_path / "forced")
    t0 = time.monotonic()
    with pytest.raises(boottest.BootError) as err:
        verify(d, variants=("vm",), accel="kvm", accel_cache=tmp_path / "accel", watchdog=WATCHDOG)
    assert time.monotonic() - t0 < 120
    msg = str(err.value)
    assert "KVM boot stalled: no kernel within 30 s" in msg and "forced by --accel kvm" in msg
    assert err.value.hint == f"boot under TCG instead: --accel tcg or {accel.ENV_ACCEL}=tcg"
    section = _section(d, "vm")
    assert section["passed"] is False and section["accel"] == "kvm" and section["fallback"] is None
    assert not list((tmp_path / "accel").glob("*.json"))    # forced: nothing probed, nothing remembered
    shutil.rmtree(d)
