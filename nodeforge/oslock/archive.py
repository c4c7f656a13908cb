"""A Debian archive trusted only through its signed ``InRelease``.

For each suite (e.g. ``bookworm``, ``bookworm-updates`` from the main mirror,
``bookworm-security`` from the security mirror):

1. ``dists/<suite>/InRelease`` is downloaded and verified with ``gpgv``
   against the archive keyring (``/usr/share/keyrings/debian-archive-keyring.gpg``
   unless configured otherwise). Only the text ``gpgv`` reports as signed is
   parsed (``gpgv --output``), so nothing outside the signature can slip in;
   an unsigned, badly signed, expired (``Valid-Until``) or wrong-suite file is
   an :class:`ArchiveTrustError` naming its URL;
2. the ``Packages`` index of each component (``.xz``, else ``.gz``, else
   plain) is downloaded (by hash when the archive offers ``Acquire-By-Hash``)
   and its size and sha256 must be the ones the verified ``InRelease`` lists;
3. each stanza's ``Package``, ``Version``, ``Architecture``, ``SHA256``,
   ``Filename`` and ``Size`` become a :class:`Record`.

Each verified ``Packages`` file and its records are kept in a cache
addressed by the sha256 the verified ``InRelease`` lists
(``$XDG_CACHE_HOME/nodeforge/apt-indexes``, :class:`IndexCache`): a suite
whose index has not changed since the last run is read from there (its bytes
checked against that sha256 again) instead of downloaded, decompressed and
parsed again (about 2.5 s for bookworm's 63 000 stanzas on 2 cores). The
``InRelease`` itself is always downloaded and verified.

The mirrors come from configuration (the environment, else the host's apt
sources: :func:`host_mirrors`); nothing here names a host.
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import functools
import gzip
import hashlib
import http.client
import json
import lzma
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable

from debian import deb822
from debian.debian_support import Version

from nodeforge import transport
from nodeforge.base import fs, runner
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.redact import redact_url, url_has_credentials
from nodeforge.schema import vocab

DEFAULT_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
ENV_KEYRING = "NODEFORGE_DEBIAN_KEYRING"
ENV_MIRROR = "NODEFORGE_DEBIAN_MIRROR"
ENV_SECURITY_MIRROR = "NODEFORGE_DEBIAN_SECURITY_MIRROR"
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
MAX_INDEX_BYTES = 512 << 20   # a decompressed Packages file larger than this is refused
TIMEOUT = 60
RETRIES = 3
DOWNLOAD_RETRY = transport.DOWNLOAD.replace(attempts=RETRIES, base=0.5, cap=4.0)


class ArchiveError(NodeforgeError):
    message = "Debian archive: {detail}"


class ArchiveTrustError(ArchiveError):
    """A file whose signature or hash does not verify: never used."""

    message = "refused {what} {url}: {detail}"


@dataclasses.dataclass(frozen=True)
class Suite:
    """One suite of one mirror: ``<base_url>/dists/<name>/``."""

    name: str                 # bookworm, bookworm-updates, bookworm-security
    archive: str              # "main" or "security": which configured mirror serves it
    base_url: str
    components: tuple[str, ...] = ("main",)

    @property
    def security(self) -> bool:
        return self.archive == "security" or self.name.endswith("-security")

    def url(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}/{path.lstrip('/')}"


@dataclasses.dataclass(frozen=True)
class Record:
    """One binary package as a verified ``Packages`` index publishes it."""

    name: str
    version: str
    arch: str
    sha256: str
    filename: str
    size: int
    suite: str
    priority: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.arch)

    def to_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "arch": self.arch, "suite": self.suite,
                "sha256": self.sha256, "size": self.size, "filename": self.filename}


@dataclasses.dataclass
class SuiteIndex:
    """A suite's verified ``InRelease`` and the verified ``Packages`` indexes below it."""

    suite: Suite
    inrelease: bytes                          # the file as served (signature included)
    release: dict                             # fields of the verified text
    packages: dict[str, bytes]                # path below dists/<suite>/ -> the compressed file as served
    records: list[Record]

    @functools.cached_property
    def stanzas(self) -> list[str]:
        """Each record's stanza text, as in the index (``stanzas[i]`` is ``records[i]``'s), read
        from the verified files when first asked for (resolving a lock needs them; a check does not)."""
        return [text for name, data in self.packages.items() for _, text in self._parsed(name, data)]

    def _parsed(self, name: str, data: bytes):
        """(record, stanza text) of each stanza of the index ``name`` that has a record."""
        plain = _decompress(data, name, self.suite.url(f"dists/{self.suite.name}/{name}"))
        for fields, text in parse_stanzas(plain.decode("utf-8", errors="replace")):
            rec = _record(fields, self.suite, name)
            if rec is not None:
                yield rec, text


