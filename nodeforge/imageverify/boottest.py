"""``nodeforge image verify``: boot each built variant under QEMU and check it.

Steps per build directory (``docs/boot-verification.md``):

1. **refuse** before anything boots if ``SHA256SUMS``/``SHA512SUMS`` do not
   match the files (:func:`checksums.verify_sums`; ``VerifyRequest.unchanged``);
2. per variant, **offline facts** from the image file itself: the root
   partition is found in the GPT and read with ``debugfs`` at its byte offset
   (``file?offset=N``: no mount, no loop device; a qcow2 is converted to a
   scratch raw first): the image-scope hardening checks (no SSH host keys,
   empty machine-id, no build leftovers) and ``/etc/nodeforge/hardening.json``;
3. **boot** a throwaway copy-on-write overlay (``qemu-img create -b IMAGE``,
   2 GiB larger than the image so grow-root has something to grow into; the
   built image is opened read-only by QEMU and never written): ``vm`` with
   SeaBIOS and a cloud-init NoCloud seed (ISO9660 ``cidata``), ``baremetal``
   with OVMF (UEFI, a private copy of the variables store) and an OpenStack
   config drive (ISO9660 ``config-2``), as Ironic gives it. KVM when
   ``/dev/kvm`` works, else TCG. No network is needed: serial port 1 is the
   console (kept as ``verify-<variant>-console.log`` in the build directory),
   serial port 2 carries only the report;
4. the seed's user-data starts :mod:`.verify_guest` (sent inside the seed,
   never baked into the image) as a transient unit; it waits until boot has
   finished, collects what the probes ask for, writes the framed report to
   ``ttyS1`` and powers off. The host stops QEMU as soon as the report is in;
5. :func:`verifychecks.evaluate` decides, and ``verify.json`` gets the
   variant's section (``passed``, per-check id/expected/observed/evidence),
   bound to the build id, the manifest digest and the image's sha256/sha512
   (schema and its strict check: :mod:`.verifyreport`).

A boot that produces no report within the timeout is stopped and fails the
variant; the error carries the console's last lines.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping, Sequence

from nodeforge.base import qemuimg, runner
from nodeforge.base.fs import atomic_write
from nodeforge.errors import ConfigError, MissingToolError, NodeforgeError
from nodeforge.imagebuild import checksums, manifest as manifest_mod
from nodeforge.imageverify import attest, builddir
from nodeforge.imageverify import accel as accel_mod, verify_guest, verifychecks as vc, verifyreport
from nodeforge.imageverify.bootwatch import ConsoleWatch, Limits
from nodeforge.imageverify.imagefiles import image_facts, probe_kernel
from nodeforge.pins.cache import Cache
from nodeforge.schema import loader

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
PROFILE = vc.PROFILE
repository_controls = vc.repository_controls
VERIFY_SCHEMA = verifyreport.SCHEMA
QEMU = "qemu-system-x86_64"
TOOLS = (QEMU, "qemu-img", "genisoimage", "debugfs")
OVMF_PAIRS = (("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
              ("/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"))
GROW = 2 << 30
MEMORY_MB = 2048
DEFAULT_TIMEOUT = 900   # seconds: TCG boots take 3 min idle, up to 13 min on a loaded 2-core host
ENV_ACCEL = accel_mod.ENV_ACCEL
ENV_WORK_DIR = "NODEFORGE_WORK_DIR"
GUEST_SCRIPT = Path(__file__).with_name("verify_guest.py")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")


class VerifyRefused(NodeforgeError):
    message = "{path}: {detail}; refusing to boot"


class BootError(NodeforgeError):
    message = "{variant}: {detail}\n--- console (last {lines} lines of {log}) ---\n{tail}"


class VerifyFailed(NodeforgeError):
    message = "boot verification failed: {detail}"


class ReportError(NodeforgeError):
    message = "verification report: {detail}"


@dataclasses.dataclass
class VariantResult:
    variant: str
    passed: bool
    checks: list[dict]
    image: str
    image_sha256: str
    accel: str
    firmware: str
    console_log: str
    seconds: dict[str, float]
    error: str | None = None
    image_sha512: str = ""
    accel_reason: str = ""
    fallback: dict | None = None            # the stalled KVM boot this result's TCG boot replaced
    timeline: dict[str, float] = dataclasses.field(default_factory=dict)   # stage -> seconds since QEMU start

    def section(self, build: builddir.BuildDir) -> dict:
        """This variant's part of ``verify.json`` (exactly :data:`verifyreport.SECTION_FIELDS`): the
        verdict bound to ``build``'s id and manifest digest and to the image bytes it was reached on."""
        return {
            "passed": self.passed, "build_id": build.build_id, "manifest_sha256": build.manifest_sha256,
            "image": self.image, "image_sha256": self.image_sha256, "image_sha512": self.image_sha512,
            "verified_at": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "accel": self.accel, "firmware": self.firmware, "console_log": self.console_log,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
            "summary": vc.summary(self.checks), "error": self.error, "checks": self.checks,
            "accel_reason": self.accel_reason, "fallback": self.fallback, "timeline": self.timeline,
        }


