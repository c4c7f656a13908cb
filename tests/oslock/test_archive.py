"""Archive trust against a local signed apt repository: what is refused, and what is read."""

from __future__ import annotations

import datetime
import hashlib
import lzma

import pytest

from nodeforge.oslock import archive, watch
from nodeforge.oslock.archive import ArchiveConfig, ArchiveTrustError
from tests.oslock.aptrepo import RELEASE


def _config(repo, keyring=None, cache=None) -> ArchiveConfig:
    """Without a cache unless one is given: what is refused here is what the server sends."""
    config = ArchiveConfig.for_release(RELEASE, repo.mirrors(), keyring=keyring or repo.key.keyring)
    config.cache = cache
    return config


def test_verified_indexes_give_every_field(apt_repo):
    idx = archive.fetch(_config(apt_repo))
    assert [s.suite.name for s in idx.suites] == [RELEASE, f"{RELEASE}-updates", f"{RELEASE}-security"]
    app = idx.newest("nf-app", "amd64")
    deb = apt_repo.deb_path(RELEASE, "nf-app")
    assert (app.version, app.suite, app.size) == ("1.0-1", RELEASE, deb.stat().st_size)
    assert app.sha256 == watch.sha256_file(deb)
    assert app.filename == f"pool/main/n/nf-app/{deb.name}"
    assert idx.newest("nf-base", "amd64").priority == "required"


def test_signature_by_a_key_outside_the_keyring_is_refused_naming_the_file(apt_repo, other_key):
    inrelease = apt_repo.inrelease(f"{RELEASE}-security")
    inrelease.write_bytes(other_key.clearsign(apt_repo.inrelease(f"{RELEASE}-security").with_name("Release")
                                              .read_bytes()))
    with pytest.raises(ArchiveTrustError) as exc:
        archive.fetch(_config(apt_repo))
    msg = str(exc.value)
    assert f"/debian-security/dists/{RELEASE}-security/InRelease" in msg
    assert "signature does not verify" in msg


def test_altered_signed_text_is_refused(apt_repo):
    path = apt_repo.inrelease(RELEASE)
    text = path.read_bytes()
    path.write_bytes(text.replace(b"Label: nodeforge-tests", b"Label: nodeforge-tesTS"))
    with pytest.raises(ArchiveTrustError, match=f"dists/{RELEASE}/InRelease: signature does not verify"):
        archive.fetch(_config(apt_repo))


def test_unsigned_inrelease_is_refused(apt_repo):
    path = apt_repo.inrelease(RELEASE)
    path.write_bytes(path.with_name("Release").read_bytes())
    with pytest.raises(ArchiveTrustError, match="not a clearsigned file"):
        archive.fetch(_config(apt_repo))


def test_text_outside_the_signature_is_never_read(apt_repo):
    """A stanza appended after the signature block must not reach the parser."""
    path = apt_repo.inrelease(RELEASE)
    path.write_bytes(path.read_bytes() + b"\nSHA256:\n 00 1 main/binary-amd64/Packages.xz\n")
    idx = archive.fetch(_config(apt_repo))   # gpgv --output yields only the signed text
    assert idx.newest("nf-app", "amd64") is not None


def test_a_suite_signed_for_another_name_is_refused(apt_repo):
    # The release suite's (validly signed) InRelease served as -updates: a replay of the wrong file.
    apt_repo.inrelease(f"{RELEASE}-updates").write_bytes(apt_repo.inrelease(RELEASE).read_bytes())
    with pytest.raises(ArchiveTrustError, match=f"signed for suite '{RELEASE}', not '{RELEASE}-updates'"):
        archive.fetch(_config(apt_repo))


def test_an_expired_inrelease_is_refused(apt_repo):
    apt_repo.valid_until = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    apt_repo.publish()
    with pytest.raises(ArchiveTrustError, match=r"expired \(Valid-Until"):
        archive.fetch(_config(apt_repo))


def test_packages_index_not_matching_inrelease_is_refused(apt_repo):
    xz = apt_repo.packages_xz(RELEASE)
    text = lzma.decompress(xz.read_bytes()).replace(b"Version: 1.0-1", b"Version: 9.9-1")
    xz.write_bytes(lzma.compress(text))   # InRelease still lists the old hash
    with pytest.raises(ArchiveTrustError) as exc:
        archive.fetch(_config(apt_repo))
    assert f"Packages index {apt_repo.url}/debian/dists/{RELEASE}/main/binary-amd64/Packages.xz" in str(exc.value)
    assert "does not match the verified InRelease" in str(exc.value)


def test_missing_keyring_is_a_config_error(apt_repo, tmp_path):
    with pytest.raises(Exception, match="archive keyring not found"):
        archive.fetch(_config(apt_repo, keyring=tmp_path / "nope.gpg"))


def test_host_mirrors_from_deb822_and_one_line_sources(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "a.sources").write_text("Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
                                 "Components: main\n\nTypes: deb\nURIs: http://sec.invalid/debian-security\n"
                                 "Suites: bookworm-security\nComponents: main\n")
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.invalid/debian bookworm main\n")
    assert archive.host_mirrors({}, (tmp_path / "sources.list", d)) == {
        "main": "http://other.invalid/debian", "security": "http://sec.invalid/debian-security"}
    assert archive.host_mirrors({"NODEFORGE_DEBIAN_MIRROR": "http://env.invalid/d"}, (d,))["main"] == \
        "http://env.invalid/d"
    with pytest.raises(archive.ArchiveError, match="no Debian security mirror"):
        archive.host_mirrors({}, (tmp_path / "sources.list",))


