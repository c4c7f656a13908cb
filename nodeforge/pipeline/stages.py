"""The pipeline's stages: each a thin call into the existing library.

A stage is ``fn(ctx: StageContext) -> dict``: it returns its outputs (kept in
the run record; later stages read them through ``ctx.previous``) and raises
on failure. ``check`` returns ``{"minors": [...]}``: the minors the rest of
the run handles. Global stages (check, bump) run once; the others once per
minor. Everything a stage writes goes under the run directory, into the
lockfile (bump) or into Glance (publish: candidates only; promote).
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
from pathlib import Path
from typing import Callable

import requests

from nodeforge.errors import NodeforgeError, UsageError
from nodeforge.pins import lockfile as lf
from nodeforge.pins import release as release_mod
from nodeforge.base.fs import sha256_file
from nodeforge.pins.cache import Cache, Downloader, DownloadSettings
from nodeforge.pins.lockfile import Arch
from nodeforge.pins.sources import Sources
from nodeforge.pipeline import runrecord as rr

log = logging.getLogger(__name__)

FIXTURE_PROPERTY = "nodeforge_fixture"
FIXTURE_SOURCE_PROPERTY = "nodeforge_artifact_source"
PRODUCTION_LOCKFILE = (Path(__file__).resolve().parents[2] / "manifests" / "versions.yaml")


class StageFailed(NodeforgeError):
    message = "{stage}: {detail}"


@dataclasses.dataclass
class PipelineConfig:
    """Everything a run needs; recorded as the run's inputs (and reused by --resume)."""

    lockfile: Path = lf.DEFAULT_PATH
    sources_file: Path | None = None
    cache_dir: Path | None = None
    os_cloud: str | None = None
    retention: Path = Path("manifests/image-retention.yaml")
    work_dir: Path | None = None
    dib_cache: Path | None = None
    verify_timeout: float = 900.0
    accel: str | None = None        # None: $NODEFORGE_VERIFY_ACCEL, else auto
    arch: str = Arch.AMD64.value
    jobs: int = 4
    fixture: str | None = None      # artifacts come from a fixture mirror: this label goes on every image
    scope: str | None = None        # ownership scope of the published images; None: the lockfile's
    packages: bool = True           # also watch the OS package lock beside the lockfile (--no-packages: off)
    sign_key: Path | None = None    # publishing key: Glance image signatures and signed provenance
    sign_cert_id: str | None = None             # its certificate's Barbican ID
    sign_key_passphrase: str | None = None      # a reference (env:NAME, file:PATH), never the passphrase
    canary_policy: Path | None = None           # None: manifests/canary-policy.yaml if it exists, else no canary
    baremetal_cloud: str | None = None          # the cloud entry with Ironic rights (None: os_cloud)
    cloud_source: str | None = None             # where os_cloud's name came from (recorded, never read back)

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, doc: dict) -> "PipelineConfig":
        paths = {"lockfile", "sources_file", "cache_dir", "retention", "work_dir", "dib_cache", "sign_key",
                 "canary_policy"}
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (Path(v) if k in paths and v is not None else v) for k, v in doc.items() if k in known})

    def sign_options(self, conn):
        """The publisher's signing options (None: publish unsigned), the key checked against its
        certificate in Barbican before anything is uploaded."""
        if self.sign_key is None:
            return None
        from nodeforge.publish import glance, signing

        signer = signing.load_signer(self.sign_key, self.sign_key_passphrase)
        signing.check_key_matches(signer, signing.fetch_certificate(conn, self.sign_cert_id), self.sign_cert_id)
        return glance.SignOptions(signer, self.sign_cert_id)

    def check(self) -> None:
        if (self.sign_key is None) != (self.sign_cert_id is None):
            raise UsageError("--sign-key and --sign-cert-id go together")
        if self.scope is not None:
            from nodeforge.scope import scope_problem

            if (problem := scope_problem(self.scope)) is not None:
                raise UsageError(detail=f"scope {problem}")
        if self.fixture and Path(self.lockfile).resolve() == PRODUCTION_LOCKFILE:
            raise UsageError(detail=f"fixture artifacts never go into the production lockfile {PRODUCTION_LOCKFILE}; "
                                    "use a fixture lockfile (nodeforge.demo.fixtures.make_demo writes one)")

    # -- library objects -----------------------------------------------------------
    def lock(self) -> lf.Lockfile:
        return lf.load(self.lockfile)

    def image_scope(self) -> str:
        """The ownership scope publish marks the images with and promote acts within:
        ``scope``, else the lockfile's (its ``scope:``, else derived from its path)."""
        return self.scope or self.lock().scope

    def package_lock_path(self) -> Path:
        """The OS package lock the build installs from: ``os-packages.lock.yaml`` beside the lockfile."""
        from nodeforge.oslock.lock import FILENAME

        return Path(self.lockfile).parent / FILENAME

    def os_lock(self):
        """The OS package lock (:class:`nodeforge.oslock.lock.PackageLock`), or None: there is none
        beside the lockfile, or the run ignores packages (``packages=False``)."""
        if not self.packages or not self.package_lock_path().exists():
            return None
        from nodeforge.oslock import lock as ol

        return ol.load(self.package_lock_path())

    def archive_config(self, plock):
        """Where the lock's suites are fetched and the keyring their InRelease must verify against:
        the environment (NODEFORGE_DEBIAN_MIRROR, NODEFORGE_DEBIAN_SECURITY_MIRROR,
        NODEFORGE_DEBIAN_KEYRING), else the host's apt sources -- as for the build."""
        from nodeforge.oslock import archive, watch

        return watch.config_for(plock, archive.host_mirrors(release=plock.release))

    def sources(self) -> Sources:
        return Sources.load(self.sources_file or Path(self.lockfile).parent / "sources.yaml")

    def downloader(self) -> Downloader:
        return Downloader(Cache(self.cache_dir), DownloadSettings.from_env())

    def connect(self):
        from nodeforge.cloud import connect

        return connect(self.os_cloud)

    def policy(self):
        from nodeforge.publish import retention

        return retention.load(self.retention)