# --- host capabilities ------------------------------------------------------------------

def require_tools() -> dict[str, str]:
    return runner.require(*TOOLS, path=runner.sbin_path())


def ovmf() -> tuple[Path, Path]:
    for code, vars_ in OVMF_PAIRS:
        if Path(code).is_file() and Path(vars_).is_file():
            return Path(code), Path(vars_)
    raise MissingToolError(tool="OVMF UEFI firmware (/usr/share/OVMF)", package="ovmf")


# --- expectations ------------------------------------------------------------------------

def artifact_expectations(manifest: dict, cache: Cache) -> dict[str, dict]:
    """component -> {version, sha256 of the installed file (None if unknown), note, source}.

    A pinned file's expected digest is its pin. A pinned archive's member (crictl, containerd) is
    expected to have the digest the build recorded in the manifest (``installed_artifacts``;
    ``source`` ``manifest``, no cache needed). A manifest without it (a build made before builds
    recorded it) falls back to the member read from the pinned archive in the artifact cache
    (``source`` ``cache``); the note says so and, when the archive is not there, what to run."""
    pins = {a["component"]: a for a in manifest.get("artifacts", []) if isinstance(a, dict)}
    minor = (manifest.get("kubernetes") or {}).get("minor")
    out = {}
    for probe in vc.ARTIFACTS:
        pin = pins.get(probe.component)
        if pin is None:
            continue
        entry = {"version": str(pin["version"]).lstrip("v"), "sha256": pin["sha256"], "note": None,
                 "source": "manifest"}
        if probe.member:
            where = f"{probe.member} inside the pinned archive sha256:{pin['sha256']}"
            recorded, why = vc.recorded_sha256(manifest, probe)
            if recorded is not None:
                entry.update(sha256=recorded, note=f"{where}, {why}")
            else:
                archive = cache.lookup(pin["sha256"])
                digest = manifest_mod.member_sha256(archive, probe.member) if archive is not None else None
                if archive is None:
                    note = (f"{why}; the pinned archive {pin['sha256'][:16]}... is not in the artifact cache "
                            f"{cache.root}: run 'nodeforge release prefetch" + (f" --minor {minor}" if minor else "")
                            + "' with the lockfile it was built from, or pass --cache-dir")
                elif digest is None:
                    note = (f"{why}; the pinned archive sha256:{pin['sha256']} in the artifact cache has no "
                            f"{probe.member}")
                else:
                    note = f"{why}; {where}, read from the artifact cache {cache.root}"
                entry.update(sha256=digest, note=note, source="cache")
        out[probe.component] = entry
    return out


def hardening_controls(manifest: dict, image_doc: dict | None, profile_path: Path = PROFILE) -> tuple[list, str]:
    """The controls to check: the repository's profile when it is the build's
    profile and version, else the one recorded inside the image."""
    repo = repository_controls(manifest, profile_path)
    if repo is not None:
        return repo
    if isinstance(image_doc, dict) and isinstance(image_doc.get("controls"), list):
        return image_doc["controls"], f"{vc.HARDENING_IN_IMAGE} in the image (repository profile is another version)"
    return [], "none found"


# --- seed ----------------------------------------------------------------------------------

def user_data(probes: dict, guest_script: str | None = None) -> str:
    """cloud-config that writes the collector and its probes to /run and starts
    it as a transient unit (outside the boot transaction, so it can wait for
    the boot to finish).

    The unit is started from ``bootcmd``, in cloud-init's first networked
    stage, not from ``runcmd`` at the very end: the collector reads what the
    boot cannot change (installed files, the versions they print) while the
    boot goes on, and the rest once systemd says the boot is finished. bootcmd
    runs before ``write_files``, so the unit waits for the files to appear;
    ``--no-block`` and no default dependencies, because cloud-init's own unit
    is ordered before the ``basic.target`` a default transient unit waits for."""
    script = guest_script if guest_script is not None else GUEST_SCRIPT.read_text()
    files = [("/run/nodeforge-verify/collect.py", "0700", script.encode()),
             ("/run/nodeforge-verify/probes.json", "0600", json.dumps(probes, sort_keys=True).encode()),
             # Written last (write_files keeps its order): the collector's unit starts once it exists.
             ("/run/nodeforge-verify/ready", "0600", b"ready\n")]
    lines = ["#cloud-config", "# nodeforge image verify: throwaway verification boot (not part of any image)",
             "write_files:"]
    for path, mode, data in files:
        lines += [f"  - path: {path}", f"    permissions: '{mode}'", "    encoding: b64",
                  f"    content: {base64.b64encode(data).decode()}"]
    # Keep the host keys the image's own first-boot unit (nodeforge-ssh-host-keys) made: NF-HARD-010's
    # runtime item then tests the image's mechanism, and emulation skips a second round of key generation.
    lines += ["ssh_deletekeys: false", "ssh_genkeytypes: []"]
    wait = ("until [ -s /run/nodeforge-verify/ready ]; do sleep 0.2; done; exec /usr/bin/python3 /run/nodeforge-verify/collect.py "
            "/run/nodeforge-verify/probes.json")
    lines += ["bootcmd:",
              "  - [systemd-run, --no-block, --unit=nodeforge-verify, --property=DefaultDependencies=no, "
              f"--description=nodeforge image verify collector, /bin/sh, -c, {json.dumps(wait)}]"]
    return "\n".join(lines) + "\n"


