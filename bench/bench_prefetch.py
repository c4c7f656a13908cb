"""Benchmark: `nodeforge release prefetch` vs `curl` + `sha256sum` on 1 GiB of artifacts.

Generates one Kubernetes minor's worth of fixture artifacts for amd64 and
arm64 (1 GiB in all, sizes in realistic proportions) in a temporary
directory, serves it with the local upstream mirror, then times:

* nodeforge: ``python -m nodeforge.cli release prefetch`` into an empty cache
  (process start-up, download, verification and cache commit included);
* baseline: one ``curl`` invocation downloading every file (sequential, one
  kept-alive connection), then one ``sha256sum`` over them, compared with
  the expected digests.

Each side runs ROUNDS times from a cold download target (the served files stay
in the page cache for both), the order alternating round by round (nodeforge
first in odd rounds, the baseline first in even ones), with dirty pages
flushed (``sync``, not timed) before every timed run so neither side pays for
the other's writeback. Prints each side's min and median and the median of the
per-round ratios nodeforge/baseline: <= 1.0 means prefetch is no slower (the
goal); the script exits 1 when it is slower. The temporary directory is
removed at the end.

Run: .venv/bin/python bench/bench_prefetch.py [--total-mib 1024] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodeforge.devcloud.upstream_mirror import FixtureUpstream, MirrorServer
from nodeforge.imagebuild import lockfile
from nodeforge.imagebuild.lockfile import Component
from nodeforge.imagebuild.sources import Sources

# Relative sizes, roughly those of the real artifacts.
WEIGHTS = {
    Component.KUBELET: 128, Component.KUBEADM: 96, Component.KUBECTL: 80, Component.CONTAINERD: 64,
    Component.CNI_PLUGINS: 64, Component.CRICTL: 40, Component.RUNC: 40,
}
MINOR, K8S = "1.36", "1.36.0"
COMPANIONS = {Component.CNI_PLUGINS: "1.9.1", Component.CONTAINERD: "2.3.4", Component.RUNC: "1.4.3"}


def generate(root: Path, total: int) -> Path:
    up = FixtureUpstream(root / "upstream")
    per_arch = total // len(up.arches)
    unit = per_arch // sum(WEIGHTS.values())
    versions = {**{c: K8S for c in lockfile.KUBERNETES_BINARIES}, Component.CRICTL: f"{MINOR}.0", **COMPANIONS}
    for comp, version in versions.items():
        up.add(comp, version, size=unit * WEIGHTS[comp])
    up.set_marker(MINOR, f"v{K8S}")
    up.set_marker(None, f"v{K8S}")
    lock = root / "manifests" / "versions.yaml"
    lock.parent.mkdir()
    lock.write_text(up.lockfile_text({MINOR: K8S}, COMPANIONS))
    return lock


def time_nodeforge(lock: Path, cache: Path, env: dict) -> float:
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nodeforge.cli", "release", "prefetch", "--lockfile", str(lock),
                    "--cache-dir", str(cache), "-o", "json"], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def time_curl(urls: list[str], digests: list[str], out: Path) -> tuple[float, float]:
    """(download seconds, hash seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    files = [out / f"{i:02d}" for i in range(len(urls))]
    args = ["curl", "-sSf"]
    for url, f in zip(urls, files):
        args += ["-o", str(f), url]
    start = time.perf_counter()
    subprocess.run(args, check=True)
    downloaded = time.perf_counter()
    sums = subprocess.run(["sha256sum", *map(str, files)], check=True, capture_output=True, text=True).stdout
    hashed = time.perf_counter()
    got = [line.split()[0] for line in sums.splitlines()]
    if got != digests:
        raise SystemExit("baseline: sha256sum disagrees with the published digests")
    return downloaded - start, hashed - downloaded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tool in ("curl", "sha256sum"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found (run 'make setup')")
    tmp = Path(tempfile.mkdtemp(prefix="nodeforge-bench-"))
    try:
        t0 = time.perf_counter()
        lock_path = generate(tmp, args.total_mib << 20)
        lock = lockfile.load(lock_path)
        with MirrorServer(tmp / "upstream") as server:
            env = dict(os.environ, **server.mirror_env())
            sources = Sources.load(None, env=env)
            artifacts = lock.artifacts()
            urls = [sources.url_for(a) for a in artifacts]
            digests = [a.sha256 for a in artifacts]
            total = sum((tmp / "upstream" / u[len(server.url) + 1:]).stat().st_size for u in urls)
            print(f"fixture set: {len(urls)} artifacts, {total / (1 << 20):.0f} MiB "
                  f"(generated in {time.perf_counter() - t0:.1f}s); mirror at {server.url}")
            ours, theirs = [], []
            for r in range(args.rounds):
                nodeforge_first = r % 2 == 0
                for side in ("nodeforge", "baseline") if nodeforge_first else ("baseline", "nodeforge"):
                    os.sync()       # the previous run's downloads written back before the next is timed
                    if side == "nodeforge":
                        ours.append(time_nodeforge(lock_path, tmp / "cache", env))
                    else:
                        download, hashing = time_curl(urls, digests, tmp / "curl")
                        theirs.append(download + hashing)
                print(f"  round {r + 1} ({'nodeforge' if nodeforge_first else 'curl + sha256sum'} first): "
                      f"nodeforge prefetch {ours[-1]:.2f}s   curl + sha256sum {theirs[-1]:.2f}s "
                      f"(curl {download:.2f}s, sha256sum {hashing:.2f}s)", flush=True)
        mib = total / (1 << 20)
        med_ours, med_theirs = statistics.median(ours), statistics.median(theirs)
        ratio = statistics.median(o / t for o, t in zip(ours, theirs))
        print(f"nodeforge release prefetch: min {min(ours):.2f}s, median {med_ours:.2f}s "
              f"({mib / med_ours:.0f} MiB/s at the median, downloaded + verified)")
        print(f"curl + sha256sum:           min {min(theirs):.2f}s, median {med_theirs:.2f}s "
              f"({mib / med_theirs:.0f} MiB/s at the median)")
        print(f"ratio nodeforge / (curl + sha256sum): {ratio:.2f} median of per-round ratios"
              f"  ({'no slower' if ratio <= 1.0 else 'SLOWER'} than the pair; goal <= 1.0: "
              f"{'met' if ratio <= 1.0 else 'NOT met'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
