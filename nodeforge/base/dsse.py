"""DSSE envelopes (Dead Simple Signing Envelope, v1): the one home of the pre-authentication
encoding, key ids, signature schemes, and reading and verifying an envelope.

Two signed documents use it: the image's SLSA provenance (``publish/provenance.py``, signed with
the publishing key) and the boot-verification attestation (``imageverify/attest.py``, signed
with the verifier's key). An envelope is ``{"payloadType", "payload": base64, "signatures":
[{"keyid", "sig": base64}]}``; each signature covers ``PAE(type, body) = "DSSEv1" SP len(type)
SP type SP len(body) SP body``, never the JSON around it.

Keys are ``cryptography`` objects: RSA (PSS, SHA-256), EC P-384/P-521 (ECDSA, SHA-384/512) and
Ed25519. The key id nodeforge writes is the sha256 of the public key's DER SubjectPublicKeyInfo.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from typing import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from nodeforge.errors import NodeforgeError

IN_TOTO = "application/vnd.in-toto+json"
# An envelope is a few KiB to a few MiB (a verify report inside); anything larger is refused unread.
MAX_BYTES = 32 << 20

_RSA_SCHEME = ("rsassa-pss-sha256", "SHA-256")
_EC_SCHEMES = {"secp384r1": ("ecdsa-sha2-nistp384", "SHA-384"), "secp521r1": ("ecdsa-sha2-nistp521", "SHA-512")}
_ED25519_SCHEME = ("ed25519", None)
_HASHES = {"SHA-256": hashes.SHA256, "SHA-384": hashes.SHA384, "SHA-512": hashes.SHA512}


class EnvelopeError(NodeforgeError):
    """An envelope that cannot be read or verified; ``check`` is ``envelope`` or ``signature``."""

    message = "{source}: {check}: {detail}"

    def __init__(self, *, source: str, check: str, detail: str, **kw):
        super().__init__(source=source, check=check, detail=detail, **kw)
        self.check, self.detail = check, detail


class SchemeError(NodeforgeError):
    message = "{detail}"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding (what the signature covers)."""
    t = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def keyid(public_key) -> str:
    """sha256 hex of the DER SubjectPublicKeyInfo (the DSSE ``keyid`` nodeforge writes)."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def scheme_for(public_key) -> tuple[str, str | None]:
    """(scheme name, hash method; None for Ed25519, which hashes itself) for this key."""
    if isinstance(public_key, rsa.RSAPublicKey):
        return _RSA_SCHEME
    if isinstance(public_key, ec.EllipticCurvePublicKey) and public_key.curve.name in _EC_SCHEMES:
        return _EC_SCHEMES[public_key.curve.name]
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return _ED25519_SCHEME
    raise SchemeError(detail=f"no DSSE scheme for a {type(public_key).__name__} key "
                             "(RSA, EC P-384 and P-521, and Ed25519 are supported)")


def payload_bytes(statement: dict) -> bytes:
    """The payload nodeforge signs: the statement as compact JSON with sorted keys."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def sign(private_key, payload: bytes, payload_type: str = IN_TOTO) -> dict:
    """One signature ``{keyid, sig}`` over ``PAE(payload_type, payload)`` with a ``cryptography``
    private key (Ed25519 or EC; RSA keys sign through ``publish.signing.Signer``)."""
    public = private_key.public_key()
    _, hash_method = scheme_for(public)
    message = pae(payload_type, payload)
    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        raw = private_key.sign(message)
    elif isinstance(private_key, ec.EllipticCurvePrivateKey):
        raw = private_key.sign(message, ec.ECDSA(_HASHES[hash_method]()))
    else:
        raise SchemeError(detail=f"sign with a {type(private_key).__name__} through publish.signing.Signer")
    return {"keyid": keyid(public), "sig": base64.b64encode(raw).decode()}


def envelope(payload: bytes, signatures: list[dict], payload_type: str = IN_TOTO) -> dict:
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(), "signatures": signatures}


def dumps(env: dict) -> bytes:
    """An envelope as the bytes nodeforge stores (indented, sorted keys, one trailing newline)."""
    return (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()


@dataclasses.dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[dict, ...]


def parse(data: bytes, source: str, payload_type: str = IN_TOTO) -> Envelope:
    """A DSSE envelope from bytes; :class:`EnvelopeError` (check ``envelope``) naming the field."""
    def bad(detail):
        return EnvelopeError(source=source, check="envelope", detail=detail)

    if len(data) > MAX_BYTES:
        raise bad(f"larger than {MAX_BYTES >> 20} MiB: not an envelope nodeforge writes")
    try:
        doc = json.loads(data, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not JSON")))
    except RecursionError:
        raise bad("nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    if doc.get("payloadType") != payload_type:
        raise bad(f"payloadType is {str(doc.get('payloadType'))[:80]!r}, expected {payload_type!r}")
    if not isinstance(doc.get("payload"), str):
        raise bad("payload: missing or not a string")
    try:
        payload = base64.b64decode(doc["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise bad("payload is not base64") from None
    sigs = doc.get("signatures")
    if not isinstance(sigs, list) or not all(isinstance(s, dict) and isinstance(s.get("sig"), str) for s in sigs):
        raise bad("signatures: expected a list of {keyid, sig}")
    return Envelope(payload_type, payload, tuple(sigs))


def _verifies(public_key, raw: bytes, message: bytes) -> bool:
    _, hash_method = scheme_for(public_key)
    try:
        if isinstance(public_key, rsa.RSAPublicKey):
            algo = _HASHES[hash_method]()
            public_key.verify(raw, message, padding.PSS(mgf=padding.MGF1(_HASHES[hash_method]()),
                                                        salt_length=padding.PSS.AUTO), algo)
        elif isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(raw, message)
        else:
            public_key.verify(raw, message, ec.ECDSA(_HASHES[hash_method]()))
    except InvalidSignature:
        return False
    return True


def verify(env: Envelope, keys: Mapping[str, object], source: str, keys_label: str) -> str:
    """The key id of a key in ``keys`` (``{keyid: public key}``) whose signature in ``env``
    verifies over the PAE; :class:`EnvelopeError` (check ``signature``) naming the key ids when
    none does. A signature's own ``keyid`` is a hint only: every trusted key is tried."""
    if not env.signatures:
        raise EnvelopeError(source=source, check="signature", detail="the envelope carries no signature")
    message = pae(env.payload_type, env.payload)
    for sig in env.signatures:
        try:
            raw = base64.b64decode(sig["sig"], validate=True)
        except (binascii.Error, ValueError):
            continue
        for kid, public_key in keys.items():
            if _verifies(public_key, raw, message):
                return kid
    ids = ", ".join(str(s.get("keyid"))[:64] for s in env.signatures)
    trusted = ", ".join(k[:16] + "..." for k in keys) or "none"
    raise EnvelopeError(source=source, check="signature",
                        detail=f"no signature verifies with {keys_label} (trusted key ids: {trusted}); "
                               f"signatures by key id {ids}")
