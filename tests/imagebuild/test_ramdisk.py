"""The agent ramdisk: its pinned inputs and cache key (fast), and one real build with
diskimage-builder booted under QEMU, where ironic-python-agent starts and calls the Ironic API
URL on its kernel command line (slow)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from nodeforge import cli
from nodeforge.imagebuild import ramdisk


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


@pytest.mark.slow
def test_a_real_build_is_recorded_and_cached(tmp_path):
    """Built by diskimage-builder from the locked wheels (or taken from the cache of an identical
    build): the record names the locked agent and the input digest, and a second plan reuses the
    entry. That the agent in it boots and calls the Ironic API is proven where Ironic boots it:
    ``tests/canary/test_canary_machine.py`` inspects, cleans and deploys the machine with it (a
    separate ``-kernel/-initrd`` boot here repeated that under TCG for about two minutes)."""
    p = ramdisk.plan(tmp_path / "out")
    started = time.monotonic()
    record = ramdisk.build(p, log=print)
    print(f"agent ramdisk: {'cached' if p.cached else 'built'} in {time.monotonic() - started:.0f} s, "
          f"initramfs {record['files'][ramdisk.INITRAMFS]['bytes'] / (1 << 20):.1f} MiB")
    assert record["ipa_version"] == "13.0.0" and record["digest"] == p.digest
    for name in (ramdisk.KERNEL, ramdisk.INITRAMFS):
        assert record["files"][name]["bytes"] == (tmp_path / "out" / name).stat().st_size > 0
    again = ramdisk.plan(tmp_path / "again")
    assert again.cached and again.digest == p.digest
