"""A Debian archive in which a security update can be made to appear, for the
end-to-end test (test_pipeline_security_e2e.py) and the benchmark
(bench/bench_security_latency.py).

``bookworm`` and ``bookworm-updates`` are the Debian mirror this machine's apt
uses (verified with debian-archive-keyring); ``bookworm-security`` is a local
signed apt repository (tests/oslock/aptrepo.py, its own throwaway key)
carrying the real security suite's stanzas, their ``.deb`` files passed
through from the real security mirror. The keyring nodeforge trusts is the
Debian archive keyring plus the fixture's key (:attr:`SecurityArchive.keyring`).

:meth:`SecurityArchive.environment` is what a build and the pipeline read:
the mirrors, the keyring, and diskimage-builder's apt sources for the chroot,
where the fixture suite is ``[trusted=yes]`` (a debootstrapped chroot has no
gpg to import a key with); what apt installs from it is still checked, .deb by
.deb, by nodeforge's apt hook against the sha256 of the package lock, which
came from the fixture's gpgv-verified index.

:meth:`SecurityArchive.publish_update` re-versions a real locked package
(``dpkg-deb -R``, Version bumped, ``dpkg-deb -b``) into the fixture suite and
signs the suite again, dated one second after its earlier Date (the real suite's:
the same moved lock on every run), or the moment it appears (``now=True``, for
the latency benchmark).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import time
from pathlib import Path

from nodeforge.oslock import archive, lock as ol, watch
from tests.oslock.aptrepo import AptRepo, SigningKey, reversion

RELEASE = "bookworm"
SEC = f"{RELEASE}-security"
PACKAGE = "ca-certificates"   # a leaf (nothing depends on its exact version), small, arch all


@dataclasses.dataclass
class Update:
    name: str
    arch: str
    old_version: str
    new_version: str
    published: datetime.datetime   # the fixture suite's InRelease Date


class SecurityArchive:
    def __init__(self, root: Path, key: SigningKey, real: dict[str, str] | None = None):
        """``real``: the Debian mirrors (``{"main", "security"}``); default: the host's apt sources."""
        self.root = Path(root)
        self.key = key
        self.real = real or archive.host_mirrors({}, release=RELEASE)
        real_sec = archive.Suite(SEC, "security", self.real["security"])
        index = archive.fetch_suite(real_sec, archive.ArchiveConfig([real_sec], keyring=archive.DEFAULT_KEYRING))
        self.repo = AptRepo(self.root / "archive", key, RELEASE, suites=[SEC],
                            upstream={"debian-security": self.real["security"]})
        self.repo.add_stanzas(SEC, index.stanzas)
        # Dated as the real suite's verified InRelease: the lock made from it is older than any
        # update's index, and the same on every run (while the real suite is), so the builds'
        # SOURCE_DATE_EPOCH and the package-base cache key are too.
        self.repo.date = _release_date(index) or (
            datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(seconds=5))
        self.repo.publish()
        self.keyring = self.root / "keyring.gpg"
        self.keyring.write_bytes(archive.DEFAULT_KEYRING.read_bytes() + key.keyring.read_bytes())

    def start(self) -> "SecurityArchive":
        self.repo.start()
        return self

    def stop(self) -> None:
        self.repo.stop()

    @property
    def security_url(self) -> str:
        return f"{self.repo.url}/debian-security"

    @property
    def mirrors(self) -> dict[str, str]:
        return {"main": self.real["main"], "security": self.security_url}

    def environment(self) -> dict[str, str]:
        return {archive.ENV_MIRROR: self.real["main"], archive.ENV_SECURITY_MIRROR: self.security_url,
                archive.ENV_KEYRING: str(self.keyring),
                "DIB_APT_SOURCES_CONF": f"default:deb {self.real['main']} {RELEASE} main\n"
                                        f"updates:deb {self.real['main']} {RELEASE}-updates main\n"
                                        f"security:deb [trusted=yes] {self.security_url} {SEC} main\n"}

    def publish_update(self, lock: ol.PackageLock, name: str = PACKAGE, arch: str = "all",
                       suffix: str = "+nfsec1", *, now: bool = False) -> Update:
        """``name`` as locked in ``lock``, re-versioned (``<version><suffix>``), appears in the fixture
        security suite; returns the update with the suite's new InRelease Date: one second after the
        suite's earlier Date (deterministic: the same moved lock on every run), or with ``now`` the
        moment it appears (what a latency measurement needs)."""
        old = lock.by_key().get((name, arch))
        if old is None:
            raise AssertionError(f"{name} ({arch}) is not in the package lock {lock.path}")
        config = watch.config_for(lock, self.mirrors, self.keyring)
        indexes = archive.fetch(config)
        [orig] = watch.fetch_debs(lock, config, self.root / "orig", names=[name])
        new_version = f"{old.version}{suffix}"
        rebuilt = reversion(orig, new_version, self.root)
        if now:
            time.sleep(1.1)                   # the InRelease Date has one-second resolution
            published = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        else:
            published = self.repo.date + datetime.timedelta(seconds=1)
        self.repo.add_deb(SEC, rebuilt, stanza(indexes, old))
        self.repo.date = published
        self.repo.publish()
        return Update(name, arch, old.version, new_version, published)


def _release_date(index: archive.SuiteIndex) -> datetime.datetime | None:
    try:
        return email.utils.parsedate_to_datetime(index.release.get("Date", "")).astimezone(datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


def stanza(indexes: archive.Indexes, rec: ol.LockedPackage) -> str:
    """The verified index's stanza of a locked package."""
    for s in indexes.suites:
        if s.suite.name == rec.suite:
            for r, text in zip(s.records, s.stanzas):
                if (r.name, r.version, r.arch) == (rec.name, rec.version, rec.arch):
                    return text
    raise AssertionError(f"no stanza for {rec.name} {rec.version} in {rec.suite}")