class IndexCache:
    """Verified ``Packages`` files and their records, addressed by the sha256 a verified
    ``InRelease`` lists for them. The file is checked against that sha256 whenever it is read;
    the records beside it were made from it (``<sha256>.records.json``, format :data:`FORMAT`).
    Entries are written atomically; an unreadable or foreign entry is a miss. An entry not read
    for :data:`KEEP_DAYS` days is removed when another is written (suites move on: the old
    indexes are never asked for again)."""

    FORMAT = 1
    KEEP_DAYS = 14

    def __init__(self, root: Path):
        self.root = Path(root)

    @classmethod
    def default(cls) -> "IndexCache":
        return cls(fs.cache_home() / "apt-indexes")

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def get(self, digest: str, size: int) -> bytes | None:
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            return None
        fs.mark_used(path, path.with_suffix(".records.json"))      # read now: kept another KEEP_DAYS
        return data

    def put(self, digest: str, data: bytes) -> None:
        self.prune()
        self._write(self._path(digest), data)

    def prune(self, now: float | None = None) -> None:
        for path in self.root.glob("*/*"):
            if fs.unused_for(path, self.KEEP_DAYS, now=now):
                try:
                    path.unlink()
                except OSError:
                    pass

    def records(self, digest: str, suite: Suite) -> list[Record] | None:
        try:
            doc = json.loads(self._path(digest).with_suffix(".records.json").read_bytes())
            if doc.get("format") != self.FORMAT or doc.get("sha256") != digest:
                return None
            return [Record(name=n, version=v, arch=a, sha256=h, filename=f, size=int(z), suite=suite.name,
                           priority=p) for n, v, a, h, f, z, p in doc["records"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def put_records(self, digest: str, records: list[Record]) -> None:
        doc = {"format": self.FORMAT, "sha256": digest,
               "records": [[r.name, r.version, r.arch, r.sha256, r.filename, r.size, r.priority] for r in records]}
        self._write(self._path(digest).with_suffix(".records.json"), json.dumps(doc, separators=(",", ":")))

    def _write(self, path: Path, data: bytes | str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fs.atomic_write(path, data, mode=0o644)
        except OSError:
            pass     # a cache that cannot be written only costs the next run the download


@dataclasses.dataclass
class ArchiveConfig:
    """What to trust and where to fetch it."""

    suites: list[Suite]
    arch: str = "amd64"
    keyring: Path = DEFAULT_KEYRING
    # suite -> the InRelease Date a lock was made from: an older index is refused (rollback)
    not_before: dict[str, str] = dataclasses.field(default_factory=dict)
    # Verified indexes kept between runs (None: always downloaded and parsed)
    cache: IndexCache | None = dataclasses.field(default_factory=IndexCache.default)

    @classmethod
    def for_release(cls, release: str, mirrors: dict[str, str], *, arch: str = "amd64",
                    keyring: Path | None = None, components: Iterable[str] = ("main",),
                    suites: Iterable[tuple[str, str]] | None = None) -> "ArchiveConfig":
        """The suites of a Debian release: ``<release>`` and ``<release>-updates`` from the
        main mirror, ``<release>-security`` from the security mirror (``suites`` overrides,
        as (suite, archive) pairs)."""
        comps = tuple(components)
        pairs = list(suites) if suites is not None else [
            (release, "main"), (f"{release}-updates", "main"), (f"{release}-security", "security")]
        out = []
        for name, archive in pairs:
            if archive not in mirrors or not mirrors[archive]:
                raise ArchiveError(detail=f"no {archive} mirror configured for suite {name}",
                                   hint=f"set {ENV_SECURITY_MIRROR if archive == 'security' else ENV_MIRROR}")
            out.append(Suite(name, archive, mirrors[archive], comps))
        return cls(out, arch, Path(keyring) if keyring else default_keyring())


def default_keyring(env=None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(ENV_KEYRING) or DEFAULT_KEYRING)


# --- the host's apt sources ------------------------------------------------------------

def host_mirrors(env=None, sources: tuple[Path, ...] = APT_SOURCES, *, release: str | None = None) -> dict[str, str]:
    """``{"main": url, "security": url}``: from the environment, else the host's apt sources
    (the first http(s) source serving a ``*-security`` suite is the security mirror). With
    ``release``, sources naming that release's suites are preferred over others (a
    Debian mirror base serves every release, so another release's source still serves)."""
    env = os.environ if env is None else env
    found = {"main": check_mirror(env.get(ENV_MIRROR), ENV_MIRROR),
             "security": check_mirror(env.get(ENV_SECURITY_MIRROR), ENV_SECURITY_MIRROR)}
    entries = [(uri, suites) for uri, suites in apt_source_entries(sources) if uri.startswith(("http://", "https://"))]
    if release:
        entries.sort(key=lambda e: not any(s == release or s.startswith(f"{release}-") for s in e[1]))
    for uri, suites in entries:
        kind = "security" if any(s.endswith("-security") for s in suites) else "main"
        if found[kind] is None:
            found[kind] = uri.rstrip("/")
    for kind, var in (("main", ENV_MIRROR), ("security", ENV_SECURITY_MIRROR)):
        if not found[kind]:
            raise ArchiveError(detail=f"no Debian {kind} mirror in the host's apt sources",
                               hint=f"set {var} to the mirror's base URL")
    return found  # type: ignore[return-value]


def check_mirror(value: str | None, where: str) -> str | None:
    """``value`` (of the variable ``where``) as a mirror base URL: http(s), a host, a port if
    any, printable ASCII, no credentials, query or fragment (:func:`vocab.check_base_url`), else a
    :class:`ConfigError` (exit 2) naming ``where`` with the URL redacted -- never a library's
    exception quoting it. None or empty: not set."""
    if not value:
        return None
    try:
        if not value.isascii() or not value.isprintable() or any(c.isspace() for c in value):
            raise ValueError(f"expected {vocab.BASE_URL_RULE}, printable ASCII without spaces "
                             f"(percent-encode others), got {redact_url(value)!r}")
        if url_has_credentials(value):
            raise ValueError(f"expected {vocab.BASE_URL_RULE}: it holds credentials ({redact_url(value)}); "
                             "credentials never go in a mirror URL: use a mirror that needs no login")
        return vocab.check_base_url(value)
    except ValueError as exc:
        raise ConfigError(path=where, detail=str(exc),
                          hint="set it to the mirror's base URL, e.g. https://deb.debian.org/debian") from None


def apt_source_entries(sources: tuple[Path, ...] = APT_SOURCES):
    """(uri, suites) of every enabled ``deb`` entry in one-line and deb822 apt sources."""
    files: list[Path] = []
    for src in sources:
        if src.is_dir():
            files += sorted(src.glob("*.sources")) + sorted(src.glob("*.list"))
        elif src.is_file():
            files.append(src)
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for para in deb822.Deb822.iter_paragraphs(text.splitlines(keepends=True)):
                if "deb" in para.get("Types", "").split() and para.get("Enabled", "yes").lower() != "no":
                    for uri in para.get("URIs", "").split():
                        yield uri, para.get("Suites", "").split()
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if parts[:1] != ["deb"]:
                    continue
                rest = line.split("#", 1)[0].split("]", 1)[1].split() if "[" in line else parts[1:]
                if len(rest) >= 2:
                    yield rest[0], [rest[1]]


# --- download --------------------------------------------------------------------------

def http_get(url: str, *, what: str, limit: int = MAX_INDEX_BYTES) -> bytes:
    """The body of ``url`` (retried by :data:`nodeforge.transport.DOWNLOAD`'s rules on 5xx, 429
    and connection errors, :data:`RETRIES` attempts); 403, 404 and 410 are :class:`NotFound`."""
    def once() -> bytes:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "nodeforge"}),
                                        timeout=TIMEOUT) as resp:
                data = resp.read(limit + 1)
        except urllib.error.HTTPError as exc:
            failure = transport.Failure(transport.kind_of(exc.code), exc.code, str(exc.reason),
                                        retry_after=transport.retry_after(exc.headers))
            if failure.kind in (transport.ErrorKind.NOT_FOUND, transport.ErrorKind.GONE) or failure.forbidden:
                raise NotFound(what=what, url=redact_url(url), code=exc.code) from None
            raise transport.Refused(failure) from None
        except (urllib.error.URLError, OSError) as exc:
            raise transport.Refused(transport.Failure(transport.ErrorKind.NETWORK, None,
                                                      str(getattr(exc, "reason", exc)))) from None
        except (http.client.InvalidURL, ValueError):
            # InvalidURL, a UnicodeEncodeError: their text quotes the URL (credentials and all)
            raise ArchiveError(detail=f"cannot download {what} {redact_url(url)}: not a usable URL",
                               hint="check the Debian mirror configuration (" + ENV_MIRROR + ", "
                                    + ENV_SECURITY_MIRROR + " or the host's apt sources)") from None
        if len(data) > limit:
            raise ArchiveError(detail=f"{what} {redact_url(url)} is larger than {limit} bytes")
        return data

    try:
        return DOWNLOAD_RETRY.run(once, what=f"{what} {redact_url(url)}")
    except transport.Refused as exc:
        raise ArchiveError(detail=f"cannot download {what} {redact_url(url)}: {exc.failure.detail}",
                           hint="check the Debian mirror configuration (" + ENV_MIRROR + ", " + ENV_SECURITY_MIRROR
                                + " or the host's apt sources) and the network") from None


