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

:func:`load` reads the file through the one safe loader and validates it
against its declaration (:class:`LockfileDecl`, documented in
``docs/schemas.md``), reporting every problem with its line and key path. Edits go through :meth:`Lockfile.with_minor`, which changes only
the values that differ in the round-trip tree, so comments and key order
survive, and :meth:`Lockfile.save` writes atomically.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import re
from pathlib import Path
from typing import Annotated, Any, Iterable

from pydantic import AfterValidator, ValidationInfo, field_validator
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from nodeforge.scope import SCOPE_RULE, derive_scope, scope_problem
from nodeforge.base import fs
from nodeforge.errors import ConfigError
from nodeforge.schema import loader
from nodeforge.schema import Declared, Rule, SchemaError, register, validate, vocab
from nodeforge.schema import load as schema_load

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
        return loader.dumps(self.doc)

    def with_minor(self, new: MinorPins) -> "Lockfile":
        """A copy with ``new`` pinned; only differing values change in the YAML tree."""
        doc = copy.deepcopy(self.doc)
        minors = doc["kubernetes"]
        if new.minor in minors:
            _update_minor(minors[new.minor], new)
        else:
            minors[DoubleQuotedScalarString(new.minor)] = _minor_tree(new, self.architectures)
        return parse(self.path, loader.dumps(doc))

    def save(self, path: Path | None = None) -> None:
        fs.atomic_write(Path(path or self.path), self.dumps())


def load(path: Path | str = DEFAULT_PATH) -> Lockfile:
    path = Path(path)
    return _from_document(path, schema_load(path, format="yaml", limits=KIND.limits))


def parse(path: Path | str, text: str) -> Lockfile:
    path = Path(path)
    return _from_document(path, schema_load(path, text, format="yaml", limits=KIND.limits))


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


# --- validation: the declaration ----------------------------------------------------

def _arch_name(value: str) -> str:
    names = [a.value for a in Arch]
    if value not in names:
        raise ValueError(f"unknown architecture {value!r} (known: {', '.join(names)})")
    return value


def _architectures(value: list) -> list:
    names = [a.value for a in Arch]
    if not value:
        raise ValueError(f"expected a non-empty list of {', '.join(names)}")
    dupes = sorted({a for a in value if value.count(a) > 1})
    if dupes:
        raise ValueError(f"duplicate architecture {dupes[0]!r}")
    return value


def _all_arches(value: dict, info: ValidationInfo) -> dict:
    arches = (info.context or {}).get("architectures")
    if arches is None:         # `architectures` itself is invalid (reported there)
        return value
    missing = [a for a in arches if a not in value]
    extra = [a for a in value if a not in arches]
    if missing:
        raise ValueError(f"missing key '{missing[0]}' (one sha256 per architecture: {', '.join(arches)})")
    if extra:
        raise ValueError(f"unknown key '{extra[0]}' (architectures: {', '.join(arches)})")
    return value


def _pinnable(value: str) -> str:
    if Version.parse(value).is_prerelease:
        raise ValueError(f"pre-release {value} cannot be pinned")
    return value


def _pause_image(value: str) -> str:
    if not _IMAGE.match(value):
        raise ValueError(f"expected an image reference like <registry>/pause:3.10.1, got {value!r}")
    why = image_unpinned(value)
    if why:
        raise ValueError(f"{why}, got {value!r}")
    return value


def _scope(value):
    problem = scope_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _schema_version(value: int) -> int:
    if value != SCHEMA_VERSION:
        raise ValueError(f"unsupported schema version {value!r} (this nodeforge reads {SCHEMA_VERSION})")
    return value


def _some_minor(value: dict) -> dict:
    if not value:
        raise ValueError("no Kubernetes minor pinned")
    return value


ArchName = Annotated[str, AfterValidator(_arch_name), Rule("one of " + ", ".join(a.value for a in Arch))]
ArchDigests = Annotated[dict[ArchName, vocab.Sha256], AfterValidator(_all_arches),
                        Rule("one sha256 per architecture listed in `architectures`")]
PinnedVersion = Annotated[vocab.SemVer, AfterValidator(_pinnable), Rule("no pre-release")]