@dataclasses.dataclass
class StageContext:
    config: PipelineConfig
    run: rr.RunRecord
    stage: str
    minor: str | None
    dry_run: bool = False
    say: Callable[[str], None] = lambda line: log.info("%s", line)
    _conn: object = None

    @property
    def previous(self) -> dict:
        """Outputs of this minor's finished stages (and the global ones), by stage name."""
        return self.run.outputs(self.minor)

    @property
    def workdir(self) -> Path:
        return self.run.root

    def conn(self):
        if self._conn is None:
            self._conn = self.config.connect()
        return self._conn


Stage = Callable[[StageContext], dict]


# --- check -------------------------------------------------------------------------------

def published_at(url: str) -> str | None:
    """When the mirror (or upstream) last changed a marker file: its Last-Modified, if it says."""
    try:
        resp = requests.head(url, timeout=30, allow_redirects=True)
        value = resp.headers.get("Last-Modified") if resp.ok else None
        return rr.iso(email.utils.parsedate_to_datetime(value)) if value else None
    except (requests.RequestException, TypeError, ValueError):
        return None


def _date_iso(text: str | None) -> str | None:
    try:
        return rr.iso(email.utils.parsedate_to_datetime(text)) if text else None
    except (TypeError, ValueError):
        return None


def check_packages(cfg: PipelineConfig) -> dict | None:
    """The OS package lock against the mirror's verified indexes (``release check``'s package part),
    or None when the run has no package lock. ``published_at``: when the oldest pending update
    appeared -- the ``Date:`` of the signed InRelease of the suite serving it (else that index's
    Last-Modified); the package-update latency starts there."""
    plock = cfg.os_lock()
    if plock is None:
        return None
    from nodeforge.oslock import archive, watch

    config = cfg.archive_config(plock)
    indexes = archive.fetch(config)
    report = watch.check(plock, config, indexes=indexes)
    dates: dict[str, str | None] = {}
    for s in indexes.suites:
        dates[s.suite.name] = _date_iso(s.release.get("Date"))
        if dates[s.suite.name] is None and any(u.suite == s.suite.name for u in report.updates):
            dates[s.suite.name] = published_at(s.suite.url(f"dists/{s.suite.name}/InRelease"))
    appeared = sorted(d for d in (dates.get(u.suite) for u in report.updates) if d)
    return report.to_dict() | {"index_dates": dates, "published_at": appeared[0] if appeared else None}


