"""The package lock file (``manifests/os-packages.lock.yaml``): read, validate, write.

Written only by nodeforge (``release lock-packages`` / ``release bump
--packages``), one package per line so a pull request's diff shows exactly
which packages moved. Layout (docs/os-packages.md)::

    schema_version: 1
    distribution: debian
    release: bookworm
    architecture: amd64
    components: [main]
    suites: {bookworm: main, bookworm-updates: main, bookworm-security: security}
    resolve:                  # what the set was resolved from
      priorities: [required]  # debootstrap --variant=minbase: Priority required ...
      base: [apt]             # ... plus these, without recommends
      recommends: [...]       # installed next, with recommends (dib's debian-minimal root step)
      install: [...]          # the elements' packages, without recommends (as diskimage-builder installs them)
    packages:
      - {name: adduser, version: "3.134", arch: all, suite: bookworm, size: 1234, sha256: ..., filename: pool/...}

Read through the schema layer (:class:`PackageLockFile`, in docs/schemas.md): a bad
file is a :class:`~nodeforge.schema.SchemaError` (exit 2), each problem
``file:line: key.path: detail``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, Field

from nodeforge import schema
from nodeforge.base import fs
from nodeforge.errors import ConfigError
from nodeforge.schema import Declared, Rule, vocab

SCHEMA_VERSION = 1
FILENAME = "os-packages.lock.yaml"
DEFAULT_PATH = Path("manifests") / FILENAME
PACKAGE_FIELDS = ("name", "version", "arch", "suite", "size", "sha256", "filename")
HEADER = """\
# nodeforge OS package lock: every Debian package in the node image (package
# base and root filesystem) by name, version, architecture, the sha256 the
# archive's signed Packages index publishes, and the suite it came from.
#
# Written only by nodeforge: `nodeforge release lock-packages` (re-resolve),
# `nodeforge release bump --packages` (move to the mirror's newest versions);
# `nodeforge release check` compares it with the mirror. Never edit by hand.
# See docs/os-packages.md.
"""


@dataclasses.dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    arch: str
    suite: str
    size: int
    sha256: str
    filename: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.arch)

    @property
    def deb_name(self) -> str:
        return self.filename.rsplit("/", 1)[-1]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Resolve:
    priorities: tuple[str, ...] = ("required",)
    base: tuple[str, ...] = ("apt",)
    recommends: tuple[str, ...] = ()
    install: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"priorities": list(self.priorities), "base": list(self.base), "recommends": list(self.recommends),
                "install": list(self.install)}


@dataclasses.dataclass(frozen=True)
class PackageLock:
    release: str
    architecture: str
    suites: dict[str, str]              # suite -> archive ("main" | "security")
    resolve: Resolve
    packages: tuple[LockedPackage, ...]
    components: tuple[str, ...] = ("main",)
    distribution: str = "debian"
    path: Path | None = None
    index_dates: dict[str, str] = dataclasses.field(default_factory=dict)   # suite -> InRelease Date

    def by_key(self) -> dict[tuple[str, str], LockedPackage]:
        return {p.key: p for p in self.packages}

    def dumps(self) -> str:
        head = {"schema_version": SCHEMA_VERSION, "distribution": self.distribution, "release": self.release,
                "architecture": self.architecture}
        lines = [HEADER.rstrip("\n"), yaml.safe_dump(head, sort_keys=False).rstrip("\n"),
                 f"components: {_flow(list(self.components))}",
                 "# suite: the configured mirror serving it (main or security)",
                 "suites:"]
        lines += [f"  {s}: {a}" for s, a in self.suites.items()]
        if self.index_dates:
            lines += ["# Date of each suite's verified InRelease the packages come from; an older index is refused",
                      "index_dates:"]
            lines += [f"  {s}: {json.dumps(d)}" for s, d in self.index_dates.items()]
        lines += ["resolve:",
                  f"  priorities: {_flow(list(self.resolve.priorities))}",
                  f"  base: {_flow(list(self.resolve.base))}",
                  f"  recommends: {_flow(list(self.resolve.recommends))}",
                  f"  install: {_flow(list(self.resolve.install))}",
                  f"# {len(self.packages)} packages",
                  "packages:" + ("" if self.packages else " []")]
        for p in sorted(self.packages, key=lambda p: p.key):
            lines.append(f"  - {_flow(p.to_dict())}")
        return "\n".join(lines) + "\n"

    def digest(self) -> str:
        """sha256 of the canonical content (what the package-base cache key includes)."""
        body = {"release": self.release, "architecture": self.architecture, "suites": self.suites,
                "packages": [p.to_dict() for p in sorted(self.packages, key=lambda p: p.key)]}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def with_packages(self, packages, resolve: Resolve | None = None) -> "PackageLock":
        return dataclasses.replace(self, packages=tuple(sorted(packages, key=lambda p: p.key)),
                                   resolve=resolve or self.resolve)

    def save(self, path: Path | None = None) -> Path:
        target = Path(path or self.path)
        fs.atomic_write(target, self.dumps())
        return target


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=100000, sort_keys=False).strip()


# --- reading: the declaration (docs/schemas.md) and its checks across fields ---------------

_DEB_NAME_RULE = "a Debian package name (a-z 0-9 + . -, at least 2 characters)"
_check_deb_name = vocab._pattern(r"[a-z0-9][a-z0-9+.-]+", _DEB_NAME_RULE)


def _below_archive(value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"{vocab.shown(value)} is not a path below the archive")
    return value


_Text = Annotated[str, Field(min_length=1)]
# Debian policy 5.6.12: [epoch:]upstream_version[-debian_revision]; it is written into apt preferences
# and file names, so nothing else (a newline would be a second apt preferences line).
_DEB_VERSION_RULE = "a Debian version ([epoch:]upstream[-revision]: A-Z a-z 0-9 . + ~ - :, starting with a digit)"
_check_deb_version = vocab._pattern(r"(?:\d+:)?\d[A-Za-z0-9.+~:-]*", _DEB_VERSION_RULE)
_DEB_ARCH_RULE = "a Debian architecture (a-z 0-9 -)"
_check_deb_arch = vocab._pattern(r"[a-z0-9][a-z0-9-]*", _DEB_ARCH_RULE)


class LockedPackageEntry(Declared):
    """One locked package (the archive's signed Packages index publishes its sha256)."""

    name: Annotated[str, AfterValidator(_check_deb_name), Rule(_DEB_NAME_RULE)]
    version: Annotated[str, AfterValidator(_check_deb_version), Rule(_DEB_VERSION_RULE)] = Field(
        description="the Debian version, quoted where YAML would read a number")
    arch: Annotated[str, AfterValidator(_check_deb_arch), Rule(_DEB_ARCH_RULE)]
    suite: _Text = Field(description="one of suites")
    size: vocab.NonNegativeInt = Field(description="bytes")
    sha256: vocab.Sha256
    filename: Annotated[str, Field(min_length=1), AfterValidator(_below_archive), Rule("a path below the archive")]


class ResolveEntry(Declared):
    """What the package set was resolved from."""

    priorities: list[str] = ["required"]
    base: list[str] = ["apt"]
    recommends: list[str] = []
    install: list[str] = []


class PackageLockFile(Declared):
    """The OS package lock, written only by nodeforge (docs/os-packages.md)."""

    schema_version: Literal[1]
    distribution: str = "debian"
    release: _Text
    architecture: _Text
    components: list[str] = ["main"]
    suites: Annotated[dict[str, Literal["main", "security"]], Field(min_length=1)] = Field(
        description="suite -> the configured mirror serving it")
    index_dates: dict[str, str] = Field({}, description="suite -> Date of its verified InRelease (an older "
                                                        "index is refused)")
    resolve: ResolveEntry = ResolveEntry()
    packages: list[LockedPackageEntry]


MAX_DEPTH = 16   # the lock nests 3 deep; anything much deeper is not a lock
LIMITS = schema.Limits(max_bytes=16 << 20, max_depth=MAX_DEPTH)
HINT = "the package lock is written by nodeforge: regenerate it with 'nodeforge release lock-packages'"
schema.register("os-package-lock", PackageLockFile, title="OS package lock", path=str(DEFAULT_PATH),
                limits=LIMITS, description="Every Debian package of the node image (docs/os-packages.md).")


def _checks(document, lock: PackageLockFile):
    seen: dict[tuple[str, str], int] = {}
    for i, p in enumerate(lock.packages):
        if p.suite not in lock.suites:
            yield document.problem(("packages", i, "suite"),
                                   f"{vocab.shown(p.suite)} is not one of the suites ({', '.join(lock.suites)})")
        if (p.name, p.arch) in seen:
            yield document.problem(("packages", i), f"{p.name} ({p.arch}) is locked twice (also packages"
                                                    f"[{seen[(p.name, p.arch)]}])")
        seen.setdefault((p.name, p.arch), i)


def load(path: Path) -> PackageLock:
    path = Path(path)
    if not path.exists():
        raise ConfigError(path=str(path), detail="package lock not found",
                          hint="create it: nodeforge release lock-packages")
    return loads(schema.read_text(path, LIMITS), path)


def loads(text: str, path: Path) -> PackageLock:
    document = schema.load(path, text, format="yaml", limits=LIMITS)
    lock = schema.validate(document, PackageLockFile, hint=HINT, checks=_checks)
    r = lock.resolve
    return PackageLock(release=lock.release, architecture=lock.architecture, suites=dict(lock.suites),
                       resolve=Resolve(tuple(r.priorities), tuple(r.base), tuple(r.recommends), tuple(r.install)),
                       packages=tuple(LockedPackage(**p.model_dump()) for p in lock.packages),
                       components=tuple(lock.components), distribution=lock.distribution, path=path,
                       index_dates=dict(lock.index_dates))
