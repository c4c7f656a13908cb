"""The local cloud's image-publishing key: an EC P-384 key and a self-signed certificate made on
first use, the certificate stored in the cloud's Barbican, so the demo's images carry Glance image
signatures and signed provenance that ``nodeforge image provenance`` verifies.

Kept in the local cloud's state directory (``data/signing/``, 0700; the key 0600), beside the
Barbican ID of its certificate. A certificate close to its end (30 days) is made again with the
same key, and stored again; so is one whose Barbican secret has gone (a new local cloud). A real
cloud brings its own key and certificate (``image signing-cert upload``, ``--sign-key``).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from nodeforge.base import fs
from nodeforge.devcloud.paths import Paths
from nodeforge.publish import signing

log = logging.getLogger(__name__)

COMMON_NAME = "nodeforge local cloud image signing"
VALID_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclasses.dataclass(frozen=True)
class PublishingKey:
    key: Path          # PEM, unencrypted, 0600
    cert: Path         # PEM
    cert_id: str       # the certificate's Barbican secret ID (--sign-cert-id)


def directory(paths: Paths) -> Path:
    return paths.data / "signing"


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    if path.is_file():
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP384R1())
    fs.atomic_write(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), 0o600)
    return key


def _cert(key, path: Path) -> bool:
    """Make the certificate when missing or near its end; True when it is new."""
    now = datetime.datetime.now(datetime.timezone.utc)
    if path.is_file():
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        if cert.not_valid_after_utc - now > RENEW_BEFORE and cert.public_key() == key.public_key():
            return False
    fs.atomic_write(path, signing.self_signed_certificate(key, COMMON_NAME, days=VALID_DAYS, hash_method="SHA-384"),
                    0o644)
    return True


def ensure(paths: Paths, conn) -> PublishingKey:
    """The local cloud's publishing key and the Barbican ID of its certificate, made and stored on
    first use (``conn``: a project-scoped connection to this local cloud, as Glance uses)."""
    d = directory(paths)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path, cert_path, id_path = d / "publisher.key", d / "publisher.crt", d / "publisher.cert-id"
    with fs.locked(d / ".lock"):
        key = _key(key_path)
        renewed = _cert(key, cert_path)
        cert_id = id_path.read_text().strip() if id_path.is_file() and not renewed else ""
        if cert_id:
            try:
                signing.check_key_matches(signing.load_signer(key_path), signing.fetch_certificate(conn, cert_id),
                                          cert_id)
            except signing.SigningError as exc:
                log.info("storing the publishing certificate again: %s", exc)
                cert_id = ""
        if not cert_id:
            cert_id = signing.upload_certificate(conn, cert_path, name="nodeforge-local-cloud-image-signing").id
            fs.atomic_write(id_path, cert_id + "\n", 0o600)
    return PublishingKey(key_path, cert_path, cert_id)
