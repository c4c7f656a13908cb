"""``nodeforge image build``: one root filesystem, both disk layouts, checksums, manifest, SBOM.

Stages (see ``docs/image-build.md``):

1. **preflight** -- everything that can fail fast fails here, before the long
   build, in two steps: :func:`plan` (writes nothing: unknown minor,
   unsupported base OS, unknown variant, missing host tool, not root, an
   existing output directory, too little disk, the Debian mirror and the OS
   package lock, and which pinned artifacts are in the cache or would be
   downloaded; ``image build --dry-run`` prints it with the package base key,
   :func:`package_base_plan`), then :func:`fetch` (every pinned artifact
   present and verified in the cache, fetched from the configured sources when
   missing unless ``offline``);
2. **render** the element tree for the pins (:mod:`.render`), unless the request
   names a tree :func:`.render.render` already wrote (``BuildRequest.rendered``:
   read back by :func:`.render.load`, refused in preflight when it is not this
   lockfile's and these elements' render or changed since);
3. **package base** (:mod:`.package_base`): the base OS with every element
   package installed, cached by the sha256 of its inputs (nothing
   Kubernetes-specific); built by diskimage-builder only on a miss;
4. **rootfs**: diskimage-builder builds one finalised root filesystem
   (``-t tar``, the ``nodeforge-rootfs`` element's single-filesystem block
   device config) starting from the package base (given to dib as its cached
   debootstrap tarball), the apt archives cached;
5. **normalise and manifest** (:mod:`.reproducible`): what records the build
   rather than the content removed, times clamped to ``SOURCE_DATE_EPOCH``
   (from the inputs); the per-file manifest ``files.jsonl``
   (:mod:`.contents`, one pass); dpkg packages read from the tree, artifacts,
   digests, the installed file of each artifact boot verification compares
   (its sha256 from the per-file manifest, checked against the pin: for an
   archive, its member; :func:`.manifest.installed_artifacts`); stored in the
   tree at ``/etc/nodeforge/manifest.json``;
6. **assemble** each variant from a hard-linked copy of the tree with the
   variant overlay applied (:mod:`.disk`): the VM disk as qcow2, the
   bare-metal disk as raw; every disk id derived from the content
   (:func:`.disk.derived_ids`), every timestamp the epoch;
7. **outputs**: SHA256SUMS and SHA512SUMS (one read per file), manifest.json,
   files.jsonl, sbom.cdx.json, build.log -- all in a staging directory renamed to the final
   name at the end, so a failed build leaves nothing under that name.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from nodeforge.base import fs, runner
from nodeforge.errors import NodeforgeError
from nodeforge.imagebuild.steps import BuildLog, Step, Together, run_steps
from nodeforge.imagebuild import checksums, contents, disk, manifest as mf, package_base as pb, render as rd
from nodeforge.imagebuild import package_lock, pyc, reproducible
from nodeforge.pins import lockfile as lf
from nodeforge.pins.cache import Cache, ChecksumMismatch, DownloadError, Downloader
from nodeforge.pins.lockfile import Arch, Lockfile
from nodeforge.pins.sources import SOURCE_OF, Sources
from nodeforge.oslock import archive
from nodeforge.redact import redact_url

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
HOST_TOOLS = ("sudo", "debootstrap", "tar", "mkfs.ext4", "mkfs.vfat", "mmd", "mcopy", "sgdisk", "grub-mkimage",
              "debugfs", "qemu-img")
GIB = 1 << 30
ENV_DIB_CACHE = "NODEFORGE_DIB_CACHE"
ENV_WORK_DIR = "NODEFORGE_WORK_DIR"
ENV_DEBIAN_MIRROR = archive.ENV_MIRROR
ENV_DEBIAN_SECURITY_MIRROR = archive.ENV_SECURITY_MIRROR
APT_SOURCES = archive.APT_SOURCES


class PreflightError(NodeforgeError):
    message = "preflight: {detail}"


class BuildError(NodeforgeError):
    message = "image build failed: {detail}"


@dataclasses.dataclass
class BuildRequest:
    minor: str
    lockfile_path: Path = lf.DEFAULT_PATH
    sources_file: Path | None = None
    variants: tuple[str, ...] = rd.VARIANTS
    out: Path | None = None                 # the build directory (created atomically)
    cache_dir: Path | None = None           # artifact cache (default: cache.default_root())
    dib_cache: Path | None = None           # debootstrap tarball + apt archives
    work_dir: Path | None = None            # scratch space (several GiB; removed afterwards)
    arch: Arch = Arch.AMD64
    offline: bool = False                   # never download; missing cached artifacts are errors
    keep_work: bool = False
    package_base_cache: Path | None = None  # cached package bases (default: <dib_cache>/package-base)
    rebuild_package_base: bool = False      # build the package base afresh even if it is cached
    # Free space preflight asks for (a build of both variants, measured 2026-12-02: peak 2.9 GiB in the
    # work directory, 2.6 GiB in the output directory, 3.4 GiB together when both are on one filesystem,
    # since the work directory empties as the images are written out).
    min_free_work: int = 4 * GIB
    min_free_out: int = 3 * GIB
    min_free_shared: int = 5 * GIB          # work and output directories on one filesystem
    stream: Callable[[str], None] | None = None   # progress lines (the CLI passes click.echo)
    rendered: Path | None = None            # an element tree render.render wrote for these inputs (render.load
                                            # checks it); None: the build renders into its work directory


@dataclasses.dataclass
class Plan:
    """What preflight established; everything the build needs."""

    request: BuildRequest
    lock: Lockfile
    out: Path
    work_root: Path
    dib_cache: Path
    cache: Cache
    mirrors: dict[str, str]
    artifacts: list[rd.StagedArtifact]
    disk_image_create: str
    os_lock: object | None = None   # nodeforge.oslock.lock.PackageLock, when one is beside the lockfile
    rendered: rd.Rendered | None = None   # the request's rendered tree, read back and checked


@dataclasses.dataclass(frozen=True)
class ArtifactPlan:
    """A pinned artifact as the plan step found it: its file in the artifact cache (there or not;
    not re-hashed: the fetch step does that) and where it would be downloaded from."""

    artifact: rd.StagedArtifact
    path: Path
    cached: bool
    url: str

    def to_dict(self) -> dict:
        return {"name": self.artifact.name, **self.artifact.manifest_entry(), "cached": self.cached,
                "action": "cached" if self.cached else "download", "path": str(self.path),
                "url": None if self.cached else redact_url(self.url)}


@dataclasses.dataclass(frozen=True)
class PackageBasePlan:
    """The package base the build would use: its key, and whether an entry for it is in the cache
    (looked at only: the build re-hashes it before use)."""

    key: str
    cache_root: Path
    cached: bool
    rebuild: bool = False          # --rebuild-package-base

    @property
    def action(self) -> str:
        return "rebuild" if self.rebuild else "reuse" if self.cached else "build"

    def to_dict(self) -> dict:
        return {"key": self.key, "cached": self.cached, "action": self.action, "cache": str(self.cache_root),
                "path": str(self.cache_root / self.key)}


@dataclasses.dataclass
class BuildPlan:
    """What the plan step established, writing nothing: every check of preflight passed; the
    :class:`Plan` the build needs, its artifacts not yet fetched or verified (:func:`fetch` does
    that), and each artifact as found in the cache (:class:`ArtifactPlan`)."""

    plan: Plan
    sources: Sources
    artifacts: list[ArtifactPlan]

    @property
    def version(self) -> str:
        return str(self.plan.lock.minor(self.plan.request.minor).version)

    def images(self) -> dict[str, str]:
        return {v: image_name(self.version, v) for v in self.plan.request.variants}

    def outputs(self) -> list[str]:
        """Every file the build directory will hold."""
        return [*self.images().values(), "SHA256SUMS", "SHA512SUMS", "manifest.json", contents.FILENAME,
                "sbom.cdx.json", "build.log", *(["os-packages.lock.yaml"] if self.plan.os_lock is not None else [])]

    def to_dict(self, package_base: PackageBasePlan | None = None) -> dict:
        p, req = self.plan, self.plan.request
        return {"kubernetes": self.version, "minor": req.minor, "arch": req.arch.value,
                "variants": list(req.variants), "images": self.images(), "outputs": self.outputs(),
                "out": str(p.out), "work_dir": str(p.work_root), "keep_work": req.keep_work,
                "dib_cache": str(p.dib_cache), "artifact_cache": str(p.cache.root),
                "rendered": str(p.rendered.root) if p.rendered is not None else None,
                "offline": req.offline, "mirrors": {k: redact_url(v) for k, v in p.mirrors.items()},
                "os_package_lock": str(p.os_lock.path) if p.os_lock is not None else None,
                "artifacts": [a.to_dict() for a in self.artifacts],
                "package_base": package_base.to_dict() if package_base is not None else None}


@dataclasses.dataclass
class BuildResult:
    out: Path
    images: dict[str, str]
    manifest: dict
    seconds: dict[str, float]
    package_base: dict = dataclasses.field(default_factory=dict)   # {"key", "reused"}

    def to_dict(self) -> dict:
        return {"out": str(self.out), "images": self.images, "build_id": self.manifest["build_id"],
                "kubernetes": self.manifest["kubernetes"]["version"], "packages": len(self.manifest["packages"]),
                "package_base": self.package_base,
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()}}


# --- settings -----------------------------------------------------------------------

def default_dib_cache() -> Path:
    if os.environ.get(ENV_DIB_CACHE):
        return Path(os.environ[ENV_DIB_CACHE])
    return fs.cache_home() / "dib"


def debian_mirrors(env=None, sources: tuple[Path, ...] = APT_SOURCES) -> dict[str, str]:
    """The Debian archive and security mirrors: from the environment, else the host's apt sources
    (one reader of apt sources: :func:`nodeforge.oslock.archive.host_mirrors`)."""
    try:
        return archive.host_mirrors(env, sources)
    except archive.ArchiveError as exc:
        raise PreflightError(detail=exc.kwargs.get("detail", str(exc)), hint=exc.hint) from None


# --- preflight ------------------------------------------------------------------------

def preflight(req: BuildRequest) -> Plan:
    """The plan step, then the fetch step: what the build needs, every artifact in the cache, verified."""
    return fetch(plan(req))


def plan(req: BuildRequest) -> BuildPlan:
    """Every check of preflight, writing nothing: the pins, variants and architecture, the rendered
    tree if one is given, host tools, root, the output directory (must not exist), free space, the
    Debian mirror and the OS package lock (checked against the mirror unless offline), and each
    pinned artifact's file in the cache (present, or to be downloaded; offline, a missing one fails
    here)."""
    lock = lf.load(req.lockfile_path)
    if req.minor not in lock.minors:
        raise PreflightError(detail=f"Kubernetes {req.minor} is not pinned in {req.lockfile_path} "
                                    f"(pinned: {', '.join(lock.minors)})",
                             hint=f"pin it first: nodeforge release bump --minor {req.minor}")
    rd.distro_for(lock)
    unknown = [v for v in req.variants if v not in rd.VARIANTS]
    if unknown or not req.variants:
        raise PreflightError(detail=f"unknown variant {', '.join(unknown) or '(none)'} "
                                    f"(known: {', '.join(rd.VARIANTS)})", hint="use --variant vm,baremetal")
    if req.arch not in lock.architectures:
        raise PreflightError(detail=f"architecture {req.arch.value} is not pinned in {req.lockfile_path}")
    # A rendered tree given: this lockfile's and these elements' render, unchanged (else refused, named).
    rendered = rd.load(req.rendered, lock, req.minor, arch=req.arch) if req.rendered is not None else None

    dic = _checked_host()
    out = Path(req.out) if req.out else REPO / "build" / "images" / f"k8s-{lock.minor(req.minor).version}-" \
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    out = out.absolute()
    if out.exists():
        raise PreflightError(detail=f"output directory {out} already exists",
                             hint="choose a new --out (each build gets its own directory)")
    work_root = Path(req.work_dir or os.environ.get(ENV_WORK_DIR) or tempfile.gettempdir()).absolute()
    out_parent = _existing_parent(out)
    work_parent = _existing_parent(work_root)
    _check_space(work_parent, req.min_free_work, "work directory", f"--work-dir or ${ENV_WORK_DIR}")
    _check_space(out_parent, req.min_free_out, "output directory", "--out")
    if work_parent.stat().st_dev == out_parent.stat().st_dev:
        _check_space(work_parent, req.min_free_shared, "the filesystem holding the work and output directories",
                     f"--work-dir or ${ENV_WORK_DIR}, or --out")

    mirrors = debian_mirrors()
    os_lock = os_lock_preflight(Path(req.lockfile_path), rd.distro_for(lock).release, req.arch.value, mirrors,
                                offline=req.offline)
    cache = Cache(req.cache_dir)
    sources = Sources.load(req.sources_file or Path(req.lockfile_path).parent / "sources.yaml")
    artifacts = []
    for pin in rd.pins_for(lock, req.minor, req.arch):
        cached = cache.peek(pin.sha256) is not None     # there, not re-hashed (Cache.lookup may evict)
        if req.offline and not cached:
            raise _not_in_cache(req, cache, pin)
        artifacts.append(ArtifactPlan(pin, cache.path_for(pin.sha256), cached, sources.artifact_url(pin.component, pin.version, req.arch)))
    return BuildPlan(Plan(req, lock, out, work_root, Path(req.dib_cache or default_dib_cache()).absolute(), cache,
                          mirrors, [a.artifact for a in artifacts], str(dic), os_lock, rendered), sources, artifacts)


def _checked_host() -> Path:
    """The host tools present and the build run as root; diskimage-builder's disk-image-create."""
    runner.require(*HOST_TOOLS, path=runner.sbin_path())
    dic = Path(sys.prefix) / "bin" / "disk-image-create"
    if not dic.exists():
        found = runner.which("disk-image-create")
        if not found:
            raise PreflightError(detail="diskimage-builder's disk-image-create is not installed",
                                 hint="run 'make setup' (installs diskimage-builder into .venv)")
        dic = Path(found)
    if os.geteuid() != 0:
        # diskimage-builder chroots, and the disk assembly reads and writes every
        # file of the image (root-owned, some unreadable to users).
        raise PreflightError(detail="image build must run as root",
                             hint="run it as root, e.g. sudo .venv/bin/nodeforge image build ...")
    return dic