def seed_label(variant: str) -> str:
    """The seed's volume label: an OpenStack config drive for ``baremetal``, NoCloud for ``vm``."""
    return "config-2" if variant == "baremetal" else "cidata"


def seed_files(variant: str, probes: dict, instance_id: str, guest_script: str | None = None) -> tuple[str, dict]:
    """(volume label, {relative path: bytes}): a NoCloud seed for ``vm``, an
    OpenStack config drive for ``baremetal`` (what Ironic attaches)."""
    ud = user_data(probes, guest_script).encode()
    hostname = f"nf-verify-{variant}"
    label = seed_label(variant)
    if label == "config-2":
        meta = {"uuid": instance_id, "hostname": hostname, "name": hostname, "launch_index": 0,
                "availability_zone": "nova", "files": [], "meta": {}}
        return label, {"openstack/latest/meta_data.json": json.dumps(meta).encode(),
                       "openstack/latest/user_data": ud}
    return label, {"meta-data": f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n".encode(),
                   "user-data": ud}


def make_seed(path: Path, label: str, files: dict[str, bytes], genisoimage: str = "genisoimage") -> Path:
    tree = path.with_suffix(".d")
    for rel, data in files.items():
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    runner.run([genisoimage, "-quiet", "-output", str(path), "-volid", label, "-joliet", "-rock", str(tree)],
               merge=False, tail_chars=500)
    shutil.rmtree(tree)
    return path


# --- QEMU ---------------------------------------------------------------------------------

def qemu_argv(*, variant: str, overlay: Path, seed: Path, console: Path, report: Path, accel: str,
              firmware: tuple[Path, Path] | None = None, smp: int = 2, memory_mb: int = MEMORY_MB) -> list[str]:
    argv = [QEMU, "-name", f"nodeforge-verify-{variant}", "-nodefaults", "-display", "none", "-no-reboot",
            "-machine", f"{accel_mod.MACHINE},accel={accel}", "-cpu", accel_mod.CPU[accel],
            "-smp", str(smp), "-m", str(memory_mb)]
    if firmware:
        code, vars_copy = firmware
        argv += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={code}",
                 "-drive", f"if=pflash,format=raw,unit=1,file={vars_copy}"]
    argv += ["-drive", f"file={overlay},format=qcow2,if=virtio,cache=unsafe",
             "-drive", f"file={seed},format=raw,if=virtio,readonly=on",
             # A NIC as Nova/Ironic give one; isolated (no route out), only slirp's DHCP answers. No
             # option ROM: the firmware would load (SeaBIOS) or start (OVMF) iPXE, which no check needs.
             "-netdev", "user,id=net0,restrict=on", "-device", "virtio-net-pci,netdev=net0,romfile=",
             "-serial", f"file:{console}", "-serial", f"file:{report}"]
    return argv


def console_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return "(no console output)"
    text = _ANSI.sub("", text).replace("\r", "\n")
    kept = [line.rstrip() for line in text.split("\n") if line.strip()]
    return "\n".join(kept[-lines:]) or "(no console output)"


def parse_report(text: str) -> dict | None:
    """The framed report in ``text`` (None if it is not complete yet)."""
    begin = text.rfind(verify_guest.MAGIC_BEGIN)
    if begin < 0:
        return None
    end = text.find(verify_guest.MAGIC_END, begin)
    if end < 0:
        return None
    block = text[begin:end].replace("\r", "").split("\n")
    head = block[0].split()
    if len(head) != 4 or head[1] != str(verify_guest.FORMAT):
        raise ReportError(detail=f"unexpected header {block[0][:80]!r}")
    payload_b64 = "".join(line.strip() for line in block[1:] if line.strip())
    try:
        payload = base64.b64decode(payload_b64, validate=True)
    except ValueError as exc:
        raise ReportError(detail=f"damaged base64 ({exc})") from None
    if len(payload) != int(head[3]) or hashlib.sha256(payload).hexdigest() != head[2]:
        raise ReportError(detail="payload does not match its sha256 (serial output damaged)")
    try:
        return loader.parse_json("the guest's report", payload)
    except ConfigError as exc:
        raise ReportError(detail=str(exc)) from None


