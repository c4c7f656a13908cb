"""A local stand-in for the upstream release servers, for tests and benchmarks.

:class:`FixtureUpstream` writes fixture artifacts (small fake binaries) into a
directory laid out like the real servers -- ``<root>/<source>/<upstream path>``
with the Kubernetes ``stable*.txt`` markers and each project's published
checksum files in its own format -- and records their real sha256.

:class:`MirrorServer` serves such a directory (or a ``release prefetch``
bundle) over HTTP on 127.0.0.1, with keep-alive and ``sendfile``. The base URL
of source ``s`` is ``<server.url>/<s>``: that is the only thing nodeforge is
told, so the production download path is exactly the one used upstream.
Faults can be injected per path for tests: HTTP errors, corrupted bytes, a
connection dropped mid-body, or a stall.

``python -m nodeforge.demo.upstream_mirror serve DIR [--port N]`` serves a
directory from the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import email.utils
import enum
import fnmatch
import hashlib
import http.server
import random
import socket
import threading
import time
from pathlib import Path

from nodeforge.pins.lockfile import Arch, Component, KUBERNETES_BINARIES, Version, load as load_lockfile
from nodeforge.pins.sources import SOURCE_OF, SourceName, checksum_relpath, relpath

ARCHES = (Arch.AMD64, Arch.ARM64)


class FixtureUpstream:
    """Writes fixture releases under ``root`` and remembers their digests."""

    def __init__(self, root: Path, *, size: int = 4096, arches=ARCHES):
        self.root = Path(root)
        self.size = size
        self.arches = tuple(arches)
        self.digests: dict[tuple[Component, str, Arch], str] = {}

    # -- artifacts ----------------------------------------------------------------
    def path(self, component: Component, version: str, arch: Arch) -> Path:
        return self.root / SOURCE_OF[component].value / relpath(component, version, arch)

    def _write_artifact(self, component: Component, version: str, arch: Arch, size: int | None) -> str:
        target = self.path(component, version, arch)
        target.parent.mkdir(parents=True, exist_ok=True)
        header = f"nodeforge fixture {component.value} {version} {arch.value}\n".encode()
        size = self.size if size is None else size
        rng = random.Random(f"{component.value}/{version}/{arch.value}")
        h = hashlib.sha256(header)
        with open(target, "wb") as fh:
            fh.write(header)
            left = max(0, size - len(header))
            while left:
                block = rng.randbytes(min(left, 8 << 20))
                fh.write(block)
                h.update(block)
                left -= len(block)
        digest = h.hexdigest()
        self.digests[(component, version, arch)] = digest
        return digest

    def add(self, component: Component, version: str, *, size: int | None = None) -> dict[Arch, str]:
        """Publish ``component`` at ``version`` for every arch, with its checksum files."""
        out = {arch: self._write_artifact(component, version, arch, size) for arch in self.arches}
        self._publish_checksums(component, version)
        return out

    def _publish_checksums(self, component: Component, version: str) -> None:
        source = SOURCE_OF[component]
        if component == Component.RUNC:  # one runc.sha256sum file for all arches
            lines = "".join(f"{self.digests[(component, version, a)]}  runc.{a.value}\n" for a in self.arches)
            self._write_text(source, checksum_relpath(component, version, self.arches[0]), lines)
            return
        for arch in self.arches:
            digest = self.digests[(component, version, arch)]
            name = relpath(component, version, arch).rsplit("/", 1)[-1]
            # Kubernetes and crictl publish a bare digest; the others sha256sum lines.
            text = f"{digest}\n" if source in (SourceName.KUBERNETES, SourceName.CRICTL) else f"{digest}  {name}\n"
            self._write_text(source, checksum_relpath(component, version, arch), text)

    def publish_checksum(self, component: Component, version: str, arch: Arch, digest: str) -> None:
        """Overwrite the published checksum (e.g. with a wrong one, for tests)."""
        real = self.digests[(component, version, arch)]
        self.digests[(component, version, arch)] = digest
        try:
            self._publish_checksums(component, version)
        finally:
            self.digests[(component, version, arch)] = real

    def add_kubernetes(self, version: str, *, size: int | None = None, marker: bool = True) -> None:
        """Publish kubelet/kubeadm/kubectl ``version``; move the markers if it is newer and stable."""
        for comp in KUBERNETES_BINARIES:
            self.add(comp, version, size=size)
        v = Version.parse(version)
        if marker and not v.is_prerelease:
            current = self.marker(v.minor_key)
            if current is None or Version.parse(current) < v:
                self.set_marker(v.minor_key, f"v{v}")
            latest = self.marker(None)
            if latest is None or Version.parse(latest) < v:
                self.set_marker(None, f"v{v}")

    def lockfile_text(self, kubernetes: dict[str, str], companions: dict[Component, str],
                      scope: str | None = None) -> str:
        """A lockfile (with comments) pinning this upstream's digests.

        ``kubernetes`` maps minor to patch version; crictl is ``<minor>.0``;
        ``companions`` gives the CNI plugins, containerd and runc versions;
        ``scope`` the ownership scope (``scope:``; None: derived from the path)."""

        hardening = load_lockfile().hardening   # the repository's, which the elements' profile matches

        def digests(comp, version, indent):
            return "".join(f"{' ' * indent}{a.value}: {self.digests[(comp, version, a)]}\n" for a in self.arches)

        text = ("# fixture lockfile\nschema_version: 1\n" + (f"scope: {scope}\n" if scope else "") +
                f"architectures: [{', '.join(a.value for a in self.arches)}]\n"
                "base_os:\n  distro: debian\n  release: \"12\"\n"
                f"hardening:\n  profile: {hardening.profile}\n  version: \"{hardening.version}\"\n"
                "kubernetes:  # supported minors\n")
        for minor, version in kubernetes.items():
            text += f'  "{minor}":\n    version: {version}  # keep me\n    pause_image: registry.k8s.io/pause:3.10.1\n'
            text += "    binaries:\n"
            for comp in KUBERNETES_BINARIES:
                text += f"      {comp.value}:\n" + digests(comp, version, 8)
            text += "    components:\n"
            for comp, cversion in {Component.CRICTL: f"{minor}.0", **companions}.items():
                text += f"      {comp.value}:  # {comp.value} comment\n        version: {cversion}\n        sha256:\n"
                text += digests(comp, cversion, 10)
        return text

    # -- markers ------------------------------------------------------------------
    def _marker_path(self, minor: str | None) -> str:
        return f"release/stable-{minor}.txt" if minor else "release/stable.txt"

    def set_marker(self, minor: str | None, text: str) -> None:
        self._write_text(SourceName.KUBERNETES, self._marker_path(minor), text + "\n")

    def marker(self, minor: str | None) -> str | None:
        p = self.root / SourceName.KUBERNETES.value / self._marker_path(minor)
        return p.read_text().strip() if p.exists() else None

    def _write_text(self, source: SourceName, rel: str, text: str) -> None:
        target = self.root / source.value / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


class FaultKind(enum.Enum):
    STATUS = "status"      # answer with an HTTP error status
    CORRUPT = "corrupt"    # flip bytes in the body (same length)
    DROP = "drop"          # send half the body, then close the connection
    STALL = "stall"        # send half the body, then hang until the server stops


@dataclasses.dataclass
class Fault:
    pattern: str           # fnmatch pattern on the request path, e.g. "*/kubelet"
    kind: FaultKind
    times: int | None = 1  # how many requests it affects (None: all)
    status: int = 500

    def take(self, path: str) -> bool:
        if not fnmatch.fnmatch(path, self.pattern) or self.times == 0:
            return False
        if self.times is not None:
            self.times -= 1
        return True


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Injected faults (dropped connections, clients that give up) end
        # requests on purpose; a traceback on stderr would only be noise.
        pass


class MirrorServer:
    """Threaded HTTP server for a mirror directory on 127.0.0.1."""

    def __init__(self, root: Path, port: int = 0):
        self.root = Path(root).resolve()
        self.faults: list[Fault] = []
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._httpd = _QuietServer(("127.0.0.1", port), _handler(self))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def base_url(self, source: SourceName | str) -> str:
        return f"{self.url}/{SourceName(source).value}"

    def mirror_env(self) -> dict[str, str]:
        """``NODEFORGE_MIRROR_*`` settings pointing every source at this server."""
        return {s.env_var: self.base_url(s) for s in SourceName}

    def inject(self, pattern: str, kind: FaultKind, times: int | None = 1, status: int = 500) -> Fault:
        fault = Fault(pattern, kind, times, status)
        with self._lock:
            self.faults.append(fault)
        return fault

    def count(self, pattern: str) -> int:
        with self._lock:
            return sum(1 for p in self.requests if fnmatch.fnmatch(p, pattern))

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            self.requests.append(path)
            for fault in self.faults:
                if fault.take(path):
                    return fault
        return None

    def start(self) -> "MirrorServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="upstream-mirror",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def wait(self) -> None:
        """Serve until interrupted (Ctrl-C); for command-line use."""
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

    def __enter__(self) -> "MirrorServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _handler(server: MirrorServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "nodeforge-upstream-mirror"

        def log_message(self, fmt, *args):  # quiet; requests are recorded instead
            pass

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            fault = server._take_fault(path)
            target = (server.root / path.lstrip("/")).resolve()
            if server.root not in target.parents or not target.is_file():
                return self._plain(404, "not found\n")
            if fault and fault.kind is FaultKind.STATUS:
                return self._plain(fault.status, f"injected HTTP {fault.status}\n")
            st = target.stat()
            size = st.st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            # As the real release servers do: when the file was published (the pipeline's patch latency).
            self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(target, "rb") as fh:
                if fault is None:
                    self.connection.sendfile(fh)
                elif fault.kind is FaultKind.CORRUPT:
                    data = bytearray(fh.read())
                    for i in range(0, len(data), max(1, len(data) // 7)):
                        data[i] ^= 0xFF
                    self.wfile.write(bytes(data))
                else:  # DROP or STALL: half the body first
                    self.wfile.write(fh.read(max(1, size // 2)))
                    self.wfile.flush()
                    if fault.kind is FaultKind.STALL:
                        server._release.wait()
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        def do_HEAD(self):
            self.do_GET()

        def _plain(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeforge.demo.upstream_mirror")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve a mirror directory (or a prefetch bundle) on 127.0.0.1")
    serve.add_argument("root", type=Path)
    serve.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with MirrorServer(args.root, args.port) as server:
        print(f"serving {args.root} at {server.url}; per-source base URL: {server.url}/<source>", flush=True)
        for name, value in server.mirror_env().items():
            print(f"  {name}={value}", flush=True)
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
