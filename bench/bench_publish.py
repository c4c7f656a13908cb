"""Benchmark: `nodeforge image publish` vs `openstack image create --file` on one image.

Writes one raw image of SIZE (default 2 GiB; incompressible data) and its
SHA256SUMS/SHA512SUMS BEFORE any timing, then uploads it to the local cloud's
Glance (``nodeforge devcloud up``) ROUNDS times per side. Publish refuses a
build without a passing boot verification, so every synthetic build directory
gets a passing ``verify.json`` written by the product's own report writer
(``boottest.write_report`` through ``tests/imagebuild/verify_fixture.py``; no
boot), untimed:

* nodeforge: ``python -m nodeforge.cli image publish DIR`` (process start-up,
  the manifest image, the verify-report image, the streamed upload and the
  digest check included);
  every round gets a new build directory (new build id, its own
  manifest.json) whose image is a hard link to the one file;
* peer: ``openstack image create --file IMAGE --disk-format raw``.

The order alternates round by round (nodeforge first in odd rounds, the peer
first in even ones: AB BA AB ...). Before EVERY timed upload, on either side,
dirty pages are flushed (``sync``: the previous upload's writes in Glance's
file store) and the image is read through once, so each side starts with the
image in the page cache and no writeback pending. Images are deleted after
each upload (not timed).

Prints every round, each side's min and median, MiB/s at the median, the
median of the per-round throughput ratios nodeforge/openstack (goal: >= 0.9)
and nodeforge's peak RSS from wait4() (goal: < 150 MB and flat with image
size: run with --size-mib 256 and 2048 to see). Exits 1 when a goal is
missed. Every image it creates and the directory are removed. ``--dry-run``
writes and checks the build directory, prints the schedule and exits without
contacting the cloud.

Run: eval "$(.venv/bin/nodeforge devcloud env)"; .venv/bin/python bench/bench_publish.py [--size-mib 2048] [--rounds 4]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.imagebuild.builddir_factory import make_build_dir  # noqa: E402

RATIO_GOAL = 0.9
RSS_GOAL = 150e6
IMAGE_NAME = "nodeforge-k8s-1.36.0-baremetal.raw"


def make_image(root: Path, size_mib: int) -> tuple[Path, str, str]:
    """The one image file, and its sha256 and sha512."""
    path = root / IMAGE_NAME
    h256, h512 = hashlib.sha256(), hashlib.sha512()
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(size_mib):
            chunk = block[:-8] + i.to_bytes(8, "big")  # no two MiB alike
            f.write(chunk)
            h256.update(chunk)
            h512.update(chunk)
    return path, h256.hexdigest(), h512.hexdigest()


def make_build(root: Path, image: Path, h256: str, h512: str) -> Path:
    """A fresh build directory (new build id, a ``manifest.json`` of the shape ``image build`` writes,
    SUMS covering it) around a hard link to ``image``; a passing ``verify.json``."""
    return make_build_dir(root, variants=("baremetal",), packages=[], build_id=f"nf-bench-{uuid.uuid4().hex[:8]}",
                          baremetal_image=(image, h256, h512))


def settle(image: Path) -> None:
    """Same starting state for every timed upload: no pending writeback, the image in the page cache."""
    os.sync()
    with open(image, "rb", buffering=0) as fh:
        while fh.read(16 << 20):
            pass


def timed(argv: list[str], env: dict) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one command."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0:4]} failed ({proc.returncode}): {err[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=4, help="uploads per side, order alternating (default 4)")
    ap.add_argument("--dry-run", action="store_true",
                    help="write and check the build directory, print the schedule; no cloud")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    env = dict(os.environ)
    bindir = Path(sys.executable).parent
    root = Path(tempfile.mkdtemp(prefix="nf-bench-publish-"))
    times: dict[str, list[float]] = {"nodeforge": [], "openstack": []}
    rss: list[int] = []
    ratios: list[float] = []
    try:
        image, h256, h512 = make_image(root, args.size_mib)
        order = [("nodeforge", "openstack") if r % 2 == 0 else ("openstack", "nodeforge") for r in range(args.rounds)]
        print(f"image: {args.size_mib} MiB written before any timing; order per round: "
              + " | ".join("+".join(o) for o in order), flush=True)
        if args.dry_run:
            from nodeforge.imagebuild import checksums
            from nodeforge.imageverify import builddir

            d = make_build(root, image, h256, h512)
            bad = checksums.verify_sums(d)
            verify = {v: im.verify.value for v, im in builddir.load(d).variants.items()}
            print(f"dry run: build directory {d.name}: checksums {'ok' if not bad else 'BAD: ' + str(bad)}, "
                  f"verify {verify}; no upload")
            return 1 if bad or set(verify.values()) != {"passed"} else 0

        import openstack

        from nodeforge.publish import glance as g

        conn = openstack.connect()

        def nodeforge() -> float:
            d = make_build(root, image, h256, h512)
            settle(image)
            seconds, peak = timed([sys.executable, "-m", "nodeforge.cli", "image", "publish", str(d)], env)
            rss.append(peak)
            for img in g.list_images(conn, nodeforge_build_id=d.name):
                g.delete_image(conn, img["id"])
            shutil.rmtree(d)
            return seconds

        def peer() -> float:
            name = f"nf-bench-openstack-{uuid.uuid4().hex[:8]}"
            settle(image)
            seconds, _ = timed([str(bindir / "openstack"), "image", "create", "--file", str(image),
                                "--disk-format", "raw", "--container-format", "bare", name], env)
            for img in g.list_images(conn, name=name):
                g.delete_image(conn, img["id"])
            return seconds

        sides = {"nodeforge": nodeforge, "openstack": peer}
        for r, pair in enumerate(order):
            for side in pair:
                times[side].append(sides[side]())
            ratios.append(times["openstack"][-1] / times["nodeforge"][-1])
            print(f"  round {r + 1} ({pair[0]} first): nodeforge {times['nodeforge'][-1]:.2f}s, "
                  f"openstack {times['openstack'][-1]:.2f}s, throughput ratio {ratios[-1]:.2f}x", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = args.size_mib
    print(f"image: {mib} MiB, rounds: {args.rounds} per side")
    for label, side in (("nodeforge image publish", "nodeforge"), ("openstack image create --file", "openstack")):
        med = statistics.median(times[side])
        print(f"{label:30} min {min(times[side]):6.2f} s  median {med:6.2f} s  {mib / med:7.1f} MiB/s at the median")
    ratio = statistics.median(ratios)
    peak = max(rss)
    print(f"throughput ratio nodeforge/openstack: {ratio:.2f}x median of per-round ratios "
          f"(goal >= {RATIO_GOAL}: {'met' if ratio >= RATIO_GOAL else 'NOT met'})")
    print(f"nodeforge peak RSS: {peak / 1e6:.0f} MB (goal < {RSS_GOAL / 1e6:.0f} MB: "
          f"{'met' if peak < RSS_GOAL else 'NOT met'})")
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0 if ratio >= RATIO_GOAL and peak < RSS_GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
