"""SLSA provenance (nodeforge/publish/provenance.py): the statement, the DSSE envelope checked by
an independent implementation (securesystemslib), and tampering refused with the check named.

Fast: synthetic build directories (tests/imagebuild/builddir_factory.py) with the repository's
real OS package lock, and the in-memory Glance of tests/imagebuild/fake_glance.py for the
publish/verify round trip; the real Glance and Barbican are in test_provenance_devcloud.py."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from packageurl import PackageURL

from nodeforge import cli
from nodeforge.base import sums as base_sums
from nodeforge.imageverify import builddir
from nodeforge.oslock import lock as oslock
from nodeforge.publish import glance as g, provenance as pv, signing
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.fake_glance import FakeConn
from tests.imagebuild.test_signing import _cert, _write_key
from tests.imagebuild.verify_fixture import write_verify
from tests.prereq import require_module

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "manifests" / "os-packages.lock.yaml"

KEYS = {
    "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
    "p521": lambda: ec.generate_private_key(ec.SECP521R1()),
}


def with_lock(d: Path, lock_path: Path = LOCK) -> Path:
    """Make ``d`` a build from the package lock at ``lock_path`` as ``image build`` writes it: the
    manifest records the lock's digest, the lock is copied beside it, verify.json is rewritten."""
    lock = oslock.load(lock_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["os_package_lock"] = {"path": lock_path.name, "digest": lock.digest(), "packages": len(lock.packages)}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(lock_path, d / pv.PACKAGE_LOCK_FILE)
    if (d / "verify.json").exists():
        write_verify(d, "passed")
    return d


def signer_for(tmp_path: Path, kind: str = "rsa"):
    key = KEYS[kind]()
    path = _write_key(tmp_path / f"{kind}.pem", key)
    cert = tmp_path / f"{kind}.crt"
    cert.write_bytes(_cert(key))
    return signing.load_signer(path), cert


def _payload(env: dict) -> dict:
    return json.loads(base64.b64decode(env["payload"]))


def _with_payload(env: dict, doc: dict) -> dict:
    """The envelope with another payload and the old signatures (a tampered envelope)."""
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return dict(env, payload=base64.b64encode(raw).decode())


# --------------------------------------------------------------------------
# The statement

def test_statement_subjects_are_the_images_and_every_input_has_its_digest(tmp_path):
    d = with_lock(make_build_dir(tmp_path))
    b = builddir.load(d)
    doc = pv.statement(b)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    sums = {a: base_sums.read_sums(d / f"SHA{a[3:]}SUMS") for a in ("sha256", "sha512")}
    assert {s["name"]: s["digest"] for s in doc["subject"]} == {
        v.path.name: {"sha256": sums["sha256"][v.path.name], "sha512": sums["sha512"][v.path.name]}
        for v in b.variants.values()}
    deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
    kind = {}
    for dep in deps:
        kind.setdefault(dep["annotations"]["kind"], []).append(dep)
    manifest = json.loads((d / "manifest.json").read_text())
    lock = oslock.load(LOCK)
    assert kind["lockfile"][0]["digest"] == {"sha256": manifest["lockfile"]["sha256"]}
    assert kind["os-package-lock"][0]["digest"] == {"sha256": hashlib.sha256(LOCK.read_bytes()).hexdigest()}
    assert kind["os-package-lock"][0]["annotations"]["canonical_sha256"] == lock.digest()
    assert kind["element-tree"][0]["digest"] == {"sha256": manifest["element_tree"]["sha256"]}
    assert kind["diskimage-builder"][0]["annotations"]["version"] == manifest["diskimage_builder"]["version"]
    assert [(a["name"], a["digest"]["sha256"]) for a in kind["kubernetes-artifact"]] == \
        [(a["component"], a["sha256"]) for a in manifest["artifacts"]]
    # Every .deb of the lock, by its file name, with the sha256 of the signed index.
    debs = {dep["name"]: dep for dep in kind["deb"]}
    assert len(debs) == len(lock.packages) > 200
    for p in lock.packages:
        dep = debs[p.deb_name]
        assert dep["digest"] == {"sha256": p.sha256}
        purl = PackageURL.from_string(dep["uri"])
        assert (purl.type, purl.namespace, purl.name, purl.version, purl.qualifiers) == \
            ("deb", "debian", p.name, p.version, {"arch": p.arch})
        assert dep["annotations"]["suite"] == p.suite
    assert doc["predicate"]["runDetails"]["metadata"]["invocationId"] == b.build_id
    # The payload is deterministic: the same build gives the same statement.
    assert pv.statement(builddir.load(d)) == doc


def test_a_lock_that_is_not_the_one_the_build_used_is_refused(tmp_path):
    d = with_lock(make_build_dir(tmp_path, variants=("vm",)))
    text = (d / pv.PACKAGE_LOCK_FILE).read_text()
    lock = oslock.load(d / pv.PACKAGE_LOCK_FILE)
    p = lock.packages[0]
    (d / pv.PACKAGE_LOCK_FILE).write_text(text.replace(p.sha256, "f" * 64))
    with pytest.raises(pv.ProvenanceError) as exc:
        pv.statement(builddir.load(d), package_lock=d / pv.PACKAGE_LOCK_FILE)
    assert "no lock with that digest" in str(exc.value) and str(d / pv.PACKAGE_LOCK_FILE) in str(exc.value)


def test_a_build_without_a_package_lock_lists_its_packages_without_digests(tmp_path):
    b = builddir.load(make_build_dir(tmp_path, variants=("vm",)))
    deps = pv.statement(b)["predicate"]["buildDefinition"]["resolvedDependencies"]
    debs = [dep for dep in deps if dep["annotations"]["kind"] == "deb"]
    assert len(debs) == 300 and all("digest" not in dep for dep in debs)


# --------------------------------------------------------------------------
# The envelope, and an independent verifier

def test_pae_is_the_dsse_spec_encoding():
    # The example of the DSSE v1 protocol document.
    assert pv.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_envelope_verifies_with_securesystemslib(tmp_path, kind):
    dsse = require_module("securesystemslib.dsse", "an independent DSSE implementation")
    sslib = require_module("securesystemslib.signer", "an independent DSSE implementation")
    exceptions = require_module("securesystemslib.exceptions", "an independent DSSE implementation")
    signer, cert_path = signer_for(tmp_path, kind)
    b = builddir.load(with_lock(make_build_dir(tmp_path, variants=("vm",))))
    env = pv.envelope(pv.statement(b), signer)
    stored = json.loads(pv.dumps(env))
    cert = signing.load_certificate(cert_path.read_bytes(), "test")
    public = cert.public_key()
    scheme, _ = pv.scheme_for(public)
    key = sslib.SSlibKey.from_crypto(public, keyid=pv.keyid(public), scheme=scheme)

    # securesystemslib parses the envelope and verifies the signature over its own PAE.
    envelope = dsse.Envelope.from_dict(json.loads(json.dumps(stored)))
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert envelope.pae() == pv.pae(pv.PAYLOAD_TYPE, envelope.payload)
    assert list(envelope.verify([key], 1)) == [pv.keyid(public)]
    assert json.loads(envelope.payload)["subject"][0]["digest"]["sha256"] == b.variants["vm"].sha256

    # Tampered: another subject digest (signature kept) fails there too ...
    doc = _payload(stored)
    doc["subject"][0]["digest"]["sha256"] = "0" * 64
    # (from_dict consumes the dict it is given: each call gets a copy)
    tampered = dsse.Envelope.from_dict(json.loads(json.dumps(_with_payload(stored, doc))))
    with pytest.raises(exceptions.VerificationError):
        tampered.verify([key], 1)
    # ... and a key that did not sign it.
    wrong = sslib.SSlibKey.from_crypto(KEYS[kind]().public_key(), keyid=pv.keyid(public), scheme=scheme)
    with pytest.raises(exceptions.VerificationError):
        dsse.Envelope.from_dict(json.loads(json.dumps(stored))).verify([wrong], 1)


def test_nodeforge_verifies_an_envelope_securesystemslib_signed(tmp_path):
    dsse = require_module("securesystemslib.dsse", "an independent DSSE implementation")
    sslib = require_module("securesystemslib.signer", "an independent DSSE implementation")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signer = sslib.CryptoSigner(key, sslib.SSlibKey.from_crypto(key.public_key(), keyid=pv.keyid(key.public_key())))
    payload = json.dumps({"_type": pv.STATEMENT_TYPE}).encode()
    envelope = dsse.Envelope(payload, pv.PAYLOAD_TYPE, {})
    envelope.sign(signer)
    env = pv.parse_envelope(json.dumps(envelope.to_dict()).encode(), "img")
    assert pv.verify_signature(env, key.public_key(), "img", "test key") == pv.keyid(key.public_key())


# --------------------------------------------------------------------------
# Publish and verify round trip (in-memory Glance); tampering named

def _publish(tmp_path, signer=None, cert_id="cert-1", variants=("vm",)):
    conn = FakeConn()
    d = with_lock(make_build_dir(tmp_path, variants=variants))
    sign = g.SignOptions(signer, cert_id) if signer is not None else None
    [r] = g.Publisher(conn, RetentionPolicy(), sign=sign).publish(builddir.load(d))
    return conn, d, r


def test_publish_stores_the_envelope_beside_the_manifest_and_links_it(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    img = g.get_image(conn, r.image_id)
    prov = g.get_image(conn, img["nodeforge_provenance"])
    assert r.provenance_image_id == prov["id"]
    assert prov["os_hidden"] is True and prov["tags"] == ["nodeforge-provenance"]
    assert prov["nodeforge_role"] == "provenance" and prov["nodeforge_build_id"] == img["nodeforge_build_id"]
    data = conn.image.data[prov["id"]]
    assert hashlib.sha256(data).hexdigest() == img["nodeforge_provenance_sha256"] == prov["nodeforge_provenance_sha256"]
    assert "nodeforge_uploader" not in prov
    report = pv.verify(conn, r.image_id, cert_path=cert)
    assert report["valid"] is True and report["subject"] == d.joinpath(builddir.load(d).variants["vm"].path.name).name
    assert report["subject_checked_by"] == "Glance os_hash_value (sha512)"
    assert report["dependencies"]["deb"] == len(oslock.load(LOCK).packages)
    # Downloading and hashing what Glance serves gives the same verdict.
    assert pv.verify(conn, r.image_id, cert_path=cert, download=True)["download"]["bytes"] == \
        len(conn.image.data[r.image_id])
    # Publishing again uploads nothing and keeps the link.
    [again] = g.Publisher(conn, RetentionPolicy(), sign=g.SignOptions(signer, "cert-1")).publish(builddir.load(d))
    assert again.action == "exists" and again.provenance_image_id == prov["id"]


def _swap_envelope(conn, image_id: str, env: dict) -> None:
    """Replace the provenance data of ``image_id`` and fix its digest property (an attacker who can
    edit the image's properties: only the signature and the subject check stop it)."""
    img = g.get_image(conn, image_id)
    data = pv.dumps(env)
    conn.image.data[img["nodeforge_provenance"]] = data
    conn.image.images[image_id]["nodeforge_provenance_sha256"] = hashlib.sha256(data).hexdigest()


def _stored(conn, image_id: str) -> dict:
    return json.loads(conn.image.data[g.get_image(conn, image_id)["nodeforge_provenance"]])


def test_a_changed_subject_digest_is_refused(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    env = _stored(conn, r.image_id)
    doc = _payload(env)
    doc["subject"][0]["digest"]["sha512"] = "0" * 128
    _swap_envelope(conn, r.image_id, _with_payload(env, doc))
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "signature" and "no signature verifies" in str(exc.value)
    # Re-signed by the publishing key but for other bytes: the subject check names it.
    _swap_envelope(conn, r.image_id, pv.envelope(doc, signer))
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "subject digest"
    assert g.get_image(conn, r.image_id)["os_hash_value"] in str(exc.value)


def test_a_changed_payload_is_refused(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    env = _stored(conn, r.image_id)
    doc = _payload(env)
    deb = next(x for x in doc["predicate"]["buildDefinition"]["resolvedDependencies"]
               if x["annotations"]["kind"] == "deb")
    deb["digest"]["sha256"] = "e" * 64
    _swap_envelope(conn, r.image_id, _with_payload(env, doc))
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "signature"


def test_a_wrong_key_is_refused(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    (tmp_path / "other").mkdir()
    _, other_cert = signer_for(tmp_path / "other")
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=other_cert)
    assert exc.value.check == "signature" and str(other_cert) in str(exc.value)
    # An envelope signed by another key, checked against the publishing certificate.
    other_signer, _ = signer_for(tmp_path / "other", "p384")
    _swap_envelope(conn, r.image_id, pv.envelope(_payload(_stored(conn, r.image_id)), other_signer))
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "signature"


def test_an_expired_publishing_certificate_is_refused(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    assert pv.verify(conn, r.image_id, cert_path=cert)["valid"]
    key = serialization.load_pem_private_key((tmp_path / "rsa.pem").read_bytes(), None)
    expired = tmp_path / "expired.crt"
    expired.write_bytes(_cert(key, days=-0.5))       # valid from yesterday until twelve hours ago
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=expired)
    assert exc.value.check == "certificate" and "not valid now" in str(exc.value)


def test_changed_envelope_bytes_missing_and_unsigned_provenance_are_named(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    img = g.get_image(conn, r.image_id)
    conn.image.data[img["nodeforge_provenance"]] += b" "
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "provenance digest"
    conn.image.images[r.image_id].pop("nodeforge_provenance")
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "missing provenance"

    (tmp_path / "u").mkdir()
    conn2, _, unsigned = _publish(tmp_path / "u")
    assert pv.parse_envelope(conn2.image.data[g.get_image(conn2, unsigned.image_id)["nodeforge_provenance"]],
                             "x").signatures == ()
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn2, unsigned.image_id, cert_path=cert)
    assert exc.value.check == "signature" and "no signature" in str(exc.value)
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn2, unsigned.image_id)     # and no certificate to check against
    assert exc.value.check == "signature" and "--cert" in str(exc.value)


def test_another_builds_valid_provenance_is_refused(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    (tmp_path / "b").mkdir()
    d2 = with_lock(make_build_dir(tmp_path / "b", variants=("vm",)))
    [r2] = g.Publisher(conn, RetentionPolicy(), sign=g.SignOptions(signer, "cert-1")).publish(builddir.load(d2))
    other = g.get_image(conn, r2.image_id)
    conn.image.images[r.image_id].update(nodeforge_provenance=other["nodeforge_provenance"],
                                         nodeforge_provenance_sha256=other["nodeforge_provenance_sha256"])
    with pytest.raises(pv.ProvenanceInvalid) as exc:
        pv.verify(conn, r.image_id, cert_path=cert)
    assert exc.value.check == "subject digest"


def test_cli_exit_codes(tmp_path, monkeypatch, capsys):
    # Usage errors exit 2 before any cloud call.
    (tmp_path / "c.pem").write_text("x")
    assert cli.main(["image", "provenance", "some-image", "--cert", str(tmp_path / "c.pem"),
                     "--cert-id", "x"]) == 2
    assert "alternatives" in capsys.readouterr().err
    assert cli.main(["image", "provenance"]) == 2


def test_publishing_again_attaches_provenance_to_an_image_published_without_it(tmp_path):
    signer, cert = signer_for(tmp_path)
    conn, d, r = _publish(tmp_path, signer)
    old = g.get_image(conn, r.image_id)["nodeforge_provenance"]
    # An image published before provenance existed: no link, no provenance image.
    g.delete_image(conn, old)
    for prop in ("nodeforge_provenance", "nodeforge_provenance_sha256"):
        conn.image.images[r.image_id].pop(prop)
    with pytest.raises(pv.ProvenanceInvalid):
        pv.verify(conn, r.image_id, cert_path=cert)
    [dry] = g.Publisher(conn, RetentionPolicy(), sign=g.SignOptions(signer, "cert-1")).plan(
        builddir.load(d)).results
    assert dry.provenance_image_id is None and "nodeforge_provenance" not in g.get_image(conn, r.image_id)
    [again] = g.Publisher(conn, RetentionPolicy(), sign=g.SignOptions(signer, "cert-1")).publish(builddir.load(d))
    assert again.action == "exists" and again.provenance_image_id not in (None, old)
    assert pv.verify(conn, r.image_id, cert_path=cert)["provenance_image"] == again.provenance_image_id
    roles = [i.get("nodeforge_role") for i in conn.image.images.values()]
    assert roles.count("provenance") == 1
