"""Signed SLSA v1 provenance for every published image.

What it is:

* an **in-toto Statement v1** (``_type`` ``https://in-toto.io/Statement/v1``)
  whose ``subject`` lists every disk image of the build directory by file name
  with its ``sha256`` and ``sha512`` (the ``SHA256SUMS``/``SHA512SUMS``
  entries publish checks the file and Glance's ``os_hash_value`` against);
* predicate ``https://slsa.dev/provenance/v1``: ``buildDefinition`` with the
  build's external parameters (Kubernetes version, variants, architecture,
  base OS) and ``resolvedDependencies``: every input with its digest: the
  version lockfile, the OS package lock (file sha256, canonical digest in an
  annotation), the rendered element tree (``element_tree.sha256``, the digest
  :func:`nodeforge.imagebuild.render.tree_digest` takes over the rendered
  tree), the cached package base tarball, every Kubernetes artifact
  (lockfile pins), every ``.deb`` of the package lock (name, version, arch,
  suite, the sha256 the signed ``Packages`` index publishes), the
  diskimage-builder version, the nodeforge source commit; ``runDetails``
  names the builder, the build id and time and the manifest/SBOM as
  byproducts;
* wrapped in a **DSSE envelope** (``payloadType``
  ``application/vnd.in-toto+json``) signed over the DSSE pre-authentication
  encoding ``PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP
  body``.

Which key: the **publishing key**, the one Glance image signatures use
(``image publish --sign-key ... --sign-cert-id ...``), because its
certificate is already in Barbican where Glance and Nova trust it, the image
names it (``img_signature_certificate_uuid``) so a verifier finds it from the
image alone, and there is one key to protect and rotate. The DSSE signature
scheme follows the key type so a verifier needs nothing but the certificate:
RSA keys sign ``rsassa-pss-sha256`` (PSS, MGF1-SHA256, maximum salt), P-384
``ecdsa-sha2-nistp384`` (SHA-384), P-521 ``ecdsa-sha2-nistp521`` (SHA-512),
the names securesystemslib uses. The signature's ``keyid`` is the sha256 of
the public key (DER SubjectPublicKeyInfo), computable from the certificate.
A publish without a signing key stores the envelope with no signature (SLSA
build level 1: provenance exists); ``image provenance`` reports it invalid.

Where: a hidden Glance image beside the manifest (``disk_format=raw``,
``os_hidden``, tag ``nodeforge-provenance``, ``nodeforge_role=provenance``),
one per variant, named by the node image's ``nodeforge_provenance`` and
checked against its ``nodeforge_provenance_sha256``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import time
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization

import nodeforge
from nodeforge.base import dsse, fs
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imageverify.builddir import BuildDir
from nodeforge.publish import glance_api as g, signing
from nodeforge.schema import loader

log = logging.getLogger(__name__)

PAYLOAD_TYPE = dsse.IN_TOTO
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:nodeforge:image-build:v1"
BUILDER_ID = "urn:nodeforge:image-build"
PACKAGE_LOCK_FILE = "os-packages.lock.yaml"
REPO = Path(nodeforge.__file__).resolve().parents[1]

TAG = "nodeforge-provenance"
ROLE = "provenance"
P = "nodeforge_"
PROP_IMAGE = f"{P}provenance"               # the node image's link to its provenance image
PROP_SHA256 = f"{P}provenance_sha256"       # sha256 of the envelope bytes stored there

class ProvenanceError(NodeforgeError):
    """Provenance cannot be made (publish stops before the node image is created)."""

    message = "{detail}"


class ProvenanceInvalid(NodeforgeError):
    """Provenance is missing or does not hold; ``check`` names what failed:
    ``missing provenance``, ``provenance digest``, ``envelope``, ``signature``, ``statement``,
    ``subject digest`` or ``build id``."""

    message = "{image}: provenance invalid: {check}: {detail}"

    def __init__(self, *, image: str, check: str, detail: str, **kw):
        super().__init__(image=image, check=check, detail=detail, **kw)
        self.check = check
        self.details = {"valid": False, "check": check}


# --------------------------------------------------------------------------
# DSSE

pae, keyid, scheme_for = dsse.pae, dsse.keyid, dsse.scheme_for   # the one DSSE home (nodeforge/base/dsse.py)


def envelope(statement: dict, signer=None) -> dict:
    """The DSSE envelope of ``statement`` (JSON, sorted keys, compact), signed with ``signer``
    (a :class:`nodeforge.publish.signing.Signer`) or unsigned (``signatures: []``)."""
    payload = dsse.payload_bytes(statement)
    signatures = []
    if signer is not None:
        public = serialization.load_der_public_key(signer.public_key_der())
        try:
            _, hash_method = scheme_for(public)
        except dsse.SchemeError as exc:
            raise ProvenanceError(detail=str(exc)) from None
        dsse_signer = dataclasses.replace(signer, hash_method=hash_method)
        digest = dsse_signer.hasher()
        digest.update(pae(PAYLOAD_TYPE, payload))
        signatures.append({"keyid": keyid(public), "sig": dsse_signer.sign(digest.digest())})
    return dsse.envelope(payload, signatures, PAYLOAD_TYPE)


dumps = dsse.dumps     # the bytes stored in Glance (their sha256 is ``nodeforge_provenance_sha256``)
Envelope = dsse.Envelope


def parse_envelope(data: bytes, image: str) -> Envelope:
    """A DSSE envelope from bytes; :class:`ProvenanceInvalid` (check ``envelope``) naming the field."""
    try:
        return dsse.parse(data, image, PAYLOAD_TYPE)
    except dsse.EnvelopeError as exc:
        raise ProvenanceInvalid(image=image, check="envelope", detail=exc.detail) from None


def verify_signature(env: Envelope, public_key, image: str, cert_label: str) -> str:
    """The keyid of the signature in ``env`` that ``public_key`` verifies over the PAE;
    :class:`ProvenanceInvalid` (check ``signature``) if none does."""
    if not env.signatures:
        raise ProvenanceInvalid(image=image, check="signature",
                                detail="the envelope carries no signature (published without --sign-key)")
    try:
        dsse.verify(env, {keyid(public_key): public_key}, image, cert_label)
    except dsse.EnvelopeError as exc:
        raise ProvenanceInvalid(image=image, check="signature", detail=exc.detail) from None
    except dsse.SchemeError as exc:
        raise ProvenanceInvalid(image=image, check="signature", detail=str(exc)) from None
    return keyid(public_key)


# --------------------------------------------------------------------------
# The statement

def _manifest(build: BuildDir) -> dict:
    return build.manifest_data()


def find_package_lock(build: BuildDir, manifest: dict, path: Path | None = None):
    """The OS package lock the build used: ``path``, else ``<build>/os-packages.lock.yaml``
    (``image build`` copies it there), else the checkout's ``manifests/os-packages.lock.yaml``;
    accepted only when its canonical digest is the manifest's ``os_package_lock.digest``.
    None when the build recorded no package lock."""
    from nodeforge.oslock import lock as oslock

    recorded = manifest.get("os_package_lock")
    if not isinstance(recorded, dict) or not recorded.get("digest"):
        return None
    candidates = [Path(path)] if path else [build.path / PACKAGE_LOCK_FILE, REPO / oslock.DEFAULT_PATH]
    tried = []
    for cand in candidates:
        if not cand.is_file():
            tried.append(f"{cand} (absent)")
            continue
        lock = oslock.load(cand)
        if lock.digest() == recorded["digest"]:
            return lock
        tried.append(f"{cand} (digest {lock.digest()[:16]}...)")
    raise ProvenanceError(
        detail=f"{build.manifest_path}: the build used OS package lock {recorded['digest'][:16]}... and no lock "
               f"with that digest was found: {'; '.join(tried)}",
        hint="publish from the build directory image build wrote (it holds a copy of the lock), or check out "
             "the commit whose manifests/os-packages.lock.yaml the build used")


def _purl_deb(distro: str, name: str, version: str, arch: str) -> str:
    from packageurl import PackageURL

    return PackageURL(type="deb", namespace=distro, name=name, version=version, qualifiers={"arch": arch}).to_string()


def _purl_generic(name: str, version: str, arch: str | None) -> str:
    from packageurl import PackageURL

    return PackageURL(type="generic", name=name, version=version,
                      qualifiers={"arch": arch} if arch else None).to_string()


def statement(build: BuildDir, *, package_lock: Path | None = None) -> dict:
    """The in-toto Statement (SLSA provenance v1) of ``build``: subjects are every image file
    with its SUMS digests, resolved dependencies every input with its digest."""
    m = _manifest(build)
    distro = str((m.get("base_os") or {}).get("distro") or build.os_distro)
    subjects = [{"name": v.path.name, "digest": {"sha256": v.sha256, "sha512": v.sha512}}
                for _, v in sorted(build.variants.items())]
    lock = find_package_lock(build, m, package_lock)
    deps = _input_dependencies(m, lock) + _artifact_dependencies(m) + _package_dependencies(m, lock, distro)
    lockfile = m.get("lockfile") or {}
    dib = m.get("diskimage_builder") or {}
    k8s = m.get("kubernetes") or {}
    byproducts = [{"name": "manifest.json", "digest": {"sha256": build.manifest_sha256}}]
    sbom = build.path / "sbom.cdx.json"
    if sbom.is_file():
        byproducts.append({"name": sbom.name, "digest": {"sha256": fs.sha256_file(sbom)}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "kubernetes_version": k8s.get("version") or build.k8s_version,
                    "kubernetes_minor": k8s.get("minor") or build.k8s_minor,
                    "variants": sorted(build.variants), "arch": m.get("arch"),
                    "base_os": m.get("base_os"), "lockfile": lockfile.get("path"),
                    "scope": m.get("scope"),
                },
                "internalParameters": {"diskimage_builder_args": dib.get("args"),
                                       "hardening": m.get("hardening"),
                                       "os_package_lock": (m.get("os_package_lock") or None)},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"nodeforge": nodeforge.__version__,
                                                          "diskimage-builder": dib.get("version")}},
                "metadata": {"invocationId": build.build_id,
                             "startedOn": build.build_time.astimezone(datetime.timezone.utc)
                             .strftime("%Y-%m-%dT%H:%M:%SZ")},
                "byproducts": byproducts,
            },
        },
    }


def _input_dependencies(m: dict, lock) -> list[dict]:
    """The build's inputs with their digests: the lockfile, the OS package lock, the element tree,
    the package base, diskimage-builder and nodeforge's own source."""
    deps: list[dict] = []
    lockfile = m.get("lockfile") or {}
    if lockfile.get("sha256"):
        deps.append({"name": str(lockfile.get("path") or "versions.yaml"), "digest": {"sha256": lockfile["sha256"]},
                     "annotations": {"kind": "lockfile"}})
    if lock is not None:
        file_sha = fs.sha256_file(lock.path)
        deps.append({"name": PACKAGE_LOCK_FILE, "digest": {"sha256": file_sha},
                     "annotations": {"kind": "os-package-lock", "canonical_sha256": lock.digest(),
                                     "packages": len(lock.packages)}})
    tree = (m.get("element_tree") or {}).get("sha256")
    if tree:
        deps.append({"name": "element-tree", "digest": {"sha256": tree}, "annotations": {"kind": "element-tree"}})
    base = m.get("package_base") or {}
    if base.get("sha256"):
        deps.append({"name": "package-base.tar", "digest": {"sha256": base["sha256"]},
                     "annotations": {"kind": "package-base", "key": base.get("key"), "recipe": base.get("recipe")}})
    dib = m.get("diskimage_builder") or {}
    if dib.get("version"):
        deps.append({"name": "diskimage-builder", "uri": f"pkg:pypi/diskimage-builder@{dib['version']}",
                     "annotations": {"kind": "diskimage-builder", "version": dib["version"]}})
    source = m.get("source") or {}
    if source.get("commit"):
        deps.append({"name": "nodeforge", "digest": {"gitCommit": source["commit"]},
                     "annotations": {"kind": "source", "dirty": source.get("dirty")}})
    return deps


