"""The strict verify gate: ``verify.json`` must be the
``nodeforge-image-verify/2`` report of this build, this manifest and these
image bytes, with every check listed and passed; anything else is refused by
``builddir.load`` (status + reason), by ``image publish`` (nothing uploaded)
and by ``image promote`` (which judges the report stored in Glance again).

Fast tests run publish and promote against an in-memory Glance
(``fake_glance.py``); the ``devcloud`` ones do the same against the local
Glance.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nodeforge import cli
from nodeforge.imageverify import builddir
from nodeforge.imageverify import attest, boottest, verifyreport
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.fake_glance import FakeConn
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.verify_fixture import signed_envelope, variant_result, write_signed, write_verify

P = g.P


# --------------------------------------------------------------------------
# Forged, lenient, truncated, stale and misbound reports for variant vm of build ``b``
# (each: bytes from the product's valid report of ``b``, and what the refusal must name)

def _valid(b: builddir.BuildDir) -> dict:
    return json.loads(b.verify_raw)


def _edit(fn):
    """A report made by changing the product's valid one (a forger's hand edit)."""
    def make(b):
        doc = _valid(b)
        fn(doc, b)
        return json.dumps(doc, indent=2).encode()
    return make


def _set(doc, path: str, value):
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value


def _del(doc, path: str):
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    del node[last]


def _check(doc, check_id: str) -> dict:
    return next(c for c in doc["variants"]["vm"]["checks"] if c["id"] == check_id)


def _rebind(doc, key: str, value: str):
    """Change ``key`` everywhere a consistent forgery has to (top level, both sections, the manifest check)."""
    doc[key] = value
    for section in doc["variants"].values():
        section[key] = value
        if key == "manifest_sha256":
            m = next(c for c in section["checks"] if c["id"] == "manifest")
            m["expected"][verifyreport.MANIFEST_ITEM] = value
            m["items"][0]["expected"] = value


def _other_bytes(b: builddir.BuildDir) -> bytes:
    """The product's writer, but the verdict was reached on other image bytes."""
    other = hashlib.sha256(b"other image").hexdigest()
    r = variant_result(b, "vm", image_sha256=other, image_sha512=hashlib.sha512(b"other image").hexdigest())
    doc = _valid(b)
    doc["variants"]["vm"] = r.section(b)
    return json.dumps(doc).encode()


def _forged_pass(doc, b):
    """A failed verdict flipped to passed, checks and all (items still say what was observed)."""
    failed = variant_result(b, "vm", passed=False).section(b)
    failed["passed"] = True
    doc["variants"]["vm"] = failed


def _forged_check(doc, b):
    failed = variant_result(b, "vm", passed=False).section(b)
    failed["passed"] = True
    for c in failed["checks"]:
        c["passed"] = True
    failed["summary"] = {"checks": len(failed["checks"]), "passed": len(failed["checks"]), "failed": []}
    doc["variants"]["vm"] = failed


def _without_boot(doc, b):
    section = doc["variants"]["vm"]
    section["checks"] = [c for c in section["checks"] if c["id"] != "boot"]
    section["summary"] = {"checks": len(section["checks"]), "passed": len(section["checks"]), "failed": []}


def _other_manifest_check(doc, b):
    """The image was compared with another manifest (check consistent in itself)."""
    m = _check(doc, "manifest")
    m["expected"][verifyreport.MANIFEST_ITEM] = m["items"][0]["expected"] = "cd" * 32


def _old_v1(b):
    """What the /1 writer left: no per-variant binding, no sha512."""
    doc = _valid(b)
    doc["schema"] = "nodeforge-image-verify/1"
    for section in doc["variants"].values():
        for key in ("build_id", "manifest_sha256", "image_sha512"):
            section.pop(key)
    return json.dumps(doc).encode()


