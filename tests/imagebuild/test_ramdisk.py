"""The agent ramdisk: its pinned inputs and cache key (fast), and one real build with
diskimage-builder booted under QEMU, where ironic-python-agent starts and calls the Ironic API
URL on its kernel command line (slow)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodeforge import cli
from nodeforge.imagebuild import ramdisk
from nodeforge.imageverify import accel


def _copy_inputs(tmp_path: Path) -> tuple[Path, Path]:
    lock = tmp_path / "agent-ramdisk.lock.txt"
    shutil.copyfile(ramdisk.LOCK, lock)
    element = tmp_path / "nodeforge-agent"
    shutil.copytree(ramdisk.ELEMENT, element)
    return lock, element


def test_the_lock_pins_every_package_with_a_hash_and_names_a_bad_line(tmp_path):
    pins = ramdisk.check_lock(ramdisk.LOCK)
    assert "ironic-python-agent==13.0.0" in pins and len(pins) > 20
    assert ramdisk.locked_version(ramdisk.LOCK) == "13.0.0"
    bad = tmp_path / "lock.txt"
    bad.write_text("ironic-python-agent==13.0.0 \\\n    --hash=sha256:" + "0" * 64 + "\npbr>=6\n")
    with pytest.raises(ramdisk.RamdiskError, match=r"lock.txt:3: 'pbr>=6' is not pinned to one version"):
        ramdisk.check_lock(bad)
    bad.write_text("ironic-python-agent==13.0.0\npbr==7.1.3 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(ramdisk.RamdiskError, match=r"lock.txt:1: ironic-python-agent==13.0.0 has no --hash=sha256"):
        ramdisk.check_lock(bad)


def test_the_cache_key_follows_every_input(tmp_path):
    lock, element = _copy_inputs(tmp_path)
    base, inputs = ramdisk.input_digest(lock, element)
    assert inputs["builder"] == "7.4.0" and inputs["release"] == ramdisk.RELEASE
    assert ramdisk.input_digest(lock, element)[0] == base                       # stable
    lock.write_text(lock.read_text() + "# a comment is a change of the lock\n")
    assert ramdisk.input_digest(lock, element)[0] != base
    shutil.copyfile(ramdisk.LOCK, lock)
    (element / "package-installs.yaml").write_text((element / "package-installs.yaml").read_text() + "curl:\n")
    assert ramdisk.input_digest(lock, element)[0] != base


def test_plan_says_build_then_reuse_and_the_dry_run_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    p = ramdisk.plan()
    assert not p.cached and p.cache.parent == tmp_path / "cache" / "nodeforge" / "agent-ramdisk"
    code = cli.main(["image", "agent-ramdisk", "--dry-run", "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["action"] == "build" and doc["digest"] == p.digest and doc["ipa_version"] == "13.0.0"
    assert not (tmp_path / "cache").exists()
    # A cache entry that holds every file: reused, and checked against its SHA256SUMS.
    p.cache.mkdir(parents=True)
    for name in (ramdisk.KERNEL, ramdisk.INITRAMFS):
        (p.cache / name).write_bytes(name.encode())
    (p.cache / "SHA256SUMS").write_text("".join(f"{__import__('hashlib').sha256(n.encode()).hexdigest()}  {n}\n"
                                                for n in (ramdisk.KERNEL, ramdisk.INITRAMFS)))
    (p.cache / ramdisk.RECORD).write_text(json.dumps({"files": {}}))
    again = ramdisk.plan(tmp_path / "out")
    assert again.cached and again.to_dict()["action"] == "reuse"
    ramdisk.build(again)
    assert (tmp_path / "out" / ramdisk.INITRAMFS).read_bytes() == ramdisk.INITRAMFS.encode()
    (p.cache / ramdisk.KERNEL).write_bytes(b"changed")
    with pytest.raises(ramdisk.RamdiskError, match="do not match SHA256SUMS"):
        ramdisk.build(again)


def _console_until(path: Path, needles: tuple[str, ...], proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline and proc.poll() is None:
        text = path.read_text(errors="replace") if path.exists() else ""
        if all(n in text for n in needles):
            return text
        time.sleep(2)
    return text


@pytest.mark.slow
def test_a_real_build_boots_and_the_agent_calls_the_ironic_api(tmp_path):
    """Built by diskimage-builder from the locked wheels (or taken from the cache of an identical
    build), booted with QEMU's -kernel/-initrd under TCG: ironic-python-agent starts and tries the
    ``ipa-api-url`` it was given (nothing listens there: the attempt is what shows)."""
    p = ramdisk.plan(tmp_path / "out")
    started = time.monotonic()
    record = ramdisk.build(p, log=print)
    print(f"agent ramdisk: {'cached' if p.cached else 'built'} in {time.monotonic() - started:.0f} s, "
          f"initramfs {record['files'][ramdisk.INITRAMFS]['bytes'] / (1 << 20):.1f} MiB")
    assert record["ipa_version"] == "13.0.0" and record["digest"] == p.digest
    console = tmp_path / "console.log"
    url = "http://10.0.2.100:6399"
    argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-cpu", accel.CPU["tcg"], "-smp", "2",
            "-m", "3072", "-kernel", str(tmp_path / "out" / ramdisk.KERNEL),
            "-initrd", str(tmp_path / "out" / ramdisk.INITRAMFS),
            "-append", f"console=ttyS0 ipa-api-url={url} ipa-insecure=1 ipa-debug=1",
            "-display", "none", "-serial", f"file:{console}", "-netdev", "user,id=n0",
            "-device", "virtio-net-pci,netdev=n0", "-no-reboot"]
    booted = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        text = _console_until(console, ("ironic-python-agent[", "host='10.0.2.100', port=6399"), proc, 600)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    print(f"agent ramdisk: boot to the agent's first API call {time.monotonic() - booted:.0f} s under TCG")
    assert "ironic-python-agent[" in text, text[-3000:]
    assert "host='10.0.2.100', port=6399" in text, text[-3000:]