class NotFound(ArchiveError):
    message = "{what} {url}: HTTP {code} (not on the mirror)"


# --- signature -------------------------------------------------------------------------

_BAD_STATUS = ("BADSIG", "ERRSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG", "NO_PUBKEY", "NODATA")


def verify_signed(data: bytes, keyring: Path, *, url: str, what: str = "InRelease") -> bytes:
    """The signed text of a clearsigned ``data``, verified by ``gpgv`` against ``keyring``.

    Anything unsigned, signed by a key not in the keyring, damaged, expired or
    revoked raises :class:`ArchiveTrustError` naming ``url``."""
    keyring = Path(keyring)
    if not keyring.is_file():
        raise ConfigError(path=str(keyring), detail="archive keyring not found",
                          hint="install debian-archive-keyring (make setup) or set " + ENV_KEYRING)
    if not data.lstrip().startswith(b"-----BEGIN PGP SIGNED MESSAGE-----"):
        raise ArchiveTrustError(what=what, url=url, detail="not a clearsigned file (unsigned)")
    with tempfile.TemporaryDirectory(prefix="nf-gpgv.") as tmp:
        signed, out = Path(tmp) / "InRelease", Path(tmp) / "content"
        signed.write_bytes(data)
        proc = runner.run(["gpgv", "--keyring", str(keyring), "--status-fd", "1", "--output", str(out),
                           str(signed)], merge=False, check=False)
        status = [line.split()[1] for line in proc.stdout.splitlines()
                  if line.startswith("[GNUPG:] ") and len(line.split()) > 1]
        bad = [s for s in status if s in _BAD_STATUS]
        if proc.returncode != 0 or bad or "GOODSIG" not in status or "VALIDSIG" not in status:
            why = ", ".join(bad) or (proc.stderr.strip().splitlines() or ["no good signature"])[-1]
            raise ArchiveTrustError(what=what, url=url, detail=f"signature does not verify against {keyring} ({why})")
        return out.read_bytes()


