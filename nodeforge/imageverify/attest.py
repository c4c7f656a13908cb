"""The boot-verification attestation: ``verify.json`` signed by the verifier, so that nobody who
can merely write files can make publish, promote or the pipeline approve an image.

``image verify`` writes ``verify.json`` and, beside it, ``verify.intoto.json``: a DSSE envelope
(:mod:`nodeforge.base.dsse`) holding an in-toto Statement v1 with the test-result predicate:

* ``subject``: each verified image (file name, sha256, sha512);
* ``predicate.result`` PASSED / FAILED, ``passedTests`` / ``failedTests`` (``variant/check id``);
* ``predicate.configuration``: ``manifest.json`` by digest (annotated with the build id) and
  ``verify.json`` itself, by digest and with its bytes as ``content``.

The envelope is signed with the **verifier key**, a local Ed25519 key (``$NODEFORGE_VERIFIER_KEY``,
default ``~/.config/nodeforge/verifier.key``, made on first use, mode 0600; the public half beside
it as ``verifier.pub``), so ``image verify`` needs no cloud. Readers accept it only when a key of
the **trust set** verifies it: the public keys named in ``$NODEFORGE_TRUSTED_VERIFIERS`` (files or
directories of ``*.pub``, separated by ``:``), plus this user's own ``verifier.pub``. The statement
must be exactly the one nodeforge makes from the report it carries, so a report cannot be
swapped, edited, moved to another build or stripped of checks without breaking the signature.

:func:`open_report` is what every reader calls (``builddir.load``, promote); :func:`stale` is
publish's freshness rule (``verified_at`` neither in the future nor older than the maximum age).
docs/publishing.md, "The verify gate", has the trust model.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from nodeforge.base import dsse, fs
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imageverify import verifyreport
from nodeforge.schema import loader

ENVELOPE = "verify.intoto.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
ENV_KEY = "NODEFORGE_VERIFIER_KEY"
ENV_TRUST = "NODEFORGE_TRUSTED_VERIFIERS"
ENV_MAX_AGE = "NODEFORGE_VERIFY_MAX_AGE_DAYS"
DEFAULT_MAX_AGE_DAYS = 30
CLOCK_SKEW = datetime.timedelta(minutes=5)   # a verified_at this far ahead of the reader's clock is tolerated
MAX_KEY_BYTES = 64 << 10


class AttestationError(NodeforgeError):
    message = "{source}: {detail}"


# --------------------------------------------------------------------------
# Keys

def key_path() -> Path:
    """The verifier's private key file: ``$NODEFORGE_VERIFIER_KEY``, else the user's config dir."""
    return Path(os.environ.get(ENV_KEY) or fs.config_home() / "verifier.key")


def public_path(key: Path) -> Path:
    return key.with_name(key.stem + ".pub")


def _read_small(path: Path, what: str) -> bytes:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise AttestationError(source=path, detail=f"{what}: not a regular file")
        if st.st_size > MAX_KEY_BYTES:
            raise AttestationError(source=path, detail=f"{what}: larger than {MAX_KEY_BYTES >> 10} KiB, not a key")
        return path.read_bytes()
    except OSError as exc:
        raise AttestationError(source=path, detail=f"{what}: cannot be read ({exc.strerror})") from None


def create_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """A new Ed25519 verifier key at ``path`` (0600) and its public half beside it (0644)."""
    key = ed25519.Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fs.atomic_write(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), 0o600)
    fs.atomic_write(public_path(path), public_pem(key.public_key()), 0o644)
    return key


def public_pem(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_key(path: Path | None = None, *, create: bool = True):
    """The verifier's private key (made on first use when ``create``). A key file readable by
    group or others is refused; the key's bytes never appear in an error."""
    path = Path(path) if path is not None else key_path()
    if not path.exists() and create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with fs.locked(path.with_name(path.name + ".lock")):    # two verifies at once make one key
            if not path.exists():
                return create_key(path)
    data = _read_small(path, "verifier key")
    if path.stat().st_mode & 0o077:
        raise AttestationError(source=path, detail="verifier key is readable by group or others; chmod 600 it")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise AttestationError(source=path, detail="verifier key: not an unencrypted PEM private key") from None
    if not isinstance(key, (ed25519.Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        raise AttestationError(source=path, detail=f"verifier key: a {type(key).__name__}; use Ed25519 or EC P-384")
    if not public_path(path).exists():
        fs.atomic_write(public_path(path), public_pem(key.public_key()), 0o644)
    return key


def _public_keys(path: Path) -> list:
    files = sorted(p for p in path.glob("*.pub") if p.is_file()) if path.is_dir() else [path]
    keys = []
    for f in files:
        try:
            keys.append(serialization.load_pem_public_key(_read_small(f, "trusted verifier key")))
        except (ValueError, TypeError):
            raise AttestationError(source=f, detail="trusted verifier key: not a PEM public key") from None
    return keys


def trusted_keys(env: dict | None = None) -> dict[str, object]:
    """``{keyid: public key}``: the keys of ``$NODEFORGE_TRUSTED_VERIFIERS`` and this user's own
    verifier public key (if there is one)."""
    env = os.environ if env is None else env
    paths = [Path(p) for p in (env.get(ENV_TRUST) or "").split(os.pathsep) if p.strip()]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AttestationError(source=f"${ENV_TRUST}", detail=f"no such key file or directory: {', '.join(missing)}")
    own = public_path(Path(env.get(ENV_KEY) or fs.config_home() / "verifier.key"))
    if own.is_file():
        paths.append(own)
    return {dsse.keyid(k): k for p in paths for k in _public_keys(p)}


# --------------------------------------------------------------------------
# The statement

def statement(report: bytes, doc: dict) -> dict:
    """The in-toto statement nodeforge makes for ``report`` (``doc`` its parsed form)."""
    sections = sorted(doc["variants"].items())
    passed = [f"{v}/{c['id']}" for v, s in sections for c in s["checks"] if c["passed"]]
    failed = [f"{v}/{c['id']}" for v, s in sections for c in s["checks"] if not c["passed"]]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": s["image"], "digest": {"sha256": s["image_sha256"], "sha512": s["image_sha512"]}}
                    for _, s in sections],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": "PASSED" if all(s["passed"] for _, s in sections) else "FAILED",
            "passedTests": passed, "warnedTests": [], "failedTests": failed,
            "configuration": [
                {"name": "manifest.json", "digest": {"sha256": doc["manifest_sha256"]},
                 "annotations": {"build_id": doc["build_id"]}},
                {"name": verifyreport.SOURCE, "digest": {"sha256": hashlib.sha256(report).hexdigest()},
                 "mediaType": "application/json", "content": base64.b64encode(report).decode()},
            ],
        },
    }


