"""Watch upstream Kubernetes releases and move the lockfile: check, bump, prefetch.

Each function takes a :class:`~nodeforge.pins.lockfile.Lockfile`, the
:class:`~nodeforge.pins.sources.Sources` and a
:class:`~nodeforge.pins.cache.Downloader`, and returns plain data for the
CLI to render. Nothing here prints.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import enum
import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from nodeforge.errors import NodeforgeError, PartialFailure, UsageError
from nodeforge.pins import lockfile as lf
from nodeforge.pins.cache import Cache, DownloadError, Downloader, Fetched, NotFoundError
from nodeforge.pins.lockfile import Arch, Artifact, Component, Lockfile, MinorPins, Pin, Version
from nodeforge.pins.sources import SOURCE_OF, Sources, SourceName, parse_checksum_file, relpath
from nodeforge.base import fs, sums
from nodeforge.base.fs import atomic_write

MAINTAINED = 3  # upstream maintains the three newest minors
BUNDLE_FORMAT = "nodeforge-bundle/1"
T = TypeVar("T")


class ReleaseError(NodeforgeError):
    message = "{detail}"


class Status(str, enum.Enum):
    UP_TO_DATE = "up-to-date"
    NEW_PATCH = "new-patch"
    NEW_MINOR = "new-minor"


@dataclasses.dataclass
class MinorStatus:
    minor: str
    pinned: str | None
    upstream: str | None
    status: Status
    maintained: bool | None = None
    ignored: str | None = None  # a pre-release the marker pointed at

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"status": self.status.value}


@dataclasses.dataclass
class CheckReport:
    latest: str | None
    maintained: list[str]
    minors: list[MinorStatus]
    left_maintained: list[str]

    @property
    def new_release(self) -> bool:
        return bool(self.left_maintained) or any(m.status is not Status.UP_TO_DATE for m in self.minors)

    def to_dict(self) -> dict:
        return {"new_release": self.new_release, "latest": self.latest, "maintained": self.maintained,
                "left_maintained": self.left_maintained, "minors": [m.to_dict() for m in self.minors]}


def _marker(sources: Sources, dl: Downloader, minor: str | None) -> tuple[Version | None, str | None]:
    """(stable version, ignored pre-release text) from a stable marker; (None, None) if absent."""
    url = sources.marker_url(minor)
    try:
        text = dl.get_text(url, hint=sources.hint(SourceName.KUBERNETES)).strip()
    except NotFoundError:
        if minor is None:
            raise
        return None, None
    try:
        version = Version.parse(text)
    except ValueError:
        raise DownloadError(url=url, detail=f"unexpected marker content {text[:60]!r}") from None
    if minor and version.minor_key != minor:
        raise DownloadError(url=url, detail=f"marker names {text}, not a {minor} release")
    if version.is_prerelease:
        return None, text
    return version, None


def check(lock: Lockfile, sources: Sources, dl: Downloader) -> CheckReport:
    latest, _ = _marker(sources, dl, None)  # a pre-release there is never picked
    statuses = []
    for minor, entry in lock.minors.items():
        upstream, ignored = _marker(sources, dl, minor)
        if upstream is None and ignored is None:
            raise ReleaseError(detail=f"upstream has no stable marker for pinned Kubernetes {minor}",
                               hint=sources.hint(SourceName.KUBERNETES))
        newer = upstream is not None and entry.version < upstream
        statuses.append(MinorStatus(minor, str(entry.version), str(upstream or entry.version),
                                    Status.NEW_PATCH if newer else Status.UP_TO_DATE, ignored=ignored))
    maintained: list[str] = []
    if latest is not None:
        maintained = [f"{latest.major}.{latest.minor - i}" for i in range(MAINTAINED) if latest.minor - i >= 0]
        newest_pinned = max((lf.minor_sort_key(m) for m in lock.minors), default=(latest.major, -1))
        for n in range(newest_pinned[1] + 1, latest.minor + 1):
            minor = f"{latest.major}.{n}"
            version, ignored = (latest, None) if n == latest.minor else _marker(sources, dl, minor)
            if version is not None:
                statuses.append(MinorStatus(minor, None, str(version), Status.NEW_MINOR, ignored=ignored))
        for s in statuses:
            s.maintained = s.minor in maintained
    oldest = lf.minor_sort_key(maintained[-1]) if maintained else None
    left = [s.minor for s in statuses if s.pinned and oldest and lf.minor_sort_key(s.minor) < oldest]
    return CheckReport(str(latest) if latest else None, maintained, statuses, left)


# --- bump ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Change:
    minor: str
    component: Component
    arch: Arch
    old_version: str | None
    new_version: str
    old_sha256: str | None
    new_sha256: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"component": self.component.value, "arch": self.arch.value}


@dataclasses.dataclass
class BumpReport:
    lockfile: str
    versions: dict[str, tuple[str | None, str]]  # minor -> (old, new) Kubernetes version
    changes: list[Change]
    written: bool
    dry_run: bool
    verified: int  # artifacts downloaded and checked against the published digests

    def to_dict(self) -> dict:
        return {"lockfile": self.lockfile, "written": self.written, "dry_run": self.dry_run,
                "verified": self.verified,
                "versions": {m: {"old": o, "new": n} for m, (o, n) in self.versions.items()},
                "changes": [c.to_dict() for c in self.changes]}


def diff(old: Lockfile, new: Lockfile) -> list[Change]:
    """Per-artifact differences, in the new lockfile's order."""
    before = {(a.minor, a.component, a.arch): a for a in old.artifacts()}
    out = []
    for a in new.artifacts():
        prev = before.get((a.minor, a.component, a.arch))
        if prev is None or (prev.version, prev.sha256) != (a.version, a.sha256):
            out.append(Change(a.minor, a.component, a.arch, prev and prev.version, a.version,
                              prev and prev.sha256, a.sha256))
    return out


