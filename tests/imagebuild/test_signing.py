"""Image signing: keys, passphrase references, signatures Glance and cursive
accept, certificates in Barbican, and no secret in any output."""

from __future__ import annotations

import base64
import datetime
import hashlib
import logging
import os
from unittest import mock

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from nodeforge import cli
from nodeforge.imageverify import builddir
from nodeforge.publish import glance as g, signing
from tests.imagebuild.builddir_factory import change_last_byte, make_build_dir
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.prereq import require_module

PASSPHRASE = "nf-test-passphrase-Zq81"


def _write_key(path, key, passphrase: str | None = None):
    enc = (serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
           else serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    return path


def _cert(key, days: float = 7) -> bytes:
    return signing.self_signed_certificate(key, "nodeforge test image signing", days=days,
                                           valid_before_now=datetime.timedelta(days=1))


def _cursive_verify(signer_props: dict, public_key, data: bytes) -> None:
    """Verify as Glance/Nova do, with cursive's verifier for the key type."""
    su = require_module("cursive.signature_utils", "image-signature verification as Nova does it")

    sig = base64.b64decode(signer_props["img_signature"])
    hash_method = su.HASH_METHODS[signer_props["img_signature_hash_method"]]
    create = (su.create_verifier_for_pss if signer_props["img_signature_key_type"] == "RSA-PSS"
              else su.create_verifier_for_ecc)
    verifier = create(sig, hash_method, public_key)
    for i in range(0, len(data), 65536):
        verifier.update(data[i:i + 65536])
    verifier.verify()


# --------------------------------------------------------------------------
# Keys and signatures (no cloud)

@pytest.mark.parametrize("make_key,key_type,hash_method", [
    (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), "RSA-PSS", "SHA-256"),
    (lambda: rsa.generate_private_key(public_exponent=65537, key_size=3072), "RSA-PSS", "SHA-512"),
    (lambda: ec.generate_private_key(ec.SECP384R1()), "ECC_SECP384R1", "SHA-384"),
    (lambda: ec.generate_private_key(ec.SECP521R1()), "ECC_SECP521R1", "SHA-512"),
])
def test_prehashed_signature_verifies_with_cursive(tmp_path, make_key, key_type, hash_method):
    key = make_key()
    signer = signing.load_signer(_write_key(tmp_path / "k.pem", key), hash_method=hash_method)
    assert signer.key_type == key_type
    data = os.urandom(300_000)
    h = signer.hasher()
    h.update(data)
    props = signer.properties(signer.sign(h.digest()), "cert-id")
    _cursive_verify(props, key.public_key(), data)
    from cryptography.exceptions import InvalidSignature

    with pytest.raises(InvalidSignature):
        _cursive_verify(props, key.public_key(), data[:-1] + bytes([data[-1] ^ 0xFF]))


def test_curves_glance_cannot_verify_are_refused(tmp_path):
    with pytest.raises(signing.SigningError, match="secp256r1.*verify only secp384r1, secp521r1"):
        signing.load_signer(_write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(signing.SigningError, match="1024 bits"):
        signing.load_signer(_write_key(tmp_path / "k.pem", rsa.generate_private_key(65537, 1024)))


def test_encrypted_key_passphrase_from_reference_only(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    path = _write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP384R1()), PASSPHRASE)
    with pytest.raises(signing.SigningError, match="is encrypted: give its passphrase as a reference"):
        signing.load_signer(path)
    monkeypatch.setenv("NF_TEST_PASS", PASSPHRASE)
    assert signing.load_signer(path, "env:NF_TEST_PASS").key_type == "ECC_SECP384R1"
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    assert signing.load_signer(path, f"file:{tmp_path / 'pass'}").key_type == "ECC_SECP384R1"
    # A literal passphrase is not a reference: refused, and never echoed.
    with pytest.raises(signing.SigningError) as exc:
        signing.load_signer(path, PASSPHRASE)
    assert PASSPHRASE not in str(exc.value)
    monkeypatch.setenv("NF_TEST_PASS", PASSPHRASE + "-wrong")
    with pytest.raises(signing.SigningError, match="passphrase is wrong") as exc:
        signing.load_signer(path, "env:NF_TEST_PASS")
    assert PASSPHRASE not in str(exc.value) and PASSPHRASE not in caplog.text


def test_key_must_match_certificate(tmp_path):
    key, other = rsa.generate_private_key(65537, 2048), rsa.generate_private_key(65537, 2048)
    signer = signing.load_signer(_write_key(tmp_path / "k.pem", key))
    signing.check_key_matches(signer, x509.load_pem_x509_certificate(_cert(key)), "c1")
    with pytest.raises(signing.SigningError, match="does not belong to certificate c2"):
        signing.check_key_matches(signer, x509.load_pem_x509_certificate(_cert(other)), "c2")


# --------------------------------------------------------------------------
# Against the local Glance and Barbican