def _parse_date(text: str) -> datetime.datetime | None:
    try:
        return email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None


def check_release(release: deb822.Release, suite: Suite, *, url: str,
                  now: datetime.datetime | None = None, not_before: str | None = None) -> None:
    """The verified ``InRelease`` must be the suite asked for, not past ``Valid-Until``, and not
    older than ``not_before`` (the Date of the index a lock was made from)."""
    names = {release.get("Suite", ""), release.get("Codename", "")}
    if suite.name not in names:
        raise ArchiveTrustError(what="InRelease", url=url,
                                detail=f"it is signed for suite {release.get('Codename') or release.get('Suite')!r}, "
                                       f"not {suite.name!r}")
    if release.get("Valid-Until"):
        until = _parse_date(release["Valid-Until"])
        now = now or datetime.datetime.now(datetime.timezone.utc)
        if until is None or until < now:
            raise ArchiveTrustError(what="InRelease", url=url,
                                    detail=f"expired (Valid-Until: {release['Valid-Until']}); the mirror is stale")
    if not_before:
        date, floor = _parse_date(release.get("Date", "")), _parse_date(not_before)
        if floor is not None and (date is None or date < floor):
            raise ArchiveTrustError(what="InRelease", url=url,
                                    detail=f"it is older (Date: {release.get('Date') or 'none'}) than the index the "
                                           f"lock was made from ({not_before}): a stale or rolled-back mirror")


