"""End to end, against the session's local cloud and the real Debian mirror,
nothing mocked: a Debian security update appears and the release pipeline
turns it into approved images.

The archive (tests/pipeline/security_archive.py): ``bookworm`` and
``bookworm-updates`` come from the Debian mirror this machine's apt uses
(verified with debian-archive-keyring); ``bookworm-security`` is a local
signed apt repository (tests/oslock/aptrepo.py, its own throwaway key)
carrying the real security suite's stanzas (their ``.deb`` files passed
through from the real security mirror). The keyring nodeforge trusts is the
Debian archive keyring plus the fixture's key. Inside the build chroot apt
reads the fixture suite as ``[trusted=yes]`` (DIB_APT_SOURCES_CONF, a
diskimage-builder setting; the chroot has no gpg to import a key with): what
it installs from there is still checked, .deb by .deb, by nodeforge's apt hook
against the sha256 of the package lock, which came from the fixture's
gpgv-verified index.

The scenario (once per module):

1. a fixture Kubernetes upstream and lockfile (nothing new there), and an OS
   package lock resolved beside it (``release lock-packages``' library call);
   an earlier approved image of 1.36 in Glance whose package list is that
   lock (a small stand-in build: a build from a lock contains exactly the
   lock's packages, which the build below checks for itself);
2. ``release check`` is quiet (exit 0);
3. a real locked package, ``ca-certificates``, re-versioned (``dpkg-deb -R``,
   Version bumped, ``dpkg-deb -b``) is published in the fixture security
   suite; ``release check`` reports it as a security update and exits 10;
4. ``pipeline run --minor 1.36`` checks, moves the package lock, prefetches,
   renders, **builds** (real diskimage-builder; a new package base: the lock
   moved), **boots** both variants, publishes and promotes; the image's dpkg
   list has the new version; the earlier image is superseded; ``image diff``
   between the two approved images names that package and no other;
5. a second build from the same lockfile and moved lock, into a new
   directory (the package base cache shared, as between CI runs), has the
   same content as the pipeline's: the same per-file manifest and SBOM, and
   ``image diff`` finds only the build identity (the disks' differing
   bytes are printed: docs/image-build.md has the figures).

Two real builds and two boots on top of the session's release scenario
(tests/release_fixture.py); the time the scenario adds is printed.
``NODEFORGE_REPRO_FRESH_BASE=1`` makes a third build in step 5, from a
package base built afresh in its own cache directory, and compares it the
same way (printed only).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeforge.demo.fixtures import make_demo, write_sources
from nodeforge.demo.upstream_mirror import MirrorServer
from nodeforge.imagebuild import build as build_mod
from nodeforge.imageverify import builddir
from nodeforge.imagebuild import package_lock
from nodeforge.oslock import archive, lock as ol
from nodeforge.pins import lockfile as lf, release as release_mod
from nodeforge.pipeline import Pipeline, PipelineConfig
from nodeforge.pipeline import runrecord as rr
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild import repro_compare
from tests.imagebuild.glance_fixtures import Tracker
from tests.imagebuild.realbuild import ARTIFACT_CACHE, BOOT_TIMEOUT
from tests.oslock.fixtures import signing_key  # noqa: F401 - fixture
from tests.pipeline.security_archive import PACKAGE, RELEASE, SEC, SecurityArchive
from tests.prereq import require, require_tools

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]

MINOR = "1.36"


@dataclasses.dataclass
class SecurityRun:
    lockfile: Path
    old_lock: ol.PackageLock
    old_version: str
    new_version: str
    quiet_check: tuple[int, dict]
    check: tuple[int, dict]
    published: datetime.datetime          # the fixture suite's InRelease Date for the update
    run: rr.RunRecord
    prev_ids: list[str]
    prev_after: list[dict]
    approved: dict[str, dict]
    diff: dict | None                      # image diff (prev vm -> new vm), when nodeforge.publish.diff exists
    seconds: float                         # what the scenario added to the test run
    said: list[str] = dataclasses.field(default_factory=list)   # the run's progress lines


@pytest.fixture(scope="module")
def security_run(devcloud, signing_key, tmp_path_factory):  # noqa: F811
    require_tools("gpgv", "apt-get", "dpkg-deb", why="the OS package lock and the fixture archive")
    require(archive.DEFAULT_KEYRING.is_file(), f"{archive.DEFAULT_KEYRING} (debian-archive-keyring)")
    try:
        real = archive.host_mirrors({}, release=RELEASE)
    except archive.ArchiveError as exc:
        require(False, f"a Debian mirror in the host's apt sources ({exc})")
    t0 = time.monotonic()
    tmp = tmp_path_factory.mktemp("security")
    admin = devcloud.admin()
    tracker = Tracker(admin)
    sec = SecurityArchive(tmp / "security", signing_key, real).start()
    up, lockfile = make_demo(tmp / "demo")
    server = MirrorServer(up.root)
    server.__enter__()
    mp = pytest.MonkeyPatch()
    try:
        for k, v in sec.environment().items():
            mp.setenv(k, v)
        write_sources(lockfile, server)
        lock_path = release_mod.package_lock_path(lockfile)
        package_lock.lock_packages(lf.load(lockfile), lock_path, sec.mirrors, keyring=sec.keyring)
        old_lock = ol.load(lock_path)

        config = PipelineConfig(lockfile=lockfile, cache_dir=ARTIFACT_CACHE, os_cloud="nodeforge-dev",
                                work_dir=Path(os.environ.get(build_mod.ENV_WORK_DIR) or "/var/tmp"),
                                verify_timeout=BOOT_TIMEOUT,
                                fixture="local fixture mirror and security suite (tests/pipeline)")
        scope = config.image_scope()
        prev_dir = tracker.build(make_build_dir(
            tmp / "prev", k8s=f"{MINOR}.0", packages=[{"name": p.name, "version": p.version, "arch": p.arch}
                                                      for p in old_lock.packages],
            build_time=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)))
        prev = {r.variant: r.image_id for r in g.Publisher(admin, RetentionPolicy(), scope=scope).publish(
            builddir.load(prev_dir))}
        prev_ids = list(prev.values())
        for image_id in prev_ids:
            catalog.promote(admin, image_id, RetentionPolicy(), scope=scope)

        quiet = _check_json(lockfile)
        update = sec.publish_update(old_lock, PACKAGE, "all")     # the security update appears
        check = _check_json(lockfile)
        t_run = time.monotonic()
        said: list[str] = []
        run = Pipeline(config, runs_dir=tmp / "runs",
                       say=lambda line: said.append(line) or print(line, flush=True)).run([MINOR])
        print(f"\nsecurity update pipeline: {run.status} in {time.monotonic() - t_run:.0f} s", flush=True)
        if run.status != rr.SUCCEEDED:
            pytest.fail(f"the security-update pipeline run did not succeed: {run.status}: {run.message}; "
                        f"record {run.json_path}")
        tracker.build_ids.add(builddir.load(run.find("build", MINOR).outputs["build_dir"]).build_id)
        approved = {v: g.get_image(admin, i) for v, i in run.approved[MINOR].items()}
        prev_after = [g.get_image(admin, i) for i in prev_ids]
        diff = None
        if importlib.util.find_spec("nodeforge.publish.diff") is not None:
            from nodeforge.publish import diff as image_diff

            diff = image_diff.diff_images(admin, prev["vm"], approved["vm"]["id"]).to_dict()
        yield SecurityRun(lockfile=lockfile, old_lock=old_lock, old_version=update.old_version,
                          new_version=update.new_version, quiet_check=quiet, check=check, published=update.published,
                          run=run, prev_ids=prev_ids, prev_after=prev_after, approved=approved, diff=diff,
                          seconds=time.monotonic() - t0, said=said)
    finally:
        mp.undo()
        server.__exit__(None, None, None)
        sec.stop()
        tracker.cleanup()


def _check_json(lockfile: Path) -> tuple[int, dict]:
    """``nodeforge release check -o json`` in a child process (the environment above: the mirrors, the keyring)."""
    proc = subprocess.run([sys.executable, "-m", "nodeforge.cli", "release", "check", "--lockfile", str(lockfile),
                           "-o", "json"], capture_output=True, text=True, env=dict(os.environ))
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"release check exited {proc.returncode}: {proc.stderr[-2000:]}") from None


def test_release_check_reports_the_security_update(security_run):
    r = security_run
    code, doc = r.quiet_check
    assert code == 0 and doc["packages"]["updates"] == [] and not doc["new_release"], doc.get("packages")
    code, doc = r.check
    assert code == 10 and doc["new_release"] and not doc["kubernetes_new_release"]
    assert doc["packages"]["updates"] == [{"name": PACKAGE, "arch": "all", "old_version": r.old_version,
                                           "new_version": r.new_version, "suite": SEC, "security": True}]
    assert doc["packages"]["security"] == 1


def test_pipeline_rebuilds_verifies_publishes_and_promotes(security_run):
    r = security_run
    run = r.run
    assert [s.name for s in run.stages] == ["check", "bump", "prefetch", "render", "build", "verify", "publish",
                                            "canary", "promote"]
    # No canary policy here (none in the repository): the stage says so and passes.
    assert [s.outputs.get("asked") for s in run.stages if s.name == "canary"] == [False]
    assert run.find("check").outputs["triggers"] == ["packages"]
    change = {"name": PACKAGE, "arch": "all", "old_version": r.old_version, "new_version": r.new_version,
              "suite": SEC, "security": True}
    assert run.packages == [change]
    assert f"| {PACKAGE} | all | {r.old_version} | {r.new_version} | **{SEC}** (security) |" in (
        run.root / "pr-body.md").read_text()
    # The lock moved (only that package), the Kubernetes lockfile did not.
    new_lock = ol.load(release_mod.package_lock_path(r.lockfile))
    assert {p.key: p.version for p in new_lock.packages} == (
        {p.key: p.version for p in r.old_lock.packages} | {(PACKAGE, "all"): r.new_version})
    assert lf.load(r.lockfile).minor(MINOR).version == lf.Version.parse(f"{MINOR}.0")
    # Built from the moved lock: the image's dpkg list has the new version, and is the lock exactly.
    manifest = json.loads((Path(run.find("build", MINOR).outputs["build_dir"]) / builddir.MANIFEST).read_text())
    dpkg = {(p["name"], p["arch"]): p["version"] for p in manifest["packages"]}
    assert dpkg[(PACKAGE, "all")] == r.new_version
    assert dpkg == {p.key: p.version for p in new_lock.packages}
    assert manifest["os_package_lock"]["digest"] == new_lock.digest()
    assert run.find("verify", MINOR).outputs["variants"] == {"vm": "passed", "baremetal": "passed"}
    # The images the build had just summed were not read again by verify (their fingerprints held).
    images = sorted(run.find("build", MINOR).outputs["images"].values())
    assert set(images) < set(run.find("build", MINOR).outputs["fingerprints"])
    assert any(f"({', '.join(images)} unchanged since the build summed them: not read again)" in line
               for line in r.said), [line for line in r.said if "SHA256SUMS" in line]
    # Approved; the earlier approved images superseded (hidden, still there).
    assert set(r.approved) == {"vm", "baremetal"}
    for img in r.approved.values():
        assert catalog.state(img) == "approved" and img["nodeforge_verify"] == "passed"
    assert all(img["os_hidden"] and catalog.state(img) == "superseded" for img in r.prev_after)
    # Package-update latency: the fixture suite's InRelease Date -> approval.
    lat = run.latency[MINOR]["packages"]
    assert rr.parse_iso(lat["published_at"]) == r.published
    assert lat["security"] == 1 and lat["latency_seconds"] > 0
    print(f"\nSECURITY UPDATE LATENCY {PACKAGE} {r.new_version}: {lat['latency_seconds']:.0f}s; stages: "
          + json.dumps(run.latency[MINOR]["stage_seconds"]) + f"; this scenario added {r.seconds:.0f}s to the run",
          flush=True)


def test_image_diff_names_only_that_package(security_run):
    r = security_run
    if r.diff is None:
        pytest.fail("nodeforge.publish.diff (image diff) is not importable", pytrace=False)
    pk = r.diff["packages"]
    assert pk["added"] == [] and pk["removed"] == []
    assert [(c["name"], c["old"], c["new"]) for c in pk["changed"]] == [(PACKAGE, r.old_version, r.new_version)]


def test_a_second_build_from_the_same_locks_has_the_same_content(security_run, tmp_path):
    """The pipeline's build and one more from the same lockfile and OS package lock."""
    r = security_run
    a = Path(r.run.find("build", MINOR).outputs["build_dir"])

    def again(out: Path, **kw) -> Path:
        t = time.monotonic()
        build_mod.build(build_mod.BuildRequest(minor=MINOR, lockfile_path=r.lockfile, out=out, cache_dir=ARTIFACT_CACHE,
                                               work_dir=Path(os.environ.get(build_mod.ENV_WORK_DIR) or "/var/tmp"),
                                               stream=lambda line: print(line, flush=True), **kw))
        print(f"\n== build {out.name}: {time.monotonic() - t:.0f} s", flush=True)
        return out

    b = again(tmp_path / "b")
    result = repro_compare.report("pipeline build vs a second build (shared package base)", a, b, tmp_path)
    if os.environ.get("NODEFORGE_REPRO_FRESH_BASE") == "1":
        c = again(tmp_path / "c", package_base_cache=tmp_path / "fresh-package-base")
        repro_compare.report("pipeline build vs a build from a fresh package base", a, c, tmp_path)
    repro_compare.assert_same_content(a, b, result)
