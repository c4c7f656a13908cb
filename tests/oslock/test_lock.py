"""The package lock: resolved by apt from verified indexes, checked, bumped, and .deb files checked against it."""

from __future__ import annotations

import pytest

from nodeforge.errors import ConfigError
from nodeforge.oslock import lock as ol, resolve as rs, watch
from nodeforge.oslock.watch import DebMismatch, LockedVersionGone
from tests.oslock.aptrepo import RELEASE

SEC = f"{RELEASE}-security"


def _config(repo, lock):
    return watch.config_for(lock, repo.mirrors(), repo.key.keyring)


def test_resolution_takes_dependencies_and_required_priority(package_lock, apt_repo):
    got = {(p.name, p.version, p.suite) for p in package_lock.packages}
    # nf-app pulls nf-lib; nf-base is Priority: required; nf-extra is nobody's dependency.
    assert got == {("nf-app", "1.0-1", RELEASE), ("nf-lib", "2.0-1", RELEASE), ("nf-base", "1.0-1", RELEASE)}
    reread = ol.load(package_lock.path)
    assert reread.packages == package_lock.packages and reread.digest() == package_lock.digest()


def test_an_unknown_package_is_a_resolution_error_naming_it(apt_repo, package_lock):
    bad = package_lock.with_packages([], ol.Resolve(priorities=(), base=(), install=("nf-missing",)))
    with pytest.raises(rs.ResolveError, match="nf-missing"):
        watch.resolve_lock(bad, _config(apt_repo, bad))


def test_check_marks_a_security_update(apt_repo, package_lock):
    assert watch.check(package_lock, _config(apt_repo, package_lock)).updates == []
    apt_repo.add(SEC, "nf-lib", "2.0-1+deb1u1")
    apt_repo.add(f"{RELEASE}-updates", "nf-base", "1.0-2")
    apt_repo.publish()
    report = watch.check(package_lock, _config(apt_repo, package_lock))
    assert report.new_release
    assert [(u.name, u.old_version, u.new_version, u.suite, u.security) for u in report.updates] == [
        ("nf-lib", "2.0-1", "2.0-1+deb1u1", SEC, True),
        ("nf-base", "1.0-1", "1.0-2", f"{RELEASE}-updates", False)]


def test_bump_moves_the_lock_with_verified_hashes(apt_repo, package_lock):
    deb = apt_repo.add(SEC, "nf-lib", "2.0-1+deb1u1")
    apt_repo.publish()
    before = package_lock.path.read_text()
    dry = watch.bump(package_lock, _config(apt_repo, package_lock), dry_run=True)
    assert not dry.written and package_lock.path.read_text() == before
    report = watch.bump(package_lock, _config(apt_repo, package_lock))
    assert report.written
    assert [c.to_dict() for c in report.changes] == [{"name": "nf-lib", "arch": "amd64", "old_version": "2.0-1",
                                                      "new_version": "2.0-1+deb1u1", "suite": SEC, "security": True}]
    new = ol.load(package_lock.path).by_key()[("nf-lib", "amd64")]
    assert (new.sha256, new.size) == (watch.sha256_file(deb), deb.stat().st_size)
    md = watch.markdown(report)
    assert f"| nf-lib | amd64 | 2.0-1 | 2.0-1+deb1u1 | **{SEC}** (security) |" in md
    # one changed line in the file: the diff a reviewer sees
    changed = set(before.splitlines()) ^ set(package_lock.path.read_text().splitlines())
    assert len([line for line in changed if line.startswith("  - ")]) == 2
    assert watch.check(ol.load(package_lock.path), _config(apt_repo, package_lock)).updates == []


def test_verify_debs_refuses_changed_bytes_naming_the_file(apt_repo, package_lock, tmp_path):
    fetched = watch.fetch_debs(package_lock, _config(apt_repo, package_lock), tmp_path / "debs")
    assert watch.verify_debs(package_lock, fetched, require_all=True) == 3
    victim = next(p for p in fetched if p.name.startswith("nf-lib_"))
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(DebMismatch) as exc:
        watch.verify_debs(package_lock, fetched)
    assert str(victim) in str(exc.value) and "does not match the lock's nf-lib 2.0-1" in str(exc.value)
    stranger = tmp_path / "debs" / "nf-extra_0.1-1_amd64.deb"
    stranger.write_bytes(apt_repo.deb_path(RELEASE, "nf-extra").read_bytes())
    with pytest.raises(DebMismatch, match="not in the package lock"):
        watch.verify_debs(package_lock, [stranger])


def test_a_mirror_serving_other_bytes_is_refused_and_nothing_kept(apt_repo, package_lock, tmp_path):
    deb = apt_repo.deb_path(RELEASE, "nf-app")
    deb.write_bytes(deb.read_bytes() + b"x")
    with pytest.raises(DebMismatch, match="nf-app_1.0-1_amd64.deb"):
        watch.fetch_debs(package_lock, _config(apt_repo, package_lock), tmp_path / "debs", names=["nf-app"])
    assert not list((tmp_path / "debs").glob("nf-app*"))


def test_a_version_the_mirror_no_longer_serves_says_how_to_refresh(apt_repo, package_lock, tmp_path):
    apt_repo.deb_path(RELEASE, "nf-base").unlink()
    with pytest.raises(LockedVersionGone) as exc:
        watch.fetch_debs(package_lock, _config(apt_repo, package_lock), tmp_path / "debs", names=["nf-base"])
    assert "nf-base 1.0-1 (amd64)" in str(exc.value)
    assert exc.value.hint == "refresh the lock: nodeforge release bump --packages"


@pytest.mark.parametrize("edit, where", [
    (lambda t: t.replace("sha256: ", "sha256: X", 1), "packages[0].sha256"),
    (lambda t: t.replace("suite: nftest,", "suite: sid,", 1), "packages[0].suite"),
    (lambda t: t.replace("schema_version: 1", "schema_version: 7"), "schema_version"),
    (lambda t: t.replace("filename: pool/", "filename: ../pool/", 1), "packages[0].filename"),
])
def test_a_damaged_lock_names_file_line_and_field(package_lock, edit, where):
    text = package_lock.path.read_text()
    package_lock.path.write_text(edit(text))
    with pytest.raises(ConfigError) as exc:
        ol.load(package_lock.path)
    assert str(package_lock.path) in str(exc.value) and where in str(exc.value)
    if where.startswith("packages[0]"):
        line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("  - "))
        assert f"{package_lock.path}:{line}:" in str(exc.value)


def test_an_index_older_than_the_one_the_lock_was_made_from_is_refused(apt_repo, package_lock):
    import datetime

    assert set(package_lock.index_dates) == {RELEASE, f"{RELEASE}-updates", SEC}
    assert ol.load(package_lock.path).index_dates == package_lock.index_dates
    # a mirror rolled back to yesterday's (validly signed) security index: it would hide updates
    apt_repo.date = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    apt_repo.publish()
    with pytest.raises(watch.archive.ArchiveTrustError) as exc:
        watch.check(package_lock, _config(apt_repo, package_lock))
    assert "older (Date:" in str(exc.value) and "rolled-back mirror" in str(exc.value)
    assert f"dists/{RELEASE}/InRelease" in str(exc.value)
