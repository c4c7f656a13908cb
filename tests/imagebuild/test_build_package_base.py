"""The real build (slow, shares the session image with test_image_build.py): the package base and cloud-init.

The root filesystem is built from the cached package base, recorded by key in
the manifest; cloud-init regenerates SSH host keys per instance, never DSA.
The check of the package-base record also runs, quickly, on a prepared cache,
where it is seen to fail (a different tarball, a missing entry under CI).
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from nodeforge.imagebuild import build, package_base as pb
from nodeforge.pins import lockfile
from tests.imagebuild.image_files import cat as _cat, root_fs as _root_fs
from tests.prereq import require


def check_recorded_base(cache: Path, base: dict, k8s_version: str) -> None:
    """What the manifest says about the package base agrees with the cache entry under ``cache``."""
    assert re.fullmatch(r"[0-9a-f]{64}", base["key"]) and re.fullmatch(r"[0-9a-f]{64}", base["sha256"])
    assert base["recipe"] == pb.RECIPE
    entry = pb.BaseCache(cache).lookup(base["key"], evict=False)
    # A developer may have emptied the package-base cache since the image was
    # cached; in CI the image was built in this run, so the entry is there.
    require(entry is not None, f"package base {base['key'][:16]} no longer in {cache}")
    assert entry.meta["sha256"] == base["sha256"], f"cache entry {entry.path} is not the base the manifest records"
    assert entry.meta["inputs"]["packages"] and "kubelet" not in json.dumps(entry.meta["inputs"])
    assert k8s_version not in json.dumps(base)


@pytest.mark.slow
@pytest.mark.devcloud
def test_manifest_records_the_package_base(built_image):
    check_recorded_base(build.default_dib_cache() / "package-base", built_image.manifest["package_base"],
                        str(lockfile.load(built_image.lockfile).minor("1.36").version))


def test_the_package_base_check_fails_on_a_missing_or_different_entry(tmp_path, monkeypatch):
    """The check above on a prepared cache (quick; the real one needs a build): it
    passes on the right entry, fails on another tarball, and a missing entry is a
    failure under CI=true (a skip that says what was not checked otherwise)."""
    cache, key = tmp_path / "package-base", "ab" * 32

    def produce(tar: Path) -> None:
        with tarfile.open(tar, "w:gz") as t:
            info = tarfile.TarInfo("etc/hostname")
            t.addfile(info)

    entry = pb.BaseCache(cache).store(key, produce, inputs={"packages": ["openssh-server"], "suite": "bookworm"})
    base = {"key": key, "sha256": entry.meta["sha256"], "recipe": pb.RECIPE}
    check_recorded_base(cache, base, "1.36.0")
    with pytest.raises(AssertionError, match="is not the base the manifest records"):
        check_recorded_base(cache, {**base, "sha256": "cd" * 32}, "1.36.0")
    shutil.rmtree(entry.path)
    monkeypatch.setenv("CI", "true")
    missing = re.escape(f"prerequisite missing in CI: package base {key[:16]} no longer in {cache}")
    with pytest.raises(pytest.fail.Exception, match=missing):
        check_recorded_base(cache, base, "1.36.0")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="not checked: package base"):
        check_recorded_base(cache, base, "1.36.0")


@pytest.mark.slow
@pytest.mark.devcloud
@pytest.mark.parametrize("variant", ["baremetal", "vm"])
def test_first_boot_generates_ed25519_and_ecdsa_host_keys_only(built_image, variant, tmp_path):
    """cloud-init (per instance) and the image's own unit (when cloud-init has not) make the same
    two types: never DSA, and no RSA (an RSA-3072 key is seconds of a first boot's CPU)."""
    fs = _root_fs(built_image.image(variant), tmp_path)
    cfg = _cat(fs, f"/etc/cloud/cloud.cfg.d/90-nodeforge-{variant}.cfg")
    assert "ssh_genkeytypes: [ed25519, ecdsa]\n" in cfg
    assert "ssh_deletekeys: true" in cfg
    unit = _cat(fs, "/etc/systemd/system/nodeforge-ssh-host-keys.service")
    types = sorted(line.split(" -t ")[1].split()[0] for line in unit.splitlines() if line.startswith("ExecStart="))
    assert types == ["ecdsa", "ed25519"]