class BaseOSDecl(Declared):
    """The base operating system (a supported pair)."""

    distro: str
    release: Annotated[str, Rule("with distro, one of " + ", ".join(f"{b.distro} {b.release}" for b in BaseOS))]

    @field_validator("release")
    @classmethod
    def _supported(cls, release: str, info: ValidationInfo) -> str:
        distro = info.data.get("distro")
        if distro is not None and (distro, release) not in [b.value for b in BaseOS]:
            known = ", ".join(f"{b.distro} {b.release}" for b in BaseOS)
            raise ValueError(f"unsupported base OS {distro} {release} (supported: {known})")
        return release


class HardeningDecl(Declared):
    """The hardening profile applied to the image."""

    profile: vocab.Slug
    version: vocab.DottedVersion


class BinariesDecl(Declared):
    """The Kubernetes binaries of the minor's release: sha256 per architecture."""

    kubelet: ArchDigests
    kubeadm: ArchDigests
    kubectl: ArchDigests


class ComponentDecl(Declared):
    """A companion release asset pinned per minor."""

    version: PinnedVersion
    sha256: ArchDigests


class ComponentsDecl(Declared):
    """The companion components of one minor."""

    crictl: ComponentDecl
    cni_plugins: ComponentDecl
    containerd: ComponentDecl
    runc: ComponentDecl


class MinorDecl(Declared):
    """Everything pinned for one Kubernetes minor (the key, like "1.36")."""

    version: Annotated[PinnedVersion, Rule("a release of the minor it is pinned under")]
    pause_image: Annotated[str, AfterValidator(_pause_image),
                           Rule("an image reference with a tag (not latest) or an @sha256: digest")]
    binaries: BinariesDecl
    components: ComponentsDecl


class LockfileDecl(Declared):
    """The version lockfile (``docs/lockfile.md`` explains each part)."""

    schema_version: Annotated[int, AfterValidator(_schema_version), Rule(f"{SCHEMA_VERSION}")]
    scope: Annotated[Any, AfterValidator(_scope), Rule(SCOPE_RULE + "; default: derived from the path")] = None
    architectures: Annotated[list[ArchName], AfterValidator(_architectures), Rule("non-empty, no duplicates")]
    base_os: BaseOSDecl
    hardening: HardeningDecl
    kubernetes: Annotated[dict[vocab.KubeMinor, MinorDecl], AfterValidator(_some_minor),
                          Rule("at least one minor")]


KIND = register("lockfile", LockfileDecl, title="Version lockfile", path="manifests/versions.yaml",
                description="What goes into a node image: per Kubernetes minor the release, the pause image "
                            "and every artifact's sha256 per architecture (see docs/lockfile.md).")


class LockfileError(SchemaError):
    """The lockfile is invalid; lists every problem as ``file:line: key.path: detail``."""


def _checks(document, decl: LockfileDecl):
    for minor, entry in decl.kubernetes.items():
        if Version.parse(entry.version).minor_key != minor:
            yield document.problem(("kubernetes", minor, "version"),
                                   f"version {entry.version} is not a {minor} release")


def _from_document(path: Path, document) -> Lockfile:
    raw = document.data
    arches = raw.get("architectures") if isinstance(raw, dict) else None
    known = [a.value for a in Arch]
    valid = isinstance(arches, list) and arches and len(set(map(str, arches))) == len(arches) and \
        all(isinstance(a, str) and a in known for a in arches)
    context = {"architectures": arches if valid else None}
    try:
        decl = validate(document, LockfileDecl, context=context, checks=_checks)
    except SchemaError as exc:
        raise LockfileError(exc.file, exc.problems) from None
    arch_t = tuple(Arch(a) for a in decl.architectures)
    base_os = next(b for b in BaseOS if b.value == (decl.base_os.distro, decl.base_os.release))
    minors = {}
    for minor, entry in decl.kubernetes.items():
        version = Version.parse(entry.version)
        pins: dict[Component, Pin] = {}
        for comp in KUBERNETES_BINARIES:
            digests = getattr(entry.binaries, comp.value)
            pins[comp] = Pin(comp, str(version), {a: digests[a.value] for a in arch_t})
        for comp in COMPANIONS:
            c = getattr(entry.components, comp.value)
            pins[comp] = Pin(comp, str(Version.parse(c.version)), {a: c.sha256[a.value] for a in arch_t})
        minors[minor] = MinorPins(minor, version, entry.pause_image, {c: pins[c] for c in Component})
    if "scope" in raw:
        scope, scope_source = str(decl.scope), "file"
    else:
        scope, scope_source = derive_scope(path), "derived"
    return Lockfile(path, arch_t, base_os, Hardening(decl.hardening.profile, decl.hardening.version), minors,
                    document.doc, scope, scope_source)


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