def _published(sources: Sources, dl: Downloader, component: Component, version: str, arch: Arch) -> str:
    url = sources.checksum_url(component, version, arch)
    text = dl.get_text(url, hint=sources.hint(SOURCE_OF[component]))
    name = relpath(component, version, arch).rsplit("/", 1)[-1]
    digest = parse_checksum_file(text, name)
    if digest is None:
        raise DownloadError(url=url, detail=f"no sha256 for {name} in the published checksum file")
    return digest


def _published_pin(sources: Sources, dl: Downloader, component: Component, version: str,
                   arches: Iterable[Arch]) -> Pin:
    return Pin(component, version, {a: _published(sources, dl, component, version, a) for a in arches})


def _verify_pins(sources: Sources, dl: Downloader, pins: list[Pin], jobs: int) -> int:
    """Download every artifact of ``pins`` and check it against the published digest."""
    work = []
    for pin in pins:
        for arch, digest in pin.sha256.items():
            url = sources.artifact_url(pin.component, pin.version, arch)
            checksum_url = sources.checksum_url(pin.component, pin.version, arch)
            name = f"{pin.component.value} {pin.version} {arch.value}"
            work.append(lambda url=url, digest=digest, name=name, cu=checksum_url: dl.fetch(
                url, digest, artifact=name, expected_from=f"the published checksum ({cu})",
                hint=sources.hint(SOURCE_OF[pin.component])))
    _run_all(work, jobs)
    return len(work)


