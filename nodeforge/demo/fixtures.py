"""Demo upstream for image builds: fixture artifacts shaped like the real ones.

The release tests' :class:`FixtureUpstream` publishes random bytes; an image
build unpacks and runs what it installs, so this subclass publishes the same
layout (markers, ``.sha256``/``.sha256sum`` files, via the same code) with
small stand-ins of the right shape: shell scripts that answer ``--version``
like the real binary, and tarballs with the real archive layout
(``crictl``; containerd's ``bin/``; the CNI plugins at the top level). The fake
``containerd`` stays running and tells systemd it is ready, so the boot test
can see the service active. Every stand-in is deterministic (fixed mtimes).

``python -m nodeforge.demo.fixtures serve DIR`` writes the demo upstream
and a lockfile pinning it into DIR, and serves it like the local mirror.

Fixture artifacts are stand-ins: the lockfile pinning them is written beside
them (never ``manifests/versions.yaml``), and everything built from them is
labelled as a fixture (see ``nodeforge.pipeline``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tarfile
from pathlib import Path

from nodeforge.demo.upstream_mirror import FixtureUpstream, MirrorServer
from nodeforge.pins.lockfile import Arch, Component
from nodeforge.pins.sources import SourceName

KUBERNETES = {"1.34": "1.34.3", "1.35": "1.35.1", "1.36": "1.36.0"}
COMPANIONS = {Component.CNI_PLUGINS: "1.9.1", Component.CONTAINERD: "2.3.4", Component.RUNC: "1.4.3"}
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "bandwidth", "firewall")
MTIME = 1700000000


def _script(body: str) -> bytes:
    return ("#!/bin/sh\n# nodeforge fixture stand-in (not the real binary)\n" + body).encode()


def _version_script(version_line: str, default: str = "exit 0\n") -> bytes:
    return _script('case "$1" in\n'
                   f'  --version|-v|version) echo "{version_line}"; exit 0;;\n'
                   'esac\n' + default)


CONTAINERD_MAIN = (
    "exec python3 -c '\n"
    "import os, socket, time\n"
    "addr = os.environ.get(\"NOTIFY_SOCKET\")\n"
    "if addr:\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "    s.sendto(b\"READY=1\", \"\\0\" + addr[1:] if addr.startswith(\"@\") else addr)\n"
    "while True:\n"
    "    time.sleep(3600)\n"
    "'\n")


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    # gzip header mtime fixed too: byte-identical archives on every run.
    import gzip
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=MTIME) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o755, MTIME
                info.uname = info.gname = "root"
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def artifact_bytes(component: Component, version: str, arch: Arch) -> bytes:
    if component in (Component.KUBELET, Component.KUBECTL):
        line = f"Kubernetes v{version}" if component is Component.KUBELET else f"Client Version: v{version}"
        return _version_script(line, "exit 1\n")
    if component is Component.KUBEADM:
        return _script(f'[ "$1" = version ] && {{ [ "$2" = "-o" ] && echo "v{version}" || '
                       f'echo "kubeadm version: &version.Info{{GitVersion:\\"v{version}\\"}}"; exit 0; }}\nexit 1\n')
    if component is Component.RUNC:
        return _version_script(f"runc version {version}")
    if component is Component.CRICTL:
        return _tar({"crictl": _version_script(f"crictl version v{version}")})
    if component is Component.CONTAINERD:
        line = f"containerd github.com/containerd/containerd/v2 v{version} fixture"
        return _tar({"bin/containerd": _version_script(line, CONTAINERD_MAIN),
                     "bin/containerd-shim-runc-v2": _version_script(line),
                     "bin/ctr": _version_script(f"ctr github.com/containerd/containerd/v2 v{version}")})
    if component is Component.CNI_PLUGINS:
        return _tar({f"./{p}": _version_script(f"CNI {p} plugin v{version}") for p in CNI_PLUGINS})
    raise ValueError(component)


class DemoUpstream(FixtureUpstream):
    """:class:`FixtureUpstream` with realistically shaped stand-in artifacts."""

    def _write_artifact(self, component, version, arch, size):
        data = artifact_bytes(component, version, arch)
        target = self.path(component, version, arch)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        self.digests[(component, version, arch)] = digest
        return digest


def add_releases(up: FixtureUpstream, kubernetes: dict[str, str]) -> FixtureUpstream:
    """Publish on ``up`` each minor's Kubernetes patch (``kubernetes``: minor ->
    patch) with the crictl of that minor, and the :data:`COMPANIONS` releases."""
    for minor, version in kubernetes.items():
        up.add_kubernetes(version)
        up.add(Component.CRICTL, f"{minor}.0")
    for comp, version in COMPANIONS.items():
        up.add(comp, version)
    return up


def make_demo(root: Path, kubernetes: dict[str, str] | None = None,
              scope: str | None = None) -> tuple[DemoUpstream, Path]:
    """Write the demo upstream under ``root/upstream`` and its fixture lockfile
    ``root/manifests/versions.yaml`` (``kubernetes``: minor -> patch, default
    :data:`KUBERNETES`; ``scope``: the lockfile's ownership scope, else derived
    from its path)."""
    root = Path(root)
    kubernetes = dict(kubernetes or KUBERNETES)
    up = add_releases(DemoUpstream(root / "upstream"), kubernetes)
    lock = root / "manifests" / "versions.yaml"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(up.lockfile_text(kubernetes, COMPANIONS, scope))
    return up, lock


def publish_patch(up: DemoUpstream, version: str) -> None:
    """A new patch release appears upstream: its binaries, checksums, then the markers."""
    up.add_kubernetes(version)


def write_sources(lock: Path, server: MirrorServer) -> Path:
    path = lock.parent / "sources.yaml"
    path.write_text("mirrors:\n" + "".join(f"  {s.value}: {server.base_url(s)}\n" for s in SourceName))
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeforge.demo.fixtures")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="write the demo upstream and lockfile into DIR and serve it")
    serve.add_argument("root", type=Path)
    serve.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    up, lock = make_demo(args.root)
    with MirrorServer(up.root, args.port) as server:
        write_sources(lock, server)
        print(f"lockfile: {lock} (sources.yaml beside it points at {server.url})", flush=True)
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
