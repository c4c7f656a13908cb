"""The version lockfile ``manifests/versions.yaml``: model, validation, round-trip edits.

The lockfile says exactly what goes into a node image: per Kubernetes minor the
patch release and the sha256 (per architecture) of kubelet, kubeadm, kubectl,
crictl, the CNI plugins, containerd and runc, plus the pause image; the base OS
and the hardening profile. ``docs/lockfile.md`` documents the schema.

The optional top-level ``scope:`` names the lockfile's ownership scope: the
images built from it carry it (``manifest.json`` ``scope``, Glance property
``nodeforge_scope``), and promote retires older images only within it.
Without the key the scope is derived from the file's path
(:func:`nodeforge.scope.derive_scope`, the rule flavors and
inventories use).

:func:`load` validates the whole file and reports every problem with its line
and key path. Edits go through :meth:`Lockfile.with_minor`, which changes only
the values that differ in the round-trip tree, so comments and key order
survive, and :meth:`Lockfile.save` writes atomically.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import re
from pathlib import Path
from typing import Iterable

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from nodeforge.errors import ConfigError
from nodeforge.imagebuild import yamlfile
from nodeforge import scope as IC

SCHEMA_VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "manifests" / "versions.yaml"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")
_MINOR = re.compile(r"^1\.(\d+)$")
# An image reference with a tag or digest: [host[:port]/]path[:tag][@sha256:hex]
_IMAGE = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:\d+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
                    r"(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")


class Arch(str, enum.Enum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class Component(str, enum.Enum):
    KUBELET = "kubelet"
    KUBEADM = "kubeadm"
    KUBECTL = "kubectl"
    CRICTL = "crictl"
    CNI_PLUGINS = "cni_plugins"
    CONTAINERD = "containerd"
    RUNC = "runc"

    @property
    def is_kubernetes(self) -> bool:
        return self in KUBERNETES_BINARIES


KUBERNETES_BINARIES = (Component.KUBELET, Component.KUBEADM, Component.KUBECTL)
COMPANIONS = (Component.CRICTL, Component.CNI_PLUGINS, Component.CONTAINERD, Component.RUNC)


class BaseOS(enum.Enum):
    """Base operating systems the model accepts (Debian 12 is built first)."""

    DEBIAN_12 = ("debian", "12")
    DEBIAN_13 = ("debian", "13")
    UBUNTU_2404 = ("ubuntu", "24.04")

    @property
    def distro(self) -> str:
        return self.value[0]

    @property
    def release(self) -> str:
        return self.value[1]


@dataclasses.dataclass(frozen=True)
class Version:
    """A release version ``MAJOR.MINOR.PATCH[-PRE]`` (leading ``v`` accepted)."""

    major: int
    minor: int
    patch: int
    pre: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Version":
        m = _VERSION.match(str(text).strip())
        if not m:
            raise ValueError(f"not a version: {text!r}")
        return cls(int(m[1]), int(m[2]), int(m[3]), m[4])

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None

    @property
    def minor_key(self) -> str:
        return f"{self.major}.{self.minor}"

    def sort_key(self) -> tuple:
        # A pre-release sorts before its release (1.36.0-rc.1 < 1.36.0).
        return (self.major, self.minor, self.patch, self.pre is None, self.pre or "")

    def __lt__(self, other: "Version") -> bool:
        return self.sort_key() < other.sort_key()

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.pre}" if self.pre else "")


def is_minor(text: str) -> bool:
    """True for a Kubernetes minor like ``1.36``."""
    return bool(_MINOR.match(text))


def minor_sort_key(minor: str) -> tuple[int, int]:
    major, _, m = minor.partition(".")
    return int(major), int(m)


@dataclasses.dataclass(frozen=True)
class Pin:
    """One component at one version, with its sha256 per architecture."""

    component: Component
    version: str
    sha256: dict[Arch, str]


@dataclasses.dataclass(frozen=True)
class MinorPins:
    """Everything pinned for one Kubernetes minor."""

    minor: str
    version: Version
    pause_image: str
    pins: dict[Component, Pin]


@dataclasses.dataclass(frozen=True)
class Artifact:
    """One downloadable file: a component at a version for one architecture."""

    minor: str
    component: Component
    version: str
    arch: Arch
    sha256: str

    @property
    def name(self) -> str:
        return f"{self.component.value} {self.version} {self.arch.value}"

    def to_dict(self) -> dict:
        return {"minor": self.minor, "component": self.component.value, "version": self.version,
                "arch": self.arch.value, "sha256": self.sha256}


@dataclasses.dataclass(frozen=True)
class Hardening:
    profile: str
    version: str


@dataclasses.dataclass(frozen=True)
class Lockfile:
    path: Path
    architectures: tuple[Arch, ...]
    base_os: BaseOS
    hardening: Hardening
    minors: dict[str, MinorPins]
    doc: CommentedMap = dataclasses.field(repr=False, compare=False)
    # Ownership scope of the images built from this lockfile: ``scope:``, else derived from the path.
    scope: str = ""
    scope_source: str = "file"          # "file" (scope: key) or "derived" (from the file's path)

    def minor(self, minor: str) -> MinorPins:
        try:
            return self.minors[minor]
        except KeyError:
            raise ConfigError(path=str(self.path),
                              detail=f"Kubernetes {minor} is not pinned (pinned: {', '.join(self.minors)})") from None

    def artifacts(self, minors: Iterable[str] | None = None,
                  arches: Iterable[Arch] | None = None) -> list[Artifact]:
        chosen = list(minors) if minors else list(self.minors)
        arch_list = [Arch(a) for a in arches] if arches else list(self.architectures)
        out = []
        for minor in chosen:
            entry = self.minor(minor)
            for pin in entry.pins.values():
                for arch in arch_list:
                    if arch not in self.architectures:
                        raise ConfigError(path=str(self.path), detail=f"architecture {arch.value} is not pinned")
                    out.append(Artifact(minor, pin.component, pin.version, arch, pin.sha256[arch]))
        return out

    def dumps(self) -> str:
        return yamlfile.dumps(self.doc)

    def with_minor(self, new: MinorPins) -> "Lockfile":
        """A copy with ``new`` pinned; only differing values change in the YAML tree."""
        doc = copy.deepcopy(self.doc)
        minors = doc["kubernetes"]
        if new.minor in minors:
            _update_minor(minors[new.minor], new)
        else:
            minors[DoubleQuotedScalarString(new.minor)] = _minor_tree(new, self.architectures)
        return parse(self.path, yamlfile.dumps(doc))

    def save(self, path: Path | None = None) -> None:
        yamlfile.atomic_write(Path(path or self.path), self.dumps())


def load(path: Path | str = DEFAULT_PATH) -> Lockfile:
    path = Path(path)
    return _Validator(path).lockfile(yamlfile.load(path))


def parse(path: Path | str, text: str) -> Lockfile:
    path = Path(path)
    return _Validator(path).lockfile(yamlfile.load(path, text))


# --- editing the round-trip tree --------------------------------------------------

def _set(node: CommentedMap, key: str, value: str) -> None:
    if node.get(key) != value:
        node[key] = value


def _update_minor(node: CommentedMap, new: MinorPins) -> None:
    _set(node, "version", str(new.version))
    _set(node, "pause_image", new.pause_image)
    for comp, pin in new.pins.items():
        if comp.is_kubernetes:
            target = node["binaries"][comp.value]
        else:
            comp_node = node["components"][comp.value]
            _set(comp_node, "version", pin.version)
            target = comp_node["sha256"]
        for arch, digest in pin.sha256.items():
            _set(target, arch.value, digest)


def _minor_tree(new: MinorPins, arches: tuple[Arch, ...]) -> CommentedMap:
    def digests(pin: Pin) -> CommentedMap:
        return CommentedMap((a.value, pin.sha256[a]) for a in arches)

    tree = CommentedMap()
    tree["version"] = str(new.version)
    tree["pause_image"] = new.pause_image
    tree["binaries"] = CommentedMap((c.value, digests(new.pins[c])) for c in KUBERNETES_BINARIES)
    tree["components"] = CommentedMap(
        (c.value, CommentedMap([("version", new.pins[c].version), ("sha256", digests(new.pins[c]))]))
        for c in COMPANIONS)
    return tree


# --- validation -------------------------------------------------------------------

class LockfileError(ConfigError):
    """The lockfile is invalid; lists every problem as ``file:line: key.path: detail``."""

    message = "{path}: {detail}"

    def __init__(self, file: Path, problems: list[tuple[int | None, str, str]]):
        self.problems = problems
        lines = [f"{file}:{line or '?'}: {key}: {detail}" for line, key, detail in problems]
        first_line = problems[0][0]
        head = f"{file}:{first_line}" if first_line else str(file)
        if len(lines) == 1:
            detail = f"{problems[0][1]}: {problems[0][2]}"
        else:
            detail = f"{len(lines)} problems:\n  " + "\n  ".join(lines)
        super().__init__(path=head, detail=detail)


def _keypath(parts: Iterable) -> str:
    out = ""
    for part in parts:
        part = str(part)
        out += f'["{part}"]' if "." in part else (f".{part}" if out else part)
    return out or "(top level)"


class _Validator:
    def __init__(self, path: Path):
        self.path = path
        self.problems: list[tuple[int | None, str, str]] = []

    def fail(self, parent, key, parts, detail: str) -> None:
        self.problems.append((yamlfile.line_of(parent, key), _keypath(parts), detail))

    def mapping(self, parent, key, parts, allowed: Iterable[str] | None, required: Iterable[str]):
        """``parent[key]`` as a mapping with only ``allowed`` keys (None: any) and all ``required``."""
        node = parent[key] if key is not None else parent
        if not isinstance(node, CommentedMap):
            self.fail(parent, key, parts, f"expected a mapping, got {_kind(node)}")
            return None
        for k in node:
            if allowed is not None and str(k) not in allowed:
                self.fail(node, k, [*parts, k], f"unknown key (allowed: {', '.join(allowed)})")
        ok = True
        for k in required:
            if k not in node:
                self.fail(parent if key is not None else node, key, parts, f"missing key '{k}'")
                ok = False
        return node if ok else None

    def string(self, parent, key, parts, pattern: re.Pattern | None = None, what: str = "") -> str | None:
        value = parent[key]
        if not isinstance(value, str):
            hint = " (quote it)" if isinstance(value, (int, float)) else ""
            self.fail(parent, key, parts, f"expected a string{hint}, got {_kind(value)} {value!r}")
            return None
        if pattern is not None and not pattern.match(value):
            self.fail(parent, key, parts, f"expected {what}, got {value!r}")
            return None
        return str(value)

    def version(self, parent, key, parts, *, minor: str | None = None) -> Version | None:
        text = self.string(parent, key, parts, _VERSION, "a version like 1.36.4")
        if text is None:
            return None
        version = Version.parse(text)
        if version.is_prerelease:
            self.fail(parent, key, parts, f"pre-release {text} cannot be pinned")
            return None
        if minor is not None and version.minor_key != minor:
            self.fail(parent, key, parts, f"version {text} is not a {minor} release")
            return None
        return version

    def digests(self, parent, key, parts, arches) -> dict[Arch, str] | None:
        node = self.mapping(parent, key, parts, [a.value for a in arches], [a.value for a in arches])
        if node is None:
            return None
        out = {}
        for arch in arches:
            digest = self.string(node, arch.value, [*parts, arch.value], _SHA256,
                                 "a sha256 digest (64 lowercase hex characters)")
            if digest is not None:
                out[arch] = digest
        return out if len(out) == len(arches) else None

    def lockfile(self, doc) -> Lockfile:
        top = self.mapping(doc, None, [], ["schema_version", "scope", "architectures", "base_os", "hardening",
                                           "kubernetes"],
                           ["schema_version", "architectures", "base_os", "hardening", "kubernetes"])
        if top is None:
            raise LockfileError(self.path, self.problems or [(None, "(top level)", "empty lockfile")])
        if top["schema_version"] != SCHEMA_VERSION:
            self.fail(top, "schema_version", ["schema_version"],
                      f"unsupported schema version {top['schema_version']!r} (this nodeforge reads {SCHEMA_VERSION})")
        scope, scope_source = self.scope(top)
        arches = self.architectures(top)
        base_os = self.base_os(top)
        hardening = self.hardening(top)
        minors = {}
        kube = self.mapping(top, "kubernetes", ["kubernetes"], None, [])
        if kube is not None and not kube:
            self.fail(top, "kubernetes", ["kubernetes"], "no Kubernetes minor pinned")
        if kube is not None and arches:
            for key in kube:
                entry = self.minor(kube, key, arches)
                if entry is not None:
                    minors[entry.minor] = entry
        if self.problems:
            raise LockfileError(self.path, self.problems)
        return Lockfile(self.path, arches, base_os, hardening, minors, doc, scope, scope_source)

    def scope(self, top) -> tuple[str, str]:
        """The lockfile's ownership scope and where it came from (the shared rule,
        :func:`IC.scope_problem` / :func:`IC.derive_scope`)."""
        if "scope" not in top:
            return IC.derive_scope(self.path), "derived"
        value = top["scope"]
        problem = IC.scope_problem(value)
        if problem is not None:
            self.fail(top, "scope", ["scope"], problem)
            return "", "file"
        return str(value), "file"

    def architectures(self, top) -> tuple[Arch, ...]:
        value = top["architectures"]
        names = [a.value for a in Arch]
        if not isinstance(value, list) or not value:
            self.fail(top, "architectures", ["architectures"], f"expected a non-empty list of {', '.join(names)}")
            return ()
        out = []
        for i, item in enumerate(value):
            if item not in names:
                self.fail(value, i, ["architectures", i], f"unknown architecture {item!r} (known: {', '.join(names)})")
            elif Arch(item) in out:
                self.fail(value, i, ["architectures", i], f"duplicate architecture {item!r}")
            else:
                out.append(Arch(item))
        return tuple(out) if len(out) == len(value) else ()

    def base_os(self, top) -> BaseOS | None:
        node = self.mapping(top, "base_os", ["base_os"], ["distro", "release"], ["distro", "release"])
        if node is None:
            return None
        distro = self.string(node, "distro", ["base_os", "distro"])
        release = self.string(node, "release", ["base_os", "release"])
        if distro is None or release is None:
            return None
        for candidate in BaseOS:
            if candidate.value == (distro, release):
                return candidate
        known = ", ".join(f"{b.distro} {b.release}" for b in BaseOS)
        self.fail(node, "release", ["base_os"], f"unsupported base OS {distro} {release} (supported: {known})")
        return None

    def hardening(self, top) -> Hardening | None:
        node = self.mapping(top, "hardening", ["hardening"], ["profile", "version"], ["profile", "version"])
        if node is None:
            return None
        profile = self.string(node, "profile", ["hardening", "profile"], re.compile(r"^[a-z0-9][a-z0-9_.-]*$"),
                              "a profile name (lowercase letters, digits, '.', '_', '-')")
        version = self.string(node, "version", ["hardening", "version"], re.compile(r"^\d+(\.\d+)*$"),
                              "a version like 1.1.0")
        return Hardening(profile, version) if profile and version else None

    def minor(self, kube, key, arches) -> MinorPins | None:
        parts = ["kubernetes", key]
        if not isinstance(key, str) or not _MINOR.match(key):
            hint = " (quote it: \"1.30\" would otherwise read as the number 1.3)" if isinstance(key, float) else ""
            self.fail(kube, key, parts, f"expected a Kubernetes minor like \"1.36\"{hint}")
            return None
        node = self.mapping(kube, key, parts, ["version", "pause_image", "binaries", "components"],
                            ["version", "pause_image", "binaries", "components"])
        if node is None:
            return None
        version = self.version(node, "version", [*parts, "version"], minor=key)
        pause = self.string(node, "pause_image", [*parts, "pause_image"], _IMAGE,
                            "an image reference like <registry>/pause:3.10.1")
        if pause is not None and (why := image_unpinned(pause)):
            self.fail(node, "pause_image", [*parts, "pause_image"], f"{why}, got {pause!r}")
            pause = None
        pins: dict[Component, Pin] = {}
        names = [c.value for c in KUBERNETES_BINARIES]
        binaries = self.mapping(node, "binaries", [*parts, "binaries"], names, names)
        if binaries is not None:
            for comp in KUBERNETES_BINARIES:
                digests = self.digests(binaries, comp.value, [*parts, "binaries", comp.value], arches)
                if digests is not None and version is not None:
                    pins[comp] = Pin(comp, str(version), digests)
        names = [c.value for c in COMPANIONS]
        comps = self.mapping(node, "components", [*parts, "components"], names, names)
        if comps is not None:
            for comp in COMPANIONS:
                cparts = [*parts, "components", comp.value]
                cnode = self.mapping(comps, comp.value, cparts, ["version", "sha256"], ["version", "sha256"])
                if cnode is None:
                    continue
                cversion = self.version(cnode, "version", [*cparts, "version"])
                digests = self.digests(cnode, "sha256", [*cparts, "sha256"], arches)
                if cversion is not None and digests is not None:
                    pins[comp] = Pin(comp, str(cversion), digests)
        if version is None or pause is None or len(pins) != len(Component):
            return None
        return MinorPins(key, version, pause, {c: pins[c] for c in Component})


def image_unpinned(ref: str) -> str | None:
    """Why the image reference ``ref`` does not pin an image (None when its
    tag, other than ``latest``, or its ``@sha256:`` digest does)."""
    name, _, digest = ref.partition("@")
    if digest:
        return None
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return "needs a tag or an @sha256: digest (like registry.k8s.io/pause:3.10.1)"
    if last.rsplit(":", 1)[1] == "latest":
        return "the tag 'latest' moves; pin a version tag or an @sha256: digest"
    return None


def _kind(value) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
