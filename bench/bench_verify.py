"""The verify stage against its floor: both variants verified, and the same images booted to the login prompt.

In one run, on the build the tests use (tests/image_fixture.py: cached under
.cache/images by input digest, built once if missing) or ``--build-dir``:

1. **the accelerator decision**: ``accel.decide`` with an empty cache, so the
   KVM probe runs as on a host's first verify (goal: under 10 s on an idle
   machine; under TCG only, it is what deciding costs);
2. **the verify stage**: ``boottest.verify`` of a hard-linked copy of the
   build, both variants one after the other, as the pipeline runs it: wall
   time, and per boot its timeline (firmware, boot loader, kernel,
   userspace, checks, report: seconds spent in each, from the console);
3. **the floor**: the same images, with the same accelerator, vCPUs,
   memory, firmware, disk overlay, NIC and datasource (an empty
   cloud-config in the same seed), each booted until the console shows a
   login prompt, nothing checked; the same timeline; in the stage's layout
   (side by side: the floor is the pair's wall time; one after the other:
   the sum). Booted before and after the stage, and the two averaged (the
   load drifts during a run).

It prints the ratio of the stage's wall time to the floor's (goal: at most
1.3x under TCG on 2 cores). Timings here are noisy: the ratio compares
figures measured in the same run.

    python bench/bench_verify.py [--build-dir DIR] [--accel tcg|auto|kvm] [--rounds 1] [--sequential]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeforge.base import qemuimg  # noqa: E402
from nodeforge.imageverify import accel, boottest, builddir, imagefiles  # noqa: E402
from nodeforge.imageverify.bootwatch import STAGES, ConsoleWatch  # noqa: E402

GOAL_RATIO = 1.3
GOAL_DECISION = 10.0
LOGIN = re.compile(rb"login: ")


def floor_boot(build: builddir.BuildDir, variant: str, accel_name: str, smp: int, tools: dict, work: Path,
               timeout: float = 900.0) -> tuple[float, dict]:
    """Seconds from QEMU's start to a login prompt on the console, and the boot's timeline."""
    image = build.variant(variant)
    work.mkdir(parents=True)
    virtual = qemuimg.virtual_size(image.path, image.disk_format, qemu_img=tools["qemu-img"])
    overlay = work / "overlay.qcow2"
    qemuimg.overlay(image.path, image.disk_format, overlay, virtual + boottest.GROW, qemu_img=tools["qemu-img"])
    label = boottest.seed_label(variant)
    empty = b"#cloud-config\n{}\n"
    files = ({"openstack/latest/meta_data.json": json.dumps({"uuid": "floor", "hostname": f"floor-{variant}"})
              .encode(), "openstack/latest/user_data": empty} if label == "config-2" else
             {"meta-data": f"instance-id: floor\nlocal-hostname: floor-{variant}\n".encode(), "user-data": empty})
    seed = boottest.make_seed(work / "seed.iso", label, files, tools["genisoimage"])
    fw = None
    if variant == "baremetal":
        code, vars_ = boottest.ovmf()
        shutil.copyfile(vars_, work / "OVMF_VARS.fd")
        fw = (code, work / "OVMF_VARS.fd")
    console, report = work / "console.log", work / "report.serial"
    argv = boottest.qemu_argv(variant=variant, overlay=overlay, seed=seed, console=console, report=report,
                              accel=accel_name, firmware=fw, smp=smp)
    t0 = time.monotonic()
    watch = ConsoleWatch(console, report, start=t0)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        while time.monotonic() - t0 < timeout:
            watch.poll()
            if LOGIN.search(console.read_bytes() if console.exists() else b""):
                seconds = time.monotonic() - t0
                return seconds, {**watch.durations(end=seconds), "silence": round(watch.longest_silence, 1)}
            if proc.poll() is not None:
                raise SystemExit(f"floor {variant}: QEMU exited with {proc.returncode} before a login prompt")
            time.sleep(0.2)
        raise SystemExit(f"floor {variant}: no login prompt within {timeout:.0f} s")
    finally:
        proc.kill()
        proc.wait()


def floor_boots(build: builddir.BuildDir, names: list[str], accel_name: str, smp: int, tools: dict, work: Path,
                parallel: bool) -> tuple[float, dict]:
    """The floor of the variants in the stage's layout: booted side by side when the stage boots
    them so (its wall time: the later login prompt), else one after the other (the sum). Also
    each variant's (seconds, timeline)."""
    if not parallel:
        each = {v: floor_boot(build, v, accel_name, smp, tools, work / v) for v in names}
        return sum(sec for sec, _ in each.values()), each
    from concurrent.futures import ThreadPoolExecutor

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        futures = {v: pool.submit(floor_boot, build, v, accel_name, smp, tools, work / v) for v in names}
        each = {v: f.result() for v, f in futures.items()}
    return time.monotonic() - t, each


