"""A local signed apt repository: the Debian mirror's stand-in for tests.

Its own throwaway GnuPG key (a temporary ``GNUPGHOME``), the layout of a
Debian suite (``dists/<suite>/{InRelease,main/binary-amd64/Packages.xz}`` and
``pool/``), tiny real ``.deb`` files built with ``dpkg-deb --build``, served by
a ``http.server`` thread on loopback under two bases like the real archive:
``/debian`` (the release and ``-updates``) and ``/debian-security``.

For the end-to-end tests a suite can also carry a real archive's stanzas
(:meth:`AptRepo.add_stanzas`), with the ``pool/`` files they name fetched
from that archive on request (``upstream``: a pass-through for files this
repository does not hold; their bytes are checked by apt and nodeforge
against the hashes in the index this repository signs), and a real package
re-versioned (:func:`reversion`) as an update.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import hashlib
import http.server
import lzma
import os
import shutil
import subprocess
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ARCH = "amd64"
RELEASE = "nftest"
REVERSION_EPOCH = 1704067200   # 2024-01-01: a re-versioned package without files of its own


def _gpg(home: Path, *args: str, input: bytes | None = None) -> bytes:
    for _ in range(3):
        proc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback",
                               "--passphrase", "", *args], input=input, capture_output=True)
        if args[0] in ("--quick-gen-key", "--clearsign"):
            # gpg starts a gpg-agent for secret-key operations and leaves it running: stop it, so a
            # test run leaves no daemon behind (the next signing starts a new one).
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
        # A signing right after the previous one's agent was stopped can reach that agent's socket
        # while it exits ("can't connect to the agent: End of file"): the next attempt starts anew.
        if proc.returncode == 0 or b"can't connect to the agent" not in proc.stderr:
            break
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

    def __init__(self, root: Path, key: SigningKey, release: str = RELEASE, *,
                 suites: list[str] | None = None, upstream: dict[str, str] | None = None):
        """``suites``: only these of the release's three (default: all); ``upstream``: base
        directory (``debian``, ``debian-security``) -> a real archive's URL, from which pool
        files this repository does not hold are passed through."""
        self.root = Path(root)
        self.key = key
        self.release = release
        self.archives = {release: "debian", f"{release}-updates": "debian",
                         f"{release}-security": "debian-security"}
        if suites is not None:
            self.archives = {s: a for s, a in self.archives.items() if s in suites}
        self.suites: dict[str, list[dict]] = {s: [] for s in self.archives}
        self.raw: dict[str, list[str]] = {s: [] for s in self.archives}   # stanza texts as a real index has them
        self.upstream = dict(upstream or {})
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

    def add_stanzas(self, suite: str, stanzas: list[str]) -> None:
        """Stanzas of a real index (their pool files passed through from ``upstream``)."""
        self.raw[suite] += [st.rstrip("\n") + "\n" for st in stanzas]

    def add_deb(self, suite: str, deb: Path, stanza: str) -> Path:
        """A ``.deb`` file into ``suite``'s pool, indexed by ``stanza`` (a real index's stanza of the
        same package) with its Version, Filename, Size and SHA256 set from the file; returns its path."""
        control = subprocess.run(["dpkg-deb", "--field", str(deb), "Package", "Version", "Architecture"],
                                 capture_output=True, text=True, check=True).stdout
        f = dict(line.split(": ", 1) for line in control.strip().splitlines())
        name, version, arch = f["Package"], f["Version"], f["Architecture"]
        pooldir = ("pool/updates/main" if suite.endswith("-security") else "pool/main") + f"/{name[0]}/{name}"
        target = self.root / self.archives[suite] / pooldir / f"{name}_{version.split(':')[-1]}_{arch}.deb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(deb, target)
        data = target.read_bytes()
        values = {"Version": version, "Filename": f"{pooldir}/{target.name}", "Size": str(len(data)),
                  "SHA256": hashlib.sha256(data).hexdigest()}
        lines = []
        for line in stanza.rstrip("\n").split("\n"):
            key = line.split(":", 1)[0] if line and not line[0].isspace() else None
            if key in ("MD5sum", "SHA1", "SHA512"):
                continue                      # only the SHA256 the new file has
            lines.append(f"{key}: {values.pop(key)}" if key in values else line)
        lines += [f"{k}: {v}" for k, v in values.items()]
        self.raw[suite].append("\n".join(lines) + "\n")
        return target

    def publish(self) -> None:
        for suite, pkgs in self.suites.items():
            dists = self.root / self.archives[suite] / "dists" / suite
            bindir = dists / "main" / f"binary-{ARCH}"
            bindir.mkdir(parents=True, exist_ok=True)
            text = "\n".join(["".join(f"{k}: {v}\n" for k, v in p.items() if v) for p in pkgs]
                             + self.raw.get(suite, [])).encode()
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
        handler = functools.partial(_QuietHandler, directory=str(self.root), upstream=self.upstream)
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
    def __init__(self, *args, upstream: dict[str, str] | None = None, **kw):
        self.upstream = upstream or {}
        super().__init__(*args, **kw)

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        raw = self.path.split("?", 1)[0]                  # apt sends '+' as %2b
        m = re.fullmatch(r"/([a-z-]+)/(pool/[A-Za-z0-9+~:._/-]+\.deb)", urllib.parse.unquote(raw))
        if m and m.group(1) in self.upstream and not Path(self.translate_path(self.path)).is_file():
            return self._pass_through(f"{self.upstream[m.group(1)].rstrip('/')}{raw[len(m.group(1)) + 1:]}")
        return super().do_GET()

    def _pass_through(self, url: str) -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "nodeforge-tests"}),
                                        timeout=120) as resp:
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.debian.binary-package")
                if resp.headers.get("Content-Length"):
                    self.send_header("Content-Length", resp.headers["Content-Length"])
                self.end_headers()
                shutil.copyfileobj(resp, self.wfile, 1 << 20)
        except urllib.error.HTTPError as exc:
            self.send_error(exc.code)
        except (urllib.error.URLError, OSError):
            self.send_error(502)


def reversion(deb: Path, version: str, out_dir: Path) -> Path:
    """``deb`` rebuilt with ``Version: version`` (``dpkg-deb -R``, edit, ``dpkg-deb -b``); returns the new file.

    Byte-deterministic: the same ``deb`` and ``version`` give the same file on every run (its sha256
    is in the package lock, whose digest is in the package-base cache key). Every entry of the
    unpacked tree gets one fixed time (the original's newest file time, so nothing depends on when
    this ran; :data:`REVERSION_EPOCH` for a package without files), ``dpkg-deb`` gets it as
    ``SOURCE_DATE_EPOCH`` (its ``ar`` member times) and builds with fixed compression (xz level 6
    on every member, one thread: the output of multi-threaded xz depends on the block split)."""
    work = Path(out_dir) / f"unpacked-{deb.stem}"
    if work.exists():
        shutil.rmtree(work)
    subprocess.run(["dpkg-deb", "-R", str(deb), str(work)], check=True, capture_output=True)
    control = work / "DEBIAN" / "control"
    text = control.read_text()
    shipped = [p for p in work.rglob("*") if "DEBIAN" not in p.relative_to(work).parts and not p.is_dir()]
    epoch = max((int(p.lstat().st_mtime) for p in shipped), default=REVERSION_EPOCH)
    control.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", text, count=1))
    for p in [*work.rglob("*"), work]:
        os.utime(p, (epoch, epoch), follow_symlinks=False)
    out = Path(out_dir) / f"{deb.name.split('_')[0]}_{version.split(':')[-1]}_rebuilt.deb"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "-z6", "--uniform-compression", "--threads-max=1",
                    "-b", str(work), str(out)], check=True, capture_output=True, env=env)
    shutil.rmtree(work)
    return out


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