def test_the_lean_index_reader_agrees_with_python_debian(apt_repo):
    from debian import deb822

    apt_repo.add(RELEASE, "nf-multi", "3.0-1", depends="nf-lib, nf-base (>= 1.0)")
    apt_repo.publish()
    idx = archive.fetch(_config(apt_repo))
    text = lzma.decompress(apt_repo.packages_xz(RELEASE).read_bytes()).decode()
    ref = [(p["Package"], p["Version"], p["Architecture"], p["SHA256"], p["Filename"], int(p["Size"]),
            p.get("Priority", "")) for p in deb822.Packages.iter_paragraphs(text.splitlines(True), use_apt_pkg=False)]
    got = [(r.name, r.version, r.arch, r.sha256, r.filename, r.size, r.priority) for r in idx.suites[0].records]
    assert got == ref and len(got) == 5
    assert "Depends: nf-lib, nf-base (>= 1.0)" in idx.suites[0].stanzas[-1]


def test_host_mirrors_prefer_the_release_asked_for(tmp_path):
    (tmp_path / "a.list").write_text("deb http://other.invalid/ubuntu noble main\n"
                                     "deb http://deb.invalid/debian bookworm main\n"
                                     "deb http://deb.invalid/debian-security bookworm-security main\n")
    assert archive.host_mirrors({}, (tmp_path / "a.list",), release="bookworm")["main"] == "http://deb.invalid/debian"
    assert archive.host_mirrors({}, (tmp_path / "a.list",))["main"] == "http://other.invalid/ubuntu"


def test_a_mirror_without_the_suite_says_which_setting_to_change(apt_repo):
    config = ArchiveConfig.for_release("nosuch", apt_repo.mirrors(), keyring=apt_repo.key.keyring)
    with pytest.raises(archive.NotFound) as exc:
        archive.fetch(config)
    assert "dists/nosuch/InRelease: HTTP 404" in str(exc.value)
    assert "NODEFORGE_DEBIAN_MIRROR" in exc.value.hint


def _as_tuples(idx):
    return [[(r.name, r.version, r.arch, r.sha256, r.filename, r.size, r.priority, r.suite) for r in s.records]
            for s in idx.suites]


def test_an_unchanged_index_is_read_from_the_cache_not_the_server(apt_repo, tmp_path):
    apt_repo.add(RELEASE, "nf-multi", "3.0-1", depends="nf-lib")
    apt_repo.publish()
    cache = archive.IndexCache(tmp_path / "cache")
    first = archive.fetch(_config(apt_repo, cache=cache))
    digests = {hashlib.sha256(d).hexdigest() for s in first.suites for d in s.packages.values()}
    assert {p.name.split(".")[0] for p in cache.root.glob("*/*.records.json")} == digests   # one per index
    xz = apt_repo.packages_xz(RELEASE)
    xz.unlink()                                                          # the server no longer has it
    again = archive.fetch(_config(apt_repo, cache=cache))
    assert _as_tuples(again) == _as_tuples(first)
    assert again.suites[0].stanzas == first.suites[0].stanzas            # read from the cached bytes
    assert "Depends: nf-lib" in again.suites[0].stanzas[-1]
    assert again.suites[0].packages == first.suites[0].packages
    with pytest.raises(archive.NotFound):
        archive.fetch(_config(apt_repo))                                 # without the cache: downloaded


def test_a_damaged_cache_entry_is_fetched_again_and_a_changed_index_is_not_taken_from_it(apt_repo, tmp_path):
    cache = archive.IndexCache(tmp_path / "cache")
    archive.fetch(_config(apt_repo, cache=cache))
    blob = next(p for p in cache.root.glob("*/*") if not p.name.endswith(".json"))
    blob.write_bytes(blob.read_bytes()[:-1] + b"x")                      # not the verified bytes any more
    records = blob.with_suffix(".records.json")
    records.write_text('{"format": 0}')                                  # another format: parsed again
    idx = archive.fetch(_config(apt_repo, cache=cache))
    assert _as_tuples(idx) == _as_tuples(archive.fetch(_config(apt_repo)))
    assert watch.sha256_file(blob) == blob.name                          # replaced by the downloaded file
    # A new index (a new package published): its own entry, with the new package.
    apt_repo.add(RELEASE, "nf-new", "1.0-1")
    apt_repo.publish()
    assert archive.fetch(_config(apt_repo, cache=cache)).newest("nf-new", "amd64").version == "1.0-1"


def test_cache_entries_not_read_for_two_weeks_are_pruned(tmp_path):
    import os
    import time

    cache = archive.IndexCache(tmp_path / "cache")
    old, new = (hashlib.sha256(b).hexdigest() for b in (b"old", b"new"))
    cache.put(old, b"old")
    cache.put_records(old, [])
    cache.put(new, b"new")
    week3 = time.time() - 21 * 86400
    for p in cache.root.glob(f"{old[:2]}/*"):
        os.utime(p, (week3, week3))
    assert cache.get(new, 3) == b"new"
    cache.prune()
    assert sorted(p.name for p in cache.root.glob("*/*")) == [new]