def _run_all(work: list[Callable[[], T]], jobs: int) -> list[T]:
    """Run ``work`` on ``jobs`` threads; raise the first error after all finished."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(fn) for fn in work]
        concurrent.futures.wait(futures)
    for f in futures:
        if f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]


def _targets(lock: Lockfile, report: CheckReport, minors: list[str] | None, sources: Sources,
             dl: Downloader) -> dict[str, Version]:
    """Minor -> the stable version to pin, for every minor that moves."""
    moving = {s.minor: Version.parse(s.upstream) for s in report.minors if s.status is not Status.UP_TO_DATE}
    if not minors:
        return moving
    out = {}
    for minor in minors:
        if minor in moving:
            out[minor] = moving[minor]
        elif minor not in lock.minors:  # a minor stable.txt does not point at (yet)
            version, ignored = _marker(sources, dl, minor)
            if version is None:
                raise ReleaseError(detail=f"upstream has no stable Kubernetes {minor} release"
                                   + (f" (only the pre-release {ignored})" if ignored else ""))
            out[minor] = version
    return out


@dataclasses.dataclass
class BumpPlan:
    """What a bump would do: the lockfile as it is and as it would be, the
    Kubernetes versions that move, the artifacts that change and the new
    pins to download and check before anything is written."""

    lock: Lockfile
    new: Lockfile
    versions: dict[str, tuple[str | None, str]]
    changes: list[Change]
    to_verify: list[Pin]

    def report(self, *, written: bool = False, dry_run: bool = True, verified: int = 0) -> BumpReport:
        return BumpReport(str(self.lock.path), self.versions, self.changes, written, dry_run, verified)


def plan_bump(lock: Lockfile, sources: Sources, dl: Downloader, *, minors: list[str] | None = None) -> BumpPlan:
    """The newest stable patch (and any new minor) as a plan: reads upstream's
    release list and published checksums; downloads no artifact, writes nothing.

    A new minor copies the companion pins of the newest pinned minor, except
    crictl, which follows the minor (``v1.NN.0``) when upstream has published it."""
    for minor in minors or []:
        if not lf.is_minor(minor):
            raise UsageError(detail=f"not a Kubernetes minor: {minor!r} (expected like 1.36)")
    report = check(lock, sources, dl)
    targets = _targets(lock, report, minors, sources, dl)
    new = lock
    to_verify: list[Pin] = []
    versions = {}
    for minor, version in sorted(targets.items(), key=lambda kv: lf.minor_sort_key(kv[0])):
        old = lock.minors.get(minor)
        if old is None:
            base = lock.minors[max(lock.minors, key=lf.minor_sort_key)]
            pins = dict(base.pins)
            pause = base.pause_image
            crictl_version = f"{minor}.0"
            try:
                pins[Component.CRICTL] = _published_pin(sources, dl, Component.CRICTL, crictl_version,
                                                        lock.architectures)
                to_verify.append(pins[Component.CRICTL])
            except NotFoundError:
                pass  # crictl for the new minor not released yet: keep the previous one
        else:
            pins, pause = dict(old.pins), old.pause_image
        for comp in lf.KUBERNETES_BINARIES:
            pins[comp] = _published_pin(sources, dl, comp, str(version), lock.architectures)
            to_verify.append(pins[comp])
        new = new.with_minor(MinorPins(minor, version, pause, pins))
        versions[minor] = (str(old.version) if old else None, str(version))
    return BumpPlan(lock, new, versions, diff(lock, new), to_verify)


def apply_bump(plan: BumpPlan, sources: Sources, dl: Downloader, *, jobs: int = 4) -> BumpReport:
    """Download every new artifact of the plan and check it against its
    published checksum (any mismatch: nothing is written), then rewrite the lockfile."""
    verified = _verify_pins(sources, dl, plan.to_verify, jobs)
    written = bool(plan.changes)
    if written:
        plan.new.save()
    return plan.report(written=written, dry_run=False, verified=verified)


def bump(lock: Lockfile, sources: Sources, dl: Downloader, *, minors: list[str] | None = None,
         dry_run: bool = False, jobs: int = 4) -> BumpReport:
    """Pin the newest stable patch (and any new minor), verified, and rewrite the lockfile:
    :func:`plan_bump`, then (unless ``dry_run``) :func:`apply_bump`.

    Kubernetes binaries take upstream's published checksums; every new artifact
    is downloaded and must match them, else nothing is written. With
    ``dry_run`` the published checksums are read but nothing is downloaded or
    written."""
    plan = plan_bump(lock, sources, dl, minors=minors)
    return plan.report() if dry_run else apply_bump(plan, sources, dl, jobs=jobs)


def diff_markdown(report: BumpReport) -> str:
    """The bump as a pull-request body: one line per Kubernetes version, a table per artifact."""
    if not report.changes:
        return "The lockfile is up to date: no new stable Kubernetes patch release upstream.\n"
    lines = ["## Kubernetes version bump", ""]
    for minor, (old, new) in report.versions.items():
        lines.append(f"- Kubernetes {minor}: {old} -> {new}" if old else f"- Kubernetes {minor}: new minor, {new}")
    lines += ["", "| minor | artifact | arch | version | sha256 |", "|---|---|---|---|---|"]
    for c in report.changes:
        version = c.new_version if c.old_version == c.new_version else f"{c.old_version or '(new)'} -> {c.new_version}"
        sha = f"`{c.old_sha256}` -> `{c.new_sha256}`" if c.old_sha256 else f"`{c.new_sha256}`"
        lines.append(f"| {c.minor} | {c.component.value} | {c.arch.value} | {version} | {sha} |")
    lines.append("")
    if report.dry_run:
        lines.append(f"Dry run: {report.lockfile} not written; artifacts not downloaded.")
    else:
        lines.append(f"Each of the {report.verified} new artifacts was downloaded and matched its published sha256.")
    return "\n".join(lines) + "\n"


# --- prefetch ---------------------------------------------------------------------------

@dataclasses.dataclass
class PrefetchItem:
    artifact: Artifact
    minors: list[str]   # every pinned minor that uses this file
    path: str           # <source>/<path below the source's base URL>: its place in a bundle
    url: str
    fetched: Fetched | None = None
    error: NodeforgeError | None = None
    cached_size: int | None = None  # planned: the size of the file under its sha256 in the cache (Cache.peek)

    @property
    def in_cache(self) -> bool:
        return self.cached_size is not None

    def to_dict(self) -> dict:
        d = self.artifact.to_dict() | {"minors": self.minors, "source": SOURCE_OF[self.artifact.component].value,
                                       "path": self.path, "url": self.url}
        if self.fetched:
            d |= {"size": self.fetched.size, "status": "downloaded" if self.fetched.downloaded else "cached"}
        elif self.error:
            d |= {"status": "failed", "error": str(self.error)}
        else:   # planned, not fetched
            d |= {"size": self.cached_size, "status": "cached" if self.in_cache else "would download",
                  "in_cache": self.in_cache}
        return d


@dataclasses.dataclass
class PrefetchReport:
    items: list[PrefetchItem]
    bundle: str | None
    seconds: float

    @property
    def downloaded_bytes(self) -> int:
        return sum(i.fetched.size for i in self.items if i.fetched and i.fetched.downloaded)

    def to_dict(self) -> dict:
        return {"artifacts": [i.to_dict() for i in self.items], "bundle": self.bundle,
                "downloaded_bytes": self.downloaded_bytes, "seconds": round(self.seconds, 3)}


@dataclasses.dataclass
class PrefetchPlan:
    """What a prefetch would do: every pinned file once (with the minors that
    use it), the URL it would come from, whether the cache has a file under its
    sha256 already (existence only: :func:`apply_prefetch` re-hashes it), and
    the bundle it would write."""

    lock: Lockfile
    cache_root: Path
    items: list[PrefetchItem]
    bundle: Path | None = None

    @property
    def cached(self) -> int:
        return sum(1 for i in self.items if i.in_cache)

    def to_dict(self) -> dict:
        return {"dry_run": True, "cache": str(self.cache_root), "artifacts": [i.to_dict() for i in self.items],
                "cached": self.cached, "would_download": len(self.items) - self.cached,
                "bundle": str(self.bundle) if self.bundle is not None else None}


def plan_prefetch(lock: Lockfile, sources: Sources, cache: Cache, *, minors: list[str] | None = None,
                  arches: list[str] | None = None, bundle: Path | None = None) -> PrefetchPlan:
    """The artifacts a prefetch of ``minors``/``arches`` (all by default) would
    fetch. Reads the lockfile and looks for each file under its name in the
    cache (never :meth:`Cache.lookup`, which re-hashes and evicts); creates,
    downloads and writes nothing. An unknown minor or architecture is the
    lockfile's :class:`~nodeforge.errors.ConfigError`."""
    items: dict[tuple[Component, str, Arch], PrefetchItem] = {}
    for a in lock.artifacts(minors, [Arch(x) for x in arches] if arches else None):
        key = (a.component, a.version, a.arch)
        if key in items:  # the same file pinned by several minors
            items[key].minors.append(a.minor)
        else:
            path = f"{SOURCE_OF[a.component].value}/{relpath(a.component, a.version, a.arch)}"
            items[key] = PrefetchItem(a, [a.minor], path, sources.url_for(a), cached_size=cache.peek(a.sha256))
    return PrefetchPlan(lock, cache.root, list(items.values()), Path(bundle) if bundle is not None else None)


