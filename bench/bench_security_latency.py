"""Benchmark: Debian security update -> approved image, beside a Kubernetes patch release -> approved image.

Both latencies are measured the same way, in the same invocation, by the
release pipeline's own run record (``nodeforge pipeline run``, real build,
real boots of both variants, publish and promote into a private local cloud):

1. **the peer: a Kubernetes patch release.** The demo upstream (fixture
   artifacts of the real shape, served on loopback) publishes 1.36.1; the
   pipeline notices it, bumps the lockfile and builds. Latency: the release
   marker's ``Last-Modified`` -> the end of promote (``latency.1.36``).
2. **a Debian security update.** A real locked package (``ca-certificates``),
   re-versioned, appears in a local signed ``bookworm-security`` suite that
   carries the real suite's stanzas (tests/pipeline/security_archive.py;
   ``bookworm`` and ``bookworm-updates`` are this machine's real Debian
   mirror); the pipeline notices it, moves the OS package lock and builds.
   Latency: the suite's signed ``InRelease`` ``Date`` -> the end of promote
   (``latency.1.36.packages``).

The two builds need different package bases (the lock each installs
differs; with a lock the key holds the lock's digest, not the mirrors), so
neither reuses the other's; the patch run goes first and takes any
first-build penalty (diskimage-builder's own caches). Both bases are kept in
the shared package-base cache (~/.cache/nodeforge/dib/package-base), but the
security update here is dated the moment it appears (``publish_update(...,
now=True)``: the latency runs from there), so the moved lock's newest index
date, the build's SOURCE_DATE_EPOCH and with it the package-base key are new
on every run: the security run always builds its package base afresh (the
patch run reuses an earlier run's base); the build log says which (``package
base ...: cached`` or ``not cached``). Printed: both latencies, each
run's stage times, the ratio security/patch, and the goal: the security
update approved in under 30 minutes on this machine, like a Kubernetes
patch; and the patch's own goal: at most 150 s from the release to the approved image with a
warm package base (the patch run's build steps are printed too), and this host's speed: a fixed
single-core loop timed before and after, and the CPU time the hypervisor took meanwhile (the
hosts vary by 1.5x and more within an hour; compare runs at similar values). Exits 1 when a run fails or
a goal is missed. ``--patch-only`` runs the patch alone (about 5 minutes).

Needs root, the host's Debian mirror, QEMU (like ``nodeforge image build``
and ``image verify``), and starts a private local cloud (Keystone, Barbican,
Glance, and Magnum with what it needs: promote asks it which images are in
use) at its own port offset (``--offset``, default 19900), stopped at the
end. About 20-30 minutes on 2 cores when idle (two builds, four boots).

Run: sudo .venv/bin/python bench/bench_security_latency.py [--offset 19900] [--patch-only] [--keep] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import private_cloud  # noqa: E402 - bench/private_cloud.py

GOAL_SECONDS = 30 * 60
PATCH_GOAL_SECONDS = 150    # a Kubernetes patch, warm package base: release -> approved image
MINOR, PATCH = "1.36", "1.36.1"


def _host_speed() -> float:
    """Seconds for a fixed single-core workload (a pure-Python loop, best of three). The hosts this
    runs on change speed over an hour by 1.5x and more: a latency is compared with another only at a
    similar value, printed before and after the run."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        sum(i * i for i in range(2_000_000))
        best = min(best, time.perf_counter() - t)
    return round(best, 3)


def _steal_seconds() -> float:
    """CPU time the hypervisor took from this machine since boot (all cores; /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def _stages(run) -> str:
    return ", ".join(f"{s.name} {s.seconds:.0f}s" for s in run.stages if s.seconds is not None)


def _outputs(run, stage: str) -> dict:
    """The outputs the run record keeps for ``stage`` ({} when it did not run)."""
    return next((s.outputs or {} for s in run.stages if s.name == stage), {})


def _boots(run) -> str:
    """Each variant's boot in the verify stage: seconds from QEMU's start to each stage it showed
    (firmware, boot loader, kernel, userspace, checks, report), from the run's verify.json."""
    path = _outputs(run, "verify").get("verify_json")
    try:
        variants = json.loads(Path(path).read_text())["variants"]
    except (TypeError, OSError, ValueError, KeyError):
        return "no verify.json"
    return "; ".join(f"{v} under {r.get('accel')}: " + " ".join(f"{k} {t:.0f}" for k, t in (r.get("timeline") or {}).items())
                     for v, r in sorted(variants.items()))


