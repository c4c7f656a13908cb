"""Glance verifies image signatures with certificates held in Barbican."""

from __future__ import annotations

import base64
import datetime
import os
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID


def _signing_cert():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeforge test image signing")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.devcloud
def test_glance_accepts_signed_image_and_rejects_tampered(devcloud):
    conn = devcloud.admin()
    key, pem = _signing_cert()
    # Castellan hands Glance the payload as bytes only for binary secrets.
    secret = conn.key_manager.create_secret(
        name=f"nf-test-cert-{uuid.uuid4().hex[:8]}", secret_type="certificate",
        payload=base64.b64encode(pem).decode(), payload_content_type="application/octet-stream",
        payload_content_encoding="base64")
    cert_id = secret.secret_ref.rsplit("/", 1)[1]
    data = os.urandom(256 * 1024)
    signature = key.sign(data, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH),
                         hashes.SHA256())
    props = {"img_signature": base64.b64encode(signature).decode(), "img_signature_hash_method": "SHA-256",
             "img_signature_key_type": "RSA-PSS", "img_signature_certificate_uuid": cert_id}
    created = []
    try:
        statuses = {}
        for label, payload in (("good", data), ("tampered", data[:-1] + bytes([data[-1] ^ 1]))):
            image = conn.image.create_image(name=f"nf-test-sig-{label}-{uuid.uuid4().hex[:6]}",
                                            disk_format="raw", container_format="bare", **props)
            created.append(image.id)
            resp = conn.image.put(f"/images/{image.id}/file", data=payload,
                                  headers={"Content-Type": "application/octet-stream"})
            statuses[label] = (resp.status_code, conn.image.get_image(image.id).status)
        assert statuses["good"] == (204, "active")
        assert statuses["tampered"][0] == 400 and statuses["tampered"][1] != "active"
    finally:
        for image_id in created:
            conn.image.delete_image(image_id, ignore_missing=True)
        conn.key_manager.delete_secret(secret, ignore_missing=True)
