"""Read a finished build directory: what `image publish` needs to know about it.

A build directory (written by `nodeforge image build`, checked by
`nodeforge image verify`) holds::

    <image files>        one per variant: qcow2 for ``vm``, raw for ``baremetal``
    SHA256SUMS           ``<hex>  <file name>`` lines (sha256sum format)
    SHA512SUMS           the same with sha512 (Glance's default os_hash_algo)
    manifest.json        packages, artifacts, lockfile digest, versions, build time
    sbom.cdx.json        CycloneDX SBOM (optional here)
    build.log            (optional here)
    verify.json          boot verification report (absent until verified; strict, see verifyreport)
    verify.intoto.json   the same report signed by the verifier (imageverify/attest.py)

``manifest.json`` is read by the one manifest reader
(:func:`nodeforge.imagebuild.manifest.read`, the declared ``Manifest``; an
older shape goes through its one converter, ``manifest.upgrade``): a bad field
is an error naming it. The variants are the manifest's ``images``; optional
files may be missing. What it never tolerates is an image without both
digests: publishing compares Glance's digest with ``SHA512SUMS`` (or
``SHA256SUMS``, whichever algorithm the cloud hashes with).

``verify.json`` is *not* read tolerantly: each variant's status comes from
:func:`verifyreport.judge` (schema ``nodeforge-image-verify/2``, bound to this
build id, this ``manifest.json`` and this image's SUMS entries), with the
reason when it is not ``passed``. A pass also needs the report signed by a
trusted verifier key (``verify.intoto.json``, :func:`attest.open_report`,
carrying exactly these bytes) and every check the build's hardening profile
lists (the repository's profile when it is the build's profile and version).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import os
import stat
from pathlib import Path

from nodeforge.base import fs, sums as sums_mod
from nodeforge.errors import ExitCode, NodeforgeError
from nodeforge.imageverify import attest, verifychecks, verifyreport
from nodeforge.imageverify.verifyreport import Verdict, VerifyStatus  # noqa: F401 - re-exported (publish, pipeline)

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
VERIFY = "verify.json"
SUMS = sums_mod.SUMS_FILES
SBOM = "sbom.cdx.json"

# Variant -> (disk format, file extensions that mean it).
VARIANT_FORMATS = {"vm": "qcow2", "baremetal": "raw"}
_DEB_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "x86_64": "x86_64", "aarch64": "aarch64"}


class BuildDirError(NodeforgeError):
    """The build directory given is not a usable, finished build: bad input (exit 2)."""

    message = "{path}: {detail}"
    exit_code = ExitCode.USAGE


@dataclasses.dataclass(frozen=True)
class VariantImage:
    variant: str
    path: Path
    disk_format: str
    sha256: str
    sha512: str
    size: int
    verify: VerifyStatus
    firmware: str  # bios | uefi
    verify_reason: str = ""  # why ``verify`` is what it is (verifyreport.judge)

    def digest(self, algo: str) -> str:
        if algo not in ("sha256", "sha512"):
            raise BuildDirError(path=self.path, detail=f"no local {algo} digest (only sha256, sha512)")
        return getattr(self, algo)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        d["verify"] = self.verify.value
        return d


@dataclasses.dataclass(frozen=True)
class BuildDir:
    path: Path
    build_id: str
    k8s_version: str          # "1.36.0" (no leading v)
    os_distro: str            # "debian"
    os_version: str           # "12"
    architecture: str         # Glance/Nova spelling: x86_64, aarch64
    build_time: datetime.datetime
    lockfile_sha256: str | None
    manifest_path: Path
    manifest_sha256: str
    variants: dict[str, VariantImage]
    verify_present: bool
    image_source: str | None = None
    original_user: str | None = None
    verify_raw: bytes | None = None   # verify.json exactly as judged
    verify_attestation: bytes | None = None   # verify.intoto.json (publish stores these bytes)
    required_checks: tuple[str, ...] = ()     # the hardening profile's controls a pass must include
    # The typed manifest read (nodeforge.imagebuild.manifest.Manifest); the fields above come from it.
    manifest: object | None = dataclasses.field(default=None, compare=False, repr=False)

    def manifest_bytes(self) -> bytes:
        """``manifest.json`` as it is now, read bounded, and only if it is still the bytes this build
        was read from (a changed manifest is a BuildDirError: publish, provenance and diff use these)."""
        from nodeforge.imagebuild import manifest as mf
        from nodeforge.schema import loader

        raw = loader.read_bytes(self.manifest_path, loader.Limits(max_bytes=mf.MAX_BYTES))
        if hashlib.sha256(raw).hexdigest() != self.manifest_sha256:
            raise BuildDirError(path=self.manifest_path, detail="changed since the build directory was read")
        return raw

    def manifest_data(self) -> dict:
        """:meth:`manifest_bytes` as plain data, parsed by the one bounded JSON reader (values,
        depth and numbers limited as everywhere else)."""
        from nodeforge.imagebuild import manifest as mf
        from nodeforge.schema import loader

        text = loader.decode(self.manifest_path, self.manifest_bytes())
        return loader.load(self.manifest_path, text, format="json",
                           limits=loader.Limits(max_bytes=mf.MAX_BYTES)).data

    @property
    def k8s_minor(self) -> str:
        return ".".join(self.k8s_version.split(".")[:2])

    def variant(self, name: str) -> VariantImage:
        if name not in self.variants:
            raise BuildDirError(path=self.path, detail=f"no '{name}' image in this build "
                                                      f"(has: {', '.join(sorted(self.variants)) or 'none'})")
        return self.variants[name]

    def binding(self, variant: str) -> verifyreport.Binding:
        """What ``variant``'s verify verdict must be bound to: this build, manifest and image."""
        image = self.variant(variant)
        return verifyreport.Binding(variant=variant, build_id=self.build_id, manifest_sha256=self.manifest_sha256,
                                    image_sha256=image.sha256, image_sha512=image.sha512,
                                    image_name=image.path.name, origin="this build")

    def verify_verdict(self, variant: str) -> verifyreport.Verdict:
        """``variant``'s verdict judged again from :attr:`verify_raw` (what publish relies on)."""
        return self.verdicts([variant])[variant]

    def verdicts(self, variants) -> dict[str, verifyreport.Verdict]:
        """Each variant's verdict: :func:`verifyreport.judge` of :attr:`verify_raw`, then a pass
        only if the verifier's attestation holds exactly these bytes and every required check is
        in the report."""
        verdicts = verifyreport.judge(self.verify_raw, [self.binding(v) for v in variants], str(self.path / VERIFY))
        if self.verify_raw is None or not any(v.passed for v in verdicts.values()):
            return verdicts
        why = self._unattested()
        doc = verifyreport.parse(self.verify_raw, str(self.path / VERIFY)) if why is None else None
        out = {}
        for variant, verdict in verdicts.items():
            reason = why
            if verdict.passed and reason is None:
                have = {c["id"] for c in doc["variants"][variant]["checks"]}
                missing = [c for c in self.required_checks if c not in have]
                if missing:
                    reason = (f"{self.path / VERIFY}: variants.{variant}.checks has no {', '.join(missing)}: the "
                              "build's hardening profile lists them; verify the build again")
            out[variant] = verdict if not verdict.passed or reason is None else Verdict(VerifyStatus.FAILED, reason)
        return out

    def _unattested(self) -> str | None:
        where = self.path / attest.ENVELOPE
        if self.verify_attestation is None:
            return (f"{self.path / VERIFY} is not signed ({attest.ENVELOPE} is missing): an unsigned report "
                    "proves nothing; run 'nodeforge image verify' again")
        try:
            opened = attest.open_report(self.verify_attestation, str(where))
        except attest.AttestationError as exc:
            return str(exc)
        if opened.report != self.verify_raw:
            return f"{self.path / VERIFY} is not the report signed in {where}"
        return None

    def to_dict(self) -> dict:
        return {
            "path": str(self.path), "build_id": self.build_id, "k8s_version": self.k8s_version,
            "k8s_minor": self.k8s_minor, "os_distro": self.os_distro, "os_version": self.os_version,
            "architecture": self.architecture, "build_time": self.build_time.isoformat(),
            "lockfile_sha256": self.lockfile_sha256, "manifest": str(self.manifest_path),
            "manifest_sha256": self.manifest_sha256,
            "variants": {k: v.to_dict() for k, v in sorted(self.variants.items())},
        }


