"""The package lock against the mirror: create, check (the release trigger), bump, verify ``.deb`` files.

Every function fetches the indexes through :mod:`.archive` (signature and
hashes verified) and returns plain data for the CLI to render; nothing here
prints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from debian.debian_support import Version

from nodeforge.base import fs
from nodeforge.base.fs import sha256_file  # noqa: F401 - re-exported (tests)
from nodeforge.errors import NodeforgeError
from nodeforge.oslock import archive, resolve as rs
from nodeforge.oslock.archive import ArchiveConfig, Indexes, Record
from nodeforge.oslock.lock import LockedPackage, PackageLock


class DebMismatch(NodeforgeError):
    message = "refused {path}: {detail}"


class LockedVersionGone(NodeforgeError):
    message = "{detail}"


def config_for(lock: PackageLock, mirrors: dict[str, str], keyring: Path | None = None) -> ArchiveConfig:
    config = ArchiveConfig.for_release(lock.release, mirrors, arch=lock.architecture, keyring=keyring,
                                       components=lock.components, suites=list(lock.suites.items()))
    config.not_before = dict(lock.index_dates)
    return config


def locked(record: Record) -> LockedPackage:
    return LockedPackage(record.name, record.version, record.arch, record.suite, record.size, record.sha256,
                         record.filename)


def resolve_lock(template: PackageLock, config: ArchiveConfig, *, indexes: Indexes | None = None,
                 workdir: Path | None = None) -> tuple[PackageLock, Indexes]:
    """``template`` with its packages re-resolved against the mirror's current verified indexes."""
    indexes = indexes or archive.fetch(config)
    r = template.resolve
    records = rs.resolve(indexes, release=template.release, priorities=r.priorities, base=r.base,
                         recommends=r.recommends, install=r.install, workdir=workdir)
    dates = {s.suite.name: s.release.get("Date", "") for s in indexes.suites if s.release.get("Date")}
    new = dataclasses.replace(template.with_packages([locked(x) for x in records]), index_dates=dates)
    return new, indexes


# --- check ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Update:
    name: str
    arch: str
    old_version: str
    new_version: str
    suite: str
    security: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PackageCheck:
    lock: str
    packages: int
    updates: list[Update]
    gone: list[str]     # "name version (arch)" the mirror no longer serves

    @property
    def security_updates(self) -> list[Update]:
        return [u for u in self.updates if u.security]

    @property
    def new_release(self) -> bool:
        return bool(self.updates)

    def to_dict(self) -> dict:
        return {"lock": self.lock, "packages": self.packages, "new_release": self.new_release,
                "security": len(self.security_updates), "updates": [u.to_dict() for u in self.updates],
                "gone": self.gone}


def check(lock: PackageLock, config: ArchiveConfig, *, indexes: Indexes | None = None) -> PackageCheck:
    """Every locked package whose name/arch the verified indexes serve in a newer version."""
    indexes = indexes or archive.fetch(config)
    updates, gone = [], []
    for p in lock.packages:
        newest = indexes.newest(p.name, p.arch)
        if newest is not None and Version(newest.version) > Version(p.version):
            updates.append(Update(p.name, p.arch, p.version, newest.version, newest.suite,
                                  newest.suite in _security_suites(config)))
        if indexes.find(p.name, p.arch, p.version) is None:
            gone.append(f"{p.name} {p.version} ({p.arch})")
    updates.sort(key=lambda u: (not u.security, u.name))
    return PackageCheck(str(lock.path), len(lock.packages), updates, gone)


def _security_suites(config: ArchiveConfig) -> set[str]:
    return {s.name for s in config.suites if s.security}


# --- bump -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Change:
    name: str
    arch: str
    old_version: str | None    # None: a package the new set adds
    new_version: str | None    # None: a package the new set drops
    suite: str
    security: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PackageBump:
    lock: str
    changes: list[Change]
    packages: int
    written: bool
    dry_run: bool
    digest: str

    def to_dict(self) -> dict:
        return {"lock": self.lock, "written": self.written, "dry_run": self.dry_run, "packages": self.packages,
                "digest": self.digest, "changes": [c.to_dict() for c in self.changes]}


def diff(old: PackageLock, new: PackageLock, security_suites: Iterable[str] = ()) -> list[Change]:
    sec = set(security_suites)
    before, after = old.by_key(), new.by_key()
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a and b and (a.version, a.sha256) == (b.version, b.sha256):
            continue
        suite = (b or a).suite
        out.append(Change(key[0], key[1], a and a.version, b and b.version, suite, bool(b) and suite in sec))
    out.sort(key=lambda c: (not c.security, c.name))
    return out