def _build_steps(run) -> str:
    """The build stage's own steps (diskimage-builder's root filesystem, each disk, ...)."""
    steps = _outputs(run, "build").get("build_seconds") or {}
    return ", ".join(f"{k} {v:.1f}s" for k, v in steps.items() if k != "total")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offset", type=int, default=19900,
                    help="port offset of the private cloud (below the ephemeral range, clear of the test clouds')")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory and the cloud (debugging)")
    ap.add_argument("--patch-only", action="store_true",
                    help="only the Kubernetes patch run (its latency against its own goal), no security update")
    ap.add_argument("--dry-run", action="store_true", help="say what would run, and exit")
    args = ap.parse_args()
    if args.dry_run:
        print(f"would start a private cloud at offset {args.offset}; run the pipeline for Kubernetes {PATCH} "
              f"(the peer), then for a security update of ca-certificates in a local bookworm-security; "
              f"print both latencies and their ratio (goal: under {GOAL_SECONDS // 60} min)")
        return 0
    if os.geteuid() != 0:
        print("the benchmark builds images: run it as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from nodeforge.demo.fixtures import make_demo, publish_patch, write_sources
    from nodeforge.devcloud.cloud import ADMIN_CLOUD, DevCloud
    from nodeforge.devcloud.paths import Paths
    from nodeforge.demo.upstream_mirror import MirrorServer
    from nodeforge.imagebuild import package_lock
    from nodeforge.oslock import lock as ol
    from nodeforge.pins import lockfile as lf, release as release_mod
    from nodeforge.pipeline import Pipeline, PipelineConfig
    from nodeforge.pipeline import runrecord as rr
    from tests.oslock.aptrepo import SigningKey
    from tests.pipeline.security_archive import SecurityArchive

    private = private_cloud.prepare("nf-bench-seclat-", args.offset)
    cloud = DevCloud(Paths(private.root))
    tmp = Path(tempfile.mkdtemp(prefix="nf-bench-seclat-work-", dir=os.environ.get("NODEFORGE_WORK_DIR", "/var/tmp")))
    sec = None

    def say(line: str) -> None:
        print(line, flush=True)

    speed_before, steal_before = _host_speed(), _steal_seconds()
    try:
        t0 = time.monotonic()
        # Promote asks Magnum which images its templates and clusters use (retention never removes
        # one in use), as in a real cloud: Magnum and what it needs run too.
        cloud.up(["image", "container-infra"])
        say(f"private cloud up in {time.monotonic() - t0:.0f} s ({private.root}, offset {args.offset})")
        sec = SecurityArchive(tmp / "security", SigningKey(tmp / "key", "nodeforge bench <bench@invalid>")).start()
        os.environ.update(sec.environment())
        up, lockfile = make_demo(tmp / "demo")
        with MirrorServer(up.root) as server:
            write_sources(lockfile, server)
            lock_path = release_mod.package_lock_path(lockfile)
            package_lock.lock_packages(lf.load(lockfile), lock_path, sec.mirrors, keyring=sec.keyring)
            config = PipelineConfig(lockfile=lockfile, cache_dir=tmp / "artifacts", os_cloud=ADMIN_CLOUD,
                                    work_dir=tmp / "work", fixture="bench_security_latency fixture mirrors")
            (tmp / "work").mkdir()
            quiet = lambda line: None  # noqa: E731 - the stage lines go to the run record

            publish_patch(up, PATCH)
            patch_run = Pipeline(config, runs_dir=tmp / "runs", say=quiet).run()
            if patch_run.status != rr.SUCCEEDED:
                say(f"FAILED: the patch run: {patch_run.status}: {patch_run.message} ({patch_run.json_path})")
                return 1
            patch = patch_run.latency[MINOR]["latency_seconds"]
            say(f"Kubernetes patch {PATCH}: {patch:.0f} s from the release to the approved image "
                f"({_stages(patch_run)}; build steps: {_build_steps(patch_run)}; boots, seconds since QEMU "
                f"started: {_boots(patch_run)})")
            patch_ok = patch <= PATCH_GOAL_SECONDS
            speed = {"before": speed_before, "after": _host_speed(),
                     "steal": round(_steal_seconds() - steal_before, 1)}
            say(f"patch latency goal <= {PATCH_GOAL_SECONDS} s (warm package base): "
                f"{'met' if patch_ok else 'NOT met'}; load average {os.getloadavg()[0]:.1f}; host calibration "
                f"{speed['before']:.3f} s before, {speed['after']:.3f} s after (lower is faster); "
                f"CPU time taken by the hypervisor since the start {speed['steal']:.1f} s")
            if args.patch_only:
                say(json.dumps({"patch_latency_seconds": patch, "load_average": round(os.getloadavg()[0], 1),
                                "host_calibration_seconds": speed}))
                return 0 if patch_ok else 1

            update = sec.publish_update(ol.load(lock_path), now=True)
            sec_run = Pipeline(config, runs_dir=tmp / "runs", say=quiet).run([MINOR])
            if sec_run.status != rr.SUCCEEDED:
                say(f"FAILED: the security-update run: {sec_run.status}: {sec_run.message} ({sec_run.json_path})")
                return 1
            pk = sec_run.latency[MINOR]["packages"]
            security = pk["latency_seconds"]
            say(f"security update {update.name} {update.old_version} -> {update.new_version}: {security:.0f} s "
                f"from the suite's InRelease Date to the approved image ({_stages(sec_run)})")
            say(json.dumps({"patch_latency_seconds": patch, "security_latency_seconds": security,
                            "ratio_security_patch": round(security / patch, 2),
                            "load_average": round(os.getloadavg()[0], 1), "host_calibration_seconds": speed}))
            ok = security < GOAL_SECONDS and patch_ok
            say(f"ratio security/patch: {security / patch:.2f}x; goal under {GOAL_SECONDS // 60} min: "
                f"{'met' if ok else 'NOT met'}; load average {os.getloadavg()[0]:.1f}")
            return 0 if ok else 1
    finally:
        if sec is not None:
            sec.stop()
        if not args.keep:   # the cloud's state (every image in it) goes with its directory
            cloud.down()
            private.remove()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
