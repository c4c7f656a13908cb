"""The image build's use of the package lock: preflight against the mirror, the package-base key,
the pins and apt hook put into the chroot, and the finished tree compared with the lock."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from nodeforge.imagebuild import build as build_mod, package_base as pb
from nodeforge.oslock import apt_pinning as pins, archive, resolve as rs, watch
from tests.oslock.aptrepo import RELEASE

REPO = Path(__file__).resolve().parents[2]
SEC = f"{RELEASE}-security"


def test_preflight_returns_the_lock_beside_the_lockfile(apt_repo, package_lock):
    lockfile = package_lock.path.parent / "versions.yaml"    # only its directory matters here
    got = build_mod.os_lock_preflight(lockfile, RELEASE, "amd64", apt_repo.mirrors())
    assert got.packages == package_lock.packages
    assert build_mod.os_lock_preflight(package_lock.path.parent / "x" / "versions.yaml", RELEASE, "amd64",
                                       apt_repo.mirrors()) is None


def test_preflight_refuses_a_lock_for_another_release(apt_repo, package_lock):
    with pytest.raises(build_mod.PreflightError, match=f"is for {RELEASE} amd64, the build is bookworm amd64"):
        build_mod.os_lock_preflight(package_lock.path.parent / "versions.yaml", "bookworm", "amd64",
                                    apt_repo.mirrors())


def test_preflight_names_a_locked_version_the_mirror_dropped_and_how_to_refresh(apt_repo, package_lock):
    apt_repo.suites[RELEASE] = [p for p in apt_repo.suites[RELEASE] if p["Package"] != "nf-lib"]
    apt_repo.add(RELEASE, "nf-lib", "2.0-2")
    apt_repo.publish()
    with pytest.raises(build_mod.PreflightError) as exc:
        build_mod.os_lock_preflight(package_lock.path.parent / "versions.yaml", RELEASE, "amd64", apt_repo.mirrors())
    assert "no longer serves 1 version(s)" in str(exc.value) and "nf-lib 2.0-1 (amd64)" in str(exc.value)
    assert exc.value.hint.startswith("refresh the lock: nodeforge release bump --packages")


def test_preflight_with_a_badly_signed_archive_fails(apt_repo, package_lock, other_key):
    apt_repo.key = other_key
    apt_repo.publish()
    with pytest.raises(build_mod.PreflightError, match="signature does not verify"):
        build_mod.os_lock_preflight(package_lock.path.parent / "versions.yaml", RELEASE, "amd64", apt_repo.mirrors())


def test_package_base_key_includes_the_lock_digest_and_is_unchanged_without_one(package_lock):
    spec = pb.BaseSpec("debian-minimal", "bookworm", "main", "amd64", {"main": "m", "security": "s"}, {},
                       "e" * 64, "3.43.0")
    # the canonical JSON of a spec as it was before the lock existed: the same key
    old_style = {"distro_element": "debian-minimal", "release": "bookworm", "components": "main", "arch": "amd64",
                 "mirrors": {"main": "m", "security": "s"}, "packages": {}, "element_digest": "e" * 64,
                 "dib_version": "3.43.0", "recipe": pb.RECIPE}
    assert spec.key() == hashlib.sha256(json.dumps(old_style, sort_keys=True, separators=(",", ":"))
                                        .encode()).hexdigest()
    locked = pb.BaseSpec(**{**old_style, "os_package_lock": package_lock.digest()})
    assert locked.key() != spec.key()
    moved = package_lock.with_packages(
        [p if p.name != "nf-lib" else watch.LockedPackage(p.name, "2.0-9", p.arch, p.suite, p.size, p.sha256,
                                                          p.filename) for p in package_lock.packages])
    assert pb.BaseSpec(**{**old_style, "os_package_lock": moved.digest()}).key() != locked.key()


def test_the_package_base_element_carries_pins_and_hook(package_lock, tmp_path):
    dest = pb.write_element(tmp_path / "elems", {"nf-app": None}, REPO / "elements", os_lock=package_lock)
    elem = dest / pb.ELEMENT
    files = elem / pb.OS_LOCK_FILES
    prefs = (files / pins.PREFERENCES).read_text()
    assert "Package: nf-lib\nPin: version 2.0-1\nPin-Priority: 1001\n" in prefs
    assert (files / pins.HOOK).stat().st_mode & 0o111
    assert (files / pins.HOOK_CONF).read_text() == 'DPkg::Pre-Install-Pkgs { "/usr/local/sbin/nodeforge-verify-debs"; };\n'
    assert len((files / pins.SUMS).read_text().splitlines()) == 3
    script = elem / "root.d" / "70-nodeforge-os-lock"
    assert script.stat().st_mode & 0o111 and pb.OS_LOCK_FILES in script.read_text()
    plain = pb.write_element(tmp_path / "plain", {"nf-app": None}, REPO / "elements")
    assert not (plain / pb.ELEMENT / "root.d" / "70-nodeforge-os-lock").exists()


def test_real_apt_honours_the_pins_over_a_newer_security_version(apt_repo, package_lock, tmp_path):
    apt_repo.add(SEC, "nf-lib", "2.0-1+deb1u1")
    apt_repo.publish()
    indexes = archive.fetch(watch.config_for(package_lock, apt_repo.mirrors(), apt_repo.key.keyring))
    root = rs._AptRoot(indexes, tmp_path / "apt")
    root.run("update", what="update")
    assert ("nf-lib", "2.0-1+deb1u1", "amd64") in root.simulate(["nf-app"], recommends=False, what="unpinned")
    (tmp_path / "apt" / pins.PREFERENCES).write_text(pins.apt_preferences(package_lock))
    assert ("nf-lib", "2.0-1", "amd64") in root.simulate(["nf-app"], recommends=False, what="pinned")


def test_the_apt_hook_refuses_a_deb_not_in_the_lock(apt_repo, package_lock, tmp_path):
    sums = tmp_path / "sums"
    sums.write_text(pins.sha256_list(package_lock))
    hook = tmp_path / "hook"
    hook.write_text(pins.HOOK_TEXT.replace(f"/{pins.SUMS}", str(sums)))
    good = apt_repo.deb_path(RELEASE, "nf-lib")
    proc = subprocess.run(["sh", str(hook)], input=f"{good}\n", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "nodeforge: 1 .deb file(s) match the OS package lock" in proc.stderr
    evil = tmp_path / "nf-lib_2.0-1_amd64.deb"
    evil.write_bytes(good.read_bytes() + b"\0")
    proc = subprocess.run(["sh", str(hook)], input=f"{good}\n{evil}\n", capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"refused {evil}" in proc.stderr and "nodeforge release bump --packages" in proc.stderr
    assert str(good) not in proc.stderr


def test_compare_installed_lists_every_difference(package_lock):
    exact = [{"name": p.name, "version": p.version, "arch": p.arch} for p in package_lock.packages]
    assert pins.compare_installed(package_lock, exact) == []
    changed = [d if d["name"] != "nf-lib" else {**d, "version": "2.0-0"} for d in exact if d["name"] != "nf-base"]
    changed.append({"name": "nf-extra", "version": "0.1-1", "arch": "amd64"})
    assert pins.compare_installed(package_lock, changed) == [
        "nf-extra 0.1-1 (amd64) is installed but not locked", "nf-lib (amd64) is 2.0-0, locked 2.0-1",
        "nf-base 1.0-1 (amd64) is locked but not installed"]
