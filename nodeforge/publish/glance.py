"""Publish a build's images to Glance: the verify gate, properties, streaming
upload, digest check, the manifest and the verify report beside the image,
idempotency and clean-up.

Only a variant whose ``verify.json`` passes the strict check
(:mod:`.verifyreport`, bound to this build, manifest and image bytes), signed
by a trusted verifier key (``verify.intoto.json``, :mod:`.attest`) and
verified within the maximum age is published; anything else is refused
before anything is uploaded.

One variant is published as four Glance images (see docs/publishing.md):

* the **node image**: the variant's disk, tagged ``nodeforge``, with the
  Magnum/SCS properties and nodeforge's ``nodeforge_*`` ones;
* the **manifest image**: the build's ``manifest.json`` byte for byte
  (``disk_format=raw``, ``os_hidden=true``, tag ``nodeforge-manifest``), named
  by the node image's ``nodeforge_manifest_image`` and checked against its
  ``nodeforge_manifest_sha256``. Image properties stay small (Nova copies
  each one onto every instance, truncated to 255 characters; listings return
  all of them; MySQL caps a value at 64 KiB);
* the **verify report image**: the build's signed verify report
  (``verify.intoto.json``, the verifier's DSSE envelope carrying ``verify.json``)
  byte for byte, the same way (tag ``nodeforge-verify-report``), named by the
  node image's ``nodeforge_verify_report`` and checked against its
  ``nodeforge_verify_sha256``. ``image promote`` downloads it, checks the
  signature against the trusted verifier keys and judges the report again
  against the Glance image (:func:`verify_binding`), so it never trusts the
  ``nodeforge_verify`` string alone;
* the **provenance image**: the build's signed SLSA provenance (a DSSE
  envelope, :mod:`.provenance`), tag ``nodeforge-provenance``, named by the
  node image's ``nodeforge_provenance`` and checked against its
  ``nodeforge_provenance_sha256``; ``image provenance`` verifies it.

Ownership scopes: every image publish creates carries ``nodeforge_scope``,
the scope of the declaration that made it, the version lockfile: publish's
``scope`` argument (``image publish --scope``; the pipeline passes its
lockfile's), else the build manifest's ``scope`` (``image build`` records the
lockfile's), else :data:`DEFAULT_SCOPE` for manifests written before scopes.
Promote retires only images of the promoted image's scope
(:mod:`.catalog`); a build's images already in Glance under another scope
are refused (:class:`ScopeConflict`), legacy ones (no ``nodeforge_scope``)
are taken into the scope. The rule (:func:`nodeforge.scope.scope_problem`)
is the one flavors and bare-metal inventories use.

Plan and apply (nodeforge/plan.py): :meth:`Publisher.plan` reads Glance and
the build directory and writes nothing (every refusal is raised there, before
any write; ``image publish --dry-run`` prints its results);
:meth:`Publisher.apply` makes the writes; :meth:`Publisher.publish` is apply
of plan. The four side images have one writer, :meth:`Publisher.side_image`
(:data:`SIDES`).

All calls are plain Glance v2 REST through the openstacksdk session, in
:mod:`.glance_api` (re-exported here). The upload is a ``PUT
/v2/images/{id}/file`` whose body is a reader yielding 1 MiB chunks from disk
while hashing them, so client memory stays flat.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait as wait_futures
from typing import Iterable

from nodeforge import plan as PL, transport
from nodeforge.base import fs
from nodeforge.errors import UsageError
from nodeforge.imagebuild import contents
from nodeforge.imageverify import attest, verifyreport
from nodeforge.imageverify.builddir import BuildDir, VariantImage, VerifyStatus
from nodeforge.publish import diff as imgdiff, glance_api as api, provenance
# The REST helpers and the image vocabulary (tags, scope mark), for this module's callers (their
# home is glance_api).
from nodeforge.publish.glance_api import (  # noqa: F401 - re-exported
    ACTIVE, DEACTIVATED, DEFAULT_SCOPE, FAILED, P, SCOPE, TAG, TAG_APPROVED, TAG_CANDIDATE, TAG_IN_USE,
    TAG_MANIFEST, TAG_SUPERSEDED, TAG_VERIFY_REPORT, TRANSIENT, ForbiddenError, GlanceError, PublishError,
    canary_property, create_image, deactivate_image, delete_image, download_canary_report, download_manifest,
    download_verify_report, find_image,
    get_image, list_images, patch_image, put_data, scope_of, set_ops, tag_k8s, tag_variant)
from nodeforge.publish.retention import RetentionPolicy
from nodeforge.publish.upload import HashingReader, uploader_alive, uploader_id, virtual_size
from nodeforge.scope import scope_problem

log = logging.getLogger(__name__)


# Limits a production Glance enforces or a MySQL/MariaDB schema implies; the
# local SQLite-backed Glance enforces none of them, so nodeforge checks here.
MAX_KEY_CHARS = 255          # image_properties.name VARCHAR(255)
MAX_VALUE_BYTES = 65535      # image_properties.value TEXT
MAX_PROPERTIES = 128         # [DEFAULT] image_property_quota
NOVA_COPY_CHARS = 255        # Nova copies properties onto instances truncated to this
# Properties allowed beyond 255 characters (Nova verifies signatures from
# Glance's record, never from its truncated copy).
LONG_OK = frozenset({"img_signature"})

def check_scope(value: str | None, what: str = "scope") -> str | None:
    """``value`` if it is a valid scope (or None); :class:`UsageError` (exit 2) otherwise."""
    if value is None:
        return None
    problem = scope_problem(value)
    if problem is not None:
        raise UsageError(detail=f"{what} {problem}")
    return value


# --------------------------------------------------------------------------
# Errors (GlanceError, ForbiddenError and PublishError: glance_api)

class DigestMismatch(PublishError):
    message = ("{image}: Glance stored {algo} {glance} but {source} says {expected}; "
               "the image was deleted")


class SignatureRejected(PublishError):
    message = ("{image}: Glance rejected the signature (HTTP {status}: {detail}); the image was deleted. "
               "Is certificate {cert_id} the one for this key, and is the image unchanged since signing?")


class UploadInterrupted(PublishError):
    message = ("{image}: upload interrupted after {sent} bytes ({detail}); the partial image was removed "
               "where possible. Run publish again: it cleans up and uploads from the start")


class PropertyLimitError(PublishError):
    message = "{image}: image properties exceed what a production Glance stores: {detail}"


class NotVerified(PublishError):
    message = "{image}: not published: its boot verification is '{status}': {reason}"
    hint = ("only a variant whose verify.json passes (schema nodeforge-image-verify/2, this build, this "
            "manifest, these image bytes) is published; run 'nodeforge image verify' on the build directory")


class ScopeConflict(PublishError):
    message = ("{image}: image {image_id} of this build is in Glance under scope '{owner}', not '{scope}'; "
               "nothing was written")
    hint = ("a build belongs to one scope: publish it with --scope set to the scope that owns it, or delete "
            "that image first (docs/publishing.md, 'Ownership scopes')")


class UploadInProgress(PublishError):
    message = ("{image}: image {image_id} is being uploaded right now by process {pid} on this host; "
               "wait for it or stop it, then publish again")


# --------------------------------------------------------------------------
# Properties

def image_name(build: BuildDir, variant: str) -> str:
    return f"nodeforge-k8s-{build.k8s_version}-{build.os_distro}-{build.os_version}-{variant}-{build.build_id}"[:255]


def manifest_scope(build: BuildDir) -> str | None:
    """The ``scope`` the build's manifest records (None: a manifest from before scopes). Read
    from the bytes :func:`builddir.load` digested; an invalid value is refused."""
    data = build.manifest_data()
    value = data.get("scope") if isinstance(data, dict) else None
    if value is None:
        return None
    problem = scope_problem(value)
    if problem is not None:
        raise PublishError(detail=f"{build.manifest_path}: scope {problem}")
    return value


def image_properties(build: BuildDir, image: VariantImage, policy: RetentionPolicy, *,
                     manifest_image_id: str, verify_report_id: str, verify_sha256: str,
                     scope: str = DEFAULT_SCOPE) -> dict[str, str]:
    """The extra properties of a node image (all strings). Core attributes
    (min_disk, min_ram, os_hidden, visibility, tags) are set separately."""
    vm = image.variant == "vm"
    props = {
        # Magnum (capi-helm driver: os_distro, kube_version) and SCS image metadata.
        "os_distro": build.os_distro,
        "os_version": build.os_version,
        "os_purpose": "k8snode",
        "architecture": build.architecture,
        "kube_version": f"v{build.k8s_version}",
        "hw_firmware_type": image.firmware,
        "hw_machine_type": "q35",
        "hw_disk_bus": "scsi",
        "hw_scsi_model": "virtio-scsi",
        "hw_rng_model": "virtio",
        "image_build_date": build.build_time.strftime("%Y-%m-%d %H:%M"),
        "image_source": build.image_source or "private",
        "image_description": (f"Kubernetes v{build.k8s_version} node image ({image.variant}), "
                               f"{build.os_distro} {build.os_version}, nodeforge build {build.build_id}"),
        "image_original_user": build.original_user or build.os_distro,
        "replace_frequency": policy.replace_frequency,
        "uuid_validity": policy.uuid_validity,
        "provided_until": policy.provided_until,
        # nodeforge's own.
        f"{P}build_id": build.build_id,
        f"{P}variant": image.variant,
        f"{P}k8s_minor": build.k8s_minor,
        f"{P}lockfile_sha256": build.lockfile_sha256 or "unknown",
        f"{P}manifest_sha256": build.manifest_sha256,
        f"{P}manifest_image": manifest_image_id,
        f"{P}sha256": image.sha256,
        f"{P}verify": image.verify.value,
        f"{P}verify_report": verify_report_id,
        f"{P}verify_sha256": verify_sha256,
        f"{P}role": "image",
        SCOPE: scope,
    }
    if vm:
        props["hw_qemu_guest_agent"] = "yes"
        props["hypervisor_type"] = "qemu"
    return props


def check_properties(name: str, props: dict, *, core: int = 0) -> None:
    """Refuse what a MySQL-backed production Glance would reject or mangle."""
    problems = []
    if len(props) > MAX_PROPERTIES:
        problems.append(f"{len(props)} properties (limit {MAX_PROPERTIES})")
    for key, value in props.items():
        if len(key) > MAX_KEY_CHARS:
            problems.append(f"key '{key[:40]}...' longer than {MAX_KEY_CHARS} characters")
        text = value if isinstance(value, str) else json.dumps(value)
        if len(text.encode()) > MAX_VALUE_BYTES:
            problems.append(f"'{key}' is {len(text.encode())} bytes (limit {MAX_VALUE_BYTES})")
        elif len(text) > NOVA_COPY_CHARS and key not in LONG_OK:
            problems.append(f"'{key}' is {len(text)} characters; Nova would truncate it to {NOVA_COPY_CHARS}")
    if problems:
        raise PropertyLimitError(image=name, detail="; ".join(problems))


def tags_for(build: BuildDir, variant: str, approved: bool = False) -> list[str]:
    return [TAG, tag_k8s(build.k8s_minor), tag_variant(variant), TAG_APPROVED if approved else TAG_CANDIDATE]


# --------------------------------------------------------------------------
# Side images: the documents beside a node image

@dataclasses.dataclass(frozen=True)
class SideImage:
    """A hidden Glance image beside the node image holding one document: ``os_hidden``,
    ``disk_format=raw``, its ``tag``, ``nodeforge_role`` = ``role``, the sha256 of its bytes in
    ``digest`` (on it and on the node image), named by the node image's ``link`` property.
    ``same_bytes``: a linked image counts as attached only when it holds these very bytes (the
    verify report: a build verified again gets the new one); otherwise any active linked one does
    (the provenance: its signature differs from one run to the next). ``marks``: node-image
    properties set together with the link."""

    role: str
    tag: str
    suffix: str
    link: str
    digest: str
    what: str
    same_bytes: bool = False
    marks: tuple[tuple[str, str], ...] = ()


MANIFEST = SideImage("manifest", TAG_MANIFEST, "manifest.json", f"{P}manifest_image", f"{P}manifest_sha256",
                     "manifest", same_bytes=True)
VERIFY_REPORT = SideImage("verify-report", TAG_VERIFY_REPORT, "verify.intoto.json", f"{P}verify_report",
                          f"{P}verify_sha256", "verify report", same_bytes=True,
                          marks=((f"{P}verify", VerifyStatus.PASSED.value),))
PROVENANCE = SideImage(provenance.ROLE, provenance.TAG, "provenance.dsse.json", provenance.PROP_IMAGE,
                       provenance.PROP_SHA256, "provenance")
FILES = SideImage(imgdiff.FILES_ROLE, imgdiff.FILES_TAG, contents.FILENAME, imgdiff.FILES_IMAGE,
                  imgdiff.FILES_SHA256, "per-file manifest")
# In the order a publish writes them (before the node image, which links all four).
SIDES = (MANIFEST, VERIFY_REPORT, PROVENANCE, FILES)
# Written by the canary deploy after publish (not from the build directory at publish time).
CANARY_REPORT = SideImage("canary-report", "nodeforge-canary-report", "canary.json", f"{P}canary_report",
                          f"{P}canary_sha256", "canary report", same_bytes=True)


def side_attached(image: dict, side: SideImage, existing: list[dict], data: bytes | None) -> bool:
    """Whether node image ``image`` links an active ``side`` image among ``existing`` (holding
    ``data`` when ``side.same_bytes``)."""
    linked = image.get(side.link)
    if not linked or not any(s["id"] == linked and s["status"] == ACTIVE for s in existing):
        return False
    return not side.same_bytes or image.get(side.digest) == hashlib.sha256(data or b"").hexdigest()


# --------------------------------------------------------------------------
# Publish: a plan (reads Glance and the build directory, writes nothing), then its apply

@dataclasses.dataclass
class VariantResult:
    variant: str
    name: str
    action: str                    # uploaded | exists | would-upload | exists (dry run)
    image_id: str | None = None
    manifest_image_id: str | None = None
    size: int = 0
    seconds: float = 0.0
    hash_algo: str | None = None
    hash_value: str | None = None
    signed: bool = False
    verify: str = VerifyStatus.ABSENT.value
    verify_report_id: str | None = None
    provenance_image_id: str | None = None
    cleaned: list[str] = dataclasses.field(default_factory=list)
    scope: str | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def kind(self) -> PL.Kind:
        """The shared plan kind: an upload (made or planned) creates; an image already there is a no-op."""
        return PL.Kind.CREATE if self.action in ("uploaded", "would-upload") else PL.Kind.NOOP

    def result(self) -> PL.Result:
        return PL.Result(self.name, self.kind, PL.Status.DONE)


@dataclasses.dataclass
class VariantPlan:
    """What publishing one variant does, decided from Glance as it was when planning:
    ``kind`` CREATE (upload the node image and its side images), UPDATE (the node image is there;
    ``attach`` lists the side images it lacks, ``adopt`` marks a legacy image with the scope) or
    NOOP; ``cleanup``: images an interrupted upload left in flight or failed, to delete first.
    ``result``: what a dry run reports (``would-upload`` or ``exists``)."""

    variant: str
    name: str
    scope: str
    kind: PL.Kind
    report: bytes                          # the signed verify report (verify.intoto.json) that passed the gate
    image: dict | None                     # the node image already in Glance
    existing: dict[str, list[dict]]        # side role -> this build's and variant's images of it (after clean-up)
    cleanup: list[str]
    attach: list[SideImage]
    adopt: bool
    has_files: bool                        # the build has a per-file manifest (files.jsonl)
    result: VariantResult

    def changes(self) -> list[PL.Change]:
        """The plan entry in the shared shape: one change per image created, updated or deleted."""
        out = [PL.Change(PL.Kind.DELETE, image_id, (), "left in flight or failed by an interrupted upload")
               for image_id in self.cleanup]
        if self.kind is PL.Kind.CREATE:
            out += [PL.Change(PL.Kind.CREATE, f"{self.name}.{s.suffix}"[:255], (), f"the {s.what} (hidden)")
                    for s in SIDES if s is not FILES or self.has_files]
            out.append(PL.Change(PL.Kind.CREATE, self.name, (PL.FieldChange(SCOPE, None, self.scope),),
                                 f"the {self.variant} node image (candidate)"))
            return out
        image = self.image or {}
        fields = tuple(PL.FieldChange(s.link, image.get(s.link), "(new)") for s in self.attach)
        if self.adopt:
            fields += (PL.FieldChange(SCOPE, None, self.scope),)
        out += [PL.Change(PL.Kind.CREATE, f"{self.name}.{s.suffix}"[:255], (), f"the {s.what} (hidden), attached")
                for s in self.attach]
        out.append(PL.Change(PL.Kind.UPDATE if fields else PL.Kind.NOOP, self.name, fields,
                             "in Glance already" + ("; legacy image taken into the scope" if self.adopt else "")))
        return out


@dataclasses.dataclass
class PublishPlan:
    """What :meth:`Publisher.apply` does for a build: one :class:`VariantPlan` per variant,
    every refusal (unknown variant, no passing verify report, another scope's image, an upload
    in progress) already raised by :meth:`Publisher.plan`."""

    build: BuildDir
    variants: list[str]
    entries: list[VariantPlan]

    @property
    def results(self) -> list[VariantResult]:
        """What a dry run reports (``image publish --dry-run``): would-upload or exists per variant."""
        return [e.result for e in self.entries]

    def changes(self) -> list[PL.Change]:
        return [c for e in self.entries for c in e.changes()]

    def counts(self) -> dict[str, int]:
        return PL.counts((PL.Kind.CREATE, PL.Kind.NOOP), (r.kind for r in self.results))


@dataclasses.dataclass
class SignOptions:
    signer: object          # signing.Signer
    cert_id: str


class Publisher:
    """Publishes builds: :meth:`plan` (reads, writes nothing), :meth:`apply`, and
    :meth:`publish` = apply(plan). ``scope``: the ownership scope every image gets (validated
    here, :class:`UsageError`); None: the build manifest's ``scope``, else :data:`DEFAULT_SCOPE`."""

    def __init__(self, conn, policy: RetentionPolicy, *, sign: SignOptions | None = None, progress=None,
                 scope: str | None = None):
        self.conn = conn
        self.policy = policy
        self.sign = sign
        self.progress = progress
        self.scope = check_scope(scope)
        self.owner = uploader_id()
        self._scopes: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()      # set when apply is interrupted: the uploads in flight stop

    def scope_for(self, build: BuildDir) -> str:
        """The scope ``build``'s images are published under (see the class)."""
        key = (str(build.path), build.manifest_sha256)
        if key not in self._scopes:
            recorded = manifest_scope(build)
            if self.scope is not None and recorded is not None and recorded != self.scope:
                log.warning("%s: the manifest records scope '%s'; publishing under '%s' as asked",
                            build.path, recorded, self.scope)
            self._scopes[key] = self.scope or recorded or DEFAULT_SCOPE
        return self._scopes[key]

    def check_owner(self, build: BuildDir, variant: str, scope: str, found: list[dict] | None = None) -> None:
        """Refuse (:class:`ScopeConflict`) when an image of this build and variant is in Glance
        under another scope."""
        for img in self._mine(build, variant, "image") if found is None else found:
            owner = scope_of(img)
            if owner is not None and owner != scope:
                raise ScopeConflict(image=image_name(build, variant), image_id=img["id"], owner=owner, scope=scope)

    @staticmethod
    def gate(build: BuildDir, variant: str) -> bytes:
        """The signed verify report (``verify.intoto.json``) that passes for ``variant``: judged
        again, strictly, from the bytes :func:`builddir.load` read, signed by a trusted verifier,
        with ``verified_at`` neither in the future nor older than the maximum age;
        :class:`NotVerified` with the reason for anything else."""
        verdict = build.verify_verdict(variant)
        if not verdict.passed or build.verify_raw is None or build.verify_attestation is None:
            raise NotVerified(image=image_name(build, variant), status=verdict.status.value, reason=verdict.reason)
        at = json.loads(build.verify_raw)["variants"][variant]["verified_at"]
        try:
            why = attest.stale(at)
        except attest.AttestationError as exc:
            why = str(exc)
        if why:
            raise NotVerified(image=image_name(build, variant), status="stale", reason=why)
        return build.verify_attestation

    # -- lookup

    def attach_canary(self, build: BuildDir, variant: str, node: dict, data: bytes,
                      verdicts: dict[str, str]) -> dict[str, str]:
        """Store a canary report (``canary.json``) beside node image ``node`` and set its per-class
        verdict properties (:func:`canary_property`); an earlier report of this image is replaced."""
        props = self.side_image(build, variant, CANARY_REPORT, data, self._mine(build, variant, CANARY_REPORT.role),
                                node=node)
        current = get_image(self.conn, node["id"])
        patch_image(self.conn, node["id"], set_ops(current, verdicts), f"recording the canary verdicts on {node.get('name')}")
        return {**props, **verdicts}

    def _mine(self, build: BuildDir, variant: str, role: str) -> list[dict]:
        return list_images(self.conn, **{f"{P}build_id": build.build_id, f"{P}variant": variant, f"{P}role": role})

    @staticmethod
    def _in_flight(images: Iterable[dict], name: str) -> tuple[list[dict], list[str]]:
        """Split off images stuck in flight or failed (an interrupted upload's: to delete); one a
        live process on this host is uploading right now is :class:`UploadInProgress`."""
        keep, stale = [], []
        for img in images:
            if img["status"] not in TRANSIENT | FAILED:
                keep.append(img)
                continue
            pid = uploader_alive(img.get(f"{P}uploader"))
            if pid is not None:
                raise UploadInProgress(image=name, image_id=img["id"], pid=pid)
            stale.append(img["id"])
        return keep, stale

    # -- plan

    def plan(self, build: BuildDir, variants: Iterable[str] | None = None) -> PublishPlan:
        """What publishing ``build`` (``variants``, default all) does: reads Glance and the build
        directory, writes nothing. Every refusal is raised here, before any write: an unknown
        variant, one without a passing verify report, one already in Glance under another scope,
        one being uploaded by a live process."""
        names = list(variants) if variants else sorted(build.variants)
        for v in names:
            build.variant(v)  # all unknown variants fail before any upload
        for v in names:
            self.gate(build, v)  # and so does any variant without a passing verify report
        scope = self.scope_for(build)
        for v in names:
            self.check_owner(build, v, scope)  # and any variant already in Glance under another scope
        return PublishPlan(build, names, [self._plan_variant(build, v) for v in names])

    def _plan_variant(self, build: BuildDir, variant: str) -> VariantPlan:
        image = build.variant(variant)
        name = image_name(build, variant)
        report = self.gate(build, variant)
        scope = self.scope_for(build)
        result = VariantResult(variant=variant, name=name, action="", size=image.size,
                               verify=VerifyStatus.PASSED.value, scope=scope)
        found = self._mine(build, variant, "image")
        self.check_owner(build, variant, scope, found)     # before any write
        found, cleanup = self._in_flight(found, name)
        existing: dict[str, list[dict]] = {}
        for side in SIDES:
            existing[side.role], stale = self._in_flight(self._mine(build, variant, side.role), name)
            cleanup += stale
        result.cleaned = list(cleanup)
        has_files = imgdiff.build_files_bytes(build) is not None
        for img in found:  # active or deactivated: this build is in Glance already
            algo = img.get("os_hash_algo") or "sha512"
            expected = image.digest(algo) if algo in ("sha256", "sha512") else None
            if img.get("os_hash_value") != expected:
                raise PublishError(detail=f"{name}: image {img['id']} has build id {build.build_id} but other "
                                          f"content ({algo} {img.get('os_hash_value')}); a build id must not be "
                                          "reused. Delete that image or rebuild")
            attach = [s for s in (VERIFY_REPORT, PROVENANCE, FILES)
                      if not side_attached(img, s, existing[s.role], report if s is VERIFY_REPORT else None)
                      and (s is not FILES or has_files)]
            adopt = scope_of(img) is None
            result.action = "exists"
            result.image_id, result.hash_algo, result.hash_value = img["id"], algo, img.get("os_hash_value")
            result.manifest_image_id = img.get(MANIFEST.link)
            result.signed = "img_signature" in img
            result.verify_report_id = None if VERIFY_REPORT in attach else img.get(VERIFY_REPORT.link)
            result.provenance_image_id = None if PROVENANCE in attach else img.get(PROVENANCE.link)
            if adopt:
                # Published before scopes (legacy): this build is declared in ``scope`` now.
                result.note = f"legacy image (no {SCOPE}): taken into scope '{scope}'"
                log.info("%s: %s", img["id"], result.note)
            kind = PL.Kind.UPDATE if attach or adopt or cleanup else PL.Kind.NOOP
            return VariantPlan(variant, name, scope, kind, report, img, existing, cleanup, attach, adopt, has_files,
                               result)
        result.action = "would-upload"
        result.signed = self.sign is not None
        return VariantPlan(variant, name, scope, PL.Kind.CREATE, report, None, existing, cleanup, [], False,
                           has_files, result)

    # -- apply

    def apply(self, plan: PublishPlan) -> list[VariantResult]:
        """Carry out ``plan``: per variant, delete what interrupted uploads left, then upload the
        side images and the node image (CREATE), or attach the side images an existing node image
        lacks and mark a legacy one with the scope (UPDATE). A variant planned for upload whose
        node image has appeared in Glance since (another run published it) is planned again
        first, so a plan made earlier never uploads an image twice.

        The variants are published side by side (each variant's images are its own: nothing is
        shared between them): the two uploads of a build take the time of the larger one. Every
        variant runs to its end, then the first failure (in the plan's order) is raised; a
        variant that failed left nothing behind (its own clean-up), one that succeeded is
        found as ``exists`` by the next run. An interrupt (Ctrl-C) stops the uploads in flight at
        their next chunk (each removes its image), then goes on."""
        def one(entry: VariantPlan) -> VariantResult:
            if entry.kind is PL.Kind.CREATE and any(i["id"] not in entry.cleanup
                                                    for i in self._mine(plan.build, entry.variant, "image")):
                entry = self._plan_variant(plan.build, entry.variant)
            return self._apply_variant(plan.build, entry)

        if len(plan.entries) < 2:
            return [one(entry) for entry in plan.entries]
        with ThreadPoolExecutor(max_workers=len(plan.entries), thread_name_prefix="publish") as pool:
            futures = [pool.submit(one, entry) for entry in plan.entries]
            try:
                wait_futures(futures)
            except BaseException:   # Ctrl-C: each upload stops at its next chunk and removes its image
                self._stop.set()
                wait_futures(futures)
                raise
        for future in futures:
            if (exc := future.exception()) is not None:
                raise exc
        return [future.result() for future in futures]

    def publish(self, build: BuildDir, variants: Iterable[str] | None = None) -> list[VariantResult]:
        """Publish ``build`` (``variants``, default all): :meth:`apply` of :meth:`plan`."""
        return self.apply(self.plan(build, variants))

    def _apply_variant(self, build: BuildDir, entry: VariantPlan) -> VariantResult:
        result = dataclasses.replace(entry.result, cleaned=list(entry.cleanup))
        for image_id in entry.cleanup:
            log.info("removing image %s left by an interrupted upload", image_id)
            delete_image(self.conn, image_id)
        if entry.kind is not PL.Kind.CREATE:
            img = entry.image
            for side in entry.attach:
                props = self.side_image(build, entry.variant, side, self._side_data(build, entry, side),
                                        entry.existing[side.role], node=img)
                img = {**img, **props}
                if side is VERIFY_REPORT:
                    result.verify_report_id = props.get(side.link)
                elif side is PROVENANCE:
                    result.provenance_image_id = props.get(side.link)
            if entry.adopt:
                current = get_image(self.conn, img["id"])
                patch_image(self.conn, img["id"], set_ops(current, {SCOPE: entry.scope}),
                            f"marking {entry.name} with scope {entry.scope}")
            return result
        return self._upload_variant(build, entry, result)

    def _side_data(self, build: BuildDir, entry: VariantPlan, side: SideImage) -> bytes | None:
        """The bytes ``side`` holds for this build (None: the build has none: no per-file manifest)."""
        if side is MANIFEST:
            return build.manifest_bytes()
        if side is VERIFY_REPORT:
            return entry.report
        if side is PROVENANCE:
            data = provenance.dumps(provenance.envelope(provenance.statement(build),
                                                        self.sign.signer if self.sign is not None else None))
            log.info("%s: provenance %s", entry.name, "signed" if self.sign is not None else "unsigned")
            return data
        return imgdiff.build_files_bytes(build)

    def _upload_variant(self, build: BuildDir, entry: VariantPlan, result: VariantResult) -> VariantResult:
        variant, name = entry.variant, entry.name
        image = build.variant(variant)
        t0 = time.monotonic()
        links: dict[str, str] = {}
        for side in (MANIFEST, VERIFY_REPORT):
            links.update(self.side_image(build, variant, side, self._side_data(build, entry, side),
                                         entry.existing[side.role]))
        props = image_properties(build, image, self.policy, manifest_image_id=links[MANIFEST.link],
                                 verify_report_id=links[VERIFY_REPORT.link],
                                 verify_sha256=links[VERIFY_REPORT.digest], scope=entry.scope)
        # A digest of what is sent (sha512, or the signing hash): tells a local file that changed
        # since the build from bytes damaged on the way.
        hashers = {"sha512": hashlib.sha512()}
        if self.sign is not None:
            signature, hashers = self._signature(image, name)
            props.update(signature)
        # Signed SLSA provenance (nodeforge/publish/provenance.py) and the per-file manifest (for
        # 'image diff') beside the manifest, linked from the image.
        for side in (PROVENANCE, FILES):
            props.update(self.side_image(build, variant, side, self._side_data(build, entry, side),
                                         entry.existing[side.role]))
        props[f"{P}uploader"] = self.owner
        check_properties(name, props)
        body = {"name": name, "disk_format": image.disk_format, "container_format": "bare",
                "visibility": "private", "min_disk": max(1, math.ceil(virtual_size(image) / (1 << 30))),
                "min_ram": 2048, "tags": tags_for(build, variant), **props}
        created = create_image(self.conn, body)
        with HashingReader(image.path, hashers, self.progress, stop=self._stop) as reader:
            try:
                self._put(created["id"], reader, name)
            except SignatureRejected:
                if reader.sent == len(reader):      # every byte hashed: a file changed since the build says so
                    self._check_local(image, reader.digests(), name)
                raise
            sent = reader.digests()
        stored = get_image(self.conn, created["id"])
        algo = stored.get("os_hash_algo") or "sha512"
        try:
            self._check_local(image, sent, name)
            if stored["status"] != ACTIVE:
                raise PublishError(detail=f"{name}: image {created['id']} is '{stored['status']}' after upload")
            expected = image.digest(algo) if algo in ("sha256", "sha512") else None
            if stored.get("os_hash_value") != expected:
                raise DigestMismatch(image=name, algo=algo, glance=stored.get("os_hash_value"),
                                     source=f"SHA{algo[3:]}SUMS", expected=expected)
        except PublishError:
            self._discard(created["id"])
            raise
        # Upload finished: drop the in-flight owner marker.
        patch_image(self.conn, created["id"], [{"op": "remove", "path": f"/{P}uploader"}], f"updating {name}")
        result.action = "uploaded"
        result.image_id, result.manifest_image_id = created["id"], links[MANIFEST.link]
        result.verify_report_id, result.provenance_image_id = links[VERIFY_REPORT.link], props[PROVENANCE.link]
        result.hash_algo, result.hash_value = algo, stored.get("os_hash_value")
        result.signed = self.sign is not None
        result.seconds = round(time.monotonic() - t0, 3)
        return result

    # -- the writers

    def _put(self, image_id: str, body, name: str) -> None:
        """Upload ``body`` (bytes, or a :class:`HashingReader`) as image ``image_id``'s data, once;
        anything but success deletes the image (the next run cleans up what cannot be deleted now)."""
        try:
            put_data(self.conn, image_id, body, f"uploading {name}")
        except transport.ApiError as exc:
            self._discard(image_id)
            f = exc.failure
            if f.kind is transport.ErrorKind.NETWORK:   # connection reset, timeout: left queued/saving
                raise UploadInterrupted(image=name, sent=getattr(body, "sent", 0), detail=f.detail) from None
            if self.sign and f.kind is transport.ErrorKind.BAD_REQUEST and "ignature" in f.text:
                raise SignatureRejected(image=name, status=f.status, detail=" ".join(f.text.split())[:200],
                                        cert_id=self.sign.cert_id) from None
            raise api.error(f, f"uploading {name}") from None
        except Exception as exc:  # noqa: BLE001 - anything else mid-upload: the image is left queued/saving
            self._discard(image_id)
            raise UploadInterrupted(image=name, sent=getattr(body, "sent", 0), detail=type(exc).__name__) from None

    def _discard(self, image_id: str) -> None:
        try:
            delete_image(self.conn, image_id)
        except Exception:  # noqa: BLE001 - the next run cleans it up
            log.warning("could not delete image %s now; the next publish removes it", image_id)

    def side_image(self, build: BuildDir, variant: str, side: SideImage, data: bytes | None,
                   existing: list[dict], *, node: dict | None = None) -> dict[str, str]:
        """The one writer of side images (:data:`SIDES`: the manifest, the verify report, the
        provenance, the per-file manifest): a hidden image holding ``data`` beside the node image.
        An active image in ``existing`` holding these bytes is reused, else one is created (marked
        with this process as its uploader), uploaded once, Glance's own hash of the stored bytes
        checked and the mark dropped; a refused or interrupted upload deletes it. With ``node`` (a
        node image already in Glance) the node image is pointed at it (with ``side.marks``). Then
        the other images in ``existing`` (an interrupted run's, or the one it replaces) are
        deleted. Returns the node image's properties linking it ({} when ``data`` is None: the
        build has no such document)."""
        if data is None:
            return {}
        digest = hashlib.sha256(data).hexdigest()
        side_id = next((s["id"] for s in existing if s["status"] == ACTIVE and s.get(side.digest) == digest), None)
        if side_id is None:
            side_id = self._store(build, variant, side, data, digest)
        props = {side.link: side_id, side.digest: digest}
        if node is not None:
            patch_image(self.conn, node["id"], set_ops(node, {**props, **dict(side.marks)}),
                        f"attaching the {side.what} to {node.get('name')}")
            log.info("%s: %s %s attached (was %s)", node["id"], side.what, side_id, node.get(side.link) or "none")
        for old in existing:
            if old["id"] != side_id:
                delete_image(self.conn, old["id"])
        return props

    def _store(self, build: BuildDir, variant: str, side: SideImage, data: bytes, digest: str) -> str:
        img = create_image(self.conn, {
            "name": f"{image_name(build, variant)}.{side.suffix}"[:255], "disk_format": "raw",
            "container_format": "bare", "os_hidden": True, "tags": [side.tag],
            f"{P}role": side.role, f"{P}build_id": build.build_id, f"{P}variant": variant,
            side.digest: digest, f"{P}uploader": self.owner, SCOPE: self.scope_for(build),
        })
        self._put(img["id"], data, img["name"])
        stored = get_image(self.conn, img["id"])
        algo = stored.get("os_hash_algo") or "sha512"
        local = hashlib.new(algo, data).hexdigest() if algo in hashlib.algorithms_available else None
        if stored["status"] != ACTIVE or stored.get("os_hash_value") != local:
            self._discard(img["id"])
            raise PublishError(detail=f"{img['name']}: Glance stored the {side.what} as '{stored['status']}' "
                                      f"with {algo} {stored.get('os_hash_value')}, not the {len(data)} bytes sent")
        patch_image(self.conn, img["id"], [{"op": "remove", "path": f"/{P}uploader"}], f"updating {img['name']}")
        return img["id"]

    def _signature(self, image: VariantImage, name: str) -> tuple[dict[str, str], dict[str, object]]:
        """The ``img_signature*`` properties, and the hash objects of the upload pass. The
        signature must be on the image before its data arrives. It signs the build's own digest (SHA256SUMS or SHA512SUMS), and the upload pass
        hashes with the signing hash instead (one hash per pass: what Glance stored is checked by
        its own sha512, ``os_hash_value``), so the bytes sent are checked against the digest
        signed (Glance checks the signature against them too); a file that changed since the build
        fails that check and its image is discarded. A signing hash the build does not record (SHA-224,
        SHA-384) takes one read pass of the file first, checked against SHA*SUMS."""
        signer = self.sign.signer
        if signer.hash_name in ("sha256", "sha512"):
            digest, hashers = image.digest(signer.hash_name), {signer.hash_name: signer.hasher()}
        else:
            local = fs.digest_file(image.path, ["sha256", "sha512", signer.hash_name])   # one read pass
            self._check_local(image, local, name)
            digest, hashers = local[signer.hash_name], {"sha512": hashlib.sha512()}
        return signer.properties(signer.sign(bytes.fromhex(digest)), self.sign.cert_id), hashers

    @staticmethod
    def _check_local(image: VariantImage, digests: dict[str, str], name: str) -> None:
        for algo in ("sha256", "sha512"):
            if algo in digests and digests[algo] != image.digest(algo):
                raise PublishError(detail=f"{name}: {image.path} does not match SHA{algo[3:]}SUMS "
                                          f"({digests[algo]} != {image.digest(algo)}); the file changed or is corrupt")