def _artifact_dependencies(m: dict) -> list[dict]:
    """The Kubernetes artifacts (binaries, images) the build fetched, each with its digest."""
    return [{"name": art["component"], "uri": _purl_generic(art["component"], art["version"], art.get("arch")),
             "digest": {"sha256": art["sha256"]},
             "annotations": {"kind": "kubernetes-artifact", "version": art["version"]}}
            for art in sorted(m.get("artifacts") or [], key=lambda a: (a.get("component", ""), a.get("arch") or ""))]


def _package_dependencies(m: dict, lock, distro: str) -> list[dict]:
    """The OS packages: from the lock with their .deb digests, or (built without a lock) the
    installed ones, their digests unknown."""
    if lock is not None:
        return [{"name": p.deb_name, "uri": _purl_deb(distro, p.name, p.version, p.arch),
                 "digest": {"sha256": p.sha256},
                 "annotations": {"kind": "deb", "suite": p.suite, "filename": p.filename}}
                for p in sorted(lock.packages, key=lambda p: p.key)]
    return [{"name": p["name"], "uri": _purl_deb(distro, p["name"], p["version"], p["arch"]),
             "annotations": {"kind": "deb", "digest": "unknown (built without an OS package lock)"}}
            for p in m.get("packages") or []]


def parse_statement(payload: bytes, image: str) -> dict:
    def bad(detail):
        return ProvenanceInvalid(image=image, check="statement", detail=detail)

    try:
        doc = loader.parse_json(f"{image}'s provenance statement", payload, loader.Limits(max_bytes=dsse.MAX_BYTES))
    except ConfigError as exc:
        raise bad(f"payload is not JSON nodeforge reads ({exc})") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise bad(f"_type is not {STATEMENT_TYPE}")
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise bad(f"predicateType is {doc.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects or not all(
            isinstance(s, dict) and isinstance(s.get("digest"), dict) for s in subjects):
        raise bad("subject: expected a non-empty list of {name, digest}")
    if not isinstance(doc.get("predicate"), dict):
        raise bad("predicate: missing")
    return doc


