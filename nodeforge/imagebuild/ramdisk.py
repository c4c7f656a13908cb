"""Ironic's deploy ramdisk, built by nodeforge: ironic-python-agent (IPA) on Debian, as a kernel
and an initramfs that Ironic boots on a node to inspect, clean and deploy it.

Inputs, all pinned: ``manifests/agent-ramdisk.lock.txt`` (IPA and every Python dependency, exact
versions and sha256 hashes, made from ``agent-ramdisk.in`` by ``make agent-lock``), the element
``elements/nodeforge-agent`` (and ironic-python-agent-builder's ``ironic-ramdisk-base``, pinned in
pyproject), the Debian release and diskimage-builder's version. The wheels are downloaded on the
host with ``pip --require-hashes`` (binary wheels only) and installed offline in the chroot;
Debian packages come from the mirror the image builds use (:func:`build.debian_mirrors`).

The result is cached by a digest of those inputs (``~/.cache/nodeforge/agent-ramdisk/<digest>/``:
``ironic-agent.kernel``, ``ironic-agent.initramfs``, ``SHA256SUMS``, ``ramdisk.json``): a second
call with the same inputs costs a copy. docs/agent-ramdisk.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from nodeforge.base import fs, runner, sums
from nodeforge.errors import NodeforgeError
from nodeforge.imagebuild import build as build_mod
from nodeforge.imagebuild.render import tree_digest
from nodeforge.schema import loader

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "manifests" / "agent-ramdisk.lock.txt"
ELEMENT = REPO / "elements" / "nodeforge-agent"
NAME = "ironic-agent"
KERNEL, INITRAMFS = f"{NAME}.kernel", f"{NAME}.initramfs"
RECORD = "ramdisk.json"
SCHEMA = "nodeforge.agent-ramdisk/1"
SCOPE = "agent-ramdisk"      # the Glance images' ownership scope unless told another
RELEASE = "bookworm"
ARCH = "amd64"
BUILDER = "ironic-python-agent-builder"
# Binary wheels for the ramdisk's Python (Debian bookworm: CPython 3.11, x86_64, glibc 2.36).
WHEEL_TARGET = ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_28_x86_64", "--platform",
                "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "any")


class RamdiskError(NodeforgeError):
    message = "agent ramdisk: {detail}"


@dataclasses.dataclass(frozen=True)
class RamdiskPlan:
    digest: str               # of every input: the cache key
    cache: Path               # where the ramdisk of these inputs is (or goes)
    cached: bool
    out: Path | None          # where the caller wants kernel and initramfs (None: the cache itself)
    lock: Path
    ipa_version: str
    inputs: dict

    def to_dict(self) -> dict:
        return {"digest": self.digest, "cache": str(self.cache), "cached": self.cached,
                "out": str(self.out) if self.out else None, "action": "reuse" if self.cached else "build",
                "ipa_version": self.ipa_version, "inputs": self.inputs}


def builder_elements() -> Path:
    """ironic-python-agent-builder's diskimage-builder elements (installed with the package)."""
    path = Path(sys.prefix) / "share" / BUILDER / "dib"
    if not (path / "ironic-ramdisk-base").is_dir():
        raise RamdiskError(detail=f"{BUILDER}'s elements are not in {path}; run 'make setup'")
    return path


def check_lock(lock: Path) -> list[str]:
    """The requirements of ``lock`` (``name==version``), each pinned exactly and with at least one
    sha256 hash; :class:`RamdiskError` naming the line of the first that is not."""
    pins, current = [], None
    for n, raw in enumerate(loader.read_text(lock).splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("--hash=sha256:"):
            if current is None:
                raise RamdiskError(detail=f"{lock}:{n}: a hash before any requirement")
            current[1] = True
            continue
        if current is not None and not current[1]:
            raise RamdiskError(detail=f"{lock}:{current[2]}: {current[0]} has no --hash=sha256 (make agent-lock)")
        requirement = line.rstrip("\\").strip()
        if "==" not in requirement or any(c in requirement for c in "<>~*"):
            raise RamdiskError(detail=f"{lock}:{n}: {requirement[:80]!r} is not pinned to one version (name==version)")
        pins.append(requirement)
        current = [requirement, False, n]
    if current is not None and not current[1]:
        raise RamdiskError(detail=f"{lock}:{current[2]}: {current[0]} has no --hash=sha256 (make agent-lock)")
    if not pins:
        raise RamdiskError(detail=f"{lock}: no requirement")
    return pins


def locked_version(lock: Path, package: str = "ironic-python-agent") -> str:
    for line in loader.read_text(lock).splitlines():
        if line.split("==")[0].strip().lower() == package:
            return line.split("==", 1)[1].split()[0].strip(" \\")
    raise RamdiskError(detail=f"{lock}: {package} is not pinned")


def input_digest(lock: Path = LOCK, element: Path = ELEMENT) -> tuple[str, dict]:
    """(sha256 over every input, the inputs named)."""
    from importlib.metadata import version

    inputs = {"lock_sha256": fs.sha256_file(lock), "element_tree": tree_digest(element),
              "builder": version(BUILDER), "builder_elements": tree_digest(builder_elements() / "ironic-ramdisk-base"),
              "diskimage_builder": version("diskimage-builder"), "release": RELEASE, "arch": ARCH, "schema": SCHEMA}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest(), inputs


def cache_root() -> Path:
    return fs.cache_home() / "agent-ramdisk"


def plan(out: Path | None = None, *, lock: Path = LOCK) -> RamdiskPlan:
    """What :func:`build` would do; reads the inputs and the cache, writes nothing."""
    if not lock.is_file():
        raise RamdiskError(detail=f"{lock}: no lock file (make agent-lock)")
    check_lock(lock)
    digest, inputs = input_digest(lock)
    cache = cache_root() / digest
    cached = all((cache / f).is_file() for f in (KERNEL, INITRAMFS, RECORD, "SHA256SUMS"))
    return RamdiskPlan(digest, cache, cached, out, lock, locked_version(lock), inputs)


def download_wheels(lock: Path, dest: Path, log: Callable[[str], None]) -> None:
    """Every locked wheel into ``dest``, each checked against the lock's hashes by pip."""
    log(f"downloading the locked wheels ({lock.name}) with --require-hashes")
    runner.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "-r", str(lock),
                "-d", str(dest), *WHEEL_TARGET], what="pip download", error=RamdiskError)


