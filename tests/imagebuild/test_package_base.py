"""The package base: its cache key (what it depends on, what it does not) and atomic, verified entries."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from nodeforge.imagebuild import build, package_base as pb, render
from nodeforge.pins import lockfile
from tests.demo.fixture_artifacts import COMPANIONS, KUBERNETES, make_demo

MIRRORS = {"main": "http://deb.example.org/debian", "security": "http://deb.example.org/debian-security"}


def _plan(lock_path: Path, tmp: Path) -> build.Plan:
    lock = lockfile.load(lock_path)
    req = build.BuildRequest(minor="1.36", lockfile_path=lock_path)
    return build.Plan(req, lock, tmp / "out", tmp / "work", tmp / "dib", None, dict(MIRRORS), [],  # type: ignore[arg-type]
                      "disk-image-create")


def _key(lock_path: Path, tmp: Path, name: str, *, src: Path = render.ELEMENTS_SRC, mirrors=None,
         minor: str = "1.36") -> str:
    plan = _plan(lock_path, tmp)
    if mirrors:
        plan.mirrors = mirrors
    rendered = render.render(plan.lock, minor, tmp / f"render-{name}", src=src)
    base_elements = pb.write_element(tmp / f"base-{name}", pb.union_packages(
        rendered.elements, list(render.NODEFORGE_ELEMENTS)), rendered.elements)
    return build.package_base_spec(plan, rendered, base_elements).key()


@pytest.fixture
def demo(tmp_path):
    up, lock = make_demo(tmp_path / "demo")
    return up, lock


def test_union_of_element_package_lists():
    out = render.ELEMENTS_SRC
    pkgs = pb.union_packages(out, list(render.NODEFORGE_ELEMENTS))
    assert list(pkgs) == sorted(pkgs)
    assert {"openssh-server", "auditd", "cloud-init", "conntrack", "qemu-guest-agent", "firmware-linux-free"} <= set(pkgs)
    assert pkgs["grub-efi-amd64-bin"] == {"arch": "amd64"} and pkgs["kmod"] is None


def test_union_rejects_conflicting_settings(tmp_path):
    for name, text in (("a", "foo:\n  arch: amd64\n"), ("b", "foo:\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "package-installs.yaml").write_text(text)
    with pytest.raises(pb.PackageBaseError, match="foo"):
        pb.union_packages(tmp_path, ["a", "b"])


def test_key_ignores_a_kubernetes_patch_bump(demo, tmp_path):
    up, lock = demo
    before = _key(lock, tmp_path, "before")
    up.add_kubernetes("1.36.1")
    lock.write_text(up.lockfile_text({**KUBERNETES, "1.36": "1.36.1"}, COMPANIONS))
    assert str(lockfile.load(lock).minor("1.36").version) == "1.36.1"
    assert _key(lock, tmp_path, "after") == before
    # Nor does the minor matter: the packages are the same for every minor.
    assert _key(lock, tmp_path, "other-minor", minor="1.35") == before


def test_key_follows_package_lists_mirrors_and_dib(demo, tmp_path):
    _, lock = demo
    base = _key(lock, tmp_path, "base")
    assert _key(lock, tmp_path, "again") == base     # deterministic
    assert _key(lock, tmp_path, "mirror", mirrors={**MIRRORS, "main": "http://other/debian"}) != base

    src = tmp_path / "elements"
    subprocess.run(["cp", "-a", f"{render.ELEMENTS_SRC}/.", str(src)], check=True)
    pkgs = src / "containerd" / "package-installs.yaml"
    pkgs.write_text(pkgs.read_text() + "jq:\n")
    assert _key(lock, tmp_path, "more-packages", src=src) != base
    pkgs.write_text(pkgs.read_text().replace("jq:\n", ""))
    # An install script (Kubernetes-specific step) is not an input of the base.
    script = src / "kubelet" / "install.d" / "50-kubelet"
    script.write_text(script.read_text() + "# changed\n")
    assert _key(lock, tmp_path, "script", src=src) == base
    # The block-device config shapes the base build.
    bd = src / "nodeforge-rootfs" / "block-device-default.yaml"
    bd.write_text(bd.read_text() + "# changed\n")
    assert _key(lock, tmp_path, "blockdev", src=src) != base


def test_spec_key_covers_every_field():
    spec = pb.BaseSpec("debian-minimal", "bookworm", "main", "amd64", dict(MIRRORS), {"a": None}, "d" * 64, "3.43.0")
    keys = {spec.key()}
    for field, value in (("release", "trixie"), ("arch", "arm64"), ("components", "main contrib"),
                         ("packages", {"a": None, "b": None}), ("element_digest", "e" * 64),
                         ("dib_version", "3.44.0"), ("recipe", "nodeforge-package-base/3"),
                         ("distro_element", "debian")):
        keys.add(dataclasses.replace(spec, **{field: value}).key())
    assert len(keys) == 9


def _produce_tarball(dest: Path) -> None:
    with tarfile.open(dest, mode="w") as tar:
        info = tarfile.TarInfo("./etc/hostname")
        data = b"base\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_store_then_lookup(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")
    entry = cache.store("k" * 64, _produce_tarball, inputs={"x": 1})
    assert entry.path == tmp_path / "bases" / ("k" * 64) and entry.tarball.is_file()
    meta = json.loads((entry.path / "meta.json").read_text())
    assert meta["key"] == "k" * 64 and meta["sha256"] == hashlib.sha256(entry.tarball.read_bytes()).hexdigest() and meta["inputs"] == {"x": 1}
    found = cache.lookup("k" * 64)
    assert found is not None and found.meta == meta
    assert cache.lookup("z" * 64) is None
    assert [p.name for p in (tmp_path / "bases").iterdir() if not p.name.endswith(".lock")] == ["k" * 64]


def test_failed_producer_leaves_no_entry(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")

    def half(dest: Path) -> None:
        dest.write_bytes(b"\x1f\x8b partial")
        raise RuntimeError("disk-image-create died")

    with pytest.raises(RuntimeError):
        cache.store("k" * 64, half)
    assert cache.lookup("k" * 64) is None
    assert list((tmp_path / "bases").iterdir()) == []


def test_damaged_tarball_is_never_stored(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")
    with pytest.raises(pb.PackageBaseError, match="damaged"):
        cache.store("k" * 64, lambda dest: dest.write_bytes(b"not a tar at all"))
    assert not (tmp_path / "bases" / ("k" * 64)).exists()

    def truncated(dest: Path) -> None:
        _produce_tarball(dest)
        data = dest.read_bytes()
        dest.write_bytes(data[:700])     # the first member's header and half its data block

    with pytest.raises(pb.PackageBaseError, match="damaged"):
        cache.store("k" * 64, truncated)
    assert list((tmp_path / "bases").iterdir()) == []


@pytest.mark.parametrize("damage", ["flip-byte", "truncate", "no-meta", "bad-meta", "other-key", "partial-dir"])
def test_damaged_entry_is_evicted_not_used(tmp_path, damage):
    cache = pb.BaseCache(tmp_path / "bases")
    key = "k" * 64
    entry = cache.store(key, _produce_tarball)
    meta_path = entry.path / "meta.json"
    if damage == "flip-byte":
        data = bytearray(entry.tarball.read_bytes())
        data[len(data) // 2] ^= 0xFF
        entry.tarball.write_bytes(bytes(data))
    elif damage == "truncate":
        with open(entry.tarball, "r+b") as fh:
            fh.truncate(10)
    elif damage == "no-meta":
        meta_path.unlink()
    elif damage == "bad-meta":
        meta_path.write_text("{")
    elif damage == "other-key":
        meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "key": "o" * 64}))
    elif damage == "partial-dir":   # e.g. a crash left the tarball without meta.json in place
        meta_path.unlink()
        entry.tarball.unlink()
    assert cache.lookup(key) is None
    assert not entry.path.exists()
    # The next build makes it again.
    again = cache.store(key, _produce_tarball)
    assert cache.lookup(key) == again


def test_tar_to_base_adds_mount_points(tmp_path):
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hostname").write_text("x\n")
    dib_tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(tree), "-cf", str(dib_tar), "."], check=True)
    dest = tmp_path / "base.tar"
    pb.tar_to_base(dib_tar, dest)
    assert not dib_tar.exists()                       # moved, not copied
    with tarfile.open(dest, "r:") as tar:             # uncompressed
        names = {m.name: m for m in tar.getmembers()}
    assert {"./etc/hostname", "./proc", "./sys", "./dev"} <= set(names)
    assert names["./proc"].isdir() and names["./proc"].mode == 0o555 and names["./proc"].uid == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("nf-base-dirs.")]


def test_image_cache_links_base_and_shared_apt(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")
    entry = cache.store("k" * 64, _produce_tarball)
    shared = tmp_path / "dib"
    ic = pb.image_cache_for(entry, tmp_path / "ic", shared, distro_name="debian", release="bookworm", arch="amd64")
    tarball = ic / "debootstrap-debian-bookworm-amd64.tar"
    assert os.path.realpath(tarball) == str(entry.tarball)
    assert (ic / "apt").resolve() == (shared / "apt").resolve() and (shared / "apt").is_dir()


# -- diskimage-builder's debootstrap element, overridden to unpack the uncompressed base ----------

def _upstream_debootstrap() -> Path:
    from nodeforge.imagebuild import package_lock
    return package_lock.dib_elements_dir() / pb.DEBOOTSTRAP


def test_debootstrap_override_is_upstream_but_its_root_script(tmp_path):
    upstream = _upstream_debootstrap()
    dest = pb.debootstrap_override(tmp_path / "overrides", upstream)
    element = dest / "debootstrap"
    ours = {p.relative_to(element).as_posix() for p in element.rglob("*") if p.is_file()}
    theirs = {p.relative_to(upstream).as_posix() for p in upstream.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert ours >= theirs and pb.DEBOOTSTRAP_ROOT_SCRIPT in ours
    changed = [rel for rel in theirs if (element / rel).read_bytes() != (upstream / rel).read_bytes()]
    assert changed == [pb.DEBOOTSTRAP_ROOT_SCRIPT]
    script = element / pb.DEBOOTSTRAP_ROOT_SCRIPT
    assert os.access(script, os.X_OK) and "-xzf" not in script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    # Written again into the same work directory (a step run twice): the same result.
    pb.debootstrap_override(tmp_path / "overrides", upstream)
    assert (element / pb.DEBOOTSTRAP_ROOT_SCRIPT).read_text() == script.read_text()


def test_debootstrap_override_refuses_an_upstream_script_it_does_not_know(tmp_path):
    upstream = tmp_path / "debootstrap"
    shutil.copytree(_upstream_debootstrap(), upstream)
    script = upstream / pb.DEBOOTSTRAP_ROOT_SCRIPT
    script.write_text(script.read_text().replace("-xzf $DEBOOTSTRAP_TARBALL", "-xf $DEBOOTSTRAP_TARBALL"))
    with pytest.raises(pb.PackageBaseError, match="no longer unpacks its cached tarball") as exc:
        pb.debootstrap_override(tmp_path / "overrides", upstream)
    assert "-xzf $DEBOOTSTRAP_TARBALL" in str(exc.value) and str(script) in str(exc.value)
    assert not (tmp_path / "overrides").exists()


def _run_override(tmp_path, cache: Path, target: Path) -> subprocess.CompletedProcess:
    dest = pb.debootstrap_override(tmp_path / "overrides", _upstream_debootstrap())
    env = {**os.environ, "DIB_IMAGE_CACHE": str(cache), "DISTRO_NAME": "debian", "DIB_RELEASE": "bookworm",
           "ARCH": "amd64", "TARGET_ROOT": str(target), "DIB_DEBUG_TRACE": "0"}
    return subprocess.run([str(dest / "debootstrap" / pb.DEBOOTSTRAP_ROOT_SCRIPT)], env=env, text=True,
                          capture_output=True, timeout=60)


def test_debootstrap_override_unpacks_the_uncompressed_base(tmp_path):
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hostname").write_text("base\n")
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "tool").write_text("#!/bin/sh\n")
    (tree / "usr" / "bin" / "tool").chmod(0o750)
    (tree / ".extra_settings").write_text("X=1\n")
    dib_tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "--numeric-owner", "-C", str(tree), "-cf", str(dib_tar), "."], check=True)
    entry = pb.BaseCache(tmp_path / "bases").store("k" * 64, lambda d: pb.tar_to_base(dib_tar, d))
    cache = pb.image_cache_for(entry, tmp_path / "ic", tmp_path / "dib", distro_name="debian",
                               release="bookworm", arch="amd64")
    target = tmp_path / "target"
    target.mkdir()
    done = _run_override(tmp_path, cache, target)
    assert done.returncode == 0, done.stderr
    assert (target / "etc" / "hostname").read_text() == "base\n"
    assert (target / "usr" / "bin" / "tool").stat().st_mode & 0o777 == 0o750
    assert (target / "proc").is_dir() and not (target / ".extra_settings").exists()


def test_debootstrap_override_without_a_base_stops(tmp_path):
    (tmp_path / "ic").mkdir()
    target = tmp_path / "target"
    target.mkdir()
    done = _run_override(tmp_path, tmp_path / "ic", target)
    assert done.returncode == 1
    assert "no package base at " + str(tmp_path / "ic" / "debootstrap-debian-bookworm-amd64.tar") in done.stderr
    assert list(target.iterdir()) == []


def test_store_prunes_bases_unused_for_keep_days(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")
    old, used, fresh = ("a" * 64), ("b" * 64), ("c" * 64)
    for key in (old, used, fresh):
        cache.store(key, _produce_tarball)
    long_ago = time.time() - (pb.BaseCache.KEEP_DAYS + 1) * 86400
    for key in (old, used):
        os.utime(cache.path(key) / pb.META, (long_ago, long_ago))
    killed = cache.root / f".{'d' * 16}.partial.x1"           # what a killed build left
    killed.mkdir()
    os.utime(killed, (long_ago, long_ago))
    recent = cache.root / f".{'e' * 16}.partial.x2"           # a build writing now
    recent.mkdir()
    (cache.root / f".{old}.lock").write_text("")
    assert cache.lookup(used) is not None                      # a build used it: its time is now
    cache.store("f" * 64, _produce_tarball)
    names = {p.name for p in cache.root.iterdir()}
    assert old not in names and killed.name not in names
    assert {used, fresh, "f" * 64, recent.name, f".{old}.lock"} <= names
    # The key being stored is never pruned, however old its previous entry.
    os.utime(cache.path(fresh) / pb.META, (long_ago, long_ago))
    cache.store(fresh, _produce_tarball)
    assert cache.lookup(fresh) is not None