def fetch(bp: BuildPlan) -> Plan:
    """The fetch step: every pinned artifact present and verified in the cache (re-hashed; a missing
    or damaged one downloaded, or with ``offline`` an error); then the plan is the build's."""
    _ensure_artifacts(bp.plan.request, bp.plan.cache, bp.sources, bp.plan.artifacts)
    return bp.plan


def os_lock_preflight(lockfile_path: Path, codename: str, arch: str, mirrors: dict[str, str], *,
                      offline: bool = False, keyring: Path | None = None):
    """The OS package lock beside the lockfile (None if there is none), checked against the build and the
    mirror: the same release and architecture, and every locked version still served (verified indexes)."""
    from nodeforge.oslock import lock as ol, watch

    path = Path(lockfile_path).parent / ol.FILENAME
    if not path.exists():
        return None
    plock = ol.load(path)
    if (plock.release, plock.architecture) != (codename, arch):
        raise PreflightError(detail=f"the OS package lock {path} is for {plock.release} {plock.architecture}, "
                                    f"the build is {codename} {arch}",
                             hint=f"regenerate it: nodeforge release lock-packages --lockfile {lockfile_path}")
    if offline:
        return plock
    try:
        report = watch.check(plock, watch.config_for(plock, mirrors, keyring))
    except NodeforgeError as exc:
        raise PreflightError(detail=f"the OS package lock {path} could not be checked against the Debian "
                                    f"mirror: {exc}", hint=exc.hint) from None
    if report.gone:
        raise PreflightError(detail=f"the Debian mirror no longer serves {len(report.gone)} version(s) locked in "
                                    f"{path}: {', '.join(report.gone[:8])}" + (" ..." if len(report.gone) > 8 else ""),
                             hint="refresh the lock: nodeforge release bump --packages (and commit it)")
    return plock


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _check_space(path: Path, need: int, what: str, option: str) -> None:
    free = shutil.disk_usage(path).free
    if free < need:
        raise PreflightError(detail=f"{what} ({path}) has {free / GIB:.1f} GiB free; the build needs "
                                    f"{need / GIB:.1f} GiB there",
                             hint=f"free some space or choose another place with {option}")