def packages_summary(pk: dict) -> str:
    ups = pk.get("updates") or []
    if not ups:
        return f"OS packages current ({pk.get('packages')} locked)"
    shown = ", ".join(f"{u['name']} {u['old_version']} -> {u['new_version']}"
                      + (f" ({u['suite']}, security)" if u.get("security") else f" ({u['suite']})")
                      for u in ups[:4])
    return (f"{len(ups)} OS package update(s), {pk.get('security', 0)} security: {shown}"
            + (" ..." if len(ups) > 4 else ""))


def check(ctx: StageContext) -> dict:
    cfg = ctx.config
    lock, sources = cfg.lock(), cfg.sources()
    report = release_mod.check(lock, sources, cfg.downloader())
    pk = check_packages(cfg)
    named = ctx.run.inputs.get("minors") or []
    moving = [m.minor for m in report.minors if m.status is release_mod.Status.NEW_PATCH]
    packages_moved = bool(pk and pk["updates"])
    # A package update changes every image the lockfile builds (unless minors are named); a
    # Kubernetes patch only its minor's.
    minors = list(named) or (list(lock.minors) if packages_moved else moving)
    targets = {m.minor: m.upstream for m in report.minors}
    # Patch latency starts when the new release appeared; a minor rebuilt by name has no new release.
    released = {m: {"version": targets.get(m),
                    "published_at": published_at(sources.marker_url(m)) if m in moving else None}
                for m in minors}
    new_minors = [m.minor for m in report.minors if m.status is release_mod.Status.NEW_MINOR]
    summary = (f"new patch: {', '.join(f'{m} -> {targets[m]}' for m in moving)}" if moving
               else "lockfile current: no new patch release upstream")
    if new_minors:
        summary += f"; new minor(s) {', '.join(new_minors)} (not built unless named with --minor)"
    if pk is not None:
        summary += "; " + packages_summary(pk)
    triggers = (["kubernetes"] if moving else []) + (["packages"] if packages_moved else [])
    ctx.say(f"check: {summary}")
    return {"minors": minors, "moving": moving, "new_minors": new_minors, "released": released,
            "report": report.to_dict(), "packages": pk, "packages_moved": packages_moved,
            "triggers": triggers, "summary": summary}


# --- bump --------------------------------------------------------------------------------

def bump(ctx: StageContext) -> dict:
    cfg = ctx.config
    minors = ctx.run.minors
    report = release_mod.bump(cfg.lock(), cfg.sources(), cfg.downloader(), minors=minors or None,
                              dry_run=ctx.dry_run, jobs=cfg.jobs)
    body = release_mod.diff_markdown(report)
    out = {"versions": {m: {"old": o, "new": n} for m, (o, n) in report.versions.items()},
           "changes": len(report.changes), "written": report.written, "verified": report.verified,
           "lockfile": str(cfg.lockfile),
           "summary": (f"{len(report.changes)} pins moved in {cfg.lockfile}" if report.changes
                       else "lockfile already pinned at the target versions")}
    checked = ctx.run.find("check")
    if checked is not None and checked.outputs.get("packages_moved"):
        preport = bump_packages(ctx)
        body += "\n" + watch_markdown(preport)
        changes = [c.to_dict() for c in preport.changes]
        sec = sum(c["security"] for c in changes)
        out |= {"packages": changes, "package_lock": preport.lock, "package_lock_digest": preport.digest,
                "package_lock_written": preport.written}
        out["summary"] += (f"; {len(changes)} OS package(s) moved in {Path(preport.lock).name}"
                           + (f" ({sec} security)" if sec else ""))
        ctx.run.packages = changes
    if not ctx.dry_run:
        from nodeforge.base.fs import atomic_write

        out["pr_body"] = str(atomic_write(ctx.workdir / "pr-body.md", body))
    ctx.say(f"bump: {out['summary']}")
    return out


