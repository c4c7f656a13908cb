"""A local signed apt repository: the Debian mirror's stand-in for tests.

Its own throwaway GnuPG key (a temporary ``GNUPGHOME``), the layout of a
Debian suite (``dists/<suite>/{InRelease,main/binary-amd64/Packages.xz}`` and
``pool/``), tiny real ``.deb`` files built with ``dpkg-deb --build``, served by
a ``http.server`` thread on loopback under two bases like the real archive:
``/debian`` (the release and ``-updates``) and ``/debian-security``.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import hashlib
import http.server
import lzma
import shutil
import subprocess
import threading
from pathlib import Path

ARCH = "amd64"
RELEASE = "nftest"


def _gpg(home: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], input=input, capture_output=True)
    if args[0] in ("--quick-gen-key", "--clearsign"):
        # gpg starts a gpg-agent for secret-key operations and leaves it running: stop it, so a
        # test run leaves no daemon behind (the next signing starts a new one).
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gpg {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


class SigningKey:
    """A throwaway OpenPGP signing key and a keyring file (for gpgv) holding its public part."""

    def __init__(self, root: Path, uid: str):
        self.home = root / "gnupg"
        self.home.mkdir(parents=True, mode=0o700)
        _gpg(self.home, "--quick-gen-key", uid, "ed25519", "sign", "never")
        self.keyring = root / "keyring.gpg"
        self.keyring.write_bytes(_gpg(self.home, "--export"))

    def clearsign(self, text: bytes) -> bytes:
        return _gpg(self.home, "--clearsign", "--digest-algo", "SHA256", input=text)


class AptRepo:
    """Packages per suite; :meth:`publish` writes every suite's indexes and signs them."""

    def __init__(self, root: Path, key: SigningKey, release: str = RELEASE):
        self.root = Path(root)
        self.key = key
        self.release = release
        self.archives = {release: "debian", f"{release}-updates": "debian",
                         f"{release}-security": "debian-security"}
        self.suites: dict[str, list[dict]] = {s: [] for s in self.archives}
        self.valid_until: datetime.datetime | None = None
        self.date: datetime.datetime | None = None   # the InRelease Date (default: now)
        self.server: http.server.ThreadingHTTPServer | None = None

    # -- content -------------------------------------------------------------------------
    def add(self, suite: str, name: str, version: str, *, depends: str = "", priority: str = "optional",
            arch: str = ARCH) -> Path:
        """Build a real .deb and put it into ``suite``'s pool (not published until :meth:`publish`)."""
        archive = self.root / self.archives[suite]
        build = self.root / "build" / f"{name}_{version}_{arch}"
        (build / "DEBIAN").mkdir(parents=True)
        (build / "usr/share/doc" / name).mkdir(parents=True)
        (build / "usr/share/doc" / name / "README").write_text(f"{name} {version}\n")
        control = [f"Package: {name}", f"Version: {version}", f"Architecture: {arch}",
                   "Maintainer: nodeforge tests <tests@invalid>", f"Priority: {priority}",
                   f"Description: nodeforge test package {name}"]
        if depends:
            control.insert(4, f"Depends: {depends}")
        (build / "DEBIAN/control").write_text("\n".join(control) + "\n")
        pooldir = ("pool/updates/main" if suite.endswith("-security") else "pool/main") + f"/{name[0]}/{name}"
        deb = archive / pooldir / f"{name}_{version.split(':')[-1]}_{arch}.deb"
        deb.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(build), str(deb)], check=True,
                       capture_output=True)
        shutil.rmtree(build)
        data = deb.read_bytes()
        self.suites[suite].append({"Package": name, "Version": version, "Architecture": arch,
                                   "Priority": priority, "Depends": depends, "Filename": f"{pooldir}/{deb.name}",
                                   "Size": str(len(data)), "SHA256": hashlib.sha256(data).hexdigest(),
                                   "Description": f"nodeforge test package {name}"})
        return deb

    def publish(self) -> None:
        for suite, pkgs in self.suites.items():
            dists = self.root / self.archives[suite] / "dists" / suite
            bindir = dists / "main" / f"binary-{ARCH}"
            bindir.mkdir(parents=True, exist_ok=True)
            text = "\n".join("".join(f"{k}: {v}\n" for k, v in p.items() if v) for p in pkgs).encode()
            xz = lzma.compress(text)
            (bindir / "Packages").write_bytes(text)
            (bindir / "Packages.xz").write_bytes(xz)
            now = self.date or datetime.datetime.now(datetime.timezone.utc)
            fields = ["Origin: nodeforge-tests", "Label: nodeforge-tests", f"Suite: {suite}", f"Codename: {suite}",
                      f"Date: {email.utils.format_datetime(now, usegmt=True)}"]
            if self.valid_until is not None:
                fields.append(f"Valid-Until: {email.utils.format_datetime(self.valid_until, usegmt=True)}")
            fields += [f"Architectures: {ARCH}", "Components: main", "SHA256:"]
            for rel, data in (("main/binary-amd64/Packages", text), ("main/binary-amd64/Packages.xz", xz)):
                fields.append(f" {hashlib.sha256(data).hexdigest()} {len(data):8d} {rel}")
            release = ("\n".join(fields) + "\n").encode()
            (dists / "Release").write_bytes(release)
            (dists / "InRelease").write_bytes(self.key.clearsign(release))

    def deb_path(self, suite: str, name: str) -> Path:
        entry = next(p for p in self.suites[suite] if p["Package"] == name)
        return self.root / self.archives[suite] / entry["Filename"]

    def inrelease(self, suite: str) -> Path:
        return self.root / self.archives[suite] / "dists" / suite / "InRelease"

    def packages_xz(self, suite: str) -> Path:
        return self.root / self.archives[suite] / "dists" / suite / "main" / f"binary-{ARCH}" / "Packages.xz"

    # -- serving --------------------------------------------------------------------------
    def start(self) -> "AptRepo":
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self) -> dict[str, str]:
        return {"NODEFORGE_DEBIAN_MIRROR": f"{self.url}/debian",
                "NODEFORGE_DEBIAN_SECURITY_MIRROR": f"{self.url}/debian-security",
                "NODEFORGE_DEBIAN_KEYRING": str(self.key.keyring)}

    def mirrors(self) -> dict[str, str]:
        return {"main": f"{self.url}/debian", "security": f"{self.url}/debian-security"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def standard_repo(root: Path, key: SigningKey) -> AptRepo:
    """nf-base (Priority required), nf-app depending on nf-lib, an unrelated nf-extra; published."""
    repo = AptRepo(root, key)
    repo.add(RELEASE, "nf-base", "1.0-1", priority="required")
    repo.add(RELEASE, "nf-lib", "2.0-1")
    repo.add(RELEASE, "nf-app", "1.0-1", depends="nf-lib (>= 2.0)")
    repo.add(RELEASE, "nf-extra", "0.1-1")
    repo.publish()
    return repo


def lock_template(path: Path):
    from nodeforge.oslock.lock import PackageLock, Resolve

    return PackageLock(release=RELEASE, architecture=ARCH,
                       suites={RELEASE: "main", f"{RELEASE}-updates": "main", f"{RELEASE}-security": "security"},
                       resolve=Resolve(priorities=("required",), base=(), recommends=(), install=("nf-app",)),
                       packages=(), path=Path(path))


