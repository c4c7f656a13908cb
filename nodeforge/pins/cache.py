"""Content-addressed download cache and the one downloader every fetch goes through.

Files live at ``<root>/sha256/<ab>/<abcdef...>``, named by their sha256. A
download streams into ``<root>/tmp/`` while it is hashed, and is renamed to
its final name only after the digest matched: a file under a final name is
always complete and verified. Transient failures (connection errors, drops
mid-body, HTTP 5xx/429) are retried by :data:`nodeforge.transport.DOWNLOAD`'s
rules (the one retry policy: exponential backoff with jitter, Retry-After); a
digest mismatch is never retried -- it is reported with both digests. A URL
is logged and put in errors only through :func:`nodeforge.redact.redact_url`
(user info and credential-like query parameters as ``***``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import requests
import urllib3.exceptions

from nodeforge import transport
from nodeforge.base import fs
from nodeforge.base.fs import sha256_file  # noqa: F401 - re-exported
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.redact import redact_url, redact_urls

log = logging.getLogger(__name__)

CHUNK = 1 << 20
# Errors while reading a response body (urllib3 wraps socket errors in these).
_NETWORK_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError)
ENV_CACHE_DIR = "NODEFORGE_CACHE_DIR"


def default_root() -> Path:
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR])
    return fs.cache_home() / "artifacts"


class DownloadError(NodeforgeError):
    message = "{url}: {detail}"


class NotFoundError(DownloadError):
    message = "{url}: not found (HTTP 404)"


class UnreachableError(DownloadError):
    message = "cannot reach {url} after {attempts} attempts: {detail}"


class ChecksumMismatch(NodeforgeError):
    message = ("{artifact}: sha256 mismatch: {expected_from} says {expected}, "
               "downloaded bytes are {actual} ({url})")


class _Transient(transport.Refused):
    """A failure worth retrying; ``unreachable`` when no server answered."""

    def __init__(self, detail: str, unreachable: bool = False, *,
                 kind: transport.ErrorKind = transport.ErrorKind.NETWORK, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(transport.Failure(kind, status, detail, retry_after=retry_after))
        self.unreachable = unreachable

    def __str__(self) -> str:
        return self.failure.detail


@dataclasses.dataclass(frozen=True)
class DownloadSettings:
    """How downloads are retried and timed out: settings that configure the one retry policy
    (:meth:`policy`), not a policy of their own."""

    attempts: int = 5
    initial: float = 0.5     # seconds before the 2nd attempt, doubled each time (with jitter)
    maximum: float = 10.0
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    def policy(self) -> transport.RetryPolicy:
        """This configuration of the one retry policy (:data:`nodeforge.transport.DOWNLOAD`)."""
        return transport.DOWNLOAD.replace(attempts=self.attempts, base=self.initial, cap=self.maximum)

    @classmethod
    def from_env(cls, env=None) -> "DownloadSettings":
        """Defaults, overridden by NODEFORGE_DOWNLOAD_RETRIES / NODEFORGE_DOWNLOAD_BACKOFF."""
        env = os.environ if env is None else env
        policy = cls()
        try:
            if env.get("NODEFORGE_DOWNLOAD_RETRIES"):
                policy = dataclasses.replace(policy, attempts=max(1, int(env["NODEFORGE_DOWNLOAD_RETRIES"])))
            if env.get("NODEFORGE_DOWNLOAD_BACKOFF"):
                policy = dataclasses.replace(policy, initial=float(env["NODEFORGE_DOWNLOAD_BACKOFF"]))
        except ValueError as exc:
            raise ConfigError(path="NODEFORGE_DOWNLOAD_RETRIES/BACKOFF", detail=str(exc)) from None
        return policy


@dataclasses.dataclass(frozen=True)
class Fetched:
    sha256: str
    path: Path
    size: int
    downloaded: bool  # False when it came from the cache

    def to_dict(self) -> dict:
        return {"sha256": self.sha256, "path": str(self.path), "size": self.size, "downloaded": self.downloaded}


class Cache:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else default_root()

    def path_for(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def peek(self, sha256: str) -> int | None:
        """The size of the file cached under ``sha256``, None if there is none. Not re-hashed and
        never evicted (what a plan may look at; :meth:`lookup` verifies)."""
        path = self.path_for(sha256)
        return path.stat().st_size if path.is_file() else None

    def lookup(self, sha256: str) -> Path | None:
        """The cached file for ``sha256``, re-hashed first; a damaged one is evicted."""
        path = self.path_for(sha256)
        if not path.is_file():
            return None
        if sha256_file(path) != sha256:
            log.warning("cache entry %s is damaged; removing it", path)
            path.unlink(missing_ok=True)
            return None
        return path

    def tmpfile(self, sha256: str):
        tmpdir = self.root / "tmp"
        tmpdir.mkdir(parents=True, exist_ok=True)
        return tempfile.NamedTemporaryFile(dir=tmpdir, prefix=f"{sha256[:16]}.", suffix=".part", delete=False)

    def commit(self, tmp: Path, sha256: str) -> Path:
        final = self.path_for(sha256)
        final.parent.mkdir(parents=True, exist_ok=True)
        fs.move_into_place(tmp, final)
        return final

    def export(self, sha256: str, dest: Path) -> None:
        """Place the cached file at ``dest`` (hard link when possible, else a copy)."""
        src = self.path_for(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        try:
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)


class Downloader:
    """HTTP GETs with retries; artifacts stream into a :class:`Cache`."""

    def __init__(self, cache: Cache | None = None, retry: DownloadSettings = DownloadSettings()):
        self.cache = cache or Cache()
        self.retry = retry
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["Accept-Encoding"] = "identity"  # hash the bytes as published
        return session

    def _retrying(self, url: str, fn, hint: str | None):
        shown = redact_url(url)     # URL credentials (user info, ?token=) never logged or in an error
        try:
            return self.retry.policy().run(fn, what=shown, logger=log)
        except _Transient as exc:
            cls = UnreachableError if exc.unreachable else DownloadError
            raise cls(url=shown, attempts=self.retry.attempts, hint=hint,
                      detail=f"{exc} (after {self.retry.attempts} attempts)" if cls is DownloadError else str(exc)) from None

    def _get(self, url: str) -> requests.Response:
        try:
            resp = self._session().get(url, stream=True,
                                       timeout=(self.retry.connect_timeout, self.retry.read_timeout))
        except requests.ConnectionError as exc:
            raise _Transient(_reason(exc), unreachable=True) from exc
        except requests.Timeout as exc:
            raise _Transient(f"timed out: {_reason(exc)}", unreachable=True) from exc
        if transport.is_success(resp.status_code, (200,)):
            return resp
        resp.close()
        kind = transport.kind_of(resp.status_code)
        if kind is transport.ErrorKind.NOT_FOUND:
            raise NotFoundError(url=redact_url(url))
        refused = _Transient(f"HTTP {resp.status_code} {resp.reason}", kind=kind, status=resp.status_code,
                             retry_after=transport.retry_after(resp.headers))
        if self.retry.policy().should_retry(refused.failure):
            raise refused
        raise DownloadError(url=redact_url(url), detail=f"HTTP {resp.status_code} {resp.reason}")

    def get_text(self, url: str, *, hint: str | None = None, limit: int = 1 << 20) -> str:
        """A small text document (marker, checksum file)."""

        def once() -> str:
            with self._get(url) as resp:
                data = _read_body(resp, limit)
            return data.decode("utf-8", errors="replace")

        return self._retrying(url, once, hint)

    def fetch(self, url: str, sha256: str, *, artifact: str, expected_from: str = "the lockfile",
              hint: str | None = None) -> Fetched:
        """Make sure the file with ``sha256`` is cached (re-hashed), downloading it from ``url`` if needed."""
        cached = self.cache.lookup(sha256)
        if cached is not None:
            return Fetched(sha256, cached, cached.stat().st_size, downloaded=False)

        def once() -> Fetched:
            with self._get(url) as resp, self.cache.tmpfile(sha256) as out:
                tmp = Path(out.name)
                try:
                    digest, size = _stream(resp, out)
                except BaseException:
                    out.close()
                    tmp.unlink(missing_ok=True)
                    raise
            if digest != sha256:
                tmp.unlink(missing_ok=True)
                raise ChecksumMismatch(artifact=artifact, expected_from=expected_from, expected=sha256,
                                       actual=digest, url=redact_url(url))
            return Fetched(sha256, self.cache.commit(tmp, sha256), size, downloaded=True)

        return self._retrying(url, once, hint)


def _stream(resp: requests.Response, out) -> tuple[str, int]:
    """Copy the body to ``out`` while hashing it: (sha256 hex, size).

    The bytes are received straight into one reused buffer
    (``http.client.HTTPResponse.readinto``, below urllib3's ``stream()``,
    which allocates a new 1 MiB ``bytes`` object per read), then hashed and
    written from it: one copy out of the kernel, none in Python. Socket errors
    arrive here unwrapped by urllib3, so they are caught around the read only:
    an ``OSError`` from the local write is not a network error and is never
    retried. ``bench/bench_prefetch.py`` measures the whole download path."""
    h = hashlib.sha256()
    size = 0
    fp = getattr(resp.raw, "_fp", None)
    if not callable(getattr(fp, "readinto", None)):   # not http.client underneath: the portable path
        return _stream_chunks(resp, out)
    buf = memoryview(bytearray(CHUNK))
    while True:
        try:
            n = fp.readinto(buf)
        except (*_NETWORK_ERRORS, OSError, http.client.HTTPException) as exc:   # socket errors arrive unwrapped here
            raise _Transient(f"connection dropped after {size} bytes: {_reason(exc)}") from exc
        if not n:
            break
        data = buf[:n]
        h.update(data)
        out.write(data)       # a local disk error (OSError) is raised as it is: not retried
        size += n
    _check_length(resp, size)
    if fp.isclosed():         # the whole body read: the connection goes back to the pool (keep-alive)
        resp.raw.release_conn()
    return h.hexdigest(), size


def _stream_chunks(resp: requests.Response, out) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    try:
        for chunk in resp.raw.stream(CHUNK, decode_content=False):
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
    except _NETWORK_ERRORS as exc:  # a local disk error (OSError from write) is not retried
        raise _Transient(f"connection dropped after {size} bytes: {_reason(exc)}") from exc
    _check_length(resp, size)
    return h.hexdigest(), size


def _check_length(resp: requests.Response, size: int) -> None:
    expected = resp.headers.get("Content-Length")
    if expected is not None and expected.isdigit() and int(expected) != size:
        raise _Transient(f"connection dropped after {size} of {expected} bytes")


def _read_body(resp: requests.Response, limit: int) -> bytes:
    data = bytearray()
    try:
        for chunk in resp.raw.stream(65536, decode_content=False):
            data += chunk
            if len(data) > limit:
                raise DownloadError(url=redact_url(resp.url), detail=f"larger than {limit} bytes")
    except _NETWORK_ERRORS as exc:
        raise _Transient(f"connection dropped: {_reason(exc)}") from exc
    return bytes(data)


def _reason(exc: BaseException) -> str:
    """A short reason ("Connection refused") instead of urllib3's nested repr."""
    text = redact_urls(str(exc))
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    for pattern in (r"(Read timed out)", r"(Connection broken: [^'\"(]+)", r"(IncompleteRead\([^)]*\))",
                    r"(Connection aborted)", r"(Remote end closed connection without response)"):
        m = re.search(pattern, text)
        if m:
            return m.group(1).strip()
    return text[:200] or type(exc).__name__