def boot(argv: list[str], *, console: Path, report: Path, timeout: float, variant: str,
         limits: Limits = Limits(), watch: ConsoleWatch | None = None,
         stop: Callable[[], bool] = lambda: False) -> tuple[dict, float]:
    """Run QEMU until the report arrives (then stop it), it exits, the boot stalls by ``limits``
    (:meth:`ConsoleWatch.stalled`: a :class:`BootError` whose ``stall`` says why), or ``timeout``.
    ``watch`` (made here if not given) keeps the boot's timeline for the caller."""
    t0 = time.monotonic()
    watch = watch or ConsoleWatch(console, report, start=t0)
    log.info("booting %s: %s", variant, " ".join(argv))
    stderr = open(console.with_suffix(".qemu-stderr"), "w+")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                            start_new_session=True)

    def failed(detail: str, **extra) -> BootError:
        return BootError(variant=variant, detail=detail, lines=25, log=console.name, tail=console_tail(console),
                         timeline=dict(watch.timeline), **extra)

    try:
        while True:
            if watch.poll():
                found = None
                for source in (report, console):
                    try:
                        text = source.read_bytes().decode("utf-8", "replace")
                    except OSError:
                        continue
                    found = parse_report(text)
                    if found is not None:
                        break
                if found is not None:
                    watch.timeline.setdefault("report", round(watch.elapsed(), 1))
                    return found, time.monotonic() - t0
            if proc.poll() is not None:
                stderr.seek(0)
                err = stderr.read().strip()[-500:]
                raise failed(f"QEMU exited with {proc.returncode} before the guest reported" + (f": {err}" if err else ""))
            stall = watch.stalled(limits)
            if stall is not None:
                raise failed(f"boot stalled: {stall.detail}; QEMU stopped", stall=stall)
            if time.monotonic() - t0 > timeout or stop():
                raise failed(f"no report within {timeout:.0f} s (boot hung or too slow); QEMU stopped")
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr.close()
        Path(stderr.name).unlink(missing_ok=True)


# --- the command --------------------------------------------------------------------------

@dataclasses.dataclass
class VerifyRequest:
    build_dir: Path
    variants: tuple[str, ...] = ()          # empty: every image in the build
    timeout: float = DEFAULT_TIMEOUT
    accel: str | None = None                # None: $NODEFORGE_VERIFY_ACCEL, else auto (accel.requested)
    cache_dir: Path | None = None
    work_dir: Path | None = None
    keep_work: bool = False
    watchdog: accel_mod.Watchdog = accel_mod.Watchdog()
    accel_cache: Path | None = None         # where the KVM probe's answer is cached (default: user cache)
    grow: int = GROW
    profile_path: Path = PROFILE
    # Boot the variants at the same time (the CPUs shared out: one vCPU each on 2 CPUs) where there
    # are two CPUs or more; else one after the other (docs/boot-verification.md, measured).
    parallel: bool = True
    stream: Callable[[str], None] | None = None
    unchanged: Mapping[str, Sequence[int]] | None = None   # checksums.fingerprints after the build: not read again


def refuse_bad_checksums(path: Path, skip: Sequence[str] = ()) -> None:
    for sums in checksums.SUMS_FILES.values():
        if not (path / sums).is_file():
            raise VerifyRefused(path=path, detail=f"no {sums}")
    bad = checksums.verify_sums(path, error=VerifyRefused, skip=skip)
    if bad:
        raise VerifyRefused(path=path, detail=f"{', '.join(bad)} do(es) not match SHA256SUMS/SHA512SUMS",
                            hint="the build directory was changed after the build; rebuild it")


@dataclasses.dataclass(frozen=True)
class VariantPlan:
    """One variant :func:`verify` would boot: its image, firmware and seed, and
    the files it would write into the build directory."""

    variant: str
    image: Path
    disk_format: str
    sha256: str
    firmware: str           # bios | uefi (OVMF)
    seed: str               # the seed's label: cidata (NoCloud) | config-2 (config drive)
    console_log: Path       # verify-<variant>-console.log
    guest_report: Path      # verify-<variant>-guest.json

    def to_dict(self) -> dict:
        return {"variant": self.variant, "image": str(self.image), "disk_format": self.disk_format,
                "sha256": self.sha256, "firmware": self.firmware, "seed": self.seed,
                "console_log": str(self.console_log), "guest_report": str(self.guest_report)}


