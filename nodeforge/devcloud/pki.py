"""The local cloud's own certificate authority.

One CA is created per state directory (``<state>/etc/pki``) the first time it
is needed; server certificates for loopback (``127.0.0.1``, ``::1``,
``localhost``) are issued by it. Everything that talks TLS to a local-cloud
service (tests, sushy, Ironic, openstacksdk) trusts :func:`ca_bundle`.

Private keys are written 0600, atomically, under a file lock, so the lead
process and a test run creating them at the same time end up with one CA.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Iterable, Iterator

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeforge.base import fs
from nodeforge.devcloud.paths import Paths

CA_NAME = "nodeforge devcloud CA"
CA_DAYS = 3650
SERVER_DAYS = 825
# Re-issue a server certificate that expires within this many days.
RENEW_BEFORE = datetime.timedelta(days=30)
DEFAULT_HOSTS = ("127.0.0.1", "::1", "localhost")


@dataclasses.dataclass(frozen=True)
class ServerCert:
    cert: Path      # PEM, the leaf certificate
    key: Path       # PEM, unencrypted private key (0600)
    ca: Path        # PEM, the CA that signed it (the bundle clients trust)


def pki_dir(paths: Paths) -> Path:
    return paths.etc / "pki"


def ca_bundle(paths: Paths) -> Path:
    """Path of the CA certificate clients must trust (created if missing)."""
    ensure_ca(paths)
    return pki_dir(paths) / "ca.pem"


def ensure_ca(paths: Paths) -> tuple[Path, Path]:
    """Create the CA once; return (ca.pem, ca-key.pem)."""
    d = pki_dir(paths)
    cert_path, key_path = d / "ca.pem", d / "ca-key.pem"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    with _locked(d):
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nodeforge"),
            x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME),
        ])
        now = _now()
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False),
                critical=True)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                           critical=False)
            .sign(key, hashes.SHA256())
        )
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path


def server_cert(paths: Paths, name: str = "server",
                hosts: Iterable[str] = DEFAULT_HOSTS) -> ServerCert:
    """Return a server certificate ``<name>.pem`` / ``<name>-key.pem`` for
    ``hosts`` (IP addresses or DNS names), issuing or re-issuing it when it is
    missing, about to expire, for other hosts, or not signed by the CA."""
    hosts = tuple(hosts)
    ca_cert_path, ca_key_path = ensure_ca(paths)
    d = pki_dir(paths)
    cert_path, key_path = d / f"{name}.pem", d / f"{name}-key.pem"
    result = ServerCert(cert=cert_path, key=key_path, ca=ca_cert_path)
    if _server_cert_ok(cert_path, key_path, ca_cert_path, hosts):
        return result
    with _locked(d):
        if _server_cert_ok(cert_path, key_path, ca_cert_path, hosts):
            return result
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nodeforge"),
                x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else name),
            ]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_encipherment=False, key_agreement=True,
                              key_cert_sign=False, crl_sign=False, content_commitment=False,
                              data_encipherment=False, encipher_only=False, decipher_only=False),
                critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return result


# -- helpers -----------------------------------------------------------------

def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _san(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _server_cert_ok(cert_path: Path, key_path: Path, ca_path: Path, hosts: tuple[str, ...]) -> bool:
    if not (cert_path.exists() and key_path.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo) != \
                cert.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo):
            return False
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if set(san) != set(_san(hosts)):
            return False
        return cert.not_valid_after_utc - RENEW_BEFORE > _now()
    except Exception:  # noqa: BLE001 - anything odd means "issue a new one"
        return False


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    fs.atomic_write(path, data, mode)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    with fs.locked(directory / ".lock"):
        yield