def _dib_env(lock: Path, wheels: Path, tmp: Path) -> dict[str, str]:
    mirrors = build_mod.debian_mirrors()
    bindir = str(Path(sys.prefix) / "bin")
    return {**os.environ,
            "ELEMENTS_PATH": os.pathsep.join([str(ELEMENT.parent), str(builder_elements())]),
            "DIB_RELEASE": RELEASE, "DIB_DEBIAN_DISTRIBUTION_MIRROR": mirrors["main"],
            "DIB_DEBIAN_SECURITY_MIRROR": mirrors["security"], "DIB_DEBIAN_USE_DEBOOTSTRAP_CACHE": "1",
            "NODEFORGE_AGENT_WHEELS": str(wheels), "NODEFORGE_AGENT_LOCK": str(lock), "TMPDIR": str(tmp),
            # A debootstrap cache of its own, no shared apt archive: no lock shared with the image builds.
            "DIB_IMAGE_CACHE": str(cache_root() / "dib-image-cache"), "DIB_APT_LOCAL_CACHE": "0",
            "PATH": os.pathsep.join([bindir, os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])}


def build(p: RamdiskPlan, *, work_dir: Path | None = None, log: Callable[[str], None] = lambda _m: None) -> dict:
    """Build (or reuse) the ramdisk of plan ``p``; copy it to ``p.out`` if given. Its record."""
    if not p.cached:
        _build_into_cache(p, work_dir, log)
    else:
        log(f"agent ramdisk {p.digest[:12]}: cached in {p.cache}")
    rec = record(p)
    bad = [n for n, d in sums.read_sums(p.cache / "SHA256SUMS", error=RamdiskError).items()
           if fs.sha256_file(p.cache / n) != d]
    if bad:
        raise RamdiskError(detail=f"{p.cache}: {', '.join(bad)} do not match SHA256SUMS; remove the directory")
    if p.out is not None:
        p.out.mkdir(parents=True, exist_ok=True)
        for name in (KERNEL, INITRAMFS, RECORD, "SHA256SUMS"):
            shutil.copyfile(p.cache / name, p.out / name)
    return rec


def record(p: RamdiskPlan) -> dict:
    """The cached ramdisk's record (``ramdisk.json``); the plan must be ``cached``."""
    return loader.read_json(p.cache / RECORD)


def glance_files(p: RamdiskPlan) -> dict[str, Path]:
    """The files that go to Glance, by part (kernel, ramdisk)."""
    return {"kernel": p.cache / KERNEL, "ramdisk": p.cache / INITRAMFS}


def _build_into_cache(p: RamdiskPlan, work_dir: Path | None, log: Callable[[str], None]) -> None:
    p.cache.parent.mkdir(parents=True, exist_ok=True)
    with fs.locked(p.cache.parent / f".{p.digest}.lock"):
        if (p.cache / RECORD).is_file():
            return
        work = Path(tempfile.mkdtemp(prefix="nodeforge-agent-ramdisk.", dir=work_dir))
        stage = Path(tempfile.mkdtemp(prefix=f".{p.digest}.partial.", dir=p.cache.parent))
        try:
            t0 = time.monotonic()
            download_wheels(p.lock, work / "wheels", log)
            log(f"diskimage-builder: debian-minimal ({RELEASE}) + nodeforge-agent (ironic-python-agent "
                f"{p.ipa_version}); build log {work / 'dib.log'}")
            (work / "tmp").mkdir()
            runner.run([str(Path(sys.prefix) / "bin" / "disk-image-create"), "-a", ARCH, "-o", str(work / NAME),
                        "debian-minimal", "nodeforge-agent"], env=_dib_env(p.lock, work / "wheels", work / "tmp"),
                       log_file=work / "dib.log", what="disk-image-create", error=RamdiskError)
            for name in (KERNEL, INITRAMFS):
                shutil.move(work / name, stage / name)
            digests = {n: {"sha256": fs.sha256_file(stage / n)} for n in (KERNEL, INITRAMFS)}
            fs.atomic_write(stage / "SHA256SUMS", sums.format_sums({n: d["sha256"] for n, d in digests.items()}))
            rec = {"schema": SCHEMA, "digest": p.digest, "ipa_version": p.ipa_version, "inputs": p.inputs,
                   "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "seconds": round(time.monotonic() - t0, 1),
                   "files": {n: {"sha256": d["sha256"], "bytes": (stage / n).stat().st_size}
                             for n, d in digests.items()}}
            fs.atomic_write(stage / RECORD, json.dumps(rec, indent=1, sort_keys=True) + "\n")
            os.chmod(stage, 0o755)
            fs.move_into_place(stage, p.cache)
            log(f"agent ramdisk {p.digest[:12]}: built in {rec['seconds']:.0f} s, initramfs "
                f"{rec['files'][INITRAMFS]['bytes'] / (1 << 20):.1f} MiB")
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            runner.run(["rm", "-rf", "--one-file-system", str(work)], privileged=True, check=False)
