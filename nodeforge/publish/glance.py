"""Publish a build's images to Glance: the verify gate, properties, streaming
upload, digest check, the manifest and the verify report beside the image,
idempotency and clean-up.

Only a variant whose ``verify.json`` passes the strict check
(:mod:`.verifyreport`, bound to this build, manifest and image bytes) is
published; anything else is refused before anything is uploaded.

One variant is published as four Glance images (see docs/publishing.md):

* the **node image**: the variant's disk, tagged ``nodeforge``, with the
  Magnum/SCS properties and nodeforge's ``nodeforge_*`` ones;
* the **manifest image**: the build's ``manifest.json`` byte for byte
  (``disk_format=raw``, ``os_hidden=true``, tag ``nodeforge-manifest``), named
  by the node image's ``nodeforge_manifest_image`` and checked against its
  ``nodeforge_manifest_sha256``. Image properties stay small (Nova copies
  each one onto every instance, truncated to 255 characters; listings return
  all of them; MySQL caps a value at 64 KiB);
* the **verify report image**: the build's ``verify.json`` byte for byte, the
  same way (tag ``nodeforge-verify-report``), named by the node image's
  ``nodeforge_verify_report`` and checked against its
  ``nodeforge_verify_sha256``. ``image promote`` downloads it and judges it
  again against the Glance image (:func:`verify_binding`), so it never trusts
  the ``nodeforge_verify`` string alone;
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

All calls are plain Glance v2 REST through the openstacksdk session (the
SDK's ``create_image`` adds its own ``owner_specified.*`` properties, reads
the file for checksums first, and its list call ignores property filters).
The upload is a ``PUT /v2/images/{id}/file`` whose body is a reader yielding
1 MiB chunks from disk while hashing them, so client memory stays flat.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Iterable

from nodeforge import plan as PL, transport
from nodeforge.base import qemuimg, runner
from nodeforge.errors import NodeforgeError, UsageError
from nodeforge.imageverify import verifyreport
from nodeforge.imageverify.builddir import BuildDir, VariantImage, VerifyStatus
from nodeforge.publish import diff as imgdiff, provenance
from nodeforge.publish.retention import RetentionPolicy
from nodeforge import scope as IC

log = logging.getLogger(__name__)

CHUNK = 1 << 20
# Glance image statuses: in flight (an upload or import that may have died),
# failed, and the resting ones.
TRANSIENT = frozenset({"queued", "saving", "importing", "uploading"})
FAILED = frozenset({"killed"})
ACTIVE = "active"
DEACTIVATED = "deactivated"

# Limits a production Glance enforces or a MySQL/MariaDB schema implies; the
# local SQLite-backed Glance enforces none of them, so nodeforge checks here.
MAX_KEY_CHARS = 255          # image_properties.name VARCHAR(255)
MAX_VALUE_BYTES = 65535      # image_properties.value TEXT
MAX_PROPERTIES = 128         # [DEFAULT] image_property_quota
NOVA_COPY_CHARS = 255        # Nova copies properties onto instances truncated to this
# Properties allowed beyond 255 characters (Nova verifies signatures from
# Glance's record, never from its truncated copy).
LONG_OK = frozenset({"img_signature"})

TAG = "nodeforge"
TAG_MANIFEST = "nodeforge-manifest"
TAG_VERIFY_REPORT = "nodeforge-verify-report"
TAG_CANDIDATE = "nodeforge-candidate"
TAG_APPROVED = "nodeforge-approved"
TAG_SUPERSEDED = "nodeforge-superseded"
TAG_IN_USE = "nodeforge-in-use"
P = "nodeforge_"  # namespace of nodeforge's own properties
# The ownership mark: the scope of the declaration (lockfile) that made the image.
SCOPE = f"{P}scope"
# The scope of a build whose manifest names none (built before scopes, or a
# synthetic build) when publish is given none either.
DEFAULT_SCOPE = "default"


def tag_k8s(minor: str) -> str:
    return f"nodeforge-k8s-{minor}"


def tag_variant(variant: str) -> str:
    return f"nodeforge-{variant}"


def scope_of(image: dict) -> str | None:
    """The scope an image in Glance is marked with (None: legacy, published before scopes)."""
    value = image.get(SCOPE)
    return str(value) if value not in (None, "") else None


def check_scope(value: str | None, what: str = "scope") -> str | None:
    """``value`` if it is a valid scope (or None); :class:`UsageError` (exit 2) otherwise."""
    if value is None:
        return None
    problem = IC.scope_problem(value)
    if problem is not None:
        raise UsageError(detail=f"{what} {problem}")
    return value


# --------------------------------------------------------------------------
# Errors

class GlanceError(NodeforgeError):
    message = "Glance {what} failed (HTTP {status}): {detail}"


class ForbiddenError(GlanceError):
    message = "Glance refused {what} (HTTP 403): {detail}"


class PublishError(NodeforgeError):
    message = "{detail}"


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
# REST helpers

def _error(failure: transport.Failure, what: str) -> GlanceError:
    cls = ForbiddenError if failure.forbidden else GlanceError
    return cls(what=what, status=failure.status or "no answer", detail=failure.short(300))


def _call(conn, method: str, url: str, what: str, **kwargs):
    """One Glance call (:func:`nodeforge.transport.request`: the API retry policy, Glance's
    message in :class:`GlanceError`); ``missing_ok=True``: a 404 is None."""
    return transport.request(conn.image, method, url, what=what, error=_error, **kwargs)


def list_images(conn, **filters) -> list[dict]:
    """Every image matching ``filters`` (Glance v2 query parameters, including
    custom properties and repeated ``tag``), hidden ones included, any visibility."""
    out, seen = [], set()
    for hidden in ("false", "true"):
        params = dict(filters, os_hidden=hidden, limit=200)
        params.setdefault("visibility", "all")
        for img in transport.paged(conn.image, "/images", "images", what="image list", params=params, error=_error):
            if img["id"] not in seen:
                seen.add(img["id"])
                out.append(img)
    return out


def get_image(conn, image_id: str) -> dict:
    resp = _call(conn, "GET", f"/images/{image_id}", f"reading image {image_id}", missing_ok=True)
    if resp is None:
        raise PublishError(detail=f"no image {image_id} (or it is not visible to this project)")
    return resp.json()


def find_image(conn, ref: str) -> dict:
    """An image by ID, or by exact name when the name is unique."""
    try:
        uuid.UUID(ref)
    except ValueError:
        matches = [i for i in list_images(conn, name=ref)]
        if len(matches) != 1:
            raise PublishError(detail=f"{len(matches)} images are named '{ref}'; give the image ID")
        return matches[0]
    return get_image(conn, ref)


def create_image(conn, body: dict) -> dict:
    return _call(conn, "POST", "/images", f"creating image {body.get('name')}", json=body).json()


def patch_image(conn, image_id: str, ops: list[dict], what: str) -> dict:
    return _call(conn, "PATCH", f"/images/{image_id}", what, json=ops,
                 headers={"Content-Type": "application/openstack-images-v2.1-json-patch"}).json()


def set_ops(image: dict, props: dict) -> list[dict]:
    """JSON-patch ops setting ``props`` on ``image`` (add or replace)."""
    return [{"op": "replace" if k in image else "add", "path": f"/{k}", "value": v} for k, v in props.items()]


def delete_image(conn, image_id: str) -> bool:
    return _call(conn, "DELETE", f"/images/{image_id}", f"deleting image {image_id}", missing_ok=True) is not None


def deactivate_image(conn, image_id: str) -> None:
    _call(conn, "POST", f"/images/{image_id}/actions/deactivate", f"deactivating image {image_id}")


def put_data(conn, image_id: str, data, what: str):
    """Upload image data, once (a streamed body cannot be sent again): a refused upload raises
    :class:`GlanceError`, no answer raises :class:`transport.ApiError` of kind NETWORK."""
    return transport.request(conn.image, "PUT", f"/images/{image_id}/file", what=what, error=transport.ApiError,
                             retry=transport.ONCE, data=data, headers={"Content-Type": "application/octet-stream"})


# --------------------------------------------------------------------------
# Streaming

class HashingReader:
    """A file-like request body: reads ``path`` in 1 MiB chunks, feeding every
    hash object in ``hashers`` as it goes. ``requests`` sends it with a
    Content-Length (``__len__``) and calls ``read`` until it returns b""."""

    def __init__(self, path: Path, hashers: dict[str, object], progress=None):
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()/__exit__
        self._size = os.fstat(self._f.fileno()).st_size
        self.hashers = hashers
        self.sent = 0
        self._progress = progress

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        # Ignore the caller's 16 KiB hint: bigger chunks mean far fewer
        # Python-level calls for multi-GiB images.
        chunk = self._f.read(CHUNK)
        if chunk:
            for h in self.hashers.values():
                h.update(chunk)
            self.sent += len(chunk)
            if self._progress:
                self._progress(len(chunk))
        return chunk

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def digests(self) -> dict[str, str]:
        return {name: h.hexdigest() for name, h in self.hashers.items()}


def read_pass(path: Path, hashers: dict[str, object]) -> dict[str, str]:
    """Hash ``path`` once with all of ``hashers`` (no upload)."""
    with HashingReader(path, hashers) as r:
        while r.read():
            pass
        return r.digests()


def virtual_size(image: VariantImage) -> int:
    """The disk size a server needs: qcow2's virtual size, a raw file's size."""
    if image.disk_format == "qcow2" and runner.which(qemuimg.TOOL):
        try:
            return qemuimg.virtual_size(image.path, "qcow2", timeout=60)
        except (NodeforgeError, ValueError, KeyError, OSError):
            log.warning("qemu-img info failed on %s; min_disk from the file size", image.path)
    return image.size


# --------------------------------------------------------------------------
# Properties

def image_name(build: BuildDir, variant: str) -> str:
    return f"nodeforge-k8s-{build.k8s_version}-{build.os_distro}-{build.os_version}-{variant}-{build.build_id}"[:255]


def manifest_scope(build: BuildDir) -> str | None:
    """The ``scope`` the build's manifest records (None: a manifest from before scopes). Read
    from the bytes :func:`builddir.load` digested; an invalid value is refused."""
    raw = build.manifest_path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != build.manifest_sha256:
        raise PublishError(detail=f"{build.manifest_path} changed since the build directory was read")
    try:
        value = json.loads(raw).get("scope")
    except (ValueError, AttributeError):
        return None
    if value is None:
        return None
    problem = IC.scope_problem(value)
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
# Uploader identity: who owns an image in flight

def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def uploader_id() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid) or 0}"


def uploader_alive(owner: str | None) -> int | None:
    """The pid of the live process on this host that owns an upload, else None."""
    if not owner:
        return None
    try:
        host, pid_s, start = owner.rsplit(":", 2)
        pid = int(pid_s)
    except ValueError:
        return None
    if host != socket.gethostname() or pid == os.getpid():
        return None
    return pid if _proc_start(pid) == start else None


# --------------------------------------------------------------------------
# Publish

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
class PublishPlan:
    """What :meth:`Publisher.publish` would do for a build: one would-upload or
    exists (dry run) result per variant, every refusal (unknown variant, no
    passing verify report, another scope's image) already raised."""

    build: BuildDir
    variants: list[str]
    results: list[VariantResult]

    def counts(self) -> dict[str, int]:
        return PL.counts((PL.Kind.CREATE, PL.Kind.NOOP), (r.kind for r in self.results))


@dataclasses.dataclass
class SignOptions:
    signer: object          # signing.Signer
    cert_id: str


class Publisher:
    """Publishes builds. ``scope``: the ownership scope every image gets (validated here,
    :class:`UsageError`); None: the build manifest's ``scope``, else :data:`DEFAULT_SCOPE`."""

    def __init__(self, conn, policy: RetentionPolicy, *, sign: SignOptions | None = None, progress=None,
                 scope: str | None = None):
        self.conn = conn
        self.policy = policy
        self.sign = sign
        self.progress = progress
        self.scope = check_scope(scope)
        self.owner = uploader_id()
        self._scopes: dict[tuple[str, str], str] = {}

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

    # -- lookup and clean-up

    def _mine(self, build: BuildDir, variant: str, role: str) -> list[dict]:
        return list_images(self.conn, **{f"{P}build_id": build.build_id, f"{P}variant": variant, f"{P}role": role})

    def _clean(self, images: Iterable[dict], name: str, dry_run: bool) -> tuple[list[dict], list[str]]:
        """Delete images stuck in flight or failed; return the rest and the deleted IDs."""
        keep, cleaned = [], []
        for img in images:
            if img["status"] not in TRANSIENT | FAILED:
                keep.append(img)
                continue
            pid = uploader_alive(img.get(f"{P}uploader"))
            if pid is not None:
                raise UploadInProgress(image=name, image_id=img["id"], pid=pid)
            log.info("removing %s image %s left by an interrupted upload", img["status"], img["id"])
            if not dry_run:
                delete_image(self.conn, img["id"])
            cleaned.append(img["id"])
        return keep, cleaned

    # -- the two uploads

    def _upload(self, image_id: str, path: Path, hashers: dict, name: str) -> dict[str, str]:
        with HashingReader(path, hashers, self.progress) as reader:
            try:
                put_data(self.conn, image_id, reader, f"uploading {name}")
            except transport.ApiError as exc:
                self._discard(image_id)
                f = exc.failure
                if f.kind is transport.ErrorKind.NETWORK:   # connection reset, timeout: left queued/saving
                    raise UploadInterrupted(image=name, sent=reader.sent, detail=f.detail) from None
                if self.sign and f.kind is transport.ErrorKind.BAD_REQUEST and "ignature" in f.text:
                    raise SignatureRejected(image=name, status=f.status, detail=" ".join(f.text.split())[:200],
                                            cert_id=self.sign.cert_id) from None
                raise _error(f, f"uploading {name}") from None
            except Exception as exc:  # noqa: BLE001 - anything else mid-upload: the image is left queued/saving
                self._discard(image_id)
                raise UploadInterrupted(image=name, sent=reader.sent, detail=type(exc).__name__) from None
            return reader.digests()

    def _discard(self, image_id: str) -> None:
        try:
            delete_image(self.conn, image_id)
        except Exception:  # noqa: BLE001 - the next run cleans it up
            log.warning("could not delete image %s now; the next publish removes it", image_id)

    def _manifest_image(self, build: BuildDir, variant: str, existing: list[dict], dry_run: bool) -> str | None:
        for img in existing:
            if img["status"] == ACTIVE and img.get(f"{P}manifest_sha256") == build.manifest_sha256:
                return img["id"]
        if dry_run:
            return None
        raw = build.manifest_path.read_bytes()
        img = create_image(self.conn, {
            "name": f"{image_name(build, variant)}.manifest.json"[:255], "disk_format": "raw",
            "container_format": "bare", "os_hidden": True, "tags": [TAG_MANIFEST],
            f"{P}role": "manifest", f"{P}build_id": build.build_id, f"{P}variant": variant,
            f"{P}manifest_sha256": build.manifest_sha256, f"{P}uploader": self.owner,
            SCOPE: self.scope_for(build),
        })
        digests = self._upload(img["id"], build.manifest_path, {"sha256": hashlib.sha256()}, img["name"])
        if digests["sha256"] != build.manifest_sha256 or hashlib.sha256(raw).hexdigest() != build.manifest_sha256:
            self._discard(img["id"])
            raise PublishError(detail=f"{build.manifest_path} changed while publishing")
        return img["id"]

    def side_image(self, build: BuildDir, variant: str, *, role: str, tag: str, suffix: str, data: bytes,
                   digest_prop: str, existing: list[dict], what: str, replace: bool = False) -> str:
        """A hidden image holding ``data`` beside the node image (``os_hidden``, ``tag``, ``role``, the
        sha256 of ``data`` in ``digest_prop``): the verify report, the provenance, the per-file
        manifest. An active image in ``existing`` with that digest is reused; Glance's own hash of
        the stored bytes is checked; with ``replace`` the other images in ``existing`` (an
        interrupted run's) are deleted once the new one is active. Nothing is left half-made: a
        refused or interrupted upload deletes the new image."""
        digest = hashlib.sha256(data).hexdigest()
        for img in existing:
            if img["status"] == ACTIVE and img.get(digest_prop) == digest:
                return img["id"]
        img = create_image(self.conn, {
            "name": f"{image_name(build, variant)}.{suffix}"[:255], "disk_format": "raw",
            "container_format": "bare", "os_hidden": True, "tags": [tag],
            f"{P}role": role, f"{P}build_id": build.build_id, f"{P}variant": variant,
            digest_prop: digest, f"{P}uploader": self.owner, SCOPE: self.scope_for(build),
        })
        try:
            put_data(self.conn, img["id"], data, f"uploading {img['name']}")
        except transport.ApiError as exc:
            self._discard(img["id"])
            if exc.failure.kind is transport.ErrorKind.NETWORK:
                raise UploadInterrupted(image=img["name"], sent=0, detail=exc.failure.detail) from None
            raise _error(exc.failure, f"uploading {img['name']}") from None
        except Exception as exc:  # noqa: BLE001 - as for the image data: the next run cleans up
            self._discard(img["id"])
            raise UploadInterrupted(image=img["name"], sent=0, detail=type(exc).__name__) from None
        stored = get_image(self.conn, img["id"])
        algo = stored.get("os_hash_algo") or "sha512"
        local = hashlib.new(algo, data).hexdigest() if algo in hashlib.algorithms_available else None
        if stored["status"] != ACTIVE or stored.get("os_hash_value") != local:
            self._discard(img["id"])
            raise PublishError(detail=f"{img['name']}: Glance stored the {what} as '{stored['status']}' "
                                      f"with {algo} {stored.get('os_hash_value')}, not the {len(data)} bytes sent")
        patch_image(self.conn, img["id"], [{"op": "remove", "path": f"/{P}uploader"}], f"updating {img['name']}")
        if replace:
            for old in existing:
                if old["id"] != img["id"]:
                    delete_image(self.conn, old["id"])
        return img["id"]

    def _report_image(self, build: BuildDir, variant: str, existing: list[dict], report: bytes) -> str:
        """The hidden image holding ``report`` (the verify.json bytes judged at load)."""
        return self.side_image(build, variant, role="verify-report", tag=TAG_VERIFY_REPORT, suffix="verify.json",
                               data=report, digest_prop=f"{P}verify_sha256", existing=existing,
                               what="verify report")

    def _ensure_report(self, image: dict, build: BuildDir, variant: str, reports: list[dict], report: bytes,
                       dry_run: bool) -> str | None:
        """An existing node image of this build carries this verify report (publishing a build
        verified again, or published before images carried one): attach it if not."""
        digest = hashlib.sha256(report).hexdigest()
        linked = image.get(f"{P}verify_report")
        if linked and image.get(f"{P}verify_sha256") == digest and \
                any(r["id"] == linked and r["status"] == ACTIVE for r in reports):
            return linked
        if dry_run:
            return None
        report_id = self._report_image(build, variant, reports, report)
        patch_image(self.conn, image["id"], set_ops(image, {
            f"{P}verify_report": report_id, f"{P}verify_sha256": digest,
            f"{P}verify": VerifyStatus.PASSED.value}), f"attaching the verify report to {image.get('name')}")
        log.info("%s: verify report %s attached (was %s)", image["id"], report_id, linked or "none")
        for old in reports:
            if old["id"] != report_id:
                delete_image(self.conn, old["id"])
        return report_id

    # -- one variant

    @staticmethod
    def gate(build: BuildDir, variant: str) -> bytes:
        """The verify.json bytes that pass for ``variant`` (judged again, strictly, from the bytes
        :func:`builddir.load` read); :class:`NotVerified` with the reason for anything else."""
        verdict = build.verify_verdict(variant)
        if not verdict.passed or build.verify_raw is None:
            raise NotVerified(image=image_name(build, variant), status=verdict.status.value, reason=verdict.reason)
        return build.verify_raw

    def publish_variant(self, build: BuildDir, variant: str, *, dry_run: bool = False) -> VariantResult:
        image = build.variant(variant)
        name = image_name(build, variant)
        report = self.gate(build, variant)
        scope = self.scope_for(build)
        result = VariantResult(variant=variant, name=name, action="", size=image.size,
                               verify=VerifyStatus.PASSED.value, scope=scope)
        found = self._mine(build, variant, "image")
        self.check_owner(build, variant, scope, found)     # before any write
        found, cleaned = self._clean(found, name, dry_run)
        manifests, cleaned_m = self._clean(self._mine(build, variant, "manifest"), name, dry_run)
        reports, cleaned_r = self._clean(self._mine(build, variant, "verify-report"), name, dry_run)
        provs, cleaned_p = self._clean(self._mine(build, variant, provenance.ROLE), name, dry_run)
        files, cleaned_f = self._clean(self._mine(build, variant, imgdiff.FILES_ROLE), name, dry_run)
        result.cleaned = cleaned + cleaned_m + cleaned_r + cleaned_p + cleaned_f
        for img in found:  # active or deactivated: this build is in Glance already
            algo = img.get("os_hash_algo") or "sha512"
            expected = image.digest(algo) if algo in ("sha256", "sha512") else None
            if img.get("os_hash_value") != expected:
                raise PublishError(detail=f"{name}: image {img['id']} has build id {build.build_id} but other "
                                          f"content ({algo} {img.get('os_hash_value')}); a build id must not be "
                                          "reused. Delete that image or rebuild")
            result.action = "exists"
            result.image_id, result.hash_algo, result.hash_value = img["id"], algo, img.get("os_hash_value")
            result.manifest_image_id = img.get(f"{P}manifest_image")
            result.signed = "img_signature" in img
            result.verify_report_id = self._ensure_report(img, build, variant, reports, report, dry_run)
            result.provenance_image_id = provenance.ensure(self, img, build, variant, provs, dry_run)
            imgdiff.ensure_files(self, img, build, variant, files, dry_run)   # the per-file manifest (image diff)
            if scope_of(img) is None:
                # Published before scopes (legacy): this build is declared in ``scope`` now.
                result.note = f"legacy image (no {SCOPE}): taken into scope '{scope}'"
                if not dry_run:
                    current = get_image(self.conn, img["id"])
                    patch_image(self.conn, img["id"], set_ops(current, {SCOPE: scope}),
                                f"marking {name} with scope {scope}")
                log.info("%s: %s", img["id"], result.note)
            return result
        if dry_run:
            result.action = "would-upload"
            result.signed = self.sign is not None
            return result

        t0 = time.monotonic()
        manifest_id = self._manifest_image(build, variant, manifests, dry_run)
        report_id = self._report_image(build, variant, reports, report)
        props = image_properties(build, image, self.policy, manifest_image_id=manifest_id,
                                 verify_report_id=report_id, verify_sha256=hashlib.sha256(report).hexdigest(),
                                 scope=scope)
        # sha512 of what is sent: tells a local file that changed since the
        # build from bytes damaged on the way.
        hashers = {"sha512": hashlib.sha512()}
        if self.sign is not None:
            # The signature must be on the image before its data arrives, so
            # sign in the pass that checks the local file against SHA*SUMS.
            signer = self.sign.signer
            pre = dict(hashers)
            if signer.hash_name not in pre:
                pre[signer.hash_name] = signer.hasher()
            local = read_pass(image.path, pre)
            self._check_local(image, local, name)
            props.update(signer.properties(signer.sign(pre[signer.hash_name].digest()), self.sign.cert_id))
            hashers = {"sha512": hashlib.sha512()}
        # Signed SLSA provenance beside the manifest (nodeforge/publish/provenance.py), linked from the image.
        prov_id, prov_sha256 = provenance.store(self, build, variant, provs)
        props.update(provenance.properties(prov_id, prov_sha256))
        props.update(imgdiff.store_files(self, build, variant, files))   # per-file manifest, for 'image diff'
        props[f"{P}uploader"] = self.owner
        check_properties(name, props)
        body = {"name": name, "disk_format": image.disk_format, "container_format": "bare",
                "visibility": "private", "min_disk": max(1, math.ceil(virtual_size(image) / (1 << 30))),
                "min_ram": 2048, "tags": tags_for(build, variant), **props}
        created = create_image(self.conn, body)
        sent = self._upload(created["id"], image.path, hashers, name)
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
        result.image_id, result.manifest_image_id, result.verify_report_id = created["id"], manifest_id, report_id
        result.provenance_image_id = prov_id
        result.hash_algo, result.hash_value = algo, stored.get("os_hash_value")
        result.signed = self.sign is not None
        result.seconds = round(time.monotonic() - t0, 3)
        return result

    @staticmethod
    def _check_local(image: VariantImage, digests: dict[str, str], name: str) -> None:
        for algo in ("sha256", "sha512"):
            if algo in digests and digests[algo] != image.digest(algo):
                raise PublishError(detail=f"{name}: {image.path} does not match SHA{algo[3:]}SUMS "
                                          f"({digests[algo]} != {image.digest(algo)}); the file changed or is corrupt")

    def publish(self, build: BuildDir, variants: Iterable[str] | None = None, *,
                dry_run: bool = False) -> list[VariantResult]:
        names = list(variants) if variants else sorted(build.variants)
        for v in names:
            build.variant(v)  # all unknown variants fail before any upload
        for v in names:
            self.gate(build, v)  # and so does any variant without a passing verify report
        scope = self.scope_for(build)
        for v in names:
            self.check_owner(build, v, scope)  # and any variant already in Glance under another scope
        return [self.publish_variant(build, v, dry_run=dry_run) for v in names]

    def plan(self, build: BuildDir, variants: Iterable[str] | None = None) -> PublishPlan:
        """The dry run as a plan (reads Glance, writes nothing)."""
        names = list(variants) if variants else sorted(build.variants)
        return PublishPlan(build, names, self.publish(build, names, dry_run=True))

    def apply(self, plan: PublishPlan) -> list[VariantResult]:
        """Publish what ``plan`` planned. Each variant is decided again against
        Glance as it is now (publishing is idempotent by build id), so a plan
        made earlier never uploads an image twice."""
        return self.publish(plan.build, plan.variants)


# --------------------------------------------------------------------------
# The manifest and the verify report, back from Glance

def _download_linked(conn, image: dict, id_prop: str, sha_prop: str, what: str) -> bytes:
    """The side image ``image[id_prop]`` points at, verified against ``image[sha_prop]``."""
    linked_id = image.get(id_prop)
    expected = image.get(sha_prop)
    if not linked_id or not expected:
        raise PublishError(detail=f"image {image['id']} carries no nodeforge {what} reference")
    resp = _call(conn, "GET", f"/images/{linked_id}/file", f"downloading {what} {linked_id}", missing_ok=True,
                 stream=True)
    if resp is None:
        raise PublishError(detail=f"{what} image {linked_id} of image {image['id']} is gone")
    data = resp.content
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise PublishError(detail=f"{what} image {linked_id}: sha256 {actual} does not match the "
                                  f"image's {sha_prop} {expected}")
    return data


def download_manifest(conn, image: dict) -> bytes:
    """The manifest of a node image, verified against its ``nodeforge_manifest_sha256``."""
    return _download_linked(conn, image, f"{P}manifest_image", f"{P}manifest_sha256", "manifest")


def download_verify_report(conn, image: dict) -> bytes:
    """The verify.json publish stored for a node image, verified against its ``nodeforge_verify_sha256``
    (whether it is a passing report for this image is :func:`verify_binding` + :func:`verifyreport.judge`)."""
    return _download_linked(conn, image, f"{P}verify_report", f"{P}verify_sha256", "verify report")


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