@dataclasses.dataclass
class VerifyPlan:
    """What :func:`verify` decides before it boots (:func:`plan`)."""

    req: VerifyRequest
    build: builddir.BuildDir
    manifest: dict
    tools: dict[str, str]
    firmware: tuple[Path, Path] | None      # OVMF code, variables template (``baremetal`` only)
    variants: list[VariantPlan]
    accel: str                              # kvm | tcg, or auto: probed when the boot starts
    accel_note: str
    parallel: bool
    smp: int                                # vCPUs per boot
    checks: list[str]                       # the check ids each variant gets
    controls: list[str] | None              # the hardening control ids; None: read from each image
    controls_source: str                    # where the hardening controls come from
    archives: dict[str, dict]               # component -> where each archive member's expected digest comes from (archives_in_cache)

    @property
    def report(self) -> Path:
        return self.build.path / builddir.VERIFY

    def to_dict(self) -> dict:
        work = self.req.work_dir or os.environ.get(ENV_WORK_DIR) or None
        return {
            "dry_run": True, "build_dir": str(self.build.path), "build_id": self.build.build_id,
            "variants": [v.to_dict() for v in self.variants], "accel": self.accel, "accel_note": self.accel_note,
            "timeout": self.req.timeout, "parallel": self.parallel, "vcpus": self.smp, "memory_mb": MEMORY_MB,
            "checks": self.checks, "controls": self.controls, "controls_source": self.controls_source,
            "tools": self.tools,
            "firmware": {"code": str(self.firmware[0]), "vars": str(self.firmware[1])} if self.firmware else None,
            "cache": str(Cache(self.req.cache_dir).root), "archives": self.archives, "report": str(self.report),
            "work_dir": str(work) if work else None, "keep_work": self.req.keep_work,
        }


def _say(req: VerifyRequest) -> Callable[[str], None]:
    return req.stream or (lambda line: log.info("%s", line))


def plan(req: VerifyRequest) -> VerifyPlan:
    """Everything :func:`verify` does before it boots, in its order: read the build directory
    (:func:`builddir.load`), choose the variants (all, ``vm`` first; one the build lacks is a
    :class:`builddir.BuildDirError`), find the host tools and, for ``baremetal``, OVMF, refuse bad
    checksums (:class:`VerifyRefused`), read the manifest, decide the accelerator (:func:`accel.planned`:
    ``auto`` on a host whose ``/dev/kvm`` opens stays ``auto``, the KVM probe starts QEMU) and the
    checks. Reads only (boots, starts, writes nothing); each archive member's expected digest is from
    the manifest, or for an older build the cache is looked at, never re-hashed (:func:`archives_in_cache`)."""
    build = builddir.load(req.build_dir)
    names = req.variants or tuple(sorted(build.variants, key=lambda v: (v != "vm", v)))
    images = [build.variant(v) for v in names]
    tools = require_tools()
    firmware = ovmf() if "baremetal" in names else None
    same = checksums.unchanged_names(build.path, [i.path.name for i in images], req.unchanged)
    _say(req)(f"checking {build.path.name}: SHA256SUMS and SHA512SUMS"
              + (f" ({', '.join(same)} unchanged since the build summed them: not read again)" if same else ""))
    refuse_bad_checksums(build.path, same)
    manifest = build.manifest_data()
    accel, _, accel_note = accel_mod.planned(req.accel)
    repo = repository_controls(manifest, req.profile_path)
    controls = [c["id"] for c in repo[0]] if repo is not None else None
    source = repo[1] if repo is not None else (f"{vc.HARDENING_IN_IMAGE} in each image (the repository's "
                                               "profile is another version; read when verify runs)")
    checks = vc.check_ids(controls if controls is not None else [f"(each control of {vc.HARDENING_IN_IMAGE})"])
    cpus = os.cpu_count() or 1
    parallel = req.parallel and len(names) > 1 and cpus >= 2
    # Concurrent boots share the CPUs: one vCPU each on 2 CPUs. A boot is mostly serial work, so two
    # one-vCPU guests side by side finish sooner than two two-vCPU guests one after the other.
    smp = max(1, cpus // len(names)) if parallel else min(2, cpus)
    variants = [VariantPlan(i.variant, i.path, i.disk_format, i.sha256,
                            "uefi" if i.variant == "baremetal" and firmware else "bios", seed_label(i.variant),
                            build.path / f"verify-{i.variant}-console.log",
                            build.path / f"verify-{i.variant}-guest.json") for i in images]
    return VerifyPlan(req, build, manifest, tools, firmware, variants, accel, accel_note, parallel, smp,
                      checks, controls, source, archives_in_cache(manifest, Cache(req.cache_dir)))


def archives_in_cache(manifest: dict, cache: Cache) -> dict[str, dict]:
    """component -> {sha256, member, source, member_sha256 | in_cache, note} for the pinned archives
    whose member the artifact checks compare (:func:`artifact_expectations`): where the member's
    expected digest comes from. ``source`` ``manifest``: recorded by the build (``member_sha256``;
    the cache is not needed); ``cache``: a manifest without it, the member is read from the
    archive in the cache (``in_cache``: whether a file is under its sha256, not re-hashed); the
    note says why."""
    pins = {a["component"]: a for a in manifest.get("artifacts", []) if isinstance(a, dict)}
    out = {}
    for p in vc.ARTIFACTS:
        if not p.member or p.component not in pins:
            continue
        sha = pins[p.component]["sha256"]
        recorded, why = vc.recorded_sha256(manifest, p)
        entry = {"sha256": sha, "member": p.member}
        if recorded is not None:
            entry.update(source="manifest", member_sha256=recorded, note=why)
        else:
            entry.update(source="cache", in_cache=cache.peek(sha) is not None, note=why)
        out[p.component] = entry
    return out


def verify(req: VerifyRequest) -> list[VariantResult]:
    """Verify the requested variants (all by default); write ``verify.json``.

    :func:`plan` first (it raises :class:`VerifyRefused` before booting on bad
    checksums), then the accelerator (:func:`accel.decide`: the KVM probe if
    ``auto``, or its cached answer), then each variant is read offline and
    booted. Returns the results (a failed check is a result, not an
    exception); raises :class:`BootError` (after recording the failure) if a
    boot hung or died."""
    p = plan(req)
    say = _say(req)
    decision = decide_accel(req, p)
    say(f"accelerator: {decision.accel} ({decision.reason}; decided in {decision.seconds:.1f} s"
        + (f"; answer kept in {decision.cache_file})" if decision.cache_file else ")"))
    artifacts = artifact_expectations(p.manifest, Cache(req.cache_dir))
    ctx = _Context(req, p.build, p.manifest, p.tools, p.firmware, decision, artifacts, p.smp, say,
                   threading.Lock())
    if p.parallel:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(p.variants)) as pool:
            outcomes = list(pool.map(lambda v: _verify_variant(ctx, v), p.variants))
    else:
        outcomes = [_verify_variant(ctx, v) for v in p.variants]
    errors = [e for _, e in outcomes if e is not None]
    if errors:
        raise errors[0]
    return [r for r, _ in outcomes]