def _not_in_cache(req: BuildRequest, cache: Cache, pin: rd.StagedArtifact) -> PreflightError:
    return PreflightError(detail=f"{pin.name} ({pin.sha256}) is missing or corrupt in the artifact cache {cache.root}",
                          hint=f"run: nodeforge release prefetch --minor {req.minor} --arch {pin.arch.value}")


def _ensure_artifacts(req: BuildRequest, cache: Cache, sources: Sources, pins: list[rd.StagedArtifact]) -> None:
    dl = Downloader(cache)
    for pin in pins:
        name = pin.name
        if req.offline:
            if cache.lookup(pin.sha256) is None:  # re-hashes; a damaged entry is evicted
                raise _not_in_cache(req, cache, pin)
            continue
        try:
            dl.fetch(sources.artifact_url(pin.component, pin.version, req.arch), pin.sha256, artifact=name,
                     hint=sources.hint(SOURCE_OF[pin.component]))
        except (DownloadError, ChecksumMismatch) as exc:
            raise PreflightError(detail=f"{name} is not in the artifact cache {cache.root} and could not be "
                                        f"fetched: {exc}",
                                 hint=exc.hint or f"run: nodeforge release prefetch --minor {req.minor}") from None


# --- build ------------------------------------------------------------------------------

_priv = runner.as_root


