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

A bad file is a :class:`~nodeforge.errors.ConfigError` naming the file, the
line and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import yaml

from nodeforge.base import fs
from nodeforge.errors import ConfigError

SCHEMA_VERSION = 1
FILENAME = "os-packages.lock.yaml"
DEFAULT_PATH = Path("manifests") / FILENAME
PACKAGE_FIELDS = ("name", "version", "arch", "suite", "size", "sha256", "filename")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
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


class _LineLoader(yaml.SafeLoader):
    pass


def _mapping_with_line(loader, node, deep=False):
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def load(path: Path) -> PackageLock:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path=str(path), detail="package lock not found",
                          hint="create it: nodeforge release lock-packages") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path=str(path), detail=f"cannot read the package lock: {exc}") from None
    return loads(text, path)


MAX_DEPTH = 16   # the lock nests 3 deep; anything much deeper is not a lock (and would exhaust the stack)


def _too_deep(text: str) -> int | None:
    """The line where nesting first exceeds MAX_DEPTH (the event stream is read iteratively)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                return event.start_mark.line + 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return None


def loads(text: str, path: Path) -> PackageLock:
    try:
        deep = _too_deep(text)
        if deep is not None:
            raise ConfigError(path=f"{path}:{deep}", detail=f"nested deeper than {MAX_DEPTH} levels; not a package lock")
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise ConfigError(path=str(path), detail="nested too deeply; not a package lock") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(path=where, detail=f"not valid YAML: {getattr(exc, 'problem', exc)}") from None

    def bad(line, field, detail):
        return ConfigError(path=f"{path}:{line}", detail=f"{field}: {detail}",
                           hint="the package lock is written by nodeforge: regenerate it with "
                                "'nodeforge release lock-packages'")

    if not isinstance(data, dict):
        raise bad(1, "(top level)", "expected a mapping")
    top = data.get("__line__", 1)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise bad(top, "schema_version", f"expected {SCHEMA_VERSION}, found {data.get('schema_version')!r}")
    for field in ("release", "architecture"):
        if not isinstance(data.get(field), str) or not data[field]:
            raise bad(top, field, "missing or not a string")
    suites = data.get("suites")
    if not isinstance(suites, dict) or not {k for k in suites if k != "__line__"}:
        raise bad(top, "suites", "expected a mapping of suite -> archive (main or security)")
    suite_map = {}
    for s, a in suites.items():
        if s == "__line__":
            continue
        if a not in ("main", "security"):
            raise bad(suites["__line__"], f"suites.{s}", f"archive must be main or security, not {a!r}")
        suite_map[str(s)] = a
    res = data.get("resolve") or {"__line__": top}
    if not isinstance(res, dict):
        raise bad(top, "resolve", "expected a mapping")
    lists = {}
    for field in ("priorities", "base", "recommends", "install"):
        value = res.get(field, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(res["__line__"], f"resolve.{field}", "expected a list of names")
        lists[field] = tuple(value)
    dates = data.get("index_dates") or {}
    if not isinstance(dates, dict) or not all(isinstance(v, str) for k, v in dates.items() if k != "__line__"):
        raise bad(top, "index_dates", "expected a mapping of suite -> date")
    dates = {str(k): v for k, v in dates.items() if k != "__line__"}
    comps = data.get("components", ["main"])
    if not isinstance(comps, list) or not all(isinstance(c, str) for c in comps):
        raise bad(top, "components", "expected a list of component names")
    pkgs = data.get("packages")
    if not isinstance(pkgs, list):
        raise bad(top, "packages", "expected a list")
    out, seen = [], {}
    for i, p in enumerate(pkgs):
        if not isinstance(p, dict):
            raise bad(top, f"packages[{i}]", "expected a mapping")
        line = p.get("__line__", top)
        missing = [f for f in PACKAGE_FIELDS if f not in p]
        extra = sorted(set(p) - set(PACKAGE_FIELDS) - {"__line__"})
        if missing or extra:
            raise bad(line, f"packages[{i}]", (f"missing {', '.join(missing)}" if missing else "")
                      + ("; " if missing and extra else "") + (f"unknown {', '.join(extra)}" if extra else ""))
        vals = {f: p[f] for f in PACKAGE_FIELDS}
        for f in ("name", "version", "arch", "suite", "sha256", "filename"):
            if isinstance(vals[f], (int, float)) and f == "version":
                raise bad(line, f"packages[{i}].version", f"{vals[f]!r} must be quoted as a string")
            if not isinstance(vals[f], str) or not vals[f]:
                raise bad(line, f"packages[{i}].{f}", "missing or not a string")
        if not _NAME.match(vals["name"]):
            raise bad(line, f"packages[{i}].name", f"{vals['name']!r} is not a Debian package name")
        if not _SHA256.match(vals["sha256"]):
            raise bad(line, f"packages[{i}].sha256", f"{vals['sha256']!r} is not a lowercase sha256")
        if not isinstance(vals["size"], int) or isinstance(vals["size"], bool) or vals["size"] < 0:
            raise bad(line, f"packages[{i}].size", "expected a byte count")
        if vals["suite"] not in suite_map:
            raise bad(line, f"packages[{i}].suite", f"{vals['suite']!r} is not one of the suites ({', '.join(suite_map)})")
        if vals["filename"].startswith("/") or ".." in vals["filename"].split("/"):
            raise bad(line, f"packages[{i}].filename", f"{vals['filename']!r} is not a path below the archive")
        pkg = LockedPackage(**vals)
        if pkg.key in seen:
            raise bad(line, f"packages[{i}]", f"{pkg.name} ({pkg.arch}) is locked twice (also line {seen[pkg.key]})")
        seen[pkg.key] = line
        out.append(pkg)
    return PackageLock(release=data["release"], architecture=data["architecture"], suites=suite_map,
                       resolve=Resolve(**lists), packages=tuple(out), components=tuple(comps),
                       distribution=str(data.get("distribution", "debian")), path=path, index_dates=dates)