def apply_prefetch(plan: PrefetchPlan, sources: Sources, dl: Downloader, *, jobs: int = 4) -> PrefetchReport:
    """Fill the cache with every artifact of ``plan`` (each verified: a cached
    file is re-hashed, a download must match its sha256); then write the
    plan's bundle, if any. One failure is raised as it is, several as a
    partial failure, all as a failure."""
    start = time.monotonic()
    items = [dataclasses.replace(i, minors=list(i.minors), fetched=None, error=None) for i in plan.items]
    # Kubernetes binaries are the big ones; start them first so the pool drains evenly.
    ordered = sorted(items, key=lambda i: not i.artifact.component.is_kubernetes)

    def fetch(item: PrefetchItem) -> None:
        try:
            item.fetched = dl.fetch(item.url, item.artifact.sha256, artifact=item.artifact.name,
                                    hint=sources.hint(SOURCE_OF[item.artifact.component]))
        except NodeforgeError as exc:
            item.error = exc

    _run_all([lambda i=i: fetch(i) for i in ordered], jobs)
    report = PrefetchReport(items, None, time.monotonic() - start)
    failed = [i for i in report.items if i.error]
    if failed:
        if len(failed) == 1:
            raise failed[0].error
        if len(failed) == len(report.items):   # nothing fetched: a failure, not a partial one
            raise ReleaseError(f"all {len(failed)} items failed", hint="\n".join(str(i.error) for i in failed))
        raise PartialFailure(failed=len(failed), total=len(report.items),
                             hint="\n".join(str(i.error) for i in failed))
    if plan.bundle is not None:
        report.bundle = str(write_bundle(plan.lock, dl, report.items, plan.bundle))
    report.seconds = time.monotonic() - start
    return report


