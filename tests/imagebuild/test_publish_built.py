"""The session's real build, verified by real boots, through publish, promote
and list on the local cloud (slow: it shares the one build and boot of the run).

What the synthetic-build tests in test_glance/test_catalog/test_signing cannot
show: a real qcow2 and a real UEFI raw image, signed and accepted by Glance's
own signature verification against Barbican, with Glance's os_hash_value equal
to the build's SHA512SUMS, and the real manifest travelling with them.
"""

from __future__ import annotations

import datetime
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from nodeforge import cli
from nodeforge.imageverify import builddir
from nodeforge.publish import glance as g
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.realbuild import linked_copy
from tests.imagebuild.test_signing import PASSPHRASE, _cert, _write_key

SCS_AND_MAGNUM = ("os_distro", "os_version", "architecture", "kube_version", "hw_firmware_type", "hw_machine_type",
                  "hw_disk_bus", "hw_scsi_model", "hw_rng_model", "image_build_date", "image_source",
                  "image_description", "image_original_user", "replace_frequency", "uuid_validity",
                  "provided_until")


@pytest.fixture
def cli_json(capsys, monkeypatch, devcloud):
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")

    def run(*args: str):
        capsys.readouterr()
        code = cli.main([*args, "-o", "json"])
        out, err = capsys.readouterr()
        assert code == 0, f"nodeforge {' '.join(args)} -> {code}: {err}"
        assert PASSPHRASE not in out + err and "PRIVATE KEY" not in out + err
        return json.loads(out)

    return run


def _sums(build_dir, name: str) -> dict[str, str]:
    out = {}
    for algo in ("sha256", "sha512"):
        for line in (build_dir / f"SHA{algo[3:]}SUMS").read_text().splitlines():
            digest, _, file = line.partition("  ")
            if file.lstrip("*") == name:
                out[algo] = digest
    return out


@pytest.mark.slow
@pytest.mark.devcloud
def test_real_build_publishes_signed_promotes_and_lists(verified_build, tmp_path, admin, tracker, cli_json,
                                                        monkeypatch):
    verified_dir, results = verified_build
    assert {v: r.passed for v, r in results.items()} == {"vm": True, "baremetal": True}
    d = tracker.build(linked_copy(verified_dir, tmp_path / verified_dir.name, with_verify=True))
    b = builddir.load(d)
    tracker.build_ids.add(b.build_id)

    # Signing key (encrypted; passphrase by reference) and its certificate in Barbican.
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    key_path = _write_key(tmp_path / "signing.pem", key, PASSPHRASE)
    (tmp_path / "signing.crt").write_bytes(_cert(key))
    monkeypatch.setenv("NF_TEST_PASS", PASSPHRASE)
    cert_id = cli_json("image", "signing-cert", "upload", str(tmp_path / "signing.crt"))["id"]
    tracker.secrets.append(cert_id)
    sign = ("--sign-key", str(key_path), "--sign-key-passphrase", "env:NF_TEST_PASS", "--sign-cert-id", cert_id)

    first = {r["variant"]: r for r in cli_json("image", "publish", str(d), *sign)}
    assert {v: r["action"] for v, r in first.items()} == {"vm": "uploaded", "baremetal": "uploaded"}
    manifest = json.loads((d / "manifest.json").read_text())
    for variant, r in first.items():
        img = g.get_image(admin, r["image_id"])
        name = b.variant(variant).path.name
        # Active means Glance verified the signature against the certificate in Barbican.
        assert img["status"] == "active" and img["img_signature_certificate_uuid"] == cert_id
        assert (img["os_hash_algo"], img["os_hash_value"]) == ("sha512", _sums(d, name)["sha512"])
        assert img["nodeforge_sha256"] == _sums(d, name)["sha256"]
        assert img["size"] == (d / name).stat().st_size
        assert img["disk_format"] == {"vm": "qcow2", "baremetal": "raw"}[variant]
        missing = [k for k in SCS_AND_MAGNUM if not img.get(k)]
        assert missing == [], f"{variant}: properties missing {missing}"
        assert img["kube_version"] == f"v{manifest['kubernetes']['version']}"
        assert img["hw_firmware_type"] == {"vm": "bios", "baremetal": "uefi"}[variant]
        assert (img.get("hw_qemu_guest_agent") == "yes") is (variant == "vm")
        assert img["min_disk"] >= 1 and img["min_ram"] >= 1
        assert (img["nodeforge_build_id"], img["nodeforge_variant"], img["nodeforge_verify"]) == \
            (b.build_id, variant, "passed")
        assert img["nodeforge_lockfile_sha256"] == manifest["lockfile"]["sha256"]
        assert {"nodeforge", "nodeforge-candidate", f"nodeforge-{variant}", f"nodeforge-k8s-{manifest['kubernetes']['minor']}"} \
            <= set(img["tags"]), img["tags"]
        # The real manifest, back from Glance by the image ID alone, verified by digest.
        assert json.loads(g.download_manifest(admin, img)) == manifest
        # And the real boot's signed verify report, which promote checks and judges again against this Glance image.
        assert g.download_verify_report(admin, img) == (d / "verify.intoto.json").read_bytes()
        assert g.verify_binding(img).image_sha512 == img["os_hash_value"]

    # A second publish of the same build uploads nothing.
    before = {i["id"] for i in tracker.images(b.build_id)}
    again = cli_json("image", "publish", str(d), *sign)
    assert {r["action"] for r in again} == {"exists"}
    assert {r["image_id"] for r in again} == {r["image_id"] for r in first.values()}
    assert {i["id"] for i in tracker.images(b.build_id)} == before

    # Promote both variants; template authors find them as approved.
    for r in first.values():
        cli_json("image", "promote", r["image_id"])
    minor = manifest["kubernetes"]["minor"]
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev-member")
    listed = {r["variant"]: r for r in cli_json("image", "list", "--approved", "--k8s", minor)
              if r["id"] in {x["image_id"] for x in first.values()}}
    assert set(listed) == {"vm", "baremetal"} and {r["verify"] for r in listed.values()} == {"passed"}
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")

    # A newer verified build of the same minor, variant and OS hides the real one when promoted.
    newer = tracker.build(make_build_dir(tmp_path / "newer", k8s=manifest["kubernetes"]["version"], variants=("vm",),
                                         build_time=datetime.datetime.now(datetime.timezone.utc)
                                         + datetime.timedelta(minutes=5)))
    scope = g.get_image(admin, first["vm"]["image_id"])["nodeforge_scope"]   # the real build's (its lockfile's)
    [n] = cli_json("image", "publish", str(newer), "--scope", scope)
    cli_json("image", "promote", n["image_id"])
    old_vm = g.get_image(admin, first["vm"]["image_id"])
    assert old_vm["os_hidden"] is True and "nodeforge-superseded" in old_vm["tags"]
    assert g.get_image(admin, first["baremetal"]["image_id"])["os_hidden"] is False   # another group
    assert g.get_image(admin, n["image_id"])["os_hidden"] is False
