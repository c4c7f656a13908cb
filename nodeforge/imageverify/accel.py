"""The accelerator a verification boot runs under: KVM only once a real guest has been seen running on it.

A ``/dev/kvm`` that opens, and a vCPU that runs (QEMU's monitor says
``running`` and reads its registers), are not enough. Nested hosts of this
project's usual kind show two other failures (docs/boot-verification.md):
QEMU aborts on the first vCPU run ("failed to set MSR 0x10a"), or the guest
hangs silently, at the switch from real mode into the kernel proper (the BIOS
path: GRUB's "Booting ..." and nothing after) or before the firmware prints
anything (OVMF).

So :func:`decide` proves KVM the way the boot will use it: it boots a real
kernel (the image's own, :func:`decide`'s ``kernel`` callable gives it) with
``-kernel``, on the same machine type and CPU model, once through SeaBIOS and
once through OVMF, both at the same time, with no root file system on
purpose. A kernel that runs its whole initialisation ends in "Kernel panic -
not syncing: VFS: Unable to mount root fs", and with ``panic=-1`` and
``-no-reboot`` QEMU then exits. KVM is trusted only if both firmware paths get
there within :data:`PROBE_BOUND` seconds, with no gap of more than
:data:`PROBE_LIMITS` ``silence`` in the console output (on a working KVM the
kernel prints without pause; the hanging kind stops after "Probing EDD").

The answer is cached in a file keyed by the host's boot id and the QEMU
binary and version (:func:`cache_key`), under a lock, so parallel test workers
and later runs on the same host boot share one probe. A verification boot
that stalls under KVM although the probe passed rewrites the answer
(:func:`record_stall`), so the next boot on this host does not try KVM again.

The choice itself: an explicit ``--accel`` wins, then
``$NODEFORGE_VERIFY_ACCEL``, then ``auto`` (:func:`requested`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from nodeforge.base import runner
from nodeforge.base.fs import atomic_write, cache_home, locked
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imageverify.bootwatch import ConsoleWatch, Limits
from nodeforge.schema import loader

log = logging.getLogger(__name__)

ENV_ACCEL = "NODEFORGE_VERIFY_ACCEL"
ACCELS = ("auto", "kvm", "tcg")
KVM_DEVICE = "/dev/kvm"
MACHINE = "q35"
# The CPU model each accelerator boots with (probe and boot alike). Under TCG a plain x86-64-v2
# CPU (SSE4.2, POPCNT; no AVX, no SVM, no 5-level paging): every feature ``max`` adds is emulated
# work the guest then takes on (5-level page walks, AVX2 string and crypto paths, the kvm modules
# udev loads for SVM), and the same build booted about 30 % slower under ``max``
# (docs/boot-verification.md, "The emulated CPU"). v2 because it is the floor of any server in use.
TCG_CPU = "qemu64,svm=off,+ssse3,+sse4.1,+sse4.2,+popcnt"
CPU = {"kvm": "host", "tcg": TCG_CPU}
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CACHE_FORMAT = 1
# The probe guest: the kernel's whole initialisation, then a panic for want of a root file system.
PROBE_CMDLINE = "console=ttyS0,115200 earlyprintk=serial,ttyS0,115200 panic=-1 root=/dev/nodeforge-probe-none"
PROBE_DONE = b"Kernel panic - not syncing"
PROBE_NAME = "nodeforge-accel-probe"     # -name of a probe guest (a boot's is nodeforge-verify-<variant>)
PROBE_BOUND = 20.0                       # seconds for a probe guest to reach its panic
PROBE_LIMITS = Limits(kernel_by=None, silence=8.0)
PROBE_MEMORY_MB = 256
# A verification boot under KVM that has not reached its kernel by then, or prints nothing for that
# long, is stalled: on a working KVM firmware and GRUB take seconds, and the console never pauses long.
KVM_LIMITS = Limits(kernel_by=60.0, silence=120.0)
# Under TCG nothing is left to fall back to: only a silence far beyond the longest one measured in
# loaded boots stops it early (docs/boot-verification.md); the boot's --timeout bounds the rest.
TCG_LIMITS = Limits(kernel_by=None, silence=300.0)


@dataclasses.dataclass(frozen=True)
class Watchdog:
    """The bounds of the probe and of the verification boots, per accelerator."""

    probe_bound: float = PROBE_BOUND
    probe: Limits = PROBE_LIMITS
    kvm: Limits = KVM_LIMITS
    tcg: Limits = TCG_LIMITS

    def limits(self, accel: str) -> Limits:
        return self.kvm if accel == "kvm" else self.tcg

    def to_dict(self) -> dict:
        return {"probe_bound": self.probe_bound, "probe": self.probe.to_dict(), "kvm": self.kvm.to_dict(),
                "tcg": self.tcg.to_dict()}


class AccelError(NodeforgeError):
    message = "{detail}"


@dataclasses.dataclass
class Decision:
    """The accelerator verification boots use, and why."""

    accel: str                 # kvm | tcg
    reason: str                # one line
    source: str                # option | environment | default: where the request came from
    automatic: bool = False    # nodeforge chose (auto): a KVM boot that stalls falls back to TCG
    seconds: float = 0.0       # what deciding took (0 when forced or cached)
    cached: bool = False
    probes: list[dict] = dataclasses.field(default_factory=list)
    cache_file: str | None = None   # where the answer is kept (auto only)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def requested(option: str | None) -> tuple[str, str]:
    """(accelerator asked for, where from): an explicit option wins over ``$NODEFORGE_VERIFY_ACCEL``,
    which wins over ``auto``."""
    if option:
        source, value = "option", option
    elif os.environ.get(ENV_ACCEL):
        source, value = "environment", os.environ[ENV_ACCEL]
    else:
        source, value = "default", "auto"
    if value not in ACCELS:
        where = f"${ENV_ACCEL}" if source == "environment" else "--accel"
        raise AccelError(detail=f"{where}: unknown accelerator '{value[:40]}' (auto, kvm or tcg)")
    return value, source


def kvm_opens() -> bool:
    return os.access(KVM_DEVICE, os.R_OK | os.W_OK)


def forced_reason(accel: str, source: str) -> str:
    return f"forced by {'--accel' if source == 'option' else '$' + ENV_ACCEL} {accel}"


def planned(option: str | None) -> tuple[str, str, str]:
    """(accelerator, source, why) without starting QEMU: ``auto`` becomes ``tcg`` when
    ``/dev/kvm`` does not open, stays ``auto`` otherwise (only the probe can tell)."""
    accel, source = requested(option)
    if accel != "auto":
        return accel, source, forced_reason(accel, source)
    if not kvm_opens():
        return "tcg", source, f"auto: {KVM_DEVICE} is not usable"
    return "auto", source, ("kvm if a probe guest runs under KVM through both firmware paths when the boot "
                            "starts (or a cached answer for this host boot and QEMU says so), else tcg")


# --- the probe ------------------------------------------------------------------------------

def probe_argv(qemu: str, kernel: Path, console: Path, firmware: tuple[Path, Path] | None) -> list[str]:
    """A probe guest: the boot's machine type and KVM CPU model, the kernel given directly."""
    argv = [qemu, "-name", f"{PROBE_NAME}-{'uefi' if firmware else 'bios'}", "-nodefaults", "-display", "none",
            "-no-reboot", "-machine", f"{MACHINE},accel=kvm", "-cpu", CPU["kvm"], "-smp", "1",
            "-m", str(PROBE_MEMORY_MB)]
    if firmware:
        argv += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={firmware[0]}",
                 "-drive", f"if=pflash,format=raw,unit=1,file={firmware[1]}"]
    return argv + ["-kernel", str(kernel), "-append", PROBE_CMDLINE, "-serial", f"file:{console}"]


