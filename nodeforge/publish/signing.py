"""Image signatures the way Glance and Nova verify them (OpenStack cursive).

Glance verifies ``img_signature`` over the image *data* with the certificate
``img_signature_certificate_uuid`` it fetches from Barbican, the hash
``img_signature_hash_method`` and the key type ``img_signature_key_type``:

* ``RSA-PSS``: PSS padding, MGF1 with the same hash, maximum salt length;
* ``ECC_SECP384R1`` / ``ECC_SECP521R1``: ECDSA (cursive has no P-256, and
  the binary curves are gone from ``cryptography``).

Signing never reads the image on its own: the caller feeds :meth:`Signer.hasher`
in the same read pass that checks the build's digests, and :meth:`Signer.sign`
signs the finished digest (``Prehashed``). When the signing hash is SHA-256 or
SHA-512 the pass's own hash object is reused, so signing costs no extra hashing.

Private keys are PEM or DER files. An encrypted key's passphrase comes from a
reference (``env:VAR`` or ``file:PATH``, as :mod:`nodeforge.base.secrets`
resolves it), never from the command line; neither the key nor the passphrase
appears in any message.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import logging
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

from nodeforge import transport
from nodeforge.clients import key_manager
from nodeforge.errors import NodeforgeError
from nodeforge.schema import loader

log = logging.getLogger(__name__)

HASH_METHODS = {"SHA-224": "sha224", "SHA-256": "sha256", "SHA-384": "sha384", "SHA-512": "sha512"}
_CRYPTO_HASH = {"SHA-224": hashes.SHA224, "SHA-256": hashes.SHA256, "SHA-384": hashes.SHA384,
                "SHA-512": hashes.SHA512}
# Curves cursive 0.3 (Glance, Nova) accepts, by cryptography's curve name.
ECC_KEY_TYPES = {"secp384r1": "ECC_SECP384R1", "secp521r1": "ECC_SECP521R1"}
RSA_PSS = "RSA-PSS"
MIN_RSA_BITS = 2048


# A PEM key or certificate is a few KiB: a key file is read whole only up to this.
KEY_FILE_LIMITS = loader.Limits(max_bytes=64 << 10)

class SigningError(NodeforgeError):
    message = "{detail}"


@dataclasses.dataclass
class Signer:
    """A loaded private key and the hash it signs with."""

    _key: object = dataclasses.field(repr=False)
    key_type: str
    hash_method: str = "SHA-256"

    @property
    def hash_name(self) -> str:
        """hashlib name of the signing hash."""
        return HASH_METHODS[self.hash_method]

    def hasher(self):
        return hashlib.new(self.hash_name)

    def sign(self, digest: bytes) -> str:
        """Base64 signature of a finished ``hash_method`` digest of the image data."""
        algo = utils.Prehashed(_CRYPTO_HASH[self.hash_method]())
        if isinstance(self._key, rsa.RSAPrivateKey):
            sig = self._key.sign(digest, padding.PSS(mgf=padding.MGF1(_CRYPTO_HASH[self.hash_method]()),
                                                     salt_length=padding.PSS.MAX_LENGTH), algo)
        else:
            sig = self._key.sign(digest, ec.ECDSA(algo))
        return base64.b64encode(sig).decode()

    def public_key_der(self) -> bytes:
        return self._key.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)

    def properties(self, signature: str, cert_id: str) -> dict[str, str]:
        return {"img_signature": signature, "img_signature_hash_method": self.hash_method,
                "img_signature_key_type": self.key_type, "img_signature_certificate_uuid": cert_id}


def load_signer(key_path: Path | str, passphrase_ref: str | None = None, *, hash_method: str = "SHA-256") -> Signer:
    """Load a signing key. ``passphrase_ref`` is ``env:VAR`` or ``file:PATH``."""
    from nodeforge.base.secrets import Policy, Resolver, SecretRefError

    if hash_method not in HASH_METHODS:
        raise SigningError(detail=f"hash method '{hash_method}' is not one Glance verifies "
                                  f"({', '.join(HASH_METHODS)})")
    path = Path(key_path)
    data = loader.read_bytes(path, KEY_FILE_LIMITS)      # a regular file of at most 64 KiB (a PEM key)
    password = None
    if passphrase_ref:
        try:
            # The operator's own reference (an option): any file or variable, the file bounded all the same.
            password = Resolver(Path.cwd(), policy=Policy.operator()).resolve(passphrase_ref).reveal().encode()
        except SecretRefError as exc:
            raise SigningError(detail=f"signing key passphrase: {exc}") from None
    parse = serialization.load_pem_private_key if b"-----BEGIN" in data else serialization.load_der_private_key
    try:
        key = parse(data, password=password)
    except TypeError:
        # cryptography: "Password was not given but private key is encrypted" or the reverse.
        if password is None:
            raise SigningError(detail=f"signing key {path} is encrypted: give its passphrase as a reference "
                                      "(--sign-key-passphrase env:VAR or file:PATH)") from None
        raise SigningError(detail=f"signing key {path} is not encrypted; drop the passphrase") from None
    except ValueError:
        # Wrong passphrase and unparsable keys both land here; say neither value.
        raise SigningError(detail=f"cannot load signing key {path}: not a private key, or the passphrase "
                                  "is wrong") from None
    del password
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise SigningError(detail=f"RSA signing key {path} has {key.key_size} bits; use at least {MIN_RSA_BITS}")
        return Signer(key, RSA_PSS, hash_method)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        key_type = ECC_KEY_TYPES.get(key.curve.name)
        if key_type is None:
            raise SigningError(detail=f"EC signing key {path} uses curve {key.curve.name}; Glance/Nova (cursive) "
                                      f"verify only {', '.join(sorted(ECC_KEY_TYPES))}")
        return Signer(key, key_type, hash_method)
    raise SigningError(detail=f"signing key {path} is neither RSA nor EC (Glance verifies RSA-PSS and ECC)")


# --------------------------------------------------------------------------
# Certificates in Barbican

@dataclasses.dataclass(frozen=True)
class CertInfo:
    id: str
    subject: str
    not_before: str
    not_after: str
    sha256_fingerprint: str
    name: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_certificate(pem: bytes, source: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise SigningError(detail=f"{source}: not a PEM X.509 certificate") from None


def _info(cert: x509.Certificate, cert_id: str, name: str | None = None) -> CertInfo:
    return CertInfo(id=cert_id, subject=cert.subject.rfc4514_string(),
                    not_before=cert.not_valid_before_utc.isoformat(), not_after=cert.not_valid_after_utc.isoformat(),
                    sha256_fingerprint=cert.fingerprint(hashes.SHA256()).hex(), name=name)


def check_validity(cert: x509.Certificate, source: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise SigningError(detail=f"{source}: certificate is not valid now (valid {cert.not_valid_before_utc:%Y-%m-%d}"
                                  f" to {cert.not_valid_after_utc:%Y-%m-%d}); Glance would refuse the signature")


@dataclasses.dataclass(frozen=True)
class CertUpload:
    """The plan of :func:`upload_certificate`: the checked certificate, the
    secret's name and the Barbican body (a public certificate: no secret)."""

    cert: x509.Certificate
    name: str
    body: dict

    def info(self, cert_id: str | None = None) -> CertInfo:
        return _info(self.cert, cert_id, self.name)


