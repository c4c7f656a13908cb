"""The real build (slow, shares the session image with test_image_build.py): the package base and cloud-init.

The root filesystem is built from the cached package base, recorded by key in
the manifest; cloud-init regenerates SSH host keys per instance, never DSA.
"""

from __future__ import annotations

import json
import re

import pytest

from nodeforge.imagebuild import build, lockfile, package_base as pb
from tests.imagebuild.test_image_build import _cat, _root_fs
from tests.prereq import require

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]


def test_manifest_records_the_package_base(built_image):
    base = built_image.manifest["package_base"]
    assert re.fullmatch(r"[0-9a-f]{64}", base["key"]) and re.fullmatch(r"[0-9a-f]{64}", base["sha256"])
    assert base["recipe"] == pb.RECIPE
    cache = build.default_dib_cache() / "package-base"
    entry = pb.BaseCache(cache).lookup(base["key"], evict=False)
    # A developer may have emptied the package-base cache since the image was
    # cached; in CI the image was built in this run, so the entry is there.
    require(entry is not None, f"package base {base['key'][:16]} no longer in {cache}")
    assert entry.meta["sha256"] == base["sha256"]
    assert entry.meta["inputs"]["packages"] and "kubelet" not in json.dumps(entry.meta["inputs"])
    assert str(lockfile.load(built_image.lockfile).minor("1.36").version) not in json.dumps(base)


@pytest.mark.parametrize("variant", ["baremetal", "vm"])
def test_cloud_init_never_generates_dsa_host_keys(built_image, variant, tmp_path):
    fs = _root_fs(built_image.image(variant), tmp_path)
    cfg = _cat(fs, f"/etc/cloud/cloud.cfg.d/90-nodeforge-{variant}.cfg")
    assert "ssh_genkeytypes: [ed25519, ecdsa, rsa]" in cfg
    assert "ssh_deletekeys: true" in cfg