def run_probe(argv: list[str], console: Path, *, bound: float = PROBE_BOUND,
              limits: Limits = PROBE_LIMITS) -> dict:
    """Run one probe guest; ``{"firmware", "ok", "detail", "seconds", "stage"}``."""
    firmware = "uefi" if any(a.startswith("if=pflash") for a in argv) else "bios"
    t0 = time.monotonic()
    watch = ConsoleWatch(console, start=t0)
    stderr = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                start_new_session=True)
    except OSError as exc:
        stderr.close()
        return {"firmware": firmware, "ok": False, "detail": f"QEMU did not start: {exc}", "seconds": 0.0,
                "stage": "firmware"}

    def result(ok: bool, detail: str) -> dict:
        return {"firmware": firmware, "ok": ok, "detail": detail, "seconds": round(time.monotonic() - t0, 1),
                "stage": watch.stage}

    try:
        while True:
            watch.poll()
            if _console_has(console, PROBE_DONE):
                return result(True, "the kernel ran its initialisation to the end")
            if proc.poll() is not None:
                stderr.seek(0)
                err = stderr.read().decode("utf-8", "replace").strip().splitlines()
                return result(False, f"QEMU exited with {proc.returncode} before the kernel finished"
                                     + (f": {err[0][:200]}" if err else ""))
            stall = watch.stalled(limits)
            if stall is not None:
                return result(False, f"the guest stopped making progress: {stall.detail}")
            if watch.elapsed() > bound:
                return result(False, f"the kernel did not finish within {bound:.0f} s (reached: {watch.stage})")
            time.sleep(0.1)
    finally:
        _stop(proc)
        stderr.close()


