"""The verify gate cannot be forged by anyone who can only write files: the report is signed by
the verifier (``verify.intoto.json``, a DSSE envelope with an in-toto test-result statement), and
publish, promote and the pipeline accept it only with a trusted key, exactly these bytes, every
check the hardening profile lists, and a ``verified_at`` neither in the future nor too old.

Publish and promote run against the in-memory Glance (``fake_glance.py``); the same gate against
the local Glance is in tests/imagebuild/test_verifyreport.py.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import stat

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ed25519

from nodeforge.base import dsse, sums
from nodeforge.imageverify import attest, builddir, verifychecks
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.fake_glance import FakeConn
from tests.imagebuild.verify_fixture import signed_envelope, write_signed

REPO_PROFILE = {k: yaml.safe_load(verifychecks.PROFILE.read_text())[k] for k in ("profile", "version")}


def _doc(b: builddir.BuildDir) -> dict:
    return json.loads(b.verify_raw)


def _publish(b: builddir.BuildDir):
    conn = FakeConn()
    return conn, g.Publisher(conn, RetentionPolicy()).publish(b)


def _refused(b: builddir.BuildDir, pattern: str) -> None:
    conn = FakeConn()
    with pytest.raises(g.NotVerified, match=pattern):
        g.Publisher(conn, RetentionPolicy()).publish(b)
    assert conn.image.images == {}, "nothing may be uploaded"


def test_verify_signs_its_report_and_the_statement_binds_everything(tmp_path):
    b = builddir.load(make_build_dir(tmp_path))
    assert b.variants["vm"].verify.value == "passed" and b.variants["baremetal"].verify.value == "passed"
    env = dsse.parse(b.verify_attestation, "t")
    stmt = json.loads(env.payload)
    assert stmt["_type"] == attest.STATEMENT_TYPE and stmt["predicateType"] == attest.PREDICATE_TYPE
    assert {s["name"]: s["digest"] for s in stmt["subject"]} == {
        v.path.name: {"sha256": v.sha256, "sha512": v.sha512} for v in b.variants.values()}
    config = {c["name"]: c for c in stmt["predicate"]["configuration"]}
    assert config["manifest.json"]["digest"]["sha256"] == b.manifest_sha256
    assert config["manifest.json"]["annotations"]["build_id"] == b.build_id
    assert config["verify.json"]["digest"]["sha256"] == hashlib.sha256(b.verify_raw).hexdigest()
    assert stmt["predicate"]["result"] == "PASSED" and not stmt["predicate"]["failedTests"]
    # Signed by the session's verifier key, whose file is private to its owner.
    key = attest.key_path()
    assert env.signatures[0]["keyid"] == dsse.keyid(attest.load_key().public_key())
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_random_image_bytes_with_recomputed_sums_and_report_are_refused(tmp_path):
    """A forger replaces the image, recomputes SHA256SUMS/SHA512SUMS and the report's digests."""
    d = make_build_dir(tmp_path, variants=("vm",))
    b = builddir.load(d)
    image = b.variants["vm"].path
    image.write_bytes(os.urandom(4096))
    new = {"sha256": hashlib.sha256(image.read_bytes()).hexdigest(),
           "sha512": hashlib.sha512(image.read_bytes()).hexdigest()}
    table = {}
    for algo, name in sums.SUMS_FILES.items():
        for file, digest in sums.read_sums(d / name).items():
            table.setdefault(file, {})[algo] = new[algo] if file == image.name else digest
    sums.write_sums(d, table)
    doc = _doc(b)
    doc["variants"]["vm"]["image_sha256"], doc["variants"]["vm"]["image_sha512"] = new["sha256"], new["sha512"]
    (d / builddir.VERIFY).write_text(json.dumps(doc, indent=2) + "\n")
    forged = builddir.load(d)
    assert forged.variants["vm"].verify.value == "failed"
    assert "is not the report signed in" in forged.variants["vm"].verify_reason
    _refused(forged, "is not the report signed in")


def test_an_unsigned_report_is_refused(tmp_path):
    d = make_build_dir(tmp_path, variants=("vm",))
    (d / attest.ENVELOPE).unlink()
    _refused(builddir.load(d), r"is not signed \(verify.intoto.json is missing\)")


def test_a_report_signed_by_an_untrusted_key_is_refused_until_the_key_is_trusted(tmp_path, monkeypatch):
    d = make_build_dir(tmp_path, variants=("vm",))
    other = ed25519.Ed25519PrivateKey.generate()
    write_signed(d, (d / builddir.VERIFY).read_bytes(), key=other)
    _refused(builddir.load(d), "signature: no signature verifies with the trusted verifier keys")
    # Named in the trust set (a file, or a directory of *.pub), the same report is accepted.
    trust = tmp_path / "trusted"
    trust.mkdir()
    (trust / "ci-verifier.pub").write_bytes(attest.public_pem(other.public_key()))
    monkeypatch.setenv(attest.ENV_TRUST, str(trust))
    _, [r] = _publish(builddir.load(d))
    assert r.action == "uploaded"