FORGERIES = {
    "lenient passed": (lambda b: b'{"passed": true}', r"schema is missing"),
    "lenient result ok": (lambda b: b'{"result": "ok"}', r"schema is missing"),
    "lenient section": (lambda b: json.dumps({"variants": {"vm": {"passed": True, "checks": [
        {"id": "kubelet-version", "result": "pass"}]}}}).encode(), r"schema is missing"),
    "truncated": (lambda b: b.verify_raw[: len(b.verify_raw) // 2], r"not valid JSON"),
    "empty file": (lambda b: b"", r"not valid JSON"),
    "not an object": (lambda b: b"[]", r"not a JSON object"),
    "old schema /1": (_old_v1, r'schema is "nodeforge-image-verify/1", not \'nodeforge-image-verify/2\''),
    "schema only bumped": (_edit(lambda d, b: _set(d, "schema", "nodeforge-image-verify/3")),
                           r"schema is \"nodeforge-image-verify/3\""),
    "missing checks": (_edit(lambda d, b: _del(d, "variants.vm.checks")), r"variants\.vm\.checks: missing key 'checks'"),
    "empty checks": (_edit(lambda d, b: _set(d, "variants.vm.checks", [])), r"variants\.vm\.checks is empty"),
    "missing image_sha256": (_edit(lambda d, b: _del(d, "variants.vm.image_sha256")),
                             r"variants\.vm\.image_sha256: missing key"),
    "missing build_id": (_edit(lambda d, b: _del(d, "build_id")), r": build_id: missing key 'build_id'"),
    "unknown top-level field": (_edit(lambda d, b: _set(d, "approved_by", "me")),
                                r"approved_by: unknown key \(allowed: schema, build_id"),
    "unknown section field": (_edit(lambda d, b: _set(d, "variants.vm.override", True)),
                              r"variants\.vm\.override: unknown key"),
    "unknown check field": (_edit(lambda d, b: _check(d, "boot").update(waived=True)),
                            r"variants\.vm\.checks\[0\]\.waived: unknown key"),
    "unknown variant": (_edit(lambda d, b: _set(d, "variants.container", d["variants"]["vm"])),
                        r"variants\.container is not a variant"),
    "check of unknown shape": (_edit(lambda d, b: _check(d, "manifest").update(items=[])),
                               r"\.items is not a non-empty list \(check 'manifest'\)"),
    "boot check missing": (_edit(_without_boot), r"variants\.vm\.checks has no 'boot' check"),
    "forged pass": (_edit(_forged_pass), r"variants\.vm\.passed is true but checks NF-HARD-003 failed"),
    "forged check": (_edit(_forged_check), r"checks\[\d+\]\.passed is true but its items say otherwise "
                                           r"\(check 'NF-HARD-003'\)"),
    "passed with an error": (_edit(lambda d, b: _set(d, "variants.vm.error", "QEMU exited")),
                             r"variants\.vm\.passed is true but error is set"),
    "summary forged": (_edit(lambda d, b: _set(d, "variants.vm.summary", {"checks": 1, "passed": 1, "failed": []})),
                       r"variants\.vm\.summary does not match its checks"),
    "section of another build": (_edit(lambda d, b: _set(d, "variants.vm.build_id", "nf-other")),
                                 r"variants\.vm\.build_id \"nf-other\" is not the report's build_id"),
    "wrong build id": (_edit(lambda d, b: _rebind(d, "build_id", "nf-test-other-build")),
                       r"build_id \"nf-test-other-build\" is another build's"),
    "wrong manifest digest": (_edit(lambda d, b: _rebind(d, "manifest_sha256", "ab" * 32)),
                              r"manifest_sha256 is another manifest's \(report abababab"),
    "manifest check of another manifest": (_edit(_other_manifest_check),
                                           r"checks\[manifest\] compared the image with another manifest"),
    "other image bytes": (_other_bytes, r"variants\.vm\.image_sha256 is for other image bytes"),
    # strict JSON (no NaN/Infinity, no key twice), bounded size and depth
    "infinite seconds": (_edit(lambda d, b: _set(d, "variants.vm.seconds.total", float("inf"))),
                         r"not valid JSON \(Infinity is not a number JSON allows\)"),
    "NaN seconds": (_edit(lambda d, b: _set(d, "variants.vm.seconds.total", float("nan"))),
                    r"not valid JSON \(NaN is not a number JSON allows\)"),
    "a key twice": (lambda b: b.verify_raw.replace(b'"passed": true', b'"passed": false, "passed": true', 1),
                    r"'passed' appears twice in one object"),
    "huge": (lambda b: b.verify_raw + b" " * (16 << 20), r"larger than 16 MiB"),
    "deep": (lambda b: b"[" * 100000 + b"]" * 100000, r"nested too deeply|not a JSON object"),
}


@pytest.fixture
def good(tmp_path) -> builddir.BuildDir:
    """A build whose vm and baremetal passed, as ``image verify`` writes it."""
    return builddir.load(make_build_dir(tmp_path, verify="passed"))


def _write(b: builddir.BuildDir, data: bytes) -> builddir.BuildDir:
    """``data`` as the build's report, signed with the trusted verifier key: what the judge says
    about a bad report a key holder signed (an unsigned edit fails earlier, on its signature)."""
    write_signed(b.path, data)
    return builddir.load(b.path)


def test_the_writer_emits_exactly_what_the_validator_requires(good):
    doc = verifyreport.parse(good.verify_raw)
    assert doc["schema"] == verifyreport.SCHEMA and set(doc) == set(verifyreport.TOP_FIELDS)
    for v, section in doc["variants"].items():
        assert set(section) == set(verifyreport.SECTION_FIELDS)
        assert (section["build_id"], section["manifest_sha256"]) == (good.build_id, good.manifest_sha256)
        assert (section["image_sha256"], section["image_sha512"]) == (good.variant(v).sha256, good.variant(v).sha512)
        assert {c["id"] for c in section["checks"]} >= set(verifyreport.REQUIRED_CHECKS)
        assert all(set(c) == set(verifyreport.CHECK_FIELDS) for c in section["checks"])
        assert good.variant(v).verify is builddir.VerifyStatus.PASSED


def test_variant_names_are_the_builds():
    assert set(verifyreport.VARIANTS) == set(builddir.VARIANT_FORMATS)


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_builddir_load_refuses(good, name):
    make, problem = FORGERIES[name]
    b = _write(good, make(good))
    vm = b.variant("vm")
    assert vm.verify is not builddir.VerifyStatus.PASSED
    assert vm.verify is builddir.VerifyStatus.FAILED, vm.verify_reason
    assert vm.verify_reason.startswith(str(good.path / "verify.json") + ": ")
    assert _search(problem, vm.verify_reason)


def test_a_changed_manifest_unbinds_the_report(good):
    """The real-world 'wrong manifest digest': the manifest changed after verify."""
    manifest = good.path / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"amd64"', '"amd64" ', 1))
    vm = builddir.load(good.path).variant("vm")
    assert vm.verify is builddir.VerifyStatus.FAILED and "manifest_sha256 is another manifest's" in vm.verify_reason


def test_a_changed_image_sum_unbinds_the_report(good):
    """SHA256SUMS says other bytes than the report was reached on (image rebuilt, report kept)."""
    sums = good.path / "SHA256SUMS"
    name = good.variant("baremetal").path.name
    sums.write_text(sums.read_text().replace(good.variant("baremetal").sha256, "e" * 64))
    b = builddir.load(good.path)
    assert b.variant("vm").verify is builddir.VerifyStatus.PASSED
    assert b.variant("baremetal").verify is builddir.VerifyStatus.FAILED
    assert "variants.baremetal.image_sha256 is for other image bytes" in b.variant("baremetal").verify_reason, name


def _search(pattern: str, text: str) -> bool:
    import re

    assert re.search(pattern, text), f"{pattern!r} not in {text!r}"
    return True


# --------------------------------------------------------------------------
# The publish path: refused before anything reaches Glance

@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_publish_refuses(good, name):
    make, problem = FORGERIES[name]
    b = _write(good, make(good))
    conn = FakeConn()
    with pytest.raises(g.NotVerified) as err:
        g.Publisher(conn, RetentionPolicy()).publish(b)
    assert _search(problem, str(err.value)) and "not published" in str(err.value)
    assert conn.image.images == {} and not [c for c in conn.image.calls if c[0] != "GET"]


@pytest.mark.parametrize("verify, status", [(None, "absent"), ("failed", "failed")])
def test_publish_refuses_unverified_and_failed_builds(tmp_path, verify, status):
    b = builddir.load(make_build_dir(tmp_path, verify=verify))
    conn = FakeConn()
    with pytest.raises(g.NotVerified, match=f"boot verification is '{status}'"):
        g.Publisher(conn, RetentionPolicy()).plan(b).results
    assert conn.image.calls == []


def test_publish_refuses_a_build_with_one_unverified_variant_before_uploading_either(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    write_verify(d, "passed", variants=["vm"])
    conn = FakeConn()
    with pytest.raises(g.NotVerified, match=r"baremetal.*'absent'.*variants\.baremetal missing"):
        g.Publisher(conn, RetentionPolicy()).publish(builddir.load(d))
    assert conn.image.images == {}
    [r] = g.Publisher(conn, RetentionPolicy()).publish(builddir.load(d), ["vm"])   # the verified one alone
    assert r.action == "uploaded"


def test_publish_cli_prints_why(tmp_path, run_cli, monkeypatch):
    d = make_build_dir(tmp_path, verify="passed")
    (d / "verify.json").write_text('{"passed": true}')
    monkeypatch.setattr("nodeforge.commands.options.AppContext.connect", lambda self: FakeConn())
    code, _, err = run_cli("image", "publish", str(d), "--dry-run")
    assert code == 1 and "not published" in err and "schema is missing" in err


def test_publish_stores_the_judged_report_beside_the_image(good):
    conn = FakeConn()
    results = {r.variant: r for r in g.Publisher(conn, RetentionPolicy()).publish(good)}
    for v, r in results.items():
        img = conn.image.images[r.image_id]
        report = conn.image.images[r.verify_report_id]
        assert img[f"{P}verify_report"] == r.verify_report_id and img[f"{P}verify"] == "passed"
        assert img[f"{P}verify_sha256"] == hashlib.sha256(good.verify_attestation).hexdigest()
        assert report[f"{P}role"] == "verify-report" and report["os_hidden"] is True
        assert report["tags"] == [g.TAG_VERIFY_REPORT] and f"{P}uploader" not in report
        assert g.download_verify_report(conn, img) == good.verify_attestation
        assert attest.open_report(good.verify_attestation, "t").report == good.verify_raw
        assert g.verify_binding(img) == verifyreport.Binding(
            variant=v, build_id=good.build_id, manifest_sha256=good.manifest_sha256,
            image_sha256=good.variant(v).sha256, image_sha512=good.variant(v).sha512, origin="the Glance image")


def test_publish_again_after_a_new_verify_attaches_the_new_report(good):
    conn = FakeConn()
    pub = g.Publisher(conn, RetentionPolicy())
    [first] = pub.publish(good, ["vm"])
    r = variant_result(good, "vm")
    r.seconds = {"total": 99.0}
    boottest.write_report(good.path, good, [r])   # verified again: other report bytes, same image
    again = builddir.load(good.path)
    [second] = pub.publish(again, ["vm"])
    assert (second.action, second.image_id) == ("exists", first.image_id)
    assert second.verify_report_id != first.verify_report_id
    assert first.verify_report_id not in conn.image.images          # the replaced report is gone
    img = conn.image.images[first.image_id]
    assert g.download_verify_report(conn, img) == again.verify_attestation
    catalog.promote(conn, first.image_id, RetentionPolicy())
    [third] = pub.publish(again, ["vm"])
    assert third.verify_report_id == second.verify_report_id         # nothing to attach


# --------------------------------------------------------------------------
# The promote path: the report in Glance, judged again against the Glance image

def _published(b: builddir.BuildDir) -> tuple[FakeConn, dict[str, str]]:
    conn = FakeConn()
    return conn, {r.variant: r.image_id for r in g.Publisher(conn, RetentionPolicy()).publish(b)}


def _swap_report(conn: FakeConn, image_id: str, data: bytes, *, sign: bool = True) -> None:
    """Replace the image's verify report consistently (new report image, its digest on the node
    image): ``data`` signed with the trusted verifier key (``sign``), else as it is."""
    data = signed_envelope(data) if sign else data
    img = conn.image.images[image_id]
    rep = g.create_image(conn, {"name": "forged.verify.json", "disk_format": "raw", "container_format": "bare",
                                "os_hidden": True, "tags": [g.TAG_VERIFY_REPORT], f"{P}role": "verify-report"})
    conn.image.put(f"/images/{rep['id']}/file", data=data)
    g.patch_image(conn, image_id, g.set_ops(img, {f"{P}verify_report": rep["id"],
                                                  f"{P}verify_sha256": hashlib.sha256(data).hexdigest(),
                                                  f"{P}verify": "passed"}), "forge")


def _assert_still_candidate(conn: FakeConn, image_id: str) -> None:
    img = conn.image.images[image_id]
    assert g.TAG_CANDIDATE in img["tags"] and g.TAG_APPROVED not in img["tags"]
    assert img["visibility"] != "public" and f"{P}promoted_at" not in img


def test_promote_accepts_the_report_publish_stored(good):
    conn, ids = _published(good)
    steps = catalog.promote(conn, ids["vm"], RetentionPolicy())
    assert [(s.image_id, s.action.value) for s in steps] == [(ids["vm"], "approve")]
    img = conn.image.images[ids["vm"]]
    assert g.TAG_APPROVED in img["tags"] and img["visibility"] == "public"
    assert conn.image.images[img[f"{P}verify_report"]]["visibility"] == "public"   # auditable with the image


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_promote_refuses(good, name):
    make, problem = FORGERIES[name]
    conn, ids = _published(good)
    _swap_report(conn, ids["vm"], make(good))
    with pytest.raises(catalog.PromoteRefused) as err:
        catalog.promote(conn, ids["vm"], RetentionPolicy())
    assert _search(problem, str(err.value)) and "cannot promote" in str(err.value)
    _assert_still_candidate(conn, ids["vm"])


def test_promote_refuses_a_report_changed_in_glance(good):
    conn, ids = _published(good)
    img = conn.image.images[ids["vm"]]
    conn.image.data[img[f"{P}verify_report"]] = good.verify_attestation
    conn.image.data[img[f"{P}verify_report"]] += b" "
    with pytest.raises(catalog.PromoteRefused, match="does not match the image's nodeforge_verify_sha256"):
        catalog.promote(conn, ids["vm"], RetentionPolicy())
    _assert_still_candidate(conn, ids["vm"])


def test_promote_refuses_a_deleted_report(good):
    conn, ids = _published(good)
    g.delete_image(conn, conn.image.images[ids["vm"]][f"{P}verify_report"])
    with pytest.raises(catalog.PromoteRefused, match="verify report image .* is gone"):
        catalog.promote(conn, ids["vm"], RetentionPolicy())


def test_promote_does_not_trust_the_bare_verify_string(good):
    """An image that says nodeforge_verify=passed without a report (published before reports, or hand-set)."""
    conn, ids = _published(good)
    img = conn.image.images[ids["vm"]]
    g.patch_image(conn, ids["vm"], [{"op": "remove", "path": f"/{P}verify_report"},
                                    {"op": "remove", "path": f"/{P}verify_sha256"}], "strip")
    assert img[f"{P}verify"] == "passed"
    with pytest.raises(catalog.PromoteRefused, match="carries no verify report"):
        catalog.promote(conn, ids["vm"], RetentionPolicy())
    _assert_still_candidate(conn, ids["vm"])


def test_promote_refuses_a_valid_failed_report_under_a_passed_string(good):
    conn, ids = _published(good)
    # This build's own report, but the vm verdict is the failed one (valid, bound to these bytes).
    doc = _valid(good)
    doc["variants"]["vm"] = variant_result(good, "vm", passed=False).section(good)
    _swap_report(conn, ids["vm"], json.dumps(doc).encode())
    with pytest.raises(catalog.PromoteRefused, match=r"variants\.vm did not pass: checks NF-HARD-003 failed"):
        catalog.promote(conn, ids["vm"], RetentionPolicy())
    assert conn.image.images[ids["vm"]][f"{P}verify"] == "passed"   # the string said so all along


def test_promote_refuses_the_report_of_the_other_variant(good):
    """The baremetal image carrying a report with only a vm section: no verdict for baremetal."""
    conn, ids = _published(good)
    doc = _valid(good)
    del doc["variants"]["baremetal"]
    _swap_report(conn, ids["baremetal"], json.dumps(doc).encode())
    with pytest.raises(catalog.PromoteRefused, match=r"variants\.baremetal missing"):
        catalog.promote(conn, ids["baremetal"], RetentionPolicy())


def test_promote_binds_the_report_to_glances_own_hash(good):
    """Report and nodeforge_sha256 forged together for other bytes: Glance's os_hash_value still says no."""
    conn, ids = _published(good)
    other = hashlib.sha256(b"other").hexdigest()
    doc = _valid(good)
    doc["variants"]["vm"] = variant_result(good, "vm", image_sha256=other,
                                           image_sha512=hashlib.sha512(b"other").hexdigest()).section(good)
    _swap_report(conn, ids["vm"], json.dumps(doc).encode())
    g.patch_image(conn, ids["vm"], [{"op": "replace", "path": f"/{P}sha256", "value": other}], "forge")
    with pytest.raises(catalog.PromoteRefused,
                       match=r"variants\.vm\.image_sha512 is for other image bytes .*the Glance image"):
        catalog.promote(conn, ids["vm"], RetentionPolicy())
    _assert_still_candidate(conn, ids["vm"])


def test_promote_refuses_a_report_of_another_build_moved_over(tmp_path, good):
    conn, ids = _published(good)
    other = builddir.load(make_build_dir(tmp_path / "other", verify="passed"))
    _swap_report(conn, ids["vm"], other.verify_attestation, sign=False)
    with pytest.raises(catalog.PromoteRefused, match=f"build_id \"{other.build_id}\" is another build's"):
        catalog.plan(conn, ids["vm"], RetentionPolicy()).steps


# --------------------------------------------------------------------------
# The pipeline's verify stage skips the boot only on a strictly passing report

class _Ctx:
    def __init__(self, build_dir: Path):
        self.previous = {"build": {"build_dir": str(build_dir)}}
        self.minor = "1.36"
        self.said: list[str] = []
        self.config = type("Cfg", (), {"verify_timeout": 1, "accel": "tcg", "cache_dir": None, "work_dir": None})()

    def say(self, line: str) -> None:
        self.said.append(line)


def test_verify_stage_skips_the_boot_only_for_a_strict_pass(good, monkeypatch):
    from nodeforge.pipeline import stages

    booted = []

    def fake_verify(req):
        booted.append(req.build_dir)
        b = builddir.load(req.build_dir)
        results = [variant_result(b, v) for v in sorted(b.variants)]
        boottest.write_report(req.build_dir, b, results)
        return results

    monkeypatch.setattr(boottest, "verify", fake_verify)
    ctx = _Ctx(good.path)
    assert stages.verify(ctx)["variants"] == {"vm": "passed", "baremetal": "passed"} and booted == []
    (good.path / "verify.json").write_text(json.dumps({"variants": {"vm": {"passed": True},
                                                                    "baremetal": {"passed": True}}}))
    ctx = _Ctx(good.path)
    assert stages.verify(ctx)["variants"] == {"vm": "passed", "baremetal": "passed"} and booted == [good.path]
    assert any("vm: " in line and "schema is missing" in line and line.endswith("; booting") for line in ctx.said)


def test_verify_stage_refuses_a_boot_whose_report_does_not_pass(good, monkeypatch):
    from nodeforge.pipeline import stages

    def fake_verify(req):   # claims success, but leaves a report for other bytes
        b = builddir.load(req.build_dir)
        results = [variant_result(b, v, image_sha256="f" * 64) for v in sorted(b.variants)]
        boottest.write_report(req.build_dir, b, results)
        return results

    (good.path / "verify.json").unlink()
    monkeypatch.setattr(boottest, "verify", fake_verify)
    with pytest.raises(boottest.VerifyFailed, match="image_sha256 is for other image bytes"):
        stages.verify(_Ctx(good.path))


# --------------------------------------------------------------------------
# Against the local Glance (devcloud): the same gate with the real service

@pytest.mark.devcloud
def test_devcloud_publish_refuses_forged_reports_and_uploads_nothing(tmp_path, admin, tracker, policy):
    d = tracker.build(make_build_dir(tmp_path, variants=("vm",)))
    good = builddir.load(d)
    for name in ("lenient passed", "old schema /1", "other image bytes", "wrong build id"):
        make, problem = FORGERIES[name]
        b = _write(good, make(good))
        with pytest.raises(g.NotVerified) as err:
            g.Publisher(admin, policy).publish(b)
        assert _search(problem, str(err.value))
    assert tracker.images(good.build_id) == []


@pytest.mark.devcloud
def test_devcloud_promote_judges_the_report_stored_in_glance(tmp_path, admin, tracker, policy):
    """Publish stores the report; tampering with it in Glance (content, reference, another build's
    report, the bare string) is refused by promote; the intact one is accepted."""
    b = builddir.load(tracker.build(make_build_dir(tmp_path, k8s="1.9131.0", variants=("vm",))))
    [r] = g.Publisher(admin, policy).publish(b)
    img = g.get_image(admin, r.image_id)
    assert g.download_verify_report(admin, img) == b.verify_attestation
    report = g.get_image(admin, r.verify_report_id)
    assert report["os_hidden"] is True and report["os_hash_value"] == hashlib.sha512(b.verify_attestation).hexdigest()

    def swap(data: bytes, sign: bool = True) -> str:
        data = signed_envelope(data) if sign else data
        forged = g.create_image(admin, {"name": f"{img['name']}.forged.verify.json", "disk_format": "raw",
                                        "container_format": "bare", "os_hidden": True,
                                        "tags": [g.TAG_VERIFY_REPORT], f"{P}role": "verify-report",
                                        f"{P}build_id": b.build_id, f"{P}variant": "vm"})
        resp = admin.image.put(f"/images/{forged['id']}/file", data=data,
                               headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code < 400, resp.text
        current = g.get_image(admin, r.image_id)
        g.patch_image(admin, r.image_id, g.set_ops(current, {
            f"{P}verify_report": forged["id"], f"{P}verify_sha256": hashlib.sha256(data).hexdigest()}), "forge")
        return forged["id"]

    for name in ("lenient passed", "truncated", "unknown section field", "old schema /1", "wrong manifest digest",
                 "other image bytes", "forged pass"):
        make, problem = FORGERIES[name]
        swap(make(b))
        with pytest.raises(catalog.PromoteRefused) as err:
            catalog.promote(admin, r.image_id, policy)
        assert _search(problem, str(err.value)), name
    other = builddir.load(tracker.build(make_build_dir(tmp_path / "other", variants=("vm",))))
    swap(other.verify_attestation, sign=False)             # another build's report, signed as it is
    with pytest.raises(catalog.PromoteRefused, match="is another build's"):
        catalog.promote(admin, r.image_id, policy)
    swap(b.verify_raw, sign=False)                          # this build's report, but not signed
    with pytest.raises(catalog.PromoteRefused, match="envelope"):
        catalog.promote(admin, r.image_id, policy)
    # Content changed behind the recorded digest.
    current = g.get_image(admin, r.image_id)
    g.patch_image(admin, r.image_id, g.set_ops(current, {f"{P}verify_report": r.verify_report_id,
                                                         f"{P}verify_sha256": "0" * 64}), "forge")
    with pytest.raises(catalog.PromoteRefused, match="does not match the image's nodeforge_verify_sha256"):
        catalog.promote(admin, r.image_id, policy)
    # The bare string alone.
    current = g.get_image(admin, r.image_id)
    g.patch_image(admin, r.image_id, [{"op": "remove", "path": f"/{P}verify_report"},
                                      {"op": "remove", "path": f"/{P}verify_sha256"}], "strip")
    with pytest.raises(catalog.PromoteRefused, match="carries no verify report"):
        catalog.promote(admin, r.image_id, policy)
    assert "nodeforge-approved" not in g.get_image(admin, r.image_id)["tags"]
    # Publishing the verified build again re-attaches its report; then promote accepts it.
    [again] = g.Publisher(admin, policy).publish(b)
    assert again.action == "exists" and again.verify_report_id
    catalog.promote(admin, r.image_id, policy)
    img = g.get_image(admin, r.image_id)
    assert "nodeforge-approved" in img["tags"]
    assert g.get_image(admin, img[f"{P}verify_report"])["visibility"] == "public"


@pytest.mark.devcloud
def test_devcloud_promote_cli_says_why(tmp_path, admin, tracker, policy, monkeypatch, capsys):
    b = builddir.load(tracker.build(make_build_dir(tmp_path, k8s="1.9132.0", variants=("vm",))))
    [r] = g.Publisher(admin, policy).publish(b)
    g.patch_image(admin, r.image_id, [{"op": "replace", "path": f"/{P}verify_sha256", "value": "0" * 64}], "x")
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")
    capsys.readouterr()
    assert cli.main(["image", "promote", r.image_id]) == 1
    err = capsys.readouterr().err
    assert "cannot promote" in err and "nodeforge_verify_sha256" in err
    assert g.get_image(admin, r.image_id)["visibility"] == "private"