def _console_has(console: Path, marker: bytes) -> bool:
    try:
        with open(console, "rb") as fh:
            return marker in fh.read()
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def probe(qemu: str, kernel: Path, firmware: tuple[Path, Path] | None, work: Path,
          watchdog: Watchdog = Watchdog()) -> list[dict]:
    """Both firmware paths (``firmware``: OVMF code and variables template; None: BIOS only), at
    the same time; one result each."""
    jobs = [("bios", None)]
    if firmware:
        vars_copy = work / "probe-OVMF_VARS.fd"
        shutil.copyfile(firmware[1], vars_copy)
        jobs.append(("uefi", (firmware[0], vars_copy)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(run_probe, probe_argv(qemu, kernel, work / f"probe-{name}.log", fw),
                               work / f"probe-{name}.log", bound=watchdog.probe_bound, limits=watchdog.probe)
                   for name, fw in jobs]
        return [f.result() for f in futures]


# --- the cached answer -----------------------------------------------------------------------

def default_cache_dir() -> Path:
    return cache_home() / "accel"


def qemu_version(qemu: str) -> str:
    try:
        out = runner.run([qemu, "--version"], check=False, timeout=30).stdout or ""
    except (NodeforgeError, OSError):
        return "unknown"
    return out.splitlines()[0].strip() if out.strip() else "unknown"


def cache_key(qemu: str) -> dict:
    """What a cached answer holds for: this host boot, this QEMU binary and version, the machine
    type and CPU model a KVM boot uses."""
    try:
        boot_id = BOOT_ID.read_text().strip()
    except OSError:
        boot_id = "unknown"
    resolved = runner.which(qemu) or qemu
    return {"boot_id": boot_id, "qemu": os.path.realpath(resolved), "qemu_version": qemu_version(resolved),
            "machine": MACHINE, "cpu": CPU["kvm"], "device": KVM_DEVICE}


def _cache_file(cache_dir: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir / f"{digest}.json"


def _read_cached(path: Path, key: dict) -> dict | None:
    try:
        doc = loader.read_json(path)
    except ConfigError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("key") != key \
            or doc.get("accel") not in ("kvm", "tcg"):
        return None
    return doc


def _write_cached(path: Path, key: dict, accel: str, reason: str, probes: list[dict]) -> None:
    doc = {"format": CACHE_FORMAT, "key": key, "accel": accel, "reason": reason, "probes": probes,
           "at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()}
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def decide(option: str | None, *, qemu: str, kernel: Callable[[], Path], firmware: tuple[Path, Path] | None,
           cache_dir: Path | None = None, work_dir: Path | None = None, watchdog: Watchdog = Watchdog(),
           say: Callable[[str], None] = lambda line: None) -> Decision:
    """The accelerator for this run's boots. ``kernel()`` gives a kernel for the probe guest and is
    called only when a probe runs; ``firmware`` is OVMF (code, variables template), or None for a
    host that boots only BIOS guests."""
    accel, source, why = planned(option)
    if accel != "auto":
        return Decision(accel, why, source, automatic=why.startswith("auto"))
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    t0 = time.monotonic()
    key = cache_key(qemu)
    path = _cache_file(cache_dir, key)
    with locked(cache_dir / "probe.lock", on_wait=lambda: say("accel: waiting for another run's KVM probe")):
        doc = _read_cached(path, key)
        if doc is not None:
            return Decision(doc["accel"], f"auto: {doc['reason']} (cached for this host boot and QEMU)",
                            source, True, round(time.monotonic() - t0, 1), cached=True, probes=doc.get("probes", []),
                            cache_file=str(path))
        work = Path(tempfile.mkdtemp(prefix="nodeforge-accel-", dir=work_dir))
        try:
            say("accel: probing KVM with the image's kernel (BIOS and UEFI paths)")
            probes = probe(qemu, kernel(), firmware, work, watchdog)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        bad = [p for p in probes if not p["ok"]]
        if bad:
            accel = "tcg"
            by_detail: dict[str, list[str]] = {}
            for p in bad:
                by_detail.setdefault(p["detail"], []).append(p["firmware"])
            reason = "KVM probe failed: " + "; ".join(f"{' and '.join(fw)}: {detail}"
                                                      for detail, fw in by_detail.items())
        else:
            accel = "kvm"
            reason = "KVM probe passed (" + ", ".join(f"{p['firmware']} {p['seconds']:.1f} s" for p in probes) + ")"
        _write_cached(path, key, accel, reason, probes)
    return Decision(accel, f"auto: {reason}", source, True, round(time.monotonic() - t0, 1), probes=probes,
                    cache_file=str(path))


def record_stall(qemu: str, detail: str, cache_dir: Path | None = None) -> None:
    """A verification boot under KVM stalled although the probe passed: remember ``tcg`` for this
    host boot and QEMU, so later boots do not try KVM again."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    key = cache_key(qemu)
    with locked(cache_dir / "probe.lock"):
        _write_cached(_cache_file(cache_dir, key), key, "tcg",
                      f"a verification boot under KVM stalled: {detail}", [])