def bump_packages(ctx: StageContext):
    """Move the OS package lock beside the lockfile to the mirror's newest versions (re-resolved from
    the verified indexes); every moved ``.deb`` is downloaded and checked against the new lock
    before it is written (``release bump --packages``, verified)."""
    import tempfile

    from nodeforge.oslock import lock as ol, watch

    cfg = ctx.config
    plock = cfg.os_lock()
    if plock is None:
        raise StageFailed(stage="bump", detail=f"the check found OS package updates but {cfg.package_lock_path()} "
                                               "is gone", hint="restore the package lock, then resume")
    config = cfg.archive_config(plock)
    scratch = cfg.work_dir if cfg.work_dir and Path(cfg.work_dir).is_dir() else None
    with tempfile.TemporaryDirectory(prefix="nf-pipeline-debs.", dir=scratch) as tmp:
        report = watch.bump(plock, config, dry_run=ctx.dry_run, fetch_to=None if ctx.dry_run else Path(tmp))
    if report.written:
        written = ol.load(plock.path)
        if written.digest() != report.digest:
            raise StageFailed(stage="bump", detail=f"{plock.path} reads back with digest {written.digest()}, "
                                                   f"not the {report.digest} written")
    return report


def watch_markdown(report) -> str:
    from nodeforge.oslock import watch

    return watch.markdown(report)


# --- per minor ---------------------------------------------------------------------------

def prefetch(ctx: StageContext) -> dict:
    cfg = ctx.config
    report = release_mod.prefetch(cfg.lock(), cfg.sources(), cfg.downloader(), minors=[ctx.minor],
                                  arches=[cfg.arch], jobs=cfg.jobs)
    mib = report.downloaded_bytes / (1 << 20)
    ctx.say(f"prefetch {ctx.minor}: {len(report.items)} artifacts verified, {mib:.1f} MiB downloaded")
    return {"artifacts": len(report.items), "downloaded_bytes": report.downloaded_bytes,
            "summary": f"{len(report.items)} artifacts in the cache ({mib:.1f} MiB downloaded)"}


def render(ctx: StageContext) -> dict:
    from nodeforge.imagebuild import render as render_mod

    result = render_mod.render(ctx.config.lock(), ctx.minor, ctx.workdir / "render" / ctx.minor,
                               arch=Arch(ctx.config.arch))
    ctx.say(f"render {ctx.minor}: element tree {result.digest[:16]}")
    return {"root": str(result.root), "element_tree_digest": result.digest,
            "kubernetes_version": str(ctx.config.lock().minor(ctx.minor).version),
            "summary": f"elements rendered ({result.digest[:16]})"}


def build(ctx: StageContext) -> dict:
    from nodeforge.imagebuild import build as build_mod
    from nodeforge.imageverify import builddir

    cfg = ctx.config
    version = str(cfg.lock().minor(ctx.minor).version)
    out = ctx.workdir / "builds" / f"k8s-{version}"
    if (out / builddir.MANIFEST).is_file():
        existing = builddir.load(out)
        if existing.lockfile_sha256 == sha256_file(cfg.lockfile) and existing.k8s_version == version:
            ctx.say(f"build {ctx.minor}: {out} is already complete for this lockfile; reusing it")
            return _build_outputs(existing, reused=True)
        raise StageFailed(stage="build", detail=f"{out} exists from another lockfile state",
                          hint="remove it, then resume")
    # The render stage's tree (render.load refuses it if the lockfile or elements moved since).
    rendered = (ctx.previous.get("render") or {}).get("root")
    result = build_mod.build(build_mod.BuildRequest(
        minor=ctx.minor, lockfile_path=Path(cfg.lockfile), sources_file=cfg.sources_file, out=out,
        cache_dir=cfg.cache_dir, dib_cache=cfg.dib_cache, work_dir=cfg.work_dir, arch=Arch(cfg.arch),
        stream=ctx.say, rendered=Path(rendered) if rendered else None))
    return _build_outputs(builddir.load(result.out), reused=False,
                          seconds={k: round(v, 1) for k, v in result.seconds.items()})