# --- indexes ---------------------------------------------------------------------------

def _sha256_entries(release: deb822.Release) -> dict[str, tuple[str, int]]:
    return {e["name"]: (e["sha256"].lower(), int(e["size"])) for e in release.get("SHA256", [])}


def fetch_suite(suite: Suite, config: ArchiveConfig) -> SuiteIndex:
    """Download and verify one suite's ``InRelease`` and ``Packages`` indexes."""
    url = suite.url(f"dists/{suite.name}/InRelease")
    try:
        raw = http_get(url, what="InRelease")
    except NotFound as exc:
        raise NotFound(what="InRelease", url=redact_url(url), code=exc.kwargs.get("code"),
                       hint=f"is {suite.base_url} a Debian {suite.archive} mirror serving {suite.name}? "
                            f"set {ENV_SECURITY_MIRROR if suite.archive == 'security' else ENV_MIRROR} "
                            "(default: the host's apt sources)") from None
    text = verify_signed(raw, config.keyring, url=url)
    release = deb822.Release(text.decode("utf-8", errors="replace"))
    check_release(release, suite, url=url, not_before=config.not_before.get(suite.name))
    hashes = _sha256_entries(release)
    by_hash = release.get("Acquire-By-Hash", "").lower() == "yes"
    cache = config.cache
    index = SuiteIndex(suite, raw, dict(release), {}, [])
    stanzas: list[str] | None = []        # kept while every index is parsed here, not read from the cache
    for comp in suite.components:
        base = f"{comp}/binary-{config.arch}/Packages"
        name = next((base + ext for ext in (".xz", ".gz", "") if base + ext in hashes), None)
        if name is None:
            raise ArchiveError(detail=f"{url} lists no {base}(.xz|.gz) index",
                               hint=f"is component {comp!r} / architecture {config.arch!r} served by this suite?")
        digest, size = hashes[name]
        data = cache.get(digest, size) if cache else None
        if data is None:
            data = _fetch_index(suite, name, digest, size, by_hash)
            if cache:
                cache.put(digest, data)
        index.packages[name] = data
        records = cache.records(digest, suite) if cache else None
        if records is None:
            parsed = list(index._parsed(name, data))
            records = [rec for rec, _ in parsed]
            if stanzas is not None:
                stanzas += [text for _, text in parsed]
            if cache:
                cache.put_records(digest, records)
        else:
            stanzas = None
        index.records.extend(records)
    if stanzas is not None:
        index.__dict__["stanzas"] = stanzas   # the cached property's value: not parsed a second time
    return index