def decide_accel(req: VerifyRequest, p: VerifyPlan) -> accel_mod.Decision:
    """The accelerator the boots start with (:func:`accel.decide`); the probe boots the image's own
    kernel (:func:`probe_kernel`), read only when no cached answer exists."""
    work = Path(tempfile.mkdtemp(prefix="nodeforge-verify-kernel-",
                                 dir=req.work_dir or os.environ.get(ENV_WORK_DIR) or None))
    try:
        return accel_mod.decide(req.accel, qemu=p.tools[QEMU], kernel=lambda: probe_kernel(p.build, p.tools, work),
                                firmware=p.firmware or _ovmf_or_none(), cache_dir=req.accel_cache,
                                work_dir=work, watchdog=req.watchdog, say=_say(req))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ovmf_or_none() -> tuple[Path, Path] | None:
    try:
        return ovmf()
    except MissingToolError:
        return None


@dataclasses.dataclass
class _Context:
    req: VerifyRequest
    build: builddir.BuildDir
    manifest: dict
    tools: dict[str, str]
    firmware: tuple[Path, Path] | None
    decision: accel_mod.Decision            # replaced by a TCG one when a KVM boot stalls under auto
    artifacts: dict[str, dict]
    smp: int
    say: Callable[[str], None]
    lock: threading.Lock


@dataclasses.dataclass
class _Boot:
    """What one variant's boot needs besides the accelerator: its image, probes and sizes."""

    vp: VariantPlan
    image: builddir.VariantImage
    probes: dict
    instance: str
    disk_bytes: int
    work: Path