def test_a_signed_report_without_the_profiles_controls_is_refused(tmp_path):
    """Checks deleted by a key holder (or an older verifier): the build's hardening profile lists
    controls the report lacks."""
    d = make_build_dir(tmp_path, variants=("vm",), hardening=REPO_PROFILE)
    b = builddir.load(d)
    controls, _ = verifychecks.repository_controls({"hardening": REPO_PROFILE})
    assert b.required_checks == tuple(c["id"] for c in controls) and b.required_checks
    doc = _doc(b)
    dropped = b.required_checks[0]
    doc["variants"]["vm"]["checks"] = [c for c in doc["variants"]["vm"]["checks"] if c["id"] != dropped]
    sections = doc["variants"]["vm"]
    sections["summary"] = verifychecks.summary(sections["checks"])
    write_signed(d, (json.dumps(doc, indent=2) + "\n").encode())
    forged = builddir.load(d)
    assert f"checks has no {dropped}" in forged.variants["vm"].verify_reason
    _refused(forged, f"checks has no {dropped}")
    # Unsigned, the same edit fails on its signature first.
    (d / builddir.VERIFY).write_text(json.dumps(doc, indent=2) + "\n")
    (d / attest.ENVELOPE).write_bytes(b.verify_attestation)
    _refused(builddir.load(d), "is not the report signed in")


def _at(d, when: datetime.datetime) -> None:
    doc = json.loads((d / builddir.VERIFY).read_bytes())
    for section in doc["variants"].values():
        section["verified_at"] = when.isoformat(timespec="seconds")
    write_signed(d, (json.dumps(doc, indent=2) + "\n").encode())


def test_publish_refuses_a_report_from_the_future_or_older_than_the_maximum_age(tmp_path, monkeypatch):
    now = datetime.datetime.now(datetime.timezone.utc)
    d = make_build_dir(tmp_path, variants=("vm",))
    _at(d, now + datetime.timedelta(days=365 * 70))
    _refused(builddir.load(d), "lies in the future")
    _at(d, now - datetime.timedelta(days=31))
    _refused(builddir.load(d), "is older than 30 days")
    monkeypatch.setenv(attest.ENV_MAX_AGE, "45")
    _, [r] = _publish(builddir.load(d))
    assert r.action == "uploaded"
    monkeypatch.setenv(attest.ENV_MAX_AGE, "soon")
    _refused(builddir.load(d), r"NODEFORGE_VERIFY_MAX_AGE_DAYS: 'soon'")


def test_a_valid_attested_report_moved_to_another_build_is_refused(tmp_path):
    one = builddir.load(make_build_dir(tmp_path / "one", variants=("vm",)))
    d = make_build_dir(tmp_path / "two", variants=("vm",))
    for name in (builddir.VERIFY, attest.ENVELOPE):
        shutil.copyfile(one.path / name, d / name)
    _refused(builddir.load(d), f"build_id \"{one.build_id}\" is another build's")


def test_promote_checks_the_signature_of_the_report_stored_in_glance(tmp_path):
    b = builddir.load(make_build_dir(tmp_path, variants=("vm",)))
    conn, [r] = _publish(b)
    assert g.download_verify_report(conn, conn.image.images[r.image_id]) == b.verify_attestation
    # Replaced in Glance (digest property updated too) by the bare verify.json, or by the same
    # report signed with another key: refused.
    for data, problem in ((b.verify_raw, "envelope: payloadType"),
                          (signed_envelope(b.verify_raw, ed25519.Ed25519PrivateKey.generate()), "signature")):
        img = conn.image.images[r.image_id]
        side = g.create_image(conn, {"name": "forged", "disk_format": "raw", "container_format": "bare",
                                     "os_hidden": True, "tags": [g.TAG_VERIFY_REPORT], f"{g.P}role": "verify-report"})
        conn.image.put(f"/images/{side['id']}/file", data=data)
        g.patch_image(conn, r.image_id, g.set_ops(img, {f"{g.P}verify_report": side["id"],
                                                        f"{g.P}verify_sha256": hashlib.sha256(data).hexdigest()}), "t")
        with pytest.raises(catalog.PromoteRefused, match=problem):
            catalog.promote(conn, r.image_id, RetentionPolicy())
    # The attestation publish stored: accepted.
    img = conn.image.images[r.image_id]
    side = g.create_image(conn, {"name": "again", "disk_format": "raw", "container_format": "bare", "os_hidden": True,
                                 "tags": [g.TAG_VERIFY_REPORT], f"{g.P}role": "verify-report"})
    conn.image.put(f"/images/{side['id']}/file", data=b.verify_attestation)
    g.patch_image(conn, r.image_id, g.set_ops(img, {f"{g.P}verify_report": side["id"], f"{g.P}verify_sha256":
                                                    hashlib.sha256(b.verify_attestation).hexdigest()}), "t")
    assert [s.action.value for s in catalog.promote(conn, r.image_id, RetentionPolicy())] == ["approve"]


def test_key_files_are_checked_and_never_shown(tmp_path, monkeypatch):
    key = tmp_path / "k" / "verifier.key"
    made = attest.load_key(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and attest.public_path(key).is_file()
    assert dsse.keyid(attest.load_key(key).public_key()) == dsse.keyid(made.public_key())
    secret = key.read_text()
    key.chmod(0o644)
    with pytest.raises(attest.AttestationError, match="readable by group or others") as err:
        attest.load_key(key)
    assert secret.splitlines()[1] not in str(err.value)
    key.chmod(0o600)
    key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(attest.AttestationError, match="not an unencrypted PEM private key"):
        attest.load_key(key)
    monkeypatch.setenv(attest.ENV_TRUST, str(tmp_path / "nowhere.pub"))
    with pytest.raises(attest.AttestationError, match="no such key file or directory"):
        attest.trusted_keys()