def _run_logged(argv: list[str], logf: BuildLog, *, env=None, what: str) -> None:
    logf.write(f"$ {runner.command_line(argv)}")
    runner.run(argv, stdout=logf.fh, env=env, what=what, error=BuildError)


def dib_version(dic: str) -> str:
    try:
        from importlib.metadata import version
        return version("diskimage-builder")
    except Exception:  # pragma: no cover - not installed as a distribution
        return runner.output([dic, "--version"], check=False).strip()


def build(req: BuildRequest, plan: Plan | None = None) -> BuildResult:
    plan = plan or preflight(req)
    started = time.monotonic()
    build_time = datetime.datetime.now(datetime.timezone.utc)
    seconds: dict[str, float] = {}
    plan.work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nodeforge-build.", dir=plan.work_root))
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{plan.out.name}.partial.", dir=plan.out.parent))
    logf = BuildLog(stage / "build.log", req.stream)
    try:
        result = _build(plan, work, stage, logf, build_time, seconds)
        seconds["total"] = time.monotonic() - started
        logf.step(f"done in {seconds['total']:.0f}s")
        logf.close()
        os.chmod(stage, 0o755)
        fs.move_into_place(stage, plan.out)   # atomic: the build directory appears complete or not at all
        return dataclasses.replace(result, out=plan.out, seconds=seconds)
    except BaseException:
        logf.close()
        failed_log = plan.out.parent / f"{plan.out.name}.failed.log"
        try:
            shutil.copyfile(stage / "build.log", failed_log)
        except OSError:
            pass
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        if not req.keep_work:
            runner.run(["rm", "-rf", "--one-file-system", str(work)], privileged=True, check=False)


