"""The KVM probe (:func:`nodeforge.imageverify.boottest.kvm_usable`) wants a positive answer.

On this kind of machine /dev/kvm exists but QEMU aborts on its first vCPU run
("failed to set MSR 0x10a"), and on a loaded machine QEMU may not even get
that far within a second or two. The probe used to answer "usable" when QEMU
was merely still alive after 1.5 s; a benchmark then chose KVM and its boot
aborted. Stand-in QEMU programs (a Python script speaking QMP on stdio, as
``-qmp stdio`` does) play each case; the real QEMU is asked too.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
import time

import pytest

from nodeforge.imageverify import boottest
from tests.prereq import require_tools

QMP = '''
import json, sys, time
MODE = {mode!r}
def out(doc):
    sys.stdout.write(json.dumps(doc) + "\\n"); sys.stdout.flush()
if MODE == "silent-then-abort":
    time.sleep(2.5); sys.exit(134)
if MODE == "silent-forever":
    time.sleep(3600)
out({{"QMP": {{"version": {{}}, "capabilities": []}}}})
for line in sys.stdin:
    cmd = json.loads(line)["execute"]
    if cmd == "qmp_capabilities":
        out({{"return": {{}}}})
    elif cmd == "query-status":
        out({{"event": "RESUME", "data": {{}}}})
        out({{"return": {{"status": "running", "running": True}}}})
    elif cmd == "human-monitor-command":
        if MODE == "abort-on-vcpu":
            sys.stderr.write("failed to set MSR 0x10a\\n"); sys.exit(134)
        out({{"return": "RAX=0000000000000000 RBX=0\\nRIP=000000000000fff0 RFL=00000002\\n"}})
        if MODE == "abort-after-registers":
            time.sleep(0.1); sys.exit(134)
time.sleep(30)
'''


def _stand_in(tmp_path: Path, mode: str) -> str:
    path = tmp_path / f"qemu-{mode}"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(QMP.format(mode=mode)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def kvm_node(monkeypatch):
    """The probe looks at /dev/kvm first; these tests play a machine that has one."""
    real = os.access
    monkeypatch.setattr(boottest.os, "access", lambda p, m: True if str(p) == "/dev/kvm" else real(p, m))


def test_a_qemu_that_answers_and_reads_registers_is_usable(tmp_path, kvm_node):
    assert boottest.kvm_usable(_stand_in(tmp_path, "works"), timeout=20) is True


@pytest.mark.parametrize("mode", ["silent-then-abort", "abort-on-vcpu", "abort-after-registers"])
def test_a_qemu_that_dies_or_never_answers_is_not_usable(tmp_path, kvm_node, mode):
    # "silent-then-abort" is still alive after 1.5 s: the old probe's test, which said usable.
    assert boottest.kvm_usable(_stand_in(tmp_path, mode), timeout=20) is False


def test_the_probe_gives_up_at_its_deadline(tmp_path, kvm_node):
    # A QEMU that never answers and never exits: the probe must end by its own deadline and kill
    # it (without one this test would hang until pytest's timeout).
    assert boottest.kvm_usable(_stand_in(tmp_path, "silent-forever"), timeout=0.5) is False


def test_no_kvm_device_means_tcg_without_starting_qemu(tmp_path, monkeypatch):
    monkeypatch.setattr(boottest.os, "access", lambda p, m: False)
    assert boottest.kvm_usable(str(tmp_path / "no-such-qemu")) is False
    monkeypatch.delenv(boottest.ENV_ACCEL, raising=False)
    assert boottest.choose_accel("auto") == "tcg"


def test_the_real_qemu_probe_agrees_with_a_real_vcpu_run():
    """On this machine: whatever the probe says, a KVM boot with the same CPU model must agree
    (usable: QEMU keeps running for 3 s; not usable: no /dev/kvm, or QEMU exits)."""
    qemu = boottest.QEMU
    require_tools(qemu, why="the KVM probe against the real QEMU")
    usable = boottest.kvm_usable()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert usable is False
        return
    import subprocess

    proc = subprocess.Popen([qemu, "-machine", "q35,accel=kvm", "-cpu", boottest.KVM_CPU, "-smp", "1",
                             "-nodefaults", "-display", "none", "-m", "64", "-no-reboot", "-monitor", "none"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        alive = proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert usable == alive