def _fetch_index(suite: Suite, name: str, digest: str, size: int, by_hash: bool) -> bytes:
    url = suite.url(f"dists/{suite.name}/{name}")
    urls = [suite.url(f"dists/{suite.name}/{name.rsplit('/', 1)[0]}/by-hash/SHA256/{digest}"), url] if by_hash \
        else [url]
    for i, candidate in enumerate(urls):
        try:
            data = http_get(candidate, what="Packages index")
        except NotFound:
            if i + 1 < len(urls):
                continue
            raise
        got = hashlib.sha256(data).hexdigest()
        if len(data) != size or got != digest:
            raise ArchiveTrustError(what="Packages index", url=candidate,
                                    detail=f"sha256 {got} ({len(data)} bytes) does not match the verified "
                                           f"InRelease ({digest}, {size} bytes)")
        return data
    raise AssertionError("unreachable")


def _decompress(data: bytes, name: str, url: str) -> bytes:
    try:
        if name.endswith(".xz"):
            out = lzma.LZMADecompressor().decompress(data, max_length=MAX_INDEX_BYTES + 1)
        elif name.endswith(".gz"):
            out = gzip.decompress(data)
        else:
            out = data
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise ArchiveError(detail=f"cannot decompress {url}: {exc}") from None
    if len(out) > MAX_INDEX_BYTES:
        raise ArchiveError(detail=f"{url} decompresses to more than {MAX_INDEX_BYTES} bytes")
    return out


def parse_stanzas(text: str):
    """(single-line fields, stanza text) of each stanza of a deb822 index.

    A lean reader for the machine-written ``Packages`` files (63 000 stanzas for
    bookworm main: ``deb822.Packages`` takes ~10 s for them, this well under
    one); multi-line fields (``Description``) are kept in the text only.
    The same fields are read as with python-debian (tests compare the two)."""
    for chunk in text.split("\n\n"):
        chunk = chunk.strip("\n")
        if not chunk:
            continue
        fields: dict[str, str] = {}
        for line in chunk.split("\n"):
            if line and not line[0].isspace() and not line.startswith("#"):
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip()] = value.strip()
        yield fields, chunk + "\n"


def _record(para, suite: Suite, index: str) -> Record | None:
    try:
        return Record(name=para["Package"], version=para["Version"], arch=para["Architecture"],
                      sha256=para["SHA256"].lower(), filename=para["Filename"], size=int(para["Size"]),
                      suite=suite.name, priority=para.get("Priority", ""))
    except (KeyError, ValueError):
        return None   # a stanza without a downloadable file (never installed by apt either)


@dataclasses.dataclass
class Indexes:
    """Every configured suite's verified records, in configuration order."""

    config: ArchiveConfig
    suites: list[SuiteIndex]

    def records(self) -> Iterable[Record]:
        for s in self.suites:
            yield from s.records

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, str], list[Record]]:
        out: dict[tuple[str, str], list[Record]] = {}
        for r in self.records():
            out.setdefault(r.key, []).append(r)
        return out

    def by_key(self) -> dict[tuple[str, str], list[Record]]:
        return self._by_key

    def find(self, name: str, arch: str, version: str) -> Record | None:
        """The record of exactly this version (security first, then updates, then the release)."""
        hits = [r for r in self._by_key.get((name, arch), []) if r.version == version]
        order = {s.suite.name: i for i, s in enumerate(self.suites)}
        hits.sort(key=lambda r: (not r.suite.endswith("-security"), not r.suite.endswith("-updates"),
                                 order.get(r.suite, 0)))
        return hits[0] if hits else None

    def newest(self, name: str, arch: str) -> Record | None:
        """The highest version of ``name``/``arch`` any suite serves (what apt would pick)."""
        best: Record | None = None
        for r in self.by_key().get((name, arch), []):
            if best is None or Version(r.version) > Version(best.version):
                best = r
        return best


def fetch(config: ArchiveConfig) -> Indexes:
    return Indexes(config, [fetch_suite(s, config) for s in config.suites])