def _verify_variant(ctx: _Context, vp: VariantPlan) -> tuple[VariantResult, BootError | None]:
    req, build, say = ctx.req, ctx.build, ctx.say
    variant, image = vp.variant, build.variant(vp.variant)
    work = Path(tempfile.mkdtemp(prefix=f"nodeforge-verify-{variant}-",
                                 dir=req.work_dir or os.environ.get(ENV_WORK_DIR) or None))
    seconds: dict[str, float] = {}
    t_all = time.monotonic()
    try:
        say(f"{variant}: reading {image.path.name} offline")
        exp, facts, virtual = _offline(build, ctx.manifest, variant, ctx.tools, ctx.artifacts, req.profile_path,
                                       req.grow, work)
        seconds["offline"] = time.monotonic() - t_all
        instance = str(uuid.uuid4())
        probes = vc.probes(exp, probe_id=instance, wait_seconds=max(60, int(req.timeout * 0.6)))
        job = _Boot(vp, image, probes, instance, virtual + req.grow, work)
        t = time.monotonic()
        guest, error, used, fallback, timeline = _boot_with_fallback(ctx, job)
        seconds["boot_to_verdict"] = time.monotonic() - t
        # What the guest reported, kept beside the console log (judge() re-evaluates it without a boot).
        atomic_write(vp.guest_report, json.dumps(guest, indent=1, sort_keys=True) + "\n")
        checks = vc.evaluate(exp, guest, facts)
        seconds["total"] = time.monotonic() - t_all
        result = VariantResult(variant, all(c["passed"] for c in checks) and error is None, checks,
                               image.path.name, image.sha256, used.accel, vp.firmware, vp.console_log.name,
                               seconds, str(error).splitlines()[0] if error else None, image_sha512=image.sha512,
                               accel_reason=used.reason, fallback=fallback, timeline=timeline)
        with ctx.lock:
            write_report(build.path, build, [result])
        failed = [c["id"] for c in checks if not c["passed"]]
        say(f"{variant}: {'passed' if result.passed else 'FAILED'} ({len(checks) - len(failed)}/{len(checks)} "
            f"checks) under {used.accel}, boot to verdict {seconds['boot_to_verdict']:.0f} s"
            + (f" (after a stalled KVM boot: {fallback['reason']})" if fallback else "")
            + (f"; failed: {', '.join(failed)}" if failed else ""))
        return result, error
    finally:
        if req.keep_work:
            say(f"{variant}: work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _boot_with_fallback(ctx: _Context, job: _Boot) -> tuple[dict, BootError | None, accel_mod.Decision,
                                                             dict | None, dict]:
    """Boot ``job`` under the current accelerator; a KVM boot that stalls is re-booted under TCG at
    once when nodeforge chose KVM (``auto``), and fails fast naming the way out when it was forced.
    Returns (guest report, error, the decision used, the fallback record or None, timeline)."""
    decision, fallback = ctx.decision, None
    guest, error, timeline = _boot_attempt(ctx, job, decision.accel)
    stall = error.kwargs.get("stall") if error is not None else None
    if stall is not None and decision.accel == "kvm":
        tail = console_tail(job.vp.console_log, 15).splitlines()
        if not decision.automatic:
            error = BootError(variant=job.vp.variant, detail=f"KVM boot stalled: {stall.detail} ({decision.reason}); "
                                                             f"this host's KVM does not run the guest",
                              lines=15, log=job.vp.console_log.name, tail="\n".join(tail), stall=stall,
                              hint=f"boot under TCG instead: --accel tcg or {ENV_ACCEL}=tcg")
            return {"error": str(error).splitlines()[0]}, error, decision, None, timeline
        fallback = {"from": "kvm", "reason": stall.detail, "stage": stall.stage, "seconds": stall.seconds,
                    "console_tail": tail}
        with ctx.lock:
            if ctx.decision.accel == "kvm":
                accel_mod.record_stall(ctx.tools[QEMU], stall.detail, ctx.req.accel_cache)
                ctx.decision = accel_mod.Decision("tcg", f"auto: a boot under KVM stalled ({stall.detail}); "
                                                         "TCG from then on", decision.source, automatic=True)
            decision = ctx.decision
        ctx.say(f"{job.vp.variant}: KVM boot stalled ({stall.detail}); booting again under TCG")
        guest, error, timeline = _boot_attempt(ctx, job, "tcg")
    return guest, error, decision, fallback, timeline


def _boot_attempt(ctx: _Context, job: _Boot, accel: str) -> tuple[dict, BootError | None, dict]:
    """One boot of a fresh overlay, seed and firmware variables; (guest report, error, timeline)."""
    req, tools, vp = ctx.req, ctx.tools, job.vp
    work = job.work / accel
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    overlay = work / "overlay.qcow2"
    qemuimg.overlay(job.image.path, job.image.disk_format, overlay, job.disk_bytes, qemu_img=tools["qemu-img"])
    label, files = seed_files(vp.variant, job.probes, job.instance)
    seed = make_seed(work / "seed.iso", label, files, tools["genisoimage"])
    fw = None
    if vp.firmware == "uefi":
        shutil.copyfile(ctx.firmware[1], work / "OVMF_VARS.fd")
        fw = (ctx.firmware[0], work / "OVMF_VARS.fd")
    report, console = work / "report.serial", vp.console_log
    console.unlink(missing_ok=True)
    argv = qemu_argv(variant=vp.variant, overlay=overlay, seed=seed, console=console, report=report,
                     accel=accel, firmware=fw, smp=ctx.smp)
    limits = req.watchdog.limits(accel)
    ctx.say(f"{vp.variant}: booting ({accel}, {'UEFI' if fw else 'BIOS'}, {ctx.smp} vCPU; timeout "
            f"{req.timeout:.0f} s, stalled after {limits.silence:.0f} s of silence"
            + (f" or no kernel by {limits.kernel_by:.0f} s)" if limits.kernel_by else ")"))
    watch = ConsoleWatch(console, report)
    try:
        guest, _ = boot(argv, console=console, report=report, timeout=req.timeout, variant=vp.variant,
                        limits=limits, watch=watch)
        return guest, None, dict(watch.timeline)
    except BootError as exc:
        return {"error": str(exc).splitlines()[0]}, exc, dict(watch.timeline)
    except ReportError as exc:
        error = BootError(variant=vp.variant, detail=str(exc), lines=25, log=console.name,
                          tail=console_tail(console))
        return {"error": str(exc)}, error, dict(watch.timeline)