def _dib_env(plan: Plan, elements_path: Path | str, image_cache: Path, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env.update({
        "SOURCE_DATE_EPOCH": str(reproducible.source_date_epoch(plan.os_lock)[0]),
        "ELEMENTS_PATH": str(elements_path),
        "DIB_DEBIAN_DISTRIBUTION_MIRROR": plan.mirrors["main"],
        "DIB_DEBIAN_SECURITY_MIRROR": plan.mirrors["security"],
        "DIB_IMAGE_CACHE": str(image_cache),
        "DIB_DEBIAN_USE_DEBOOTSTRAP_CACHE": "1",
        "DIB_APT_LOCAL_CACHE": "1",
        "PATH": os.pathsep.join([str(Path(plan.disk_image_create).parent), env.get("PATH", ""), "/usr/sbin", "/sbin"]),
    })
    return env


DIB_CACHE_LOCK = ".nodeforge-dib.lock"


def _dib_cache_lock(dib_cache: Path, logf: BuildLog):
    """One diskimage-builder run at a time per diskimage-builder cache directory: its apt archive
    cache (``DIB_APT_LOCAL_CACHE``) is bind-mounted into every build's chroot and apt takes its lock
    without waiting, so a second build on the host failed with "Could not get lock
    /var/cache/apt/archives/lock". A build that finds the cache in use says so and waits."""
    return fs.locked(Path(dib_cache) / DIB_CACHE_LOCK, on_wait=lambda: logf.step(
        f"waiting for another build using diskimage-builder's cache {dib_cache} (its apt cache is shared)"))


def package_base_spec(plan: Plan, rendered: rd.Rendered, base_elements: Path) -> pb.BaseSpec:
    """What the package base is built from (its cache key); nothing Kubernetes-specific. With an OS
    package lock the mirrors are not part of it (see :func:`pb.spec_mirrors`)."""
    return _base_spec(plan, rendered.distro, rd.rendered_env(rendered.env_file),
                      pb.union_packages(rendered.elements, list(rd.NODEFORGE_ELEMENTS)), rd.tree_digest(base_elements))


def _base_spec(plan: Plan, distro: rd.Distro, renv: dict[str, str], packages: dict,
               element_digest: str) -> pb.BaseSpec:
    return pb.BaseSpec(
        distro_element=distro.element, release=distro.release,
        components=renv.get("DIB_DEBIAN_COMPONENTS", "main"), arch=plan.request.arch.value,
        mirrors=pb.spec_mirrors(plan.mirrors, plan.os_lock), packages=packages,
        element_digest=element_digest, dib_version=dib_version(plan.disk_image_create),
        os_package_lock=plan.os_lock.digest() if plan.os_lock is not None else None,
        source_date_epoch=reproducible.source_date_epoch(plan.os_lock)[0] if plan.os_lock is not None else None)


def package_base_root(req: BuildRequest, dib_cache: Path) -> Path:
    """The package base cache: ``req.package_base_cache``, else ``<dib cache>/package-base``."""
    return Path(req.package_base_cache) if req.package_base_cache else Path(dib_cache) / "package-base"


def package_base_plan(bp: BuildPlan) -> PackageBasePlan:
    """The package base key the build would use and whether it is cached, writing nothing: from the
    given rendered tree, else the render the build would make (held in memory); the generated
    element's digest from its files in memory; the cache entry looked at (:meth:`pb.BaseCache.present`:
    not re-hashed, locked or removed)."""
    plan, req = bp.plan, bp.plan.request
    if plan.rendered is not None:
        elements, renv, distro = plan.rendered.elements, rd.rendered_env(plan.rendered.env_file), plan.rendered.distro
    else:
        tree = rd.tree(plan.lock, req.minor, arch=req.arch)
        elements, renv, distro = tree.element_files(), rd.parse_env(tree.read("nodeforge.env").decode()), tree.distro
    packages = pb.union_packages(elements, list(rd.NODEFORGE_ELEMENTS))
    spec = _base_spec(plan, distro, renv, packages,
                      rd.entries_digest(pb.element_entries(packages, elements, os_lock=plan.os_lock)))
    cache = pb.BaseCache(package_base_root(req, plan.dib_cache))
    return PackageBasePlan(spec.key(), cache.root, cache.present(spec.key()), req.rebuild_package_base)


def _package_base(plan: Plan, rendered: rd.Rendered, work: Path, logf: BuildLog) -> tuple[pb.Entry, bool]:
    """The cached package base for this build's inputs, built first if missing. Returns (entry, reused)."""
    req = plan.request
    base_elements = work / "base-elements"
    spec = package_base_spec(plan, rendered, pb.write_element(
        base_elements, pb.union_packages(rendered.elements, list(rd.NODEFORGE_ELEMENTS)), rendered.elements,
        os_lock=plan.os_lock))
    key = spec.key()
    cache = pb.BaseCache(package_base_root(req, plan.dib_cache))
    with cache.locked(key):
        if not req.rebuild_package_base:
            entry = cache.lookup(key)   # re-hashes the tarball; a damaged entry is removed
            if entry is not None:
                logf.step(f"package base {key}: cached ({entry.path}; cache directory {cache.root})")
                return entry, True
        elements = [spec.distro_element, pb.ELEMENT]
        logf.step(f"package base {key}: not cached in {cache.root}, building it ({' '.join(elements)}); "
                  "a CI cache that keeps that directory skips this step next time")
        plan.dib_cache.mkdir(parents=True, exist_ok=True)
        env = _dib_env(plan, base_elements, plan.dib_cache, {
            "DIB_RELEASE": spec.release, "DIB_DEBIAN_COMPONENTS": spec.components,
            "DIB_DEBOOTSTRAP_CACHE": "1"})
        out = work / "package-base"
        with _dib_cache_lock(plan.dib_cache, logf):
            _run_logged([plan.disk_image_create, "-a", spec.arch, "-t", "tar", "-o", str(out), *elements], logf,
                        env=env, what="disk-image-create (package base)")

        def produce(dest: Path) -> None:
            logf.step("package base: store")
            pb.tar_to_base(work / "package-base.tar", dest, log=logf)

        entry = cache.store(key, produce, inputs=spec.to_dict())
        return entry, False


def _check_os_lock(os_lock, rootfs: Path, logf: BuildLog) -> None:
    """Remove the build-time pins and apt hook from the tree; its dpkg database must be exactly the lock."""
    from nodeforge.oslock import apt_pinning

    _run_logged(_priv(["rm", "-f", *(str(rootfs / rel) for rel in apt_pinning.IN_IMAGE)]), logf, what="rm")
    problems = apt_pinning.compare_installed(os_lock, mf.dpkg_packages(rootfs))
    if problems:
        raise BuildError(detail=f"the root filesystem does not match the OS package lock {os_lock.path} "
                                f"({len(problems)} difference(s)): " + "; ".join(problems[:12]),
                         hint="refresh the lock (nodeforge release lock-packages) if the elements changed")
    logf.step(f"root filesystem matches the OS package lock: {len(os_lock.packages)} packages")


@dataclasses.dataclass
class _Build:
    """What the build steps hand on to each other (:func:`_build`)."""

    plan: Plan
    work: Path
    stage: Path
    logf: BuildLog
    build_time: datetime.datetime
    pinned_files: dict = dataclasses.field(default_factory=dict)
    rendered: object = None
    base: object = None
    reused: bool = False
    args: list = dataclasses.field(default_factory=list)
    elements: list = dataclasses.field(default_factory=list)
    rootfs: Path | None = None
    epoch: int = 0
    epoch_source: str = ""
    normalised: dict = dataclasses.field(default_factory=dict)
    entries: list = dataclasses.field(default_factory=list)
    files: dict = dataclasses.field(default_factory=dict)
    images: dict = dataclasses.field(default_factory=dict)
    manifest: dict = dataclasses.field(default_factory=dict)
    digests: dict = dataclasses.field(default_factory=dict)     # disk file name -> {algo: hex}, by its disk step


def _build(plan: Plan, work: Path, stage: Path, logf: BuildLog, build_time, seconds) -> BuildResult:
    """The build as named steps (:mod:`.steps`): each logged and timed under its name in
    ``seconds``; the finished ones undone when a later one fails."""
    b = _Build(plan, work, stage, logf, build_time)
    run_steps([Step("package_base", _step_package_base),
               Step("rootfs", _step_rootfs),
               Step("unpack", _step_unpack, undo=_undo_unpack),
               Step("normalise", _step_normalise),
               Step("file_manifest", _step_file_manifest),
               Step("manifest", _step_manifest),
               Together(tuple(Step(f"disk_{v}", _step_disk(v), undo=_undo_disk(v)) for v in plan.request.variants)),
               Step("checksums", _step_checksums)], b, seconds, note=logf.write)
    return BuildResult(stage, b.images, b.manifest, seconds, {"key": b.base.key, "reused": b.reused})


def _step_package_base(b: _Build) -> None:
    """The pinned files' digests (an archive without its member fails here, before
    diskimage-builder runs), the rendered elements, and the package base (cached by its inputs)."""
    plan, req = b.plan, b.plan.request
    entry = plan.lock.minor(req.minor)
    try:
        b.pinned_files = mf.pinned_file_digests([a.manifest_entry() for a in plan.artifacts], plan.cache.path_for)
    except mf.InstalledFileError as exc:
        raise BuildError(detail=str(exc), hint="the pinned archive does not hold the file its element installs; "
                                               "check the pin in the lockfile") from None
    if plan.rendered is not None:
        b.rendered = plan.rendered
        b.logf.step(f"elements rendered in {b.rendered.root} for Kubernetes {entry.version} ({req.arch.value}): "
                    f"tree {b.rendered.digest[:16]}")
    else:
        b.logf.step(f"render elements for Kubernetes {entry.version} ({req.arch.value})")
        b.rendered = rd.render(plan.lock, req.minor, b.work / "render", arch=req.arch)
    b.base, b.reused = _package_base(plan, b.rendered, b.work, b.logf)


def _step_rootfs(b: _Build) -> None:
    """One root filesystem (a tar), by diskimage-builder from the package base."""
    plan, req, rendered = b.plan, b.plan.request, b.rendered
    b.elements = rd.rendered_env(rendered.env_file)["NODEFORGE_ELEMENTS"].split()
    b.args = ["-a", req.arch.value, "-t", "tar", "-o", str(b.work / "rootfs"), *b.elements]
    image_cache = pb.image_cache_for(b.base, b.work / "dib-image-cache", plan.dib_cache,
                                     distro_name=plan.lock.base_os.distro, release=rendered.distro.release,
                                     arch=req.arch.value)
    dib_elements = package_lock.dib_elements_dir()
    if dib_elements is None:
        raise BuildError(detail="diskimage-builder is not importable here; run 'make setup'")
    overrides = pb.debootstrap_override(b.work / "dib-overrides", dib_elements / pb.DEBOOTSTRAP)
    env = _dib_env(plan, os.pathsep.join([str(overrides), str(rendered.elements)]), image_cache, {
        **rd.rendered_env(rendered.env_file),
        "DIB_DEBOOTSTRAP_CACHE": "0",
        "DIB_NODEFORGE_ARTIFACT_CACHE": str(plan.cache.root.absolute()),
        "DIB_NODEFORGE_ACTIVATE_VARIANT": ""})
    b.logf.step(f"diskimage-builder: root filesystem from package base {b.base.key[:12]} ({' '.join(b.elements)})")
    with _dib_cache_lock(plan.dib_cache, b.logf):
        _run_logged([plan.disk_image_create, *b.args], b.logf, env=env, what="disk-image-create")


def _step_unpack(b: _Build) -> None:
    """The tar unpacked as root (owners, modes, xattrs, ACLs kept); the OS package lock checked."""
    b.logf.step("unpack the root filesystem")
    b.rootfs = b.work / "root"
    b.rootfs.mkdir()
    _run_logged(_priv(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "-xpf",
                       str(b.work / "rootfs.tar"), "-C", str(b.rootfs)]), b.logf, what="tar")
    (b.work / "rootfs.tar").unlink()
    if b.plan.os_lock is not None:
        _check_os_lock(b.plan.os_lock, b.rootfs, b.logf)