def timeline_row(label: str, total: float, durations: dict) -> str:
    cells = " ".join(f"{durations.get(s, 0.0):>10.1f}" for s in STAGES)
    quiet = f" {durations['silence']:>8.1f}" if "silence" in durations else ""
    return f"{label:22} {total:>8.1f} {cells}{quiet}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, help="a build directory (default: the tests' fixture build)")
    ap.add_argument("--accel", default="tcg", choices=["tcg", "kvm", "auto"],
                    help="accelerator for the verify stage and the floor (default tcg: the goal's setting)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sequential", dest="parallel", action="store_false",
                    help="the variants one after the other (default: the stage's default layout, side by side "
                         "on two CPUs or more); the floor is booted in the same layout")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        tmp = Path(tmp)
        if args.build_dir is None:
            from tests.image_fixture import build_demo_image

            t = time.monotonic()
            source = build_demo_image(tmp / "fixture").path
            print(f"image: {source.name} (ready in {time.monotonic() - t:.0f} s)", flush=True)
        else:
            source = args.build_dir
        tools = boottest.require_tools()
        build = builddir.load(source)

        t = time.monotonic()
        decision = accel.decide(None, qemu=tools[boottest.QEMU], cache_dir=tmp / "accel-cache", work_dir=tmp,
                                kernel=lambda: imagefiles.probe_kernel(build, tools, tmp),
                                firmware=boottest.ovmf())
        decided = time.monotonic() - t
        print(f"accelerator decision (probe, empty cache): {decided:.1f} s -> {decision.accel} "
              f"({decision.reason[:160]})", flush=True)

        header = (f"{'boot':22} {'seconds':>8} " + " ".join(f"{s:>10}" for s in STAGES)
                  + f" {'silence':>8}  (stage columns: seconds in each; silence: longest gap in the console)")
        ratios = []
        for r in range(args.rounds):
            copy = tmp / f"verify-{r}"
            copy.mkdir()
            for f in source.iterdir():
                if f.is_file() and not f.name.startswith("verify"):
                    os.link(f, copy / f.name)
            layout = boottest.plan(boottest.VerifyRequest(build_dir=copy, accel=args.accel, parallel=args.parallel))
            smp, parallel = layout.smp, layout.parallel
            names = sorted(build.variants, key=lambda v: (v != "vm", v))
            floor_accel = decision.accel if args.accel == "auto" else args.accel
            wall_before, before = floor_boots(build, names, floor_accel, smp, tools, tmp / f"floor-{r}-before",
                                              parallel)
            t = time.monotonic()
            results = boottest.verify(boottest.VerifyRequest(build_dir=copy, accel=args.accel, parallel=args.parallel,
                                                             cache_dir=REPO / ".cache" / "artifacts",
                                                             accel_cache=tmp / "accel-cache", work_dir=tmp))
            stage = time.monotonic() - t
            print(f"\nround {r + 1}: verify stage {stage:.1f} s for {', '.join(x.variant for x in results)} "
                  f"({'side by side' if parallel else 'one after the other'}, {smp} vCPU each; "
                  f"{'all passed' if all(x.passed for x in results) else 'NOT all passed'})\n{header}")
            for x in results:
                b2v = x.seconds["boot_to_verdict"]
                print(timeline_row(f"verify {x.variant}", b2v, _durations(x.timeline, b2v)))
            # The floor is booted before and after the stage, and averaged: load drifts during a run.
            wall_after, after = floor_boots(build, [x.variant for x in results], results[0].accel, smp, tools,
                                            tmp / f"floor-{r}-after", parallel)
            floor = (wall_before + wall_after) / 2
            for x in results:
                (s1, d1), (s2, d2) = before[x.variant], after[x.variant]
                print(timeline_row(f"floor {x.variant} before", s1, d1))
                print(timeline_row(f"floor {x.variant} after", s2, d2), flush=True)
            ratios.append(stage / floor)
            print(f"verify stage {stage:.1f} s / floor {floor:.1f} s = {stage / floor:.2f}x "
                  f"(goal <= {GOAL_RATIO}x; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
                  flush=True)
            if not all(x.passed for x in results):
                print("goal: FAILED: a variant did not pass: a failed verify proves nothing about its time")
                return 1
        best = min(ratios)
        print(f"\nbest ratio {best:.2f}x: {'met' if best <= GOAL_RATIO else 'NOT met'} (goal <= {GOAL_RATIO}x); "
              f"decision {decided:.1f} s: {'met' if decided < GOAL_DECISION else 'NOT met'} "
              f"(goal < {GOAL_DECISION:.0f} s on an idle machine)")
    return 0


def _durations(timeline: dict, end: float) -> dict:
    seen = sorted(timeline.items(), key=lambda kv: (kv[1], STAGES.index(kv[0])))
    return {stage: round(max(0.0, (seen[i + 1][1] if i + 1 < len(seen) else end) - start), 1)
            for i, (stage, start) in enumerate(seen)}


if __name__ == "__main__":
    raise SystemExit(main())
