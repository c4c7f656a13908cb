"""Benchmark: `nodeforge image publish` vs `openstack image create --file` on one image.

Writes a synthetic build directory with one raw image of SIZE (default
2 GiB; incompressible data), its SHA256SUMS/SHA512SUMS and manifest.json,
then uploads it to the local cloud's Glance (``nodeforge devcloud up``):

* nodeforge: ``python -m nodeforge.cli image publish DIR`` (process start-up,
  the manifest image, the streamed upload and the digest check included);
* baseline: ``openstack image create --file IMAGE --disk-format raw``.

Each side runs ROUNDS times (the image file stays in the page cache for
both); the best time of each is compared. Prints MiB/s of each, the
throughput ratio nodeforge/openstack (goal: >= 0.9) and nodeforge's peak RSS
from wait4() (goal: < 150 MB and flat with image size: run with --size-mib
256 and 2048 to see). Every image it creates and the directory are removed.

Run: eval "$(.venv/bin/nodeforge devcloud env)"; .venv/bin/python bench/bench_publish.py [--size-mib 2048] [--rounds 2]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import openstack

from nodeforge.imagebuild import glance as g


def make_build(root: Path, size_mib: int) -> Path:
    build_id = f"nf-bench-{uuid.uuid4().hex[:8]}"
    d = root / build_id
    d.mkdir()
    name = "nodeforge-k8s-1.36.0-baremetal.raw"
    h256, h512 = hashlib.sha256(), hashlib.sha512()
    block = os.urandom(1 << 20)
    with open(d / name, "wb") as f:
        for i in range(size_mib):
            chunk = block[:-8] + i.to_bytes(8, "big")  # no two MiB alike
            f.write(chunk)
            h256.update(chunk)
            h512.update(chunk)
    (d / "SHA256SUMS").write_text(f"{h256.hexdigest()}  {name}\n")
    (d / "SHA512SUMS").write_text(f"{h512.hexdigest()}  {name}\n")
    (d / "manifest.json").write_text(json.dumps({
        "build_id": build_id, "build_time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "kubernetes": {"version": "1.36.0", "minor": "1.36"}, "base_os": {"distro": "debian", "release": "12"},
        "arch": "amd64", "images": {"baremetal": name}, "packages": [], "artifacts": []}))
    return d


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
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    conn = openstack.connect()
    env = dict(os.environ)
    bindir = Path(sys.executable).parent
    root = Path(tempfile.mkdtemp(prefix="nf-bench-publish-"))
    nf_times, os_times, rss = [], [], []
    try:
        for _ in range(args.rounds):
            d = make_build(root, args.size_mib)
            image = next(d.glob("*.raw"))
            seconds, peak = timed([sys.executable, "-m", "nodeforge.cli", "image", "publish", str(d)], env)
            nf_times.append(seconds)
            rss.append(peak)
            for img in g.list_images(conn, nodeforge_build_id=d.name):
                g.delete_image(conn, img["id"])
            name = f"nf-bench-openstack-{uuid.uuid4().hex[:8]}"
            seconds, _ = timed([str(bindir / "openstack"), "image", "create", "--file", str(image),
                                "--disk-format", "raw", "--container-format", "bare", name], env)
            os_times.append(seconds)
            for img in g.list_images(conn, name=name):
                g.delete_image(conn, img["id"])
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = args.size_mib
    nf, base = min(nf_times), min(os_times)
    print(f"image: {mib} MiB, rounds: {args.rounds}")
    print(f"nodeforge image publish:      best {nf:6.2f} s  {mib / nf:7.1f} MiB/s  (all: {', '.join(f'{t:.2f}' for t in nf_times)})")
    print(f"openstack image create --file: best {base:6.2f} s  {mib / base:7.1f} MiB/s  (all: {', '.join(f'{t:.2f}' for t in os_times)})")
    print(f"throughput ratio nodeforge/openstack: {base / nf:.2f}x (goal >= 0.9)")
    print(f"nodeforge peak RSS: {max(rss) / 1e6:.0f} MB (goal < 150 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