def _undo_unpack(b: _Build) -> None:
    if b.rootfs is not None:      # root-owned files: removed as root, on this file system only
        runner.run(["rm", "-rf", "--one-file-system", str(b.rootfs)], privileged=True, check=False)


def _step_normalise(b: _Build) -> None:
    """Reproducible content: times clamped to SOURCE_DATE_EPOCH, host paths and leftovers removed."""
    plan = b.plan
    b.epoch, b.epoch_source = reproducible.source_date_epoch(plan.os_lock)
    b.logf.step(f"normalise the tree: SOURCE_DATE_EPOCH {b.epoch} ({reproducible.iso(b.epoch)}, {b.epoch_source})")
    b.normalised = _normalise(b.rootfs, b.epoch, b.logf, host_paths={
        str(b.work): "<work>", str(plan.cache.root.absolute()): "<artifact-cache>", sys.prefix: "<python-env>",
        str(plan.dib_cache): "<dib-cache>"})


def _step_file_manifest(b: _Build) -> None:
    t = time.monotonic()
    b.entries = _file_manifest(b.rootfs, b.logf)
    b.files = contents.write(b.stage / contents.FILENAME, b.entries)
    b.logf.step(f"per-file manifest: {b.files['entries']} entries, {b.files['bytes'] / GIB:.2f} GiB in files, "
                f"sha256 {b.files['sha256'][:16]} ({time.monotonic() - t:.1f}s)")