def match_subject(doc: dict, algo: str, value: str) -> dict | None:
    for s in doc["subject"]:
        if value and s["digest"].get(algo) == value:
            return s
    return None


def summary(doc: dict) -> dict:
    """A short view of a statement: builder, build, subjects and dependencies by kind."""
    pred = doc.get("predicate") or {}
    bd, rd = pred.get("buildDefinition") or {}, pred.get("runDetails") or {}
    kinds: dict[str, int] = {}
    for dep in bd.get("resolvedDependencies") or []:
        kind = (dep.get("annotations") or {}).get("kind", "other")
        kinds[kind] = kinds.get(kind, 0) + 1
    by_kind = {d.get("annotations", {}).get("kind"): d for d in bd.get("resolvedDependencies") or []}

    def dig(kind):
        d = by_kind.get(kind) or {}
        return (d.get("digest") or {}).get("sha256")

    return {
        "build_type": bd.get("buildType"),
        "builder": (rd.get("builder") or {}).get("id"),
        "build_id": (rd.get("metadata") or {}).get("invocationId"),
        "started_on": (rd.get("metadata") or {}).get("startedOn"),
        "kubernetes_version": (bd.get("externalParameters") or {}).get("kubernetes_version"),
        "subjects": [{"name": s.get("name"), "sha256": s["digest"].get("sha256")} for s in doc.get("subject", [])],
        "dependencies": dict(sorted(kinds.items())),
        "lockfile_sha256": dig("lockfile"),
        "os_package_lock_sha256": dig("os-package-lock"),
        "element_tree_sha256": dig("element-tree"),
        "diskimage_builder": (by_kind.get("diskimage-builder") or {}).get("annotations", {}).get("version"),
    }