# --------------------------------------------------------------------------
# The verify report's binding, from the Glance image

def verify_binding(image: dict) -> verifyreport.Binding:
    """What a node image's verify report must be bound to, from the image Glance holds: its build
    id, manifest digest and variant (properties publish set), and its bytes: ``os_hash_value``,
    which Glance computed itself on upload and never changes (sha512, or sha256 where the cloud
    hashes with sha256, then also equal to ``nodeforge_sha256``)."""
    name = image.get("name") or image["id"]
    props = {k: image.get(f"{P}{k}") for k in ("variant", "build_id", "manifest_sha256", "sha256")}
    missing = [f"{P}{k}" for k, v in props.items() if not v]
    if missing:
        raise PublishError(detail=f"{name}: no {', '.join(missing)} (not published by 'nodeforge image publish')")
    algo, value = image.get("os_hash_algo"), image.get("os_hash_value")
    if not value:
        raise PublishError(detail=f"{name}: Glance recorded no os_hash_value for the image data")
    if algo == "sha512":
        sha512 = value
    elif algo == "sha256":
        if value != props["sha256"]:
            raise PublishError(detail=f"{name}: Glance's os_hash_value (sha256 {value}) is not the image's "
                                      f"{P}sha256 {props['sha256']}")
        sha512 = None
    else:
        raise PublishError(detail=f"{name}: Glance hashes image data with {algo}; a verify report binds "
                                  "sha256 and sha512 only")
    return verifyreport.Binding(variant=props["variant"], build_id=props["build_id"],
                                manifest_sha256=props["manifest_sha256"], image_sha256=props["sha256"],
                                image_sha512=sha512, origin="the Glance image")