def plan_certificate(cert_path: Path | str, name: str | None = None) -> CertUpload:
    """Read and check a PEM certificate (readable, one certificate, valid
    now) and build the Barbican secret it becomes; writes nothing."""
    path = Path(cert_path)
    pem = loader.read_bytes(path, KEY_FILE_LIMITS)
    cert = load_certificate(pem, str(path))
    check_validity(cert, str(path))
    name = name or f"nodeforge-image-signing-{cert.fingerprint(hashes.SHA256()).hex()[:12]}"
    pem = cert.public_bytes(serialization.Encoding.PEM)  # normalised: one certificate, no extra text
    body = {"name": name, "secret_type": "certificate", "payload": base64.b64encode(pem).decode(),
            "payload_content_type": "application/octet-stream", "payload_content_encoding": "base64"}
    return CertUpload(cert, name, body)


def apply_certificate(conn, plan: CertUpload) -> CertInfo:
    """Store the planned certificate in Barbican; its info with the new ID."""
    return plan.info(key_manager.store_secret(conn, plan.body, f"storing certificate {plan.name}",
                                              error=_barbican_error))


def upload_certificate(conn, cert_path: Path | str, name: str | None = None) -> CertInfo:
    """Store a PEM certificate in Barbican as Glance/castellan need it: a
    ``certificate`` secret with a binary (base64, application/octet-stream)
    payload, so castellan hands Glance the PEM bytes
    (:func:`plan_certificate`, then :func:`apply_certificate`)."""
    return apply_certificate(conn, plan_certificate(cert_path, name))


def _barbican_error(failure: transport.Failure, what: str) -> SigningError:
    return SigningError(detail=f"Barbican refused {what} (HTTP {failure.status or 'no answer'}): "
                               f"{failure.short(300)}")


def fetch_certificate(conn, cert_id: str) -> x509.Certificate:
    """The certificate Glance will use for ``cert_id``, from Barbican."""
    def cannot_read(failure: transport.Failure, what: str) -> SigningError:
        return SigningError(detail=f"cannot read certificate {cert_id} from Barbican "
                                   f"(HTTP {failure.status or 'no answer'})")

    meta = key_manager.secret_metadata(conn, cert_id, error=cannot_read)
    if meta is None:
        raise SigningError(detail=f"no certificate {cert_id} in Barbican (upload one with "
                                  "'nodeforge image signing-cert upload CERT')")
    payload = key_manager.secret_payload(conn, cert_id, error=cannot_read)
    secret_type = meta.get("secret_type")
    if secret_type not in (None, "certificate"):
        raise SigningError(detail=f"Barbican secret {cert_id} is a {secret_type}, not a certificate")
    return load_certificate(payload, f"Barbican secret {cert_id}")


def check_key_matches(signer: Signer, cert: x509.Certificate, cert_id: str) -> None:
    """Fail before uploading anything when Glance would reject the signature."""
    check_validity(cert, f"certificate {cert_id}")
    pub = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if pub != signer.public_key_der():
        raise SigningError(detail=f"the signing key does not belong to certificate {cert_id} "
                                  f"({cert.subject.rfc4514_string()})")


def self_signed_certificate(key, common_name: str, *, days: float, hash_method: str = "SHA-256",
                            valid_before_now: datetime.timedelta = datetime.timedelta(minutes=5)) -> bytes:
    """A PEM certificate for ``key``, signed by itself, valid from ``valid_before_now`` ago until
    ``days`` days from now, with the key usage Glance's signature verification checks (digital signature). For a
    local cloud, a demo or a test: a real cloud's certificate comes from its CA."""
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - valid_before_now).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, _CRYPTO_HASH[hash_method]()))
    return cert.public_bytes(serialization.Encoding.PEM)
