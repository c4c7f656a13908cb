"""``image diff`` between two node images in the session's Glance (devcloud).

Two small factory builds with per-file manifests (B: a newer openssl and one
changed file) are published; the diff, read back through the manifests and
per-file manifests stored beside the images, names exactly those. A third
build of A's content compares as the same content (exit 0), whatever its
build id and image bytes.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from nodeforge import cli
from nodeforge.imageverify import builddir
from nodeforge.publish import diff as imgdiff, glance as g
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.test_image_diff import PACKAGES, _pair

pytestmark = pytest.mark.devcloud


def test_image_diff_between_two_glance_images(tmp_path, admin, tracker, policy, capsys):
    newer = [dict(p, version="3.0.18-1~deb12u1") if p["name"] == "openssl" else p for p in PACKAGES]
    a, b = _pair(tmp_path / "ab", b_packages=newer, b_extra={"etc/hostname": "other\n"}, verify="passed",
                 variants=("vm",))
    a2, _ = _pair(tmp_path / "again", verify="passed", variants=("vm",))
    ids = {}
    for name, d in (("a", a), ("b", b), ("a2", a2)):
        r = g.Publisher(admin, policy).publish(builddir.load(tracker.build(d)))[0]
        assert r.action == "uploaded"
        img = g.get_image(admin, r.image_id)
        files = g.get_image(admin, img[imgdiff.FILES_IMAGE])      # stored beside it, hidden, digest-linked
        assert files["os_hidden"] is True and files["tags"] == [imgdiff.FILES_TAG]
        assert img[imgdiff.FILES_SHA256] == hashlib.sha256((d / "files.jsonl").read_bytes()).hexdigest()
        ids[name] = r.image_id

    d = imgdiff.diff_images(admin, ids["a"], ids["b"])
    assert not d.identical
    assert d.packages.changed == [{"name": "openssl", "arch": "amd64", "old": "3.0.17-1~deb12u2",
                                   "new": "3.0.18-1~deb12u1"}]
    assert not d.packages.added and not d.packages.removed and d.artifacts.identical
    assert [c["path"] for c in d.files.changed] == ["/etc/hostname"] and not d.files.added and not d.files.removed
    assert d.properties_changed == {}, d.properties_changed
    assert {"os_hash_value", "nodeforge_sha256"} <= set(d.data_changed)       # other bytes: reported, no difference
    assert d.identity_changed["glance.id"] == [ids["a"], ids["b"]]

    capsys.readouterr()
    assert cli.main(["--os-cloud", "nodeforge-dev", "-o", "json", "image", "diff", ids["a"], ids["b"]]) == 10
    doc = json.loads(capsys.readouterr().out)
    assert doc["packages"]["changed"][0]["name"] == "openssl" and doc["files"]["counts"]["changed"] == 1
    assert cli.main(["--os-cloud", "nodeforge-dev", "image", "diff", ids["a"], ids["a2"]]) == 0
    assert "same content" in capsys.readouterr().out

    # A property that differs is a difference (here: the variant's verify status).
    img = g.get_image(admin, ids["a2"])
    g.patch_image(admin, ids["a2"], g.set_ops(img, {"os_distro": "debian-other"}), "test: change a property")
    d = imgdiff.diff_images(admin, ids["a"], ids["a2"])
    assert d.properties_changed == {"os_distro": ["debian", "debian-other"]} and not d.identical