def _read_sums(path: Path) -> dict[str, str]:
    """``{file name: lower-case hex}`` from a sha*sum file (:mod:`nodeforge.base.sums`); {} if it is missing."""
    return {Path(name).name: digest
            for name, digest in sums_mod.read_sums(path, missing_ok=True, error=BuildDirError).items()}


def read_report_bytes(root: Path, name: str = VERIFY) -> bytes | None:
    """``verify.json`` or its signed envelope (None when absent): a regular file inside the build
    directory, read up to one byte past :data:`verifyreport.MAX_BYTES` (a longer report is judged
    "larger than", a failed verification, by :mod:`verifyreport`; never read whole)."""
    if not (root / name).exists() and not (root / name).is_symlink():
        return None
    try:
        path = fs.confined(root, name)
        if not stat.S_ISREG(os.stat(path).st_mode):      # a FIFO would hang the open, a device never ends
            raise ValueError("not a regular file (a pipe, socket or device)")
        with open(path, "rb") as fh:
            return fh.read(verifyreport.MAX_BYTES + 1)
    except ValueError as exc:
        raise BuildDirError(path=root / name, detail=str(exc)) from None
    except OSError as exc:
        raise BuildDirError(path=root / name, detail=exc.strerror or str(exc)) from None


def load(path: Path | str) -> BuildDir:
    """Read ``path``. ``manifest.json`` is read by the one manifest reader
    (:func:`nodeforge.imagebuild.manifest.read`: the declared :class:`~nodeforge.imagebuild.manifest.Manifest`,
    an older shape through its one converter, :func:`~nodeforge.imagebuild.manifest.upgrade`); a bad
    field is an error naming it (exit 2). Images: the manifest's ``images`` (variant: file name),
    each with both digests in the SUMS files; the disk format and firmware are the manifest's
    (:meth:`~nodeforge.imagebuild.manifest.Manifest.disk_format`, ``.firmware``)."""
    from nodeforge.imagebuild import manifest as mf

    root = Path(path)
    if not root.is_dir():
        raise BuildDirError(path=root, detail="not a directory")
    manifest_path = root / MANIFEST
    if not manifest_path.exists() and not manifest_path.is_symlink():
        raise BuildDirError(path=root, detail=f"no {MANIFEST}: not a finished build directory")
    raw, manifest = mf.read(manifest_path)

    k8s = manifest.kubernetes.version.lstrip("v")
    arch = _DEB_ARCH.get(manifest.arch, manifest.arch)
    build_time = _parse_time(manifest.build_time, manifest_path)

    verify_raw = read_report_bytes(root, VERIFY)
    attestation = read_report_bytes(root, attest.ENVELOPE)
    sums = {algo: _read_sums(root / fname) for algo, fname in SUMS.items()}
    variants: dict[str, VariantImage] = {}
    for variant, fname in manifest.images.items():
        try:      # a plain name (the manifest's declaration); a symlink leading out is refused here
            file = fs.confined(root, fname)
        except ValueError as exc:
            raise BuildDirError(path=manifest_path, detail=f"images.{variant}: {exc}") from None
        if not file.is_file():
            raise BuildDirError(path=file, detail="image listed but missing")
        digests = {}
        for algo, fname_sums in SUMS.items():
            if file.name not in sums[algo]:
                raise BuildDirError(path=root / fname_sums, detail=f"no entry for {file.name}")
            digests[algo] = sums[algo][file.name]
        variants[variant] = VariantImage(variant, file, manifest.disk_format(file.name), digests["sha256"],
                                         digests["sha512"], file.stat().st_size, VerifyStatus.ABSENT,
                                         manifest.firmware(variant))
    if not variants:
        raise BuildDirError(path=manifest_path, detail="images is empty: no image in this build")
    build = BuildDir(
        path=root, build_id=manifest.build_id, k8s_version=k8s, os_distro=manifest.base_os.distro.lower(),
        os_version=manifest.base_os.release, architecture=arch, build_time=build_time,
        lockfile_sha256=manifest.lockfile.sha256, manifest_path=manifest_path,
        manifest_sha256=hashlib.sha256(raw).hexdigest(), variants=variants, verify_present=verify_raw is not None,
        verify_raw=verify_raw, verify_attestation=attestation, manifest=manifest,
        required_checks=_required_checks(manifest),
    )
    # Each variant's status, strictly (verifyreport), bound to this build; ``variants`` is the BuildDir's dict.
    verdicts = build.verdicts(list(variants))
    for v, verdict in verdicts.items():
        log.debug("%s verify %s: %s", v, verdict.status.value, verdict.reason)
        variants[v] = dataclasses.replace(variants[v], verify=verdict.status, verify_reason=verdict.reason)
    return build


def _required_checks(manifest) -> tuple[str, ...]:
    """The hardening controls a pass must include: the repository profile's, when it is the
    build's profile and version (else the image's own, which only a boot reads)."""
    repo = verifychecks.repository_controls({"hardening": manifest.hardening or {}})
    return tuple(c["id"] for c in repo[0] if isinstance(c, dict) and "id" in c) if repo else ()


def _parse_time(value: str, path: Path) -> datetime.datetime:
    try:
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BuildDirError(path=path, detail=f"build_time '{value[:40]}' is not ISO 8601") from None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)