def sign_report(root: Path, report: bytes, doc: dict, key=None) -> Path:
    """Write ``root/verify.intoto.json``: ``report`` attested with ``key`` (default: the verifier key)."""
    key = load_key() if key is None else key
    payload = dsse.payload_bytes(statement(report, doc))
    return fs.atomic_write(Path(root) / ENVELOPE, dsse.dumps(dsse.envelope(payload, [dsse.sign(key, payload)])))


@dataclasses.dataclass(frozen=True)
class Opened:
    report: bytes        # verify.json as signed
    keyid: str           # the trusted key that verified it


def open_report(data: bytes, source: str, keys: dict | None = None) -> Opened:
    """The verify report inside an attestation, once a trusted key verified it and its statement
    is exactly the one nodeforge makes from that report; :class:`AttestationError` otherwise."""
    keys = trusted_keys() if keys is None else keys
    try:
        env = dsse.parse(data, source)
        kid = dsse.verify(env, keys, source, "the trusted verifier keys")
    except dsse.EnvelopeError as exc:
        raise AttestationError(source=source, detail=f"{exc.check}: {exc.detail}") from None
    try:
        stmt = loader.parse_json(f"{source} (payload)", env.payload, loader.Limits(max_bytes=dsse.MAX_BYTES))
        config = {c.get("name"): c for c in stmt["predicate"]["configuration"] if isinstance(c, dict)}
        report = base64.b64decode(config[verifyreport.SOURCE]["content"], validate=True)
    except (ConfigError, ValueError, TypeError, KeyError, AttributeError):
        raise AttestationError(source=source, detail="the signed statement carries no verify report") from None
    try:
        doc = verifyreport.parse(report, f"{source} (signed report)")
    except verifyreport.VerifyReportError as exc:
        raise AttestationError(source=source, detail=str(exc)) from None
    if stmt != statement(report, doc):
        raise AttestationError(source=source, detail="the signed statement is not the one nodeforge makes from "
                                                     "the report it carries (subjects, results or digests differ)")
    return Opened(report, kid)


# --------------------------------------------------------------------------
# Freshness (publish)

def max_age(env: dict | None = None) -> datetime.timedelta:
    env = os.environ if env is None else env
    raw = env.get(ENV_MAX_AGE) or str(DEFAULT_MAX_AGE_DAYS)
    try:
        days = float(raw)
        if not 0 < days <= 3650:
            raise ValueError
    except ValueError:
        raise AttestationError(source=f"${ENV_MAX_AGE}", detail=f"{raw[:40]!r}: days, more than 0 and at most "
                                                                 "3650") from None
    return datetime.timedelta(days=days)


def stale(verified_at: str, now: datetime.datetime | None = None, limit: datetime.timedelta | None = None) -> str | None:
    """Why a report verified at ``verified_at`` may not be published now (None: it may)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    limit = max_age() if limit is None else limit
    at = datetime.datetime.fromisoformat(verified_at.replace("Z", "+00:00"))
    if at > now + CLOCK_SKEW:
        return f"verified_at {verified_at} lies in the future"
    if now - at > limit:
        return (f"verified_at {verified_at} is older than {limit.days} days (${ENV_MAX_AGE}); "
                "verify the build again")
    return None
