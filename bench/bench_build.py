"""Benchmark: image build times (cold both variants, warm rebuild after a patch bump).

Serves the demo upstream (tests/demo) with the local mirror and builds
Kubernetes 1.36 three ways, each into a fresh output directory:

1. **cold**: empty diskimage-builder cache (debootstrap tarball, apt archives),
   empty package-base cache and empty artifact cache; both variants. Its
   diskimage-builder stages (package base + root filesystem: one root
   filesystem, the least a single-variant diskimage-builder build of the same
   content costs -- it would add its own disk stage on top) are the
   single-variant reference: goal both/one <= 1.25x.
2. **warm after a patch bump**: the demo upstream publishes 1.36.1, the
   lockfile moves to it (kubelet/kubeadm/kubectl version and checksums change,
   nothing else), and the build reuses the caches of run 1 -- above all the
   package base, which the run must report as reused (the bench fails
   otherwise): goal warm/cold <= 0.5x.

Prints the stage times of each run, whether the package base was reused, and
both ratios (total wall-clock seconds of each build, nothing left out). Needs root (or
password-less sudo) and the Debian mirror, like `nodeforge image build`;
takes 10-20 minutes on 2 cores. Temporary directories are removed at the end.

Run: .venv/bin/python bench/bench_build.py [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeforge.devcloud.upstream_mirror import MirrorServer  # noqa: E402
from nodeforge.imagebuild import build  # noqa: E402
from tests.demo.fixture_artifacts import COMPANIONS, KUBERNETES, make_demo, write_sources  # noqa: E402


def _run(lock: Path, root: Path, name: str, dib_cache: Path, cache: Path) -> build.BuildResult:
    return build.build(build.BuildRequest(
        minor="1.36", lockfile_path=lock, out=root / "out" / name, cache_dir=cache, dib_cache=dib_cache,
        work_dir=root / "work", stream=lambda line: print(f"  {name}: {line}", flush=True)))


def _show(name: str, seconds: dict[str, float]) -> None:
    print(f"{name:>6}: " + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nodeforge-bench-build.", dir="/var/tmp"))
    try:
        up, lock = make_demo(root / "demo")
        dib_cache, cache = root / "dib-cache", root / "artifacts"
        with MirrorServer(up.root) as server:
            write_sources(lock, server)
            cold_result = _run(lock, root, "cold", dib_cache, cache)
            up.add_kubernetes("1.36.1")
            lock.write_text(up.lockfile_text({**KUBERNETES, "1.36": "1.36.1"}, COMPANIONS))
            warm_result = _run(lock, root, "warm", dib_cache, cache)
        cold, warm = cold_result.seconds, warm_result.seconds
        _show("cold", cold)
        _show("warm", warm)
        for name, result in (("cold", cold_result), ("warm", warm_result)):
            print(f"{name:>6}: Kubernetes {result.manifest['kubernetes']['version']}, package base "
                  f"{result.package_base['key'][:12]} {'reused' if result.package_base['reused'] else 'built'}")
        if cold_result.package_base["reused"] or not warm_result.package_base["reused"]:
            print("error: the cold run must build the package base and the warm run reuse it", file=sys.stderr)
            return 1
        dib = cold["package_base"] + cold["rootfs"]
        print(f"both variants / one root filesystem build (cold): {cold['total'] / dib:.2f}x "
              "(goal <= 1.25x)")
        print(f"warm rebuild after a patch bump / cold build:     {warm['total'] / cold['total']:.2f}x "
              "(goal <= 0.5x)")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
