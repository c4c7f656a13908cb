"""Every writing command has --dry-run that prints the plan and writes nothing
(the commands without a cloud; the cloud ones: their devcloud tests)."""

from __future__ import annotations

import json






def _self_signed(path, days: int = 30):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeforge dry-run test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days)).sign(key, hashes.SHA384()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def test_signing_cert_upload_dry_run_checks_and_prints_without_a_cloud(run, no_cloud, tmp_path):
    """--dry-run reads and checks the certificate and prints what would be
    stored; it never connects (no cloud is configured here, so a connection
    would fail with exit 2)."""
    from cryptography.hazmat.primitives import hashes

    cert = _self_signed(tmp_path / "cert.pem")
    code, out, err = run("image", "signing-cert", "upload", tmp_path / "cert.pem", "--dry-run", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["id"] is None and doc["sha256_fingerprint"] == cert.fingerprint(hashes.SHA256()).hex()
    assert doc["name"] == f"nodeforge-image-signing-{doc['sha256_fingerprint'][:12]}"
    # without --dry-run the same command needs the cloud: it got as far as connecting
    code, _, err = run("image", "signing-cert", "upload", tmp_path / "cert.pem")
    assert code == 2 and "cloud" in err.lower()


def test_signing_cert_upload_dry_run_refuses_a_bad_certificate(run, no_cloud, tmp_path):
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    code, _, err = run("image", "signing-cert", "upload", tmp_path / "junk.pem", "--dry-run")
    assert code == 1 and "not a PEM X.509 certificate" in err


def test_keygen_dry_run_writes_no_key(run, tmp_path):
    key = tmp_path / "inventory.key"
    code, out, err = run("baremetal", "keygen", key, "--dry-run", "-o", "json")
    assert code == 0 and not key.exists() and json.loads(out) == {"key_file": str(key), "mode": "0600",
                                                                   "dry_run": True}
    code, _, err = run("baremetal", "keygen", tmp_path / "missing" / "k", "--dry-run")
    assert code == 2 and "does not exist" in err
    code, _, _ = run("baremetal", "keygen", key)
    assert code == 0 and key.stat().st_mode & 0o777 == 0o600
    code, _, err = run("baremetal", "keygen", key, "--dry-run")
    assert code == 2 and "not overwriting" in err
