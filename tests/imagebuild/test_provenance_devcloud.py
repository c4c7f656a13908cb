"""Provenance against the session's real Glance and Barbican: a signed publish stores the DSSE
envelope beside the manifest, ``nodeforge image provenance`` verifies it (certificate fetched from
Barbican by the image's img_signature_certificate_uuid, subject = Glance's os_hash_value, or the
downloaded data), securesystemslib verifies the envelope downloaded from Glance, and tampering in
Glance is refused with the check named. The slow test does the same with the run's real build."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from nodeforge import transport
from nodeforge.imageverify import builddir
from nodeforge.oslock import lock as oslock
from nodeforge.publish import glance as g, provenance as pv, signing
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.realbuild import linked_copy
from tests.imagebuild.test_provenance import LOCK, with_lock
from tests.imagebuild.test_signing import PASSPHRASE, _cert, _write_key, run_cli, signing_setup  # noqa: F401
from tests.prereq import require_module


def _publish(run_cli, d, cert_id, key_path, *extra):
    code, out, err = run_cli("image", "publish", str(d), "--sign-key", str(key_path), "--sign-key-passphrase",
                             "env:NF_TEST_PASS", "--sign-cert-id", cert_id, *extra, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def _provenance(run_cli, image_id, *args):
    code, out, err = run_cli("image", "provenance", image_id, *args, "-o", "json")
    assert PASSPHRASE not in out + err and "PRIVATE KEY" not in out + err
    return code, (json.loads(out) if out.strip() else None), err


def _envelope_from_glance(conn, img: dict) -> bytes:
    resp = transport.request(conn.image, "GET", f"/images/{img['nodeforge_provenance']}/file", what="provenance")
    return resp.content


def _securesystemslib_verifies(data: bytes, cert) -> dict:
    dsse = require_module("securesystemslib.dsse", "an independent DSSE implementation")
    sslib = require_module("securesystemslib.signer", "an independent DSSE implementation")
    public = cert.public_key()
    key = sslib.SSlibKey.from_crypto(public, keyid=pv.keyid(public), scheme=pv.scheme_for(public)[0])
    envelope = dsse.Envelope.from_dict(json.loads(data))
    assert list(envelope.verify([key], 1)) == [pv.keyid(public)]
    return json.loads(envelope.payload)


@pytest.mark.devcloud
def test_signed_publish_stores_provenance_and_image_provenance_verifies_it(tmp_path, admin, tracker, signing_setup,
                                                                           run_cli, capsys):
    _, key_path, cert_id = signing_setup
    d = tracker.build(with_lock(make_build_dir(tmp_path, variants=("vm", "baremetal"), size=8 << 20)))
    b = builddir.load(d)
    # Its own scope: the promote below retires nothing of other tests.
    results = {r["variant"]: r for r in _publish(run_cli, d, cert_id, key_path, "--scope", f"nf-prov-{d.name[-10:]}")}
    cert = signing.fetch_certificate(admin, cert_id)
    for variant, r in results.items():
        img = g.get_image(admin, r["image_id"])
        assert r["provenance_image_id"] == img["nodeforge_provenance"]
        prov = g.get_image(admin, img["nodeforge_provenance"])
        assert (prov["status"], prov["os_hidden"], prov["nodeforge_role"], prov["tags"]) == \
            ("active", True, "provenance", ["nodeforge-provenance"])
        data = _envelope_from_glance(admin, img)
        assert hashlib.sha256(data).hexdigest() == img["nodeforge_provenance_sha256"]
        # An independent implementation verifies what Glance holds, with the certificate in Barbican.
        doc = _securesystemslib_verifies(data, cert)
        assert {s["name"]: s["digest"]["sha512"] for s in doc["subject"]}[b.variant(variant).path.name] \
            == img["os_hash_value"]

        code, report, err = _provenance(run_cli, r["image_id"])
        assert code == 0, err
        assert report["valid"] is True and report["certificate"] == cert_id
        assert report["subject"] == b.variant(variant).path.name
        assert report["subject_sha256"] == b.variant(variant).sha256 == img["nodeforge_sha256"]
        assert report["subject_checked_by"] == "Glance os_hash_value (sha512)"
        assert report["dependencies"]["deb"] == len(oslock.load(LOCK).packages)
        assert report["build_id"] == b.build_id

    # The data Glance serves, downloaded and hashed, against the same subject (measured).
    t0 = time.monotonic()
    code, fast, _ = _provenance(run_cli, results["vm"]["image_id"])
    t_props = time.monotonic() - t0
    code, slow, err = _provenance(run_cli, results["vm"]["image_id"], "--download")
    assert code == 0, err
    assert slow["download"]["bytes"] == g.get_image(admin, results["vm"]["image_id"])["size"]
    with capsys.disabled():
        print(f"\nimage provenance: {t_props:.2f} s by os_hash_value; with --download "
              f"{slow['download']['bytes']} bytes hashed in {slow['download']['seconds']} s")
    # Table output too.
    code, out, _ = run_cli("image", "provenance", results["vm"]["image_id"])
    assert code == 0 and "provenance valid" in out and b.build_id in out

    # Promote makes the provenance public with its image.
    code, _, err = run_cli("image", "promote", results["vm"]["image_id"])
    assert code == 0, err
    assert g.get_image(admin, results["vm"]["provenance_image_id"])["visibility"] == "public"


@pytest.mark.devcloud
def test_tampering_in_glance_is_refused_with_the_check_named(tmp_path, admin, tracker, signing_setup, run_cli):
    _, key_path, cert_id = signing_setup
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tracker.build(with_lock(make_build_dir(tmp_path / "a", variants=("vm",))))
    other = tracker.build(with_lock(make_build_dir(tmp_path / "b", variants=("vm",))))
    [ra] = _publish(run_cli, a, cert_id, key_path)
    [rb] = _publish(run_cli, other, cert_id, key_path)
    img_b = g.get_image(admin, rb["image_id"])

    # A valid, signed provenance of another build linked to image a: its subject is other bytes.
    img = g.get_image(admin, ra["image_id"])
    g.patch_image(admin, ra["image_id"], g.set_ops(img, {
        "nodeforge_provenance": img_b["nodeforge_provenance"],
        "nodeforge_provenance_sha256": img_b["nodeforge_provenance_sha256"]}), "tamper")
    code, _, err = _provenance(run_cli, ra["image_id"])
    assert code == 1 and "subject digest" in err and img["os_hash_value"] in err

    # The link's digest no longer that of the envelope.
    img = g.get_image(admin, ra["image_id"])
    g.patch_image(admin, ra["image_id"], g.set_ops(img, {"nodeforge_provenance_sha256": "0" * 64}), "tamper")
    code, _, err = _provenance(run_cli, ra["image_id"])
    assert code == 1 and "provenance digest" in err

    # A certificate that did not sign it.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "other.crt").write_bytes(_cert(key))
    code, _, err = _provenance(run_cli, rb["image_id"], "--cert", str(tmp_path / "other.crt"))
    assert code == 1 and "signature" in err and "other.crt" in err
    code, _, err = _provenance(run_cli, rb["image_id"])
    assert code == 0, err

    # No provenance at all.
    img = g.get_image(admin, ra["image_id"])
    g.patch_image(admin, ra["image_id"], [{"op": "remove", "path": "/nodeforge_provenance"}], "tamper")
    code, doc, err = _provenance(run_cli, ra["image_id"])
    assert code == 1 and "missing provenance" in err
    assert doc is not None and doc["check"] == "missing provenance" and doc["valid"] is False

    # An unsigned publish stores an unsigned envelope: reported as such.
    (tmp_path / "u").mkdir()
    u = tracker.build(with_lock(make_build_dir(tmp_path / "u", variants=("vm",))))
    code, out, err = run_cli("image", "publish", str(u), "-o", "json")
    assert code == 0, err
    [ru] = json.loads(out)
    code, _, err = _provenance(run_cli, ru["image_id"], "--cert-id", cert_id)
    assert code == 1 and "signature" in err and "no signature" in err


@pytest.mark.slow
@pytest.mark.devcloud
def test_real_build_provenance_verifies(verified_build, tmp_path, admin, tracker, signing_setup, run_cli):
    verified_dir, _ = verified_build
    d = tracker.build(linked_copy(verified_dir, tmp_path / verified_dir.name, with_verify=True))
    b = builddir.load(d)
    tracker.build_ids.add(b.build_id)
    _, key_path, cert_id = signing_setup
    manifest = json.loads((d / "manifest.json").read_text())
    results = {r["variant"]: r for r in _publish(run_cli, d, cert_id, key_path)}
    cert = signing.fetch_certificate(admin, cert_id)
    for variant, r in results.items():
        img = g.get_image(admin, r["image_id"])
        doc = _securesystemslib_verifies(_envelope_from_glance(admin, img), cert)
        deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
        kinds = {dep["annotations"]["kind"] for dep in deps}
        assert {"lockfile", "element-tree", "diskimage-builder", "kubernetes-artifact", "deb"} <= kinds
        artifacts = {dep["name"]: dep["digest"]["sha256"] for dep in deps
                     if dep["annotations"]["kind"] == "kubernetes-artifact"}
        assert artifacts == {a["component"]: a["sha256"] for a in manifest["artifacts"]}
        if manifest.get("os_package_lock"):
            debs = [dep for dep in deps if dep["annotations"]["kind"] == "deb"]
            assert len(debs) == manifest["os_package_lock"]["packages"] and all(dep.get("digest") for dep in debs)
        code, report, err = _provenance(run_cli, r["image_id"])
        assert code == 0, err
        assert report["subject"] == b.variant(variant).path.name and report["build_id"] == b.build_id