# --------------------------------------------------------------------------
# Glance: stored at publish time, beside the manifest, by the one side-image writer
# (nodeforge.publish.glance.Publisher.side_image, side PROVENANCE): these bytes, signed with the
# publisher's key when it has one.

def properties(prov_id: str, digest: str) -> dict[str, str]:
    return {PROP_IMAGE: prov_id, PROP_SHA256: digest}


# --------------------------------------------------------------------------
# Verification: nodeforge image provenance IMAGE

def _hash_image_data(conn, image_id: str, algos: tuple[str, ...]) -> tuple[dict[str, str], int, float]:
    """Stream the image data Glance serves and hash it; (digests, bytes, seconds)."""
    hashers = {a: hashlib.new(a) for a in algos}
    t0, size = time.monotonic(), 0
    for chunk in g.stream_data(conn, image_id):
        size += len(chunk)
        for h in hashers.values():
            h.update(chunk)
    return {a: h.hexdigest() for a, h in hashers.items()}, size, round(time.monotonic() - t0, 3)


def _certificate(conn, image: dict, cert_path: Path | None, cert_id: str | None, label: str):
    if cert_path is not None:
        pem = loader.read_bytes(cert_path, signing.KEY_FILE_LIMITS)    # a PEM certificate: a small regular file
        return signing.load_certificate(pem, str(cert_path)), f"certificate {cert_path}", None
    ref = cert_id or image.get("img_signature_certificate_uuid")
    if not ref:
        raise ProvenanceInvalid(image=label, check="signature",
                                detail="no certificate to check the signature against: the image carries no "
                                       "img_signature_certificate_uuid; give --cert FILE or --cert-id ID")
    return signing.fetch_certificate(conn, ref), f"certificate {ref}", ref


def _check_validity(cert, label: str, cert_label: str) -> None:
    """The publishing certificate must be valid now, as Glance and Nova require for the image
    signature made with the same key (an expired or not-yet-valid one proves nothing today)."""
    try:
        signing.check_validity(cert, cert_label)
    except signing.SigningError as exc:
        raise ProvenanceInvalid(image=label, check="certificate", detail=exc.kwargs.get("detail", str(exc))) from None


