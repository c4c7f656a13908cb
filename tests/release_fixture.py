"""The test run's one real image build and one boot per variant, made by the
release pipeline's own stages (``nodeforge pipeline run``) on the session's
local cloud, against a local fixture mirror with the upstream URL layout.

The scenario, once per session (:func:`release_run`):

1. the demo upstream (fixture artifacts of the real shape) and its lockfile
   pinning Kubernetes 1.36.0; an older approved 1.36.0 image in Glance (a small
   synthetic build);
2. a pipeline run with nothing new upstream: ``nothing-to-do``;
3. patch 1.36.1 appears on the mirror; the pipeline checks, bumps the
   lockfile, prefetches, renders, **builds** both variants (real
   diskimage-builder), **boots** each under QEMU, publishes and promotes;
4. what the cloud says right then (approved images, the older one hidden, the
   member's catalog) is recorded; a second run finds nothing new;
5. the scenario's images are deleted again (the build directory stays).

Every test that needs a built or booted image takes the build from here:
``built_image`` (the build directory), ``verified_build`` (the same directory
after the pipeline's verify stage, with its results) and ``release_run`` (the
run record and the recorded facts, for the end-to-end test).

A developer's second session is quicker: the finished build directory is
cached under ``.cache/images/<key>`` (the key digests the bumped lockfile, the
rendered element tree, the image-build code and the diskimage-builder
version), and the pipeline's build stage is handed that directory, which it
then reuses (its record says ``reused``). The pipeline's boots are never
taken from the cache (the build stage's copy leaves the verify reports out);
its verify reports are kept beside the cached build for the machine canary's
test, which deploys that build.
``NODEFORGE_IMAGE_FIXTURE_REBUILD=1`` ignores the cache. CI starts from a
clean clone, so there the build is always real.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from nodeforge.demo.fixtures import make_demo, publish_patch, write_sources
from nodeforge.devcloud import signing_key
from nodeforge.demo.upstream_mirror import MirrorServer
from nodeforge.imagebuild import build as build_mod
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance as g, provenance
from nodeforge.pipeline import Pipeline, PipelineConfig, stages as pipeline_stages
from nodeforge.pipeline import runrecord as rr
from tests.image_fixture import CACHE, BuiltImage, input_key
from tests.imagebuild.realbuild import ARTIFACT_CACHE, BOOT_TIMEOUT, linked_copy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import Tracker

REPO = Path(__file__).resolve().parents[1]
MINOR = "1.36"
PATCH = "1.36.1"


@dataclasses.dataclass
class VerifiedVariant:
    """One variant's section of the pipeline's verify.json (what the boot found)."""

    variant: str
    passed: bool
    checks: list[dict]
    firmware: str
    accel: str
    seconds: dict
    error: str | None


@dataclasses.dataclass
class ReleaseRun:
    minor: str
    version: str
    lockfile: Path
    runs_dir: Path
    quiet: rr.RunRecord            # the run before the release: nothing to do
    run: rr.RunRecord              # the run that built, verified, published and promoted
    again: rr.RunRecord            # the run after it: nothing to do
    again_lines: list[str]
    released: float                # when the patch appeared on the mirror (time.time())
    seeded: bool                   # the build stage was handed a cached build directory
    key: str                       # the image cache key of the build's inputs
    scope: str                     # the pipeline's image scope (its lockfile's)
    prev_ids: list[str]            # the older approved images
    approved: dict[str, dict]      # variant -> Glance image right after promote
    prev_after: list[dict]         # the older images right after promote
    listed_after: set[str]         # approved image IDs the catalog listed for the minor right after
    listed_after_rerun: set[str]
    image_stat: dict[str, tuple]   # image file -> (mtime_ns, size, inode) before and after verify
    image_stat_after: dict[str, tuple]
    production_lockfile_unchanged: bool
    provenance: dict[str, dict]    # variant -> `image provenance` of the approved image (signed by the pipeline)

    @property
    def build_dir(self) -> Path:
        return Path(self.run.find("build", self.minor).outputs["build_dir"])


def _stat(build_dir: Path) -> dict[str, tuple]:
    b = builddir.load(build_dir)
    return {i.path.name: (i.path.stat().st_mtime_ns, i.path.stat().st_size, i.path.stat().st_ino)
            for i in b.variants.values()}


class _Stages:
    """The pipeline's own stages; the build stage is first handed a cached
    build directory when one exists for these inputs, and its result is cached
    afterwards; the verify stage's image files are stat-ed before and after."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.seeded = False
        self.key = ""
        self.before: dict[str, tuple] = {}
        self.after: dict[str, tuple] = {}

    def stages(self) -> dict:
        return dict(pipeline_stages.DEFAULT_STAGES, build=self.build, verify=self.verify)

    def build(self, ctx):
        version = str(ctx.config.lock().minor(ctx.minor).version)
        out = ctx.workdir / "builds" / f"k8s-{version}"
        self.key = input_key(Path(ctx.config.lockfile), self.scratch / f"key-{time.monotonic_ns()}")
        cached = CACHE / f"k8s-{MINOR}-{self.key}"
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / ".lock", "w") as lockfh:
            fcntl.flock(lockfh, fcntl.LOCK_EX)   # concurrent sessions wait for each other's build
            rebuild = os.environ.get("NODEFORGE_IMAGE_FIXTURE_REBUILD") == "1"
            if not rebuild and (cached / builddir.MANIFEST).is_file() and not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                linked_copy(cached, out)
                self.seeded = True
                ctx.say(f"test fixture: handing the build stage the cached build {cached}")
            result = pipeline_stages.build(ctx)
            if not self.seeded:
                shutil.rmtree(cached, ignore_errors=True)
                for old in sorted(CACHE.glob(f"k8s-{MINOR}-*"), key=lambda p: p.stat().st_mtime)[:-1]:
                    shutil.rmtree(old, ignore_errors=True)
                linked_copy(out, cached)
        return result

    def verify(self, ctx):
        build_dir = Path(ctx.previous["build"]["build_dir"])
        self.before = _stat(build_dir)
        try:
            result = pipeline_stages.verify(ctx)
        finally:
            self.after = _stat(build_dir)
        self._keep_reports(build_dir)
        return result

    def _keep_reports(self, build_dir: Path) -> None:
        """This build's verify reports beside its cached copy (under the cache lock), so a test that
        deploys the build (the machine canary, on the other worker) starts from a verified copy
        instead of booting it again; the reports are bound to the build and its image digests."""
        cached = CACHE / f"k8s-{MINOR}-{self.key}"
        with open(CACHE / ".lock", "w") as lockfh:
            fcntl.flock(lockfh, fcntl.LOCK_EX)
            if (cached / builddir.MANIFEST).is_file():
                for f in build_dir.iterdir():
                    if f.name.startswith("verify") and f.is_file():
                        shutil.copy2(f, cached / f.name)