@pytest.fixture
def signing_setup(tmp_path, admin, tracker, monkeypatch, run_cli):
    """An encrypted RSA key (passphrase in $NF_TEST_PASS) and its certificate
    uploaded to Barbican through the CLI."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    key_path = _write_key(tmp_path / "signing.pem", key, PASSPHRASE)
    (tmp_path / "signing.crt").write_bytes(_cert(key))
    monkeypatch.setenv("NF_TEST_PASS", PASSPHRASE)
    code, out, err = run_cli("image", "signing-cert", "upload", str(tmp_path / "signing.crt"), "-o", "json")
    assert code == 0, err
    import json

    info = json.loads(out)
    tracker.secrets.append(info["id"])
    return key, key_path, info["id"]


@pytest.fixture
def run_cli(capsys, monkeypatch, devcloud):
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")

    def run(*args: str):
        capsys.readouterr()
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.devcloud
def test_signed_publish_goes_active_and_verifies_with_cursive(tmp_path, admin, tracker, signing_setup, run_cli,
                                                              caplog):
    caplog.set_level(logging.DEBUG)
    key, key_path, cert_id = signing_setup
    d = tracker.build(make_build_dir(tmp_path, variants=("vm",), size=2 * 1024 * 1024))
    code, out, err = run_cli("image", "publish", str(d), "--sign-key", str(key_path), "--sign-key-passphrase",
                             "env:NF_TEST_PASS", "--sign-cert-id", cert_id, "-o", "json", "-v")
    assert code == 0, err
    for text in (out, err, caplog.text):
        assert PASSPHRASE not in text and "PRIVATE KEY" not in text
    import json

    result = json.loads(out)[0]
    assert result["action"] == "uploaded" and result["signed"] is True
    img = g.get_image(admin, result["image_id"])
    assert img["status"] == "active"  # Glance verified the signature against Barbican's certificate
    assert (img["img_signature_key_type"], img["img_signature_hash_method"], img["img_signature_certificate_uuid"]) \
        == ("RSA-PSS", "SHA-256", cert_id)
    # cursive, with the certificate fetched from Barbican through castellan, as Nova would.
    data = (d / "nodeforge-k8s-1.36.0-vm.qcow2").read_bytes()
    _cursive_via_barbican(admin, img, data)
    code, out, _ = run_cli("image", "show", result["image_id"], "-o", "json")
    assert json.loads(out)["signature"]["certificate_id"] == cert_id


def _cursive_via_barbican(conn, img: dict, data: bytes) -> None:
    signature_utils = require_module("cursive.signature_utils", "image-signature verification through Barbican")
    from castellan import key_manager, options
    from oslo_config import cfg
    from oslo_context import context

    conf = cfg.ConfigOpts()
    options.set_defaults(conf, backend="barbican",
                         auth_endpoint=conn.session.get_endpoint(service_type="identity", interface="public"))
    conf([], project="nodeforge-test")
    ctx = context.RequestContext(auth_token=conn.session.get_token(), project_id=conn.current_project_id)
    with mock.patch.object(signature_utils.key_manager, "API", return_value=key_manager.API(conf)):
        verifier = signature_utils.get_verifier(ctx, img["img_signature_certificate_uuid"],
                                                img["img_signature_hash_method"], img["img_signature"],
                                                img["img_signature_key_type"])
    verifier.update(data)
    verifier.verify()


@pytest.mark.devcloud
def test_tampered_signature_is_rejected_by_glance_and_nothing_is_left(tmp_path, admin, tracker, policy,
                                                                     signing_setup, monkeypatch):
    key, key_path, cert_id = signing_setup
    b = builddir.load(tracker.build(make_build_dir(tmp_path, variants=("baremetal",))))
    signer = signing.load_signer(key_path, "env:NF_TEST_PASS")
    real_sign = signer.sign
    # Sign other bytes than the ones uploaded: what tampering after signing looks like to Glance.
    monkeypatch.setattr(signer, "sign", lambda digest: real_sign(hashlib.sha256(b"tampered" + digest).digest()))
    with pytest.raises(g.SignatureRejected, match="Glance rejected the signature"):
        g.Publisher(admin, policy, sign=g.SignOptions(signer, cert_id)).publish(b)
    assert [i for i in tracker.images(b.build_id) if i.get("nodeforge_role") == "image"] == []


@pytest.mark.devcloud
def test_wrong_certificate_refused_before_upload(tmp_path, admin, tracker, signing_setup, run_cli, monkeypatch):
    _, _, cert_id = signing_setup
    other = _write_key(tmp_path / "other.pem", rsa.generate_private_key(65537, 2048))
    d = tracker.build(make_build_dir(tmp_path, variants=("vm",)))
    code, _, err = run_cli("image", "publish", str(d), "--sign-key", str(other), "--sign-cert-id", cert_id)
    assert code == 1 and "does not belong to certificate" in err
    assert tracker.images(d.name) == []


@pytest.mark.devcloud
def test_a_file_changed_since_the_build_is_named_and_nothing_is_left(tmp_path, admin, tracker, policy,
                                                                     signing_setup):
    """The signature is of the build's own digest (SHA256SUMS), and the upload pass hashes what it
    sends: a file changed after the build is refused as such, not as a bad signature, and its
    image is gone."""
    _, key_path, cert_id = signing_setup
    d = tracker.build(make_build_dir(tmp_path, variants=("baremetal",)))
    image = d / "nodeforge-k8s-1.36.0-baremetal.raw"
    change_last_byte(image)
    signer = signing.load_signer(key_path, "env:NF_TEST_PASS")
    with pytest.raises(g.PublishError, match="does not match SHA(256|512)SUMS") as caught:
        g.Publisher(admin, policy, sign=g.SignOptions(signer, cert_id)).publish(builddir.load(d))
    assert not isinstance(caught.value, g.SignatureRejected)
    assert [i for i in tracker.images(d.name) if i.get("nodeforge_role") == "image"] == []
