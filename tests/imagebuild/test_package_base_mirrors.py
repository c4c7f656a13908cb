"""The package base and the Debian mirror: with an OS package lock the mirror is only a transport.

* the cache key leaves the mirrors out when the build has a lock (every .deb
  pinned by version and checked by its locked sha256) and keeps them when it
  has none (those keys stay as they were);
* the image does not carry the build host's mirror: the normalisation removes
  the apt sources diskimage-builder wrote and replaces the mirror settings in
  its environment record, so two builds from different mirrors have the same
  per-file manifest;
* the security fixture's re-versioned .deb is byte-deterministic, so the moved
  lock (and the key) is the same on every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from nodeforge.imagebuild import build, contents, package_base as pb, render, reproducible
from nodeforge.oslock.lock import LockedPackage
from tests.demo.fixture_artifacts import make_demo
from tests.imagebuild.test_package_base import MIRRORS, _plan
from tests.oslock.aptrepo import lock_template, reversion

OTHER = {"main": "http://127.0.0.1:40001/debian", "security": "http://127.0.0.1:40002/debian-security"}
EPOCH = 1733011200


def _lock(tmp: Path, version: str = "1.0-1"):
    pkgs = [LockedPackage("nf-app", version, "amd64", "nftest", 1234, hashlib.sha256(version.encode()).hexdigest(),
                          f"pool/main/n/nf-app/nf-app_{version}_amd64.deb"),
            LockedPackage("nf-lib", "2.0-1", "amd64", "nftest", 99, "b" * 64,
                          "pool/main/n/nf-lib/nf-lib_2.0-1_amd64.deb")]
    return lock_template(tmp / "packages.lock.yaml").with_packages(pkgs)


def _spec(lock_path: Path, tmp: Path, name: str, mirrors: dict, os_lock) -> pb.BaseSpec:
    plan = _plan(lock_path, tmp)
    plan.mirrors = dict(mirrors)
    plan.os_lock = os_lock
    rendered = render.render(plan.lock, "1.36", tmp / f"render-{name}")
    base_elements = pb.write_element(tmp / f"base-{name}", pb.union_packages(
        rendered.elements, list(render.NODEFORGE_ELEMENTS)), rendered.elements, os_lock=os_lock)
    return build.package_base_spec(plan, rendered, base_elements)


@pytest.fixture
def demo_lock(tmp_path):
    return make_demo(tmp_path / "demo")[1]


def test_with_a_package_lock_the_key_does_not_depend_on_the_mirrors(demo_lock, tmp_path):
    lock = _lock(tmp_path)
    a = _spec(demo_lock, tmp_path, "a", MIRRORS, lock)
    b = _spec(demo_lock, tmp_path, "b", OTHER, lock)
    assert "mirrors" not in a.to_dict() and a.to_dict()["os_package_lock"] == lock.digest()
    assert a.key() == b.key()
    # ... but on the lock: one locked package moved (another version, another sha256) is another base.
    assert _spec(demo_lock, tmp_path, "moved", MIRRORS, _lock(tmp_path, "1.0-2")).key() != a.key()


def test_without_a_package_lock_the_mirrors_stay_in_the_key(demo_lock, tmp_path):
    a = _spec(demo_lock, tmp_path, "a", MIRRORS, None)
    b = _spec(demo_lock, tmp_path, "b", OTHER, None)
    assert a.to_dict()["mirrors"] == dict(sorted(MIRRORS.items())) and "os_package_lock" not in a.to_dict()
    assert a.key() != b.key()
    # the key is the sha256 of the canonical JSON that includes them (as before the rule)
    assert a.key() == hashlib.sha256(json.dumps(a.to_dict(), sort_keys=True, separators=(",", ":"))
                                     .encode()).hexdigest()
    assert pb.spec_mirrors({"security": "s", "main": "m"}, None) == {"main": "m", "security": "s"}
    assert pb.spec_mirrors({"main": "m"}, _lock(tmp_path)) is None


def _dib_tree(root: Path, mirrors: dict) -> Path:
    """The parts of a finished root filesystem that name the build's mirrors, as diskimage-builder leaves them."""
    sources = root / "etc/apt/sources.list.d"
    sources.mkdir(parents=True)
    (sources / "default.list").write_text(f"deb {mirrors['main']} bookworm main\n")
    (sources / "updates.list").write_text(f"deb {mirrors['main']} bookworm-updates main\n")
    (sources / "security.list").write_text(f"deb [trusted=yes] {mirrors['security']} bookworm-security main\n")
    (sources / ".list").write_text("\n")
    (root / "etc/apt/preferences.d").mkdir()
    (root / "etc/apt/apt.conf.d").mkdir()
    (root / "etc/apt/apt.conf.d/95no-translations").write_text('Acquire::Languages "none";\n')
    env = root / "etc/dib-manifests/dib_environment"
    env.parent.mkdir(parents=True)
    conf = (f"default:deb {mirrors['main']} bookworm main\\nsecurity:deb [trusted=yes] {mirrors['security']} "
            "bookworm-security main\\n")
    env.write_text(f"declare -x DIB_APT_LOCAL_CACHE=\"1\"\n"
                   f"declare -x DIB_APT_SOURCES_CONF=$'{conf}'\n"
                   f"declare -x DIB_DEBIAN_DISTRIBUTION_MIRROR=\"{mirrors['main']}\"\n"
                   f"declare -x DIB_DEBIAN_SECURITY_MIRROR=\"{mirrors['security']}\"\n"
                   f"declare -x DIB_DISTRIBUTION_MIRROR=\"{mirrors['main']}\"\n"
                   "declare -x DIB_RELEASE=\"bookworm\"\n")
    return root


