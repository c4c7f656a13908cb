"""Against the Debian mirror this machine's apt uses (slow: downloads the real indexes)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nodeforge.oslock import archive, lock as ol, watch
from tests.prereq import require, require_tools

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def real_config(tmp_path_factory):
    require_tools("gpgv", "apt-get", why="archive verification and resolution")
    require(archive.DEFAULT_KEYRING.is_file(), f"{archive.DEFAULT_KEYRING} (debian-archive-keyring)")
    try:
        mirrors = archive.host_mirrors({})
    except archive.ArchiveError as exc:
        require(False, f"a Debian mirror in the host's apt sources ({exc})")
    committed = ol.load(REPO / "manifests" / ol.FILENAME)
    config = watch.config_for(committed, mirrors, archive.DEFAULT_KEYRING)
    try:
        archive.http_get(config.suites[0].url(f"dists/{committed.release}/InRelease"), what="InRelease")
    except archive.ArchiveError as exc:
        require(False, f"the host's Debian mirror reachable ({exc})")
    return committed, config


def test_real_inrelease_verifies_with_the_archive_keyring_and_a_small_lock_resolves(real_config, tmp_path):
    committed, config = real_config
    indexes = archive.fetch(config)
    assert [s.suite.name for s in indexes.suites] == list(committed.suites)
    assert all(s.release.get("Origin") == "Debian" for s in indexes.suites)
    assert sum(len(s.records) for s in indexes.suites) > 50000
    small = committed.with_packages([], ol.Resolve(priorities=(), base=(), recommends=(), install=("ca-certificates",)))
    small = dataclasses.replace(small, path=tmp_path / "small.lock.yaml")
    lock, _ = watch.resolve_lock(small, config, indexes=indexes)
    names = {p.name for p in lock.packages}
    assert {"ca-certificates", "openssl"} <= names and len(names) < 40
    lock.save()
    assert ol.load(lock.path).packages == lock.packages
    # a real .deb, downloaded and checked against the verified index's sha256
    debs = watch.fetch_debs(lock, config, tmp_path / "debs", names=["ca-certificates"])
    assert watch.verify_debs(lock, debs) == 1
    # the committed lock parses and is compared with the same indexes
    report = watch.check(committed, config, indexes=indexes)
    assert report.packages == len(committed.packages) > 200
    assert all(u.suite in committed.suites for u in report.updates)


def test_lock_packages_dry_run_resolves_the_image_set_and_writes_nothing(real_config, tmp_path, capsys):
    from nodeforge import cli

    target = tmp_path / "manifests" / ol.FILENAME
    code = cli.main(["-o", "json", "release", "lock-packages", "--dry-run", "--package-lock", str(target),
                     "--lockfile", str(REPO / "manifests" / "versions.yaml")])
    assert code in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert report["written"] is False and not target.exists()
    names = {c["name"] for c in report["changes"]}    # against no lock: every package is a change
    assert report["packages"] == len(names) > 250
    assert {"openssh-server", "cloud-init", "linux-image-amd64", "systemd-sysv", "apt"} <= names