def bump(lock: PackageLock, config: ArchiveConfig, *, dry_run: bool = False,
         workdir: Path | None = None, fetch_to: Path | None = None) -> PackageBump:
    """Re-resolve the lock's set against the verified indexes; write it (atomically) unless ``dry_run``.

    With ``fetch_to`` (and not ``dry_run``), every ``.deb`` the new lock adds or moves is
    downloaded there and checked against the new lock first (:func:`fetch_debs`): on a
    mismatch, or a file the mirror does not serve, nothing is written."""
    new, _ = resolve_lock(lock, config, workdir=workdir)
    changes = diff(lock, new, _security_suites(config))
    written = bool(changes) and not dry_run
    if written and fetch_to is not None:
        fetch_debs(new, config, fetch_to, names={c.name for c in changes if c.new_version})
    if written:
        new.save()
    return PackageBump(str(lock.path), changes, len(new.packages), written, dry_run, new.digest())


def markdown(report: PackageBump) -> str:
    """The bump as a pull-request body: package, old -> new, suite."""
    if not report.changes:
        return "The OS package lock is up to date: the mirror serves no newer locked package.\n"
    sec = sum(c.security for c in report.changes)
    lines = ["## OS package update", "",
             f"{len(report.changes)} package(s) changed" + (f", {sec} from a security suite" if sec else "") + ".",
             "", "| package | arch | old | new | suite |", "|---|---|---|---|---|"]
    for c in report.changes:
        suite = f"**{c.suite}** (security)" if c.security else c.suite
        lines.append(f"| {c.name} | {c.arch} | {c.old_version or '(new)'} | {c.new_version or '(removed)'} | {suite} |")
    lines.append("")
    if report.dry_run:
        lines.append(f"Dry run: {report.lock} not written.")
    else:
        lines.append(f"Every version and sha256 is taken from a Packages index verified against its signed "
                     f"InRelease; lock digest `{report.digest}`.")
    return "\n".join(lines) + "\n"


# --- .deb files -----------------------------------------------------------------------

def verify_debs(lock: PackageLock, paths: Iterable[Path], *, require_all: bool = False) -> int:
    """Check each ``.deb`` against the lock by its file name: size and sha256 must be the locked ones.

    A file the lock does not name, or whose bytes differ, is a :class:`DebMismatch`
    naming it; with ``require_all`` every locked package must be among ``paths``.
    Returns the number checked."""
    by_name = {p.deb_name: p for p in lock.packages}
    seen = set()
    n = 0
    for path in paths:
        path = Path(path)
        p = by_name.get(path.name)
        if p is None:
            raise DebMismatch(path=str(path), detail=f"not in the package lock {lock.path}")
        size = path.stat().st_size
        got = sha256_file(path)
        if size != p.size or got != p.sha256:
            raise DebMismatch(path=str(path),
                              detail=f"sha256 {got} ({size} bytes) does not match the lock's {p.name} {p.version} "
                                     f"({p.sha256}, {p.size} bytes) in {lock.path}")
        seen.add(p.deb_name)
        n += 1
    if require_all:
        missing = sorted(set(by_name) - seen)
        if missing:
            raise DebMismatch(path=", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""),
                              detail=f"{len(missing)} locked package(s) missing")
    return n


def fetch_debs(lock: PackageLock, config: ArchiveConfig, dest: Path,
               names: Iterable[str] | None = None) -> list[Path]:
    """Download the locked ``.deb`` files into ``dest`` (kept only when they match the lock)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    suites = {s.name: s for s in config.suites}
    want = set(names) if names is not None else None
    out = []
    for p in lock.packages:
        if want is not None and p.name not in want:
            continue
        target = dest / p.deb_name
        if not (target.exists() and target.stat().st_size == p.size and sha256_file(target) == p.sha256):
            url = suites[p.suite].url(p.filename)
            try:
                data = archive.http_get(url, what=".deb", limit=max(p.size, 1) + 1)
            except archive.NotFound:
                raise LockedVersionGone(
                    detail=f"the mirror no longer serves {p.name} {p.version} ({p.arch}) locked in {lock.path} "
                           f"({url})", hint="refresh the lock: nodeforge release bump --packages") from None
            part = target.with_name(f".{target.name}.part")
            part.write_bytes(data)
            try:
                verify_debs(lock, [fs.move_into_place(part, target)])
            except DebMismatch:
                target.unlink(missing_ok=True)
                raise
        out.append(target)
    return out