def _step_manifest(b: _Build) -> None:
    """The installed artifacts checked against their pins; manifest.json in the build and the image."""
    plan, req, lock, rendered = b.plan, b.plan.request, b.plan.lock, b.rendered
    entry = lock.minor(req.minor)
    try:
        installed = mf.installed_artifacts(b.pinned_files, b.entries)
    except mf.InstalledFileError as exc:
        raise BuildError(detail=str(exc), hint=f"an element installed another file than its pin; see the build "
                                               f"log {plan.out.name}.failed.log beside the build") from None
    b.logf.write("installed artifacts (checked against their pins, recorded in the manifest): "
                 + ", ".join(f"{c} {r['path']} {r['sha256'][:16]}" for c, r in installed.items()))
    version = str(entry.version)
    b.images = {v: image_name(version, v) for v in req.variants}
    build_id = f"k8s-{version}-{b.build_time.strftime('%Y%m%dT%H%M%SZ')}-{rendered.digest[:8]}"
    manifest = mf.build_manifest(
        build_id=build_id, build_time=b.build_time, minor=req.minor, kubernetes_version=version,
        pause_image=entry.pause_image,
        base_os={"distro": lock.base_os.distro, "release": lock.base_os.release,
                 "codename": rendered.distro.release},
        arch=req.arch.value, variants=list(req.variants), images=b.images,
        packages=mf.dpkg_packages(b.rootfs),
        artifacts=[a.manifest_entry() for a in plan.artifacts],
        lockfile_path=Path(req.lockfile_path), element_tree_digest=rendered.digest,
        hardening={"profile": lock.hardening.profile, "version": lock.hardening.version},
        dib={"version": dib_version(plan.disk_image_create), "args": b.args, "elements": b.elements},
        source=mf.source_commit(REPO),
        package_base={"key": b.base.key, "sha256": b.base.meta["sha256"], "created": b.base.meta["created"],
                      "recipe": pb.RECIPE},
        scope=lock.scope, installed=installed)
    if plan.os_lock is not None:
        manifest["os_package_lock"] = {"path": Path(plan.os_lock.path).name, "digest": plan.os_lock.digest(),
                                       "packages": len(plan.os_lock.packages)}
        # The lock itself beside the manifest: publish's provenance lists every .deb digest from it.
        shutil.copyfile(plan.os_lock.path, b.stage / "os-packages.lock.yaml")
    manifest["files"] = b.files
    manifest["reproducible"] = reproducible.record(manifest, b.epoch, b.epoch_source, b.normalised,
                                                   FILE_MANIFEST_EXCLUDE)
    text = mf.dumps(manifest)
    disk.replace_file(b.rootfs / mf.IN_IMAGE_PATH, text)
    reproducible.clamp_paths(b.rootfs, b.epoch, [mf.IN_IMAGE_PATH, str(Path(mf.IN_IMAGE_PATH).parent)])
    (b.stage / "manifest.json").write_text(text)
    b.manifest = manifest