def test_the_image_does_not_carry_the_build_hosts_mirror(tmp_path):
    a = _dib_tree(tmp_path / "a", MIRRORS)
    b = _dib_tree(tmp_path / "b", OTHER)
    done = reproducible.normalise(a, EPOCH)
    reproducible.normalise(b, EPOCH)
    assert {"/etc/apt/sources.list.d/default.list", "/etc/apt/sources.list.d/updates.list",
            "/etc/apt/sources.list.d/security.list", "/etc/apt/sources.list.d/.list"} <= set(done["removed"])
    assert done["mirror_settings_replaced"] == ["DIB_APT_SOURCES_CONF", "DIB_DEBIAN_DISTRIBUTION_MIRROR",
                                                "DIB_DEBIAN_SECURITY_MIRROR", "DIB_DISTRIBUTION_MIRROR"]
    assert (a / "etc/apt/sources.list.d").is_dir() and not os.listdir(a / "etc/apt/sources.list.d")
    assert (a / "etc/apt/apt.conf.d/95no-translations").is_file()        # apt's own settings stay
    env = (a / "etc/dib-manifests/dib_environment").read_text()
    assert 'declare -x DIB_DEBIAN_SECURITY_MIRROR="<debian-mirror>"\n' in env
    assert 'declare -x DIB_RELEASE="bookworm"\n' in env and 'DIB_APT_LOCAL_CACHE="1"' in env
    for tree in (a, b):
        for dirpath, _dirs, files in os.walk(tree):
            for name in files:
                text = Path(dirpath, name).read_text()
                assert "127.0.0.1" not in text and "example.org" not in text, Path(dirpath, name)
    # built from two mirrors, the same per-file manifest
    assert contents.dumps(contents.scan(a)) == contents.dumps(contents.scan(b))


def _tiny_deb(tmp: Path) -> Path:
    tree = tmp / "src"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr/share/doc/nf-tiny").mkdir(parents=True)
    (tree / "usr/share/doc/nf-tiny/README").write_text("nf-tiny\n")
    (tree / "usr/share/doc/nf-tiny/link").symlink_to("README")
    (tree / "DEBIAN/control").write_text("Package: nf-tiny\nVersion: 1.0-1\nArchitecture: all\n"
                                         "Maintainer: nodeforge tests <tests@invalid>\nDescription: tiny\n")
    for p in [*tree.rglob("*"), tree]:
        os.utime(p, (EPOCH, EPOCH), follow_symlinks=False)
    deb = tmp / "nf-tiny_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(deb)], check=True,
                   capture_output=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    return deb


def test_reversioning_twice_gives_the_same_bytes(tmp_path):
    deb = _tiny_deb(tmp_path)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = reversion(deb, "1.0-1+nfsec1", tmp_path / "one")
    time.sleep(1.1)          # a second later: a file time taken from the clock would differ
    second = reversion(deb, "1.0-1+nfsec1", tmp_path / "two")
    assert first.read_bytes() == second.read_bytes()
    field = subprocess.run(["dpkg-deb", "--field", str(first), "Version"], capture_output=True, text=True, check=True)
    assert field.stdout.strip() == "1.0-1+nfsec1"

    def listing(path: Path) -> list[str]:
        out = subprocess.run(["dpkg-deb", "--contents", str(path)], capture_output=True, text=True, check=True)
        return sorted(out.stdout.splitlines())

    assert listing(first) == listing(deb)          # the same files, owners, modes and times as the original
    assert not list(tmp_path.glob("*/unpacked-*"))   # nothing left behind
    # another version is another file
    assert reversion(deb, "1.0-1+nfsec2", tmp_path / "two").read_bytes() != first.read_bytes()


def test_with_a_package_lock_the_epoch_is_in_the_key(demo_lock, tmp_path):
    """The base is built with SOURCE_DATE_EPOCH (the lock's newest index date): its initramfs and the
    files maintainer scripts write carry it. The same packages re-resolved from newer indexes are
    another base, or a cached base would give other content than a fresh one."""
    lock = _lock(tmp_path)
    dated = dataclasses.replace(lock, index_dates={"bookworm": "Sat, 11 Jul 2026 10:16:37 UTC"})
    later = dataclasses.replace(lock, index_dates={"bookworm": "Sun, 12 Jul 2026 10:16:37 UTC"})
    assert dated.digest() == later.digest()          # the same packages
    a = _spec(demo_lock, tmp_path, "dated", MIRRORS, dated)
    b = _spec(demo_lock, tmp_path, "later", MIRRORS, later)
    assert a.to_dict()["source_date_epoch"] == reproducible.source_date_epoch(dated)[0]
    assert a.key() != b.key()
    assert a.key() == _spec(demo_lock, tmp_path, "again", OTHER, dated).key()
    # Without a lock there is no epoch from the inputs: those keys stay as they were.
    assert "source_date_epoch" not in _spec(demo_lock, tmp_path, "nolock", MIRRORS, None).to_dict()