def _scenario(devcloud, tmp: Path) -> ReleaseRun:
    admin = devcloud.admin()
    tracker = Tracker(admin)
    up, lock = make_demo(tmp / "demo")
    production = (REPO / "manifests" / "versions.yaml").read_bytes()
    runs = tmp / "runs"
    lines: list[str] = []

    def say(line):
        lines.append(line)
        print(line, flush=True)

    hooks = _Stages(tmp)
    server = MirrorServer(up.root)
    server.__enter__()
    try:
        write_sources(lock, server)
        prev_dir = tracker.build(make_build_dir(
            tmp / "prev", k8s=f"{MINOR}.0",
            build_time=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)))
        scope = PipelineConfig(lockfile=lock).image_scope()   # the pipeline's (its lockfile's): retired by its promote
        prev_ids = [r.image_id for r in g.Publisher(admin, _policy(), scope=scope).publish(builddir.load(prev_dir))]
        for image_id in prev_ids:
            catalog.promote(admin, image_id, _policy())

        # The local cloud's publishing key, as the demo uses it: images and provenance are signed.
        publishing = signing_key.ensure(devcloud.paths, admin)
        config = PipelineConfig(lockfile=lock, cache_dir=ARTIFACT_CACHE, os_cloud="nodeforge-dev",
                                sign_key=publishing.key, sign_cert_id=publishing.cert_id,
                                work_dir=Path(os.environ.get(build_mod.ENV_WORK_DIR) or "/var/tmp"),
                                verify_timeout=BOOT_TIMEOUT,
                                fixture="local fixture mirror (tests/release_fixture.py)")
        quiet = Pipeline(config, runs_dir=runs, stages=hooks.stages(), say=say).run()

        time.sleep(1.1)   # Last-Modified has one-second resolution
        released = time.time()
        publish_patch(up, PATCH)
        t0 = time.monotonic()
        run = Pipeline(config, runs_dir=runs, stages=hooks.stages(), say=say).run()
        print(f"\nrelease pipeline {PATCH}: {run.status} in {time.monotonic() - t0:.0f} s "
              f"(build {'from the image cache' if hooks.seeded else 'real'}, boots real)", flush=True)
        if run.status != rr.SUCCEEDED:
            pytest.fail(f"the session's release pipeline run did not succeed: {run.status}: {run.message}; "
                        f"record {run.json_path}")
        approved = {v: g.get_image(admin, i) for v, i in run.approved[MINOR].items()}
        signed = {v: provenance.verify(admin, i) for v, i in run.approved[MINOR].items()}
        prev_after = [g.get_image(admin, i) for i in prev_ids]
        listed = {r["id"] for r in catalog.list_catalog(admin, approved=True, k8s=MINOR)}

        lines.clear()
        again = Pipeline(config, runs_dir=runs, stages=hooks.stages(), say=say).run()
        again_lines = list(lines)
        listed_again = {r["id"] for r in catalog.list_catalog(admin, approved=True, k8s=MINOR)}
        build_dir = Path(run.find("build", MINOR).outputs["build_dir"])
        tracker.build_ids.add(builddir.load(build_dir).build_id)
        return ReleaseRun(
            minor=MINOR, version=PATCH, lockfile=lock, runs_dir=runs, quiet=quiet, run=run, again=again,
            again_lines=again_lines, released=released, seeded=hooks.seeded, key=hooks.key, scope=scope, prev_ids=prev_ids,
            approved=approved, prev_after=prev_after, listed_after=listed, listed_after_rerun=listed_again,
            image_stat=hooks.before, image_stat_after=hooks.after,
            production_lockfile_unchanged=(REPO / "manifests" / "versions.yaml").read_bytes() == production,
            provenance=signed)
    finally:
        server.__exit__(None, None, None)
        # The scenario's images go again (tests that publish the build publish it afresh).
        for img in g.list_images(admin, **{"nodeforge_k8s_minor": MINOR}):
            if img.get("nodeforge_fixture") == "true" or img.get("nodeforge_build_id") in tracker.build_ids:
                tracker.build_ids.add(img["nodeforge_build_id"])
        tracker.cleanup()


def _policy():
    from nodeforge.publish.retention import RetentionPolicy

    return RetentionPolicy()


@pytest.fixture(scope="session")
def release_run(devcloud, tmp_path_factory) -> ReleaseRun:
    return _scenario(devcloud, tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="session")
def built_image(release_run) -> BuiltImage:
    d = release_run.build_dir
    return BuiltImage(d, release_run.lockfile, json.loads((d / builddir.MANIFEST).read_text()), release_run.key)


@pytest.fixture(scope="session")
def verified_build(release_run) -> tuple[Path, dict[str, VerifiedVariant]]:
    """The build directory after the pipeline's verify stage, and each
    variant's section of its verify.json (read back, as written by the boot)."""
    d = release_run.build_dir
    doc = json.loads((d / builddir.VERIFY).read_text())
    return d, {v: VerifiedVariant(v, s["passed"], s["checks"], s["firmware"], s["accel"], s["seconds"],
                                  s.get("error")) for v, s in doc["variants"].items()}