def _build_outputs(b, *, reused: bool, seconds: dict | None = None) -> dict:
    from nodeforge.imagebuild import checksums

    names = [i.path.name for i in b.variants.values()]
    return {"build_dir": str(b.path), "build_id": b.build_id, "kubernetes_version": b.k8s_version,
            "images": {v: str(i.path.name) for v, i in sorted(b.variants.items())}, "reused": reused,
            "build_seconds": seconds or {},
            # Taken once the build has summed its images: verify reads again only what changed since.
            "fingerprints": checksums.fingerprints(b.path, names) if not reused else {},
            "summary": f"{b.build_id}: {', '.join(sorted(b.variants))}" + (" (reused)" if reused else "")}


def verify(ctx: StageContext) -> dict:
    from nodeforge.imageverify import builddir
    from nodeforge.imageverify import boottest

    cfg = ctx.config
    build_dir = Path(ctx.previous["build"]["build_dir"])
    # Skipping the boot, and the verdict after it, go through builddir.load's strict check of
    # verify.json (verifyreport: schema, build id, manifest digest, image bytes; signed by a trusted
    # verifier key, verify.intoto.json), never the raw file.
    b = builddir.load(build_dir)
    if all(i.verify is builddir.VerifyStatus.PASSED for i in b.variants.values()):
        ctx.say(f"verify {ctx.minor}: the signed verify.json passes for this build and these image bytes; "
                "not booting again")
        results = {v: "passed" for v in b.variants}
    else:
        for v, i in sorted(b.variants.items()):
            if b.verify_present and i.verify is not builddir.VerifyStatus.PASSED:
                ctx.say(f"verify {ctx.minor}: {v}: {i.verify_reason}; booting")
        got = boottest.verify(boottest.VerifyRequest(build_dir=build_dir, timeout=cfg.verify_timeout,
                                                     accel=cfg.accel, cache_dir=cfg.cache_dir,
                                                     work_dir=cfg.work_dir, stream=ctx.say,
                                                     unchanged=ctx.previous["build"].get("fingerprints")))
        failed = [f"{r.variant}: {', '.join(c['id'] for c in r.checks if not c['passed'])}"
                  for r in got if not r.passed]
        if failed:
            raise boottest.VerifyFailed(detail="; ".join(failed),
                                        hint=f"details in {build_dir / builddir.VERIFY} and the console logs")
        written = builddir.load(build_dir)
        refused = [f"{v}: {i.verify_reason}" for v, i in sorted(written.variants.items())
                   if i.verify is not builddir.VerifyStatus.PASSED]
        if refused:
            raise boottest.VerifyFailed(detail="; ".join(refused),
                                        hint=f"the report in {build_dir / builddir.VERIFY} does not pass the check "
                                             "publish and promote apply")
        results = {v: "passed" for v in written.variants}
    accel = _accelerators(build_dir)
    return {"variants": results, "verify_json": str(build_dir / builddir.VERIFY), "accel": accel,
            "summary": ", ".join(f"{v} {s}" + (f" under {accel[v]['accel']}" if v in accel else "")
                                 for v, s in sorted(results.items()))
                       + "".join(sorted({f"; {a['why']}" for a in accel.values()}))}


def _accelerators(build_dir: Path) -> dict[str, dict]:
    """variant -> {accel, why, fallback}: which accelerator each variant's boot used and why, from
    its verify.json section (reports written before these fields say nothing)."""
    from nodeforge.imageverify import boottest

    out = {}
    for variant, section in boottest.read_report(build_dir)["variants"].items():
        fallback = section.get("fallback")
        why = section.get("accel_reason") or "reason not recorded"
        if fallback:
            why = f"{variant}: KVM stalled ({fallback['reason']}), booted again under TCG"
        out[variant] = {"accel": section["accel"], "why": why, "fallback": fallback}
    return out