def verify(conn, ref: str, *, cert_path: Path | None = None, cert_id: str | None = None,
           download: bool = False) -> dict:
    """Check the provenance of Glance image ``ref``: its envelope's digest, its signature against
    the publishing certificate (``cert_path``, ``cert_id``, else the image's
    ``img_signature_certificate_uuid`` from Barbican), the statement's shape, a subject whose
    digest is the image data Glance serves (``os_hash_value``, computed by Glance on upload; or the
    data downloaded and hashed with ``download`` or an algorithm the statement does not carry) and
    the build id. Returns the report; :class:`ProvenanceInvalid` naming the failed check."""
    image = g.find_image(conn, ref)
    label = image.get("name") or image["id"]
    prov_id, data, actual = _provenance_data(conn, image, label)
    env = parse_envelope(data, label)
    cert, cert_label, used_id = _certificate(conn, image, cert_path, cert_id, label)
    signed_by = verify_signature(env, cert.public_key(), label, cert_label)
    _check_validity(cert, label, cert_label)
    doc = parse_statement(env.payload, label)
    algo, value, how, fetched = _served_digest(conn, image, label, download)
    subject = match_subject(doc, algo, value)
    if subject is None:
        names = ", ".join(f"{s.get('name')} {algo} {str(s['digest'].get(algo))[:16]}..." for s in doc["subject"])
        raise ProvenanceInvalid(image=label, check="subject digest",
                                detail=f"no subject has the digest of the image data Glance serves ({algo} "
                                       f"{value}); subjects: {names}")
    info = summary(doc)
    build_id = image.get(f"{P}build_id")
    if build_id and info["build_id"] != build_id:
        raise ProvenanceInvalid(image=label, check="build id",
                                detail=f"the statement is for build {info['build_id']}, the image is build {build_id}")
    return {
        "valid": True, "image_id": image["id"], "image": label, "provenance_image": prov_id,
        "envelope_sha256": actual, "signed_by": signed_by, "certificate": used_id or cert_label,
        "certificate_subject": cert.subject.rfc4514_string(),
        "certificate_sha256": cert.fingerprint(hashes.SHA256()).hex(),
        "subject": subject.get("name"), "subject_sha256": subject["digest"].get("sha256"),
        "subject_checked_by": how, "download": fetched, **info,
    }


def _provenance_data(conn, image: dict, label: str) -> tuple[str, bytes, str]:
    """The image's provenance image: its id, its data and that data's sha256, which must be
    the one the image's :data:`PROP_SHA256` gives."""
    prov_id, want = image.get(PROP_IMAGE), image.get(PROP_SHA256)
    if not prov_id or not want:
        raise ProvenanceInvalid(image=label, check="missing provenance",
                                detail=f"image {image['id']} carries no {PROP_IMAGE}/{PROP_SHA256} "
                                       "(published before provenance, or not by nodeforge)")
    data = g.download(conn, prov_id, f"provenance {prov_id}")
    if data is None:
        raise ProvenanceInvalid(image=label, check="missing provenance",
                                detail=f"provenance image {prov_id} is gone or holds no data")
    actual = hashlib.sha256(data).hexdigest()
    if actual != want:
        raise ProvenanceInvalid(image=label, check="provenance digest",
                                detail=f"provenance image {prov_id} has sha256 {actual}, the image's "
                                       f"{PROP_SHA256} says {want}")
    return prov_id, data, actual


def _served_digest(conn, image: dict, label: str, download: bool) -> tuple[str, str, str, dict | None]:
    """The digest of the image data Glance serves (algorithm, value), how it was found, and the
    download's size and time (None: Glance's os_hash_value taken as it is)."""
    algo, value = image.get("os_hash_algo"), image.get("os_hash_value")
    how, fetched = f"Glance os_hash_value ({algo})", None
    if download or algo not in ("sha256", "sha512"):
        # Hash what Glance serves: sha256 (always in the subjects), and Glance's own algorithm
        # when hashlib has it, which must then equal the os_hash_value Glance computed on upload.
        extra = (algo,) if value and algo and algo != "sha256" and algo in hashlib.algorithms_available else ()
        digests, size, seconds = _hash_image_data(conn, image["id"], ("sha256", *extra))
        fetched = {"bytes": size, "seconds": seconds}
        if extra and digests[algo] != value:
            raise ProvenanceInvalid(image=label, check="subject digest",
                                    detail=f"the {size} bytes Glance serves have {algo} {digests[algo]}, not "
                                           f"its os_hash_value {value}")
        algo, value = "sha256", digests["sha256"]
        how = f"sha256 of the {size} bytes Glance serves (downloaded in {seconds} s)"
    return algo, value, how, fetched