def _offline(build: builddir.BuildDir, manifest: dict, variant: str, tools: dict[str, str], artifacts: dict,
             profile_path: Path, grow: int, work: Path) -> tuple[vc.Expectations, dict, int]:
    """Read the image without booting it: its facts (hardening controls, root
    partition), what the boot must find (:class:`verifychecks.Expectations`)
    and the image's virtual size."""
    image = build.variant(variant)
    raw = image.path
    if image.disk_format == "qcow2":
        raw = work / "image.raw"
        qemuimg.convert(image.path, raw, src_fmt="qcow2", dest_fmt="raw", qemu_img=tools["qemu-img"])
    try:
        pre = image_facts(raw, [], tools["debugfs"])  # hardening.json first: it may define the controls
        controls, source = hardening_controls(manifest, pre.get("hardening"), profile_path)
        facts = image_facts(raw, controls, tools["debugfs"])
    finally:
        if raw != image.path:
            raw.unlink(missing_ok=True)
    virtual = qemuimg.virtual_size(image.path, image.disk_format, qemu_img=tools["qemu-img"])
    exp = vc.Expectations(
        variant=variant, artifacts=artifacts, controls=controls,
        hardening=manifest.get("hardening") or {}, controls_source=source,
        manifest_sha256=build.manifest_sha256, disk_bytes=virtual + grow,
        image_root_partition_bytes=facts["root_partition_bytes"])
    return exp, facts, virtual


def judge(build_dir: Path, variant: str, guest: dict, *, cache_dir: Path | None = None,
          profile_path: Path = PROFILE, grow: int = GROW, work_dir: Path | None = None) -> list[dict]:
    """The checks a guest report earns against this build's image, without
    booting: the same offline reading and :func:`verifychecks.evaluate` as
    :func:`verify`. ``guest`` is what a boot's collector reported (a boot keeps
    it as ``verify-<variant>-guest.json``). Writes nothing into the build."""
    exp, facts = expectations(build_dir, variant, cache_dir=cache_dir, profile_path=profile_path, grow=grow,
                              work_dir=work_dir)
    return vc.evaluate(exp, guest, facts)


def expectations(build_dir: Path, variant: str, *, cache_dir: Path | None = None, profile_path: Path = PROFILE,
                 grow: int = GROW, work_dir: Path | None = None) -> tuple[vc.Expectations, dict]:
    """(what a boot of this build's ``variant`` must find, the image's offline facts): the
    reading :func:`verify` and :func:`judge` do, for callers that boot the image elsewhere (a
    canary deploy: :func:`verifychecks.probes` for its collector, :func:`verifychecks.evaluate`
    on its report). Writes nothing into the build."""
    build = builddir.load(build_dir)
    manifest = build.manifest_data()
    tools = require_tools()
    work = Path(tempfile.mkdtemp(prefix=f"nodeforge-judge-{variant}-",
                                 dir=work_dir or os.environ.get(ENV_WORK_DIR) or None))
    try:
        exp, facts, _ = _offline(build, manifest, variant, tools, artifact_expectations(manifest, Cache(cache_dir)), profile_path,
                                 grow, work)
        return exp, facts
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_report(root: Path, build: builddir.BuildDir, results: list[VariantResult]) -> dict:
    """Merge ``results`` into ``root/verify.json`` (schema :data:`verifyreport.SCHEMA`). Other
    variants' sections are kept only from a valid report of this same build and manifest. No
    top-level verdict: each variant passes or fails on its own section.

    The document is checked with :func:`verifyreport.parse`, the readers' check, before it is
    written: the writer never leaves a report the readers would refuse. It is then signed with
    the verifier key (``verify.intoto.json``, :mod:`.attest`), loaded (or made) before anything
    is written."""
    key = attest.load_key()
    path = root / builddir.VERIFY
    variants: dict = {}
    if path.is_file():
        try:
            old = verifyreport.parse(builddir.read_report_bytes(root), str(path))
        except verifyreport.VerifyReportError as exc:
            log.info("replacing %s: %s", path, exc)
        else:
            if (old["build_id"], old["manifest_sha256"]) == (build.build_id, build.manifest_sha256):
                variants = dict(old["variants"])
    for r in results:
        variants[r.variant] = r.section(build)
    doc = {"schema": VERIFY_SCHEMA, "build_id": build.build_id, "manifest_sha256": build.manifest_sha256,
           "variants": {k: variants[k] for k in sorted(variants)}}
    text = json.dumps(doc, indent=2) + "\n"
    doc = verifyreport.parse(text, f"{path} (about to be written)")
    atomic_write(path, text)
    attest.sign_report(root, text.encode(), doc, key)
    return doc


def read_report(root: Path) -> dict:
    """``verify.json`` of a build directory, strictly validated (:func:`verifyreport.parse`;
    FileNotFoundError if absent, :class:`verifyreport.VerifyReportError` if invalid). Whether it
    is this build's and for these image bytes is :func:`builddir.load`'s verdict."""
    path = Path(root) / builddir.VERIFY
    raw = builddir.read_report_bytes(Path(root))
    if raw is None:
        raise FileNotFoundError(path)
    return verifyreport.parse(raw, str(path))