def publish(ctx: StageContext) -> dict:
    from nodeforge.imageverify import builddir
    from nodeforge.publish import glance

    cfg = ctx.config
    b = builddir.load(ctx.previous["build"]["build_dir"])
    conn = ctx.conn()
    scope = cfg.image_scope()
    results = glance.Publisher(conn, cfg.policy(), sign=cfg.sign_options(conn), scope=scope).publish(b)
    images = {r.variant: r.image_id for r in results}
    if cfg.fixture:
        # Labelled where every consumer sees it: built from fixture stand-ins, not upstream releases.
        for r in results:
            img = glance.get_image(conn, r.image_id)
            props = {FIXTURE_PROPERTY: "true", FIXTURE_SOURCE_PROPERTY: cfg.fixture[:255]}
            ops = glance.set_ops(img, props)
            if ops:
                glance.patch_image(conn, r.image_id, ops, f"fixture label on {r.name}")
    ctx.run.images[ctx.minor] = images
    ctx.say(f"publish {ctx.minor}: candidates " + ", ".join(f"{v} {i}" for v, i in sorted(images.items()))
            + f" (scope {scope})")
    return {"images": images, "actions": {r.variant: r.action for r in results}, "scope": scope,
            "verify": {r.variant: r.verify for r in results}, "fixture": bool(cfg.fixture),
            "summary": "candidates " + ", ".join(f"{v}={i}" for v, i in sorted(images.items()))}


def canary(ctx: StageContext) -> dict:
    """The canary deploy of the bare-metal candidate on one node of each resource class the canary
    policy names (docs/canary.md); a required class without a pass fails the run, so nothing is
    promoted. No policy: says so and passes."""
    from nodeforge.canary import policy as canary_policy, stage as canary_stage
    from nodeforge.cloud import connect
    from nodeforge.ironic.provisioner import SdkProvisioner
    from nodeforge.publish import glance

    cfg = ctx.config
    policy = canary_policy.load(cfg.canary_policy)
    image_id = ctx.previous["publish"]["images"].get("baremetal")
    if not policy.asked or image_id is None:
        why = "no canary asked for" if not policy.asked else "no bare-metal image in this build"
        ctx.say(f"canary {ctx.minor}: {why}")
        return {"asked": False, "summary": why}
    conn = ctx.conn()
    prov = SdkProvisioner(connect(cfg.baremetal_cloud) if cfg.baremetal_cloud else conn)
    plan = canary_stage.plan(conn, prov, Path(ctx.previous["build"]["build_dir"]), policy, image_ref=image_id)
    if plan.problems:
        raise StageFailed(stage="canary", detail="; ".join(plan.problems))
    report = canary_stage.apply(prov, plan, glance.Publisher(conn, cfg.policy(), scope=plan.scope),
                                listen=canary_stage.listen_settings(), cache_dir=cfg.cache_dir,
                                say=lambda line: ctx.say(f"canary {ctx.minor}: {line}"))
    verdicts = {r["resource_class"]: {"passed": r["passed"], "node": r["node"], "seconds": r["seconds"]}
                for r in report["results"]}
    return {"asked": True, "image": image_id, "classes": verdicts,
            "summary": ", ".join(f"{rc} passed on {v['node']}" for rc, v in sorted(verdicts.items()))}


def promote(ctx: StageContext) -> dict:
    from nodeforge.canary import policy as canary_policy
    from nodeforge.publish import catalog

    conn, policy = ctx.conn(), ctx.config.policy()
    images = ctx.previous["publish"]["images"]
    # Retention acts within the run's scope only (other declarations' images are never retired).
    scope = ctx.previous["publish"].get("scope") or ctx.config.image_scope()
    required = tuple(canary_policy.load(ctx.config.canary_policy).required_classes())
    steps = []
    for variant, image_id in sorted(images.items()):
        steps += [s.to_dict() | {"variant": variant}
                  for s in catalog.promote(conn, image_id, policy, scope=scope,
                                           canary_classes=required if variant == "baremetal" else ())]
    retired = [s["image_id"] for s in steps if s["action"] in ("hide", "deactivate", "delete")]
    ctx.run.approved[ctx.minor] = dict(images)
    ctx.say(f"promote {ctx.minor}: approved " + ", ".join(f"{v} {i}" for v, i in sorted(images.items()))
            + (f"; retired {len(retired)} older image(s)" if retired else ""))
    return {"approved": dict(images), "steps": steps, "retired": retired, "scope": scope,
            "summary": f"approved {len(images)}; retired {len(retired)}"}


DEFAULT_STAGES: dict[str, Stage] = {"check": check, "bump": bump, "prefetch": prefetch, "render": render,
                                    "build": build, "verify": verify, "publish": publish, "canary": canary,
                                    "promote": promote}