def _step_disk(variant: str) -> Callable[[_Build], None]:
    def run(b: _Build) -> None:
        """The variant's disk from a hard-linked copy of the tree: its overlay, kernel command line,
        boot loader and partition table, then raw or qcow2 into the build, and its digests. The
        variants' disks are assembled side by side (:class:`Together`): nothing here is shared
        but the read-only tree and the log."""
        b.logf.step(f"assemble the {variant} disk")
        tree = b.work / f"tree-{variant}"
        _run_logged(_priv(["cp", "-al", str(b.rootfs), str(tree)]), b.logf, what="cp -al")
        overlay = b.rootfs / "usr/lib/nodeforge/variants" / variant / "overlay"
        if overlay.is_dir():
            _run_logged(_priv(["cp", "-a", "--remove-destination", f"{overlay}/.", f"{tree}/"]), b.logf,
                        what="variant overlay")
        cmdline_file = b.rootfs / "usr/lib/nodeforge/variants" / variant / "kernel-cmdline"
        cmdline = cmdline_file.read_text().strip() if cmdline_file.exists() else "console=ttyS0,115200n8"
        ids = disk.derived_ids(f"{b.files['sha256']}:{variant}")
        version = str(b.plan.lock.minor(b.plan.request.minor).version)
        root_uuid, esp_id = disk.prepare_tree(tree, cmdline=cmdline, ids=ids,
                                              title=f"nodeforge Kubernetes {version} node ({variant})")
        reproducible.clamp_times(tree, b.epoch)
        raw = b.work / f"{variant}.raw"
        diskwork = b.work / f"disk-{variant}"
        diskwork.mkdir()
        disk.assemble(tree, raw, root_uuid=root_uuid, esp_id=esp_id, workdir=diskwork, log=b.logf, ids=ids,
                      epoch=b.epoch)
        runner.run(["rm", "-rf", "--one-file-system", str(tree)], privileged=True, check=False)
        dest = b.stage / b.images[variant]
        if b.images[variant].endswith(".qcow2"):
            disk.to_qcow2(raw, dest, log=b.logf)
            raw.unlink()
        else:
            fs.move_into_place(raw, dest) if _same_fs(raw, b.stage) else shutil.move(raw, dest)
        b.digests[b.images[variant]] = checksums.digest_file(dest)    # while the other disk is assembled
    return run


def _undo_disk(variant: str) -> Callable[[_Build], None]:
    def undo(b: _Build) -> None:
        (b.stage / b.images[variant]).unlink(missing_ok=True)     # a disk is gigabytes: not kept for the failure
    return undo


def _step_checksums(b: _Build) -> None:
    b.logf.step("SBOM and checksums")
    (b.stage / "sbom.cdx.json").write_text(mf.sbom(b.manifest))
    checksums.sum_files(b.stage, [*b.images.values(), "manifest.json", contents.FILENAME, "sbom.cdx.json"],
                        known=b.digests)


# Left out of the per-file manifest: the build manifest, written into the tree after it (it records
# the per-file manifest's digest, and names the build: id and time).
FILE_MANIFEST_EXCLUDE = ("/" + mf.IN_IMAGE_PATH,)


def _normalise(rootfs: Path, epoch: int, logf: BuildLog, host_paths: dict[str, str]) -> dict:
    """:func:`reproducible.normalise` on the tree (as root, like the rest of the build)."""
    done = reproducible.normalise(rootfs, epoch, host_paths)
    logf.write(f"normalised: removed {len(done['removed'])} path(s): {' '.join(done['removed'][:40])}"
               + (" ..." if len(done["removed"]) > 40 else ""))
    logf.write(f"normalised: emptied {done['emptied']}, {done['truncated_logs']} log file(s) truncated, "
               f"{done['shadow_dates']} shadow date(s) set, host paths replaced in {done['host_paths_replaced']}, "
               f"iSCSI initiator name reset: {done['iscsi_initiator_reset']}, "
               f"{done['clamped']} mtime(s) clamped to {epoch}")
    if done["pyc"]:
        logf.write("normalised: " + pyc.PycCounts(**done["pyc"]).summary())
    return done


def _file_manifest(rootfs: Path, logf: BuildLog) -> list[dict]:
    return contents.scan(rootfs, exclude=FILE_MANIFEST_EXCLUDE, workers=2)


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def image_name(version: str, variant: str) -> str:
    return f"nodeforge-k8s-{version}-{variant}." + ("qcow2" if variant == "vm" else "raw")
