"""Benchmark: `nodeforge release prefetch` vs `curl` + `sha256sum` on 1 GiB of artifacts.

Generates one Kubernetes minor's worth of fixture artifacts for amd64 and
arm64 (1 GiB in all, sizes in realistic proportions) in a temporary
directory, serves it with the local upstream mirror, then times:

* nodeforge: ``python -m nodeforge.cli release prefetch`` into an empty cache
  (process start-up, download, verification and cache commit included);
* baseline: one ``curl`` invocation downloading every file (sequential, one
  kept-alive connection), then one ``sha256sum`` over them, compared with
  the expected digests;
* secondary (printed, not the goal's yardstick): the same ``curl``, then one
  ``openssl dgst -sha256 -r`` over the files. coreutils' ``sha256sum`` links
  no crypto library here and is several times slower than OpenSSL (which
  nodeforge's hashlib uses), so this is the stronger same-machine pair.

Each side runs ROUNDS times from a cold download target (the served files stay
in the page cache for all), the order alternating round by round (nodeforge,
baseline, secondary in odd rounds; the reverse in even ones), with dirty pages
flushed (``sync``, not timed) before every timed run so no side pays for
another's writeback. Prints each side's min and median and the median of the
per-round ratios nodeforge/baseline: <= 1.0 means prefetch is no slower (the
goal; the script exits 1 when it is slower), and the same ratio against the
secondary pair. The temporary directory is removed at the end.

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


def time_curl(urls: list[str], digests: list[str], out: Path, hasher: list[str]) -> tuple[float, float]:
    """(download seconds, hash seconds); ``hasher`` prints ``<hex> <name>`` lines for the files."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    files = [out / f"{i:02d}" for i in range(len(urls))]
    args = ["curl", "-sSf"]
    for url, f in zip(urls, files):
        args += ["-o", str(f), url]
    start = time.perf_counter()
    subprocess.run(args, check=True)
    downloaded = time.perf_counter()
    sums = subprocess.run([*hasher, *map(str, files)], check=True, capture_output=True, text=True).stdout
    hashed = time.perf_counter()
    got = [line.split()[0] for line in sums.splitlines()]
    if got != digests:
        raise SystemExit(f"baseline: {hasher[0]} disagrees with the published digests")
    return downloaded - start, hashed - downloaded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tool in ("curl", "sha256sum", "openssl"):
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
            hashers = {"baseline": ["sha256sum"], "secondary": ["openssl", "dgst", "-sha256", "-r"]}
            times: dict[str, list[float]] = {"nodeforge": [], "baseline": [], "secondary": []}
            for r in range(args.rounds):
                order = list(times) if r % 2 == 0 else list(times)[::-1]
                split = {}
                for side in order:
                    os.sync()       # the previous run's downloads written back before the next is timed
                    if side == "nodeforge":
                        times[side].append(time_nodeforge(lock_path, tmp / "cache", env))
                    else:
                        split[side] = time_curl(urls, digests, tmp / "curl", hashers[side])
                        times[side].append(sum(split[side]))
                print(f"  round {r + 1} ({order[0]} first): nodeforge prefetch {times['nodeforge'][-1]:.2f}s   "
                      f"curl + sha256sum {times['baseline'][-1]:.2f}s (curl {split['baseline'][0]:.2f}s, "
                      f"sha256sum {split['baseline'][1]:.2f}s)   curl + openssl {times['secondary'][-1]:.2f}s "
                      f"(curl {split['secondary'][0]:.2f}s, openssl {split['secondary'][1]:.2f}s)", flush=True)
        mib = total / (1 << 20)
        ours = times["nodeforge"]
        labels = {"nodeforge": "nodeforge release prefetch:", "baseline": "curl + sha256sum:",
                  "secondary": "curl + openssl dgst -sha256:"}
        for side, label in labels.items():
            med = statistics.median(times[side])
            print(f"{label:29} min {min(times[side]):.2f}s, median {med:.2f}s ({mib / med:.0f} MiB/s at the median"
                  + (", downloaded + verified)" if side == "nodeforge" else ")"))
        ratio = statistics.median(o / t for o, t in zip(ours, times["baseline"]))
        ratio2 = statistics.median(o / t for o, t in zip(ours, times["secondary"]))
        print(f"ratio nodeforge / (curl + sha256sum): {ratio:.2f} median of per-round ratios"
              f"  ({'no slower' if ratio <= 1.0 else 'SLOWER'} than the pair; goal <= 1.0: "
              f"{'met' if ratio <= 1.0 else 'NOT met'})")
        print(f"ratio nodeforge / (curl + openssl dgst -sha256): {ratio2:.2f} median of per-round ratios"
              f"  ({'no slower' if ratio2 <= 1.0 else 'SLOWER'} than the stronger pair; no goal)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