def prefetch(lock: Lockfile, sources: Sources, dl: Downloader, *, minors: list[str] | None = None,
             arches: list[str] | None = None, bundle: Path | None = None, jobs: int = 4) -> PrefetchReport:
    """Fill the cache with every pinned artifact (verified); optionally write a mirror bundle:
    :func:`plan_prefetch`, then :func:`apply_prefetch`."""
    plan = plan_prefetch(lock, sources, dl.cache, minors=minors, arches=arches, bundle=bundle)
    return apply_prefetch(plan, sources, dl, jobs=jobs)


def write_bundle(lock: Lockfile, dl: Downloader, items: list[PrefetchItem], dest: Path) -> Path:
    """A directory or tarball (.tar, .tar.gz, .tgz) laid out as a mirror of every source.

    ``<source>/<upstream path>`` for each artifact, ``index.json`` describing
    them, ``SHA256SUMS`` (``sha256sum -c`` format) and the lockfile itself."""
    index = {
        "format": BUNDLE_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lockfile": "versions.yaml",
        "mirrors": {s.value: s.value for s in SourceName},
        "artifacts": [{k: v for k, v in i.to_dict().items() if k not in ("minor", "url", "status")}
                      for i in items],
    }
    meta = {
        "index.json": json.dumps(index, indent=2) + "\n",
        "SHA256SUMS": sums.format_sums({i.path: i.artifact.sha256 for i in items}),
        "versions.yaml": lock.dumps(),
    }
    name = dest.name
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        mode = "w" if name.endswith(".tar") else "w:gz"
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=dest.parent)
        os.close(fd)
        try:
            with tarfile.open(tmp, mode) as tar:
                for i in items:
                    tar.add(dl.cache.path_for(i.artifact.sha256), arcname=i.path)
                for fname, text in meta.items():
                    info = tarfile.TarInfo(fname)
                    data = text.encode()
                    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                    tar.addfile(info, io.BytesIO(data))
            os.chmod(tmp, 0o644)
            fs.move_into_place(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for i in items:
        target = dest / i.path
        part = target.with_name(f".{target.name}.part")
        dl.cache.export(i.artifact.sha256, part)
        fs.move_into_place(part, target)
    for fname, text in meta.items():  # index last: a bundle with an index is complete
        if fname != "index.json":
            atomic_write(dest / fname, text)
    atomic_write(dest / "index.json", meta["index.json"])
    return dest


# --- the OS package lock (nodeforge.oslock; its resolve inputs: nodeforge.imagebuild.package_lock) ----

def package_lock_path(lockfile_path: Path) -> Path:
    from nodeforge.oslock.lock import FILENAME
    return Path(lockfile_path).parent / FILENAME
