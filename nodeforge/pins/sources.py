"""Where artifacts come from: upstream URL layouts, and one mirror setting per source.

Each :class:`SourceName` has an upstream base URL and a path layout below it.
A mirror of the same layout replaces only the base URL, set in
``manifests/sources.yaml`` (``mirrors: {<source>: <url>}``) or the environment
(``NODEFORGE_MIRROR_<SOURCE>``, which wins), declared by :class:`SourcesDecl`
(``docs/schemas.md``). A URL with credentials is refused, never echoed; a
mirror behind a login reads it from ``~/.netrc``. Everything else -- paths, published
checksum files, stable markers -- is identical for upstream and any mirror.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from pathlib import Path
from typing import Annotated, Mapping

from nodeforge.base import sums
from nodeforge.errors import ConfigError
from nodeforge.pins.lockfile import Arch, Artifact, Component
from nodeforge.redact import redact_url
from nodeforge.schema import Declared, Rule, register, validate, vocab
from nodeforge.schema import load as schema_load

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "manifests" / "sources.yaml"
ENV_PREFIX = "NODEFORGE_MIRROR_"


class SourceName(str, enum.Enum):
    KUBERNETES = "kubernetes"
    CRICTL = "crictl"
    CNI_PLUGINS = "cni_plugins"
    CONTAINERD = "containerd"
    RUNC = "runc"

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.value.upper()


@dataclasses.dataclass(frozen=True)
class Layout:
    """Paths below a source's base URL. Placeholders: version, arch, name."""

    upstream: str
    artifact: str
    # Published checksum file: "<hex>" or sha256sum lines "<hex>  <file>".
    checksum: str


LAYOUTS: dict[SourceName, Layout] = {
    SourceName.KUBERNETES: Layout(
        "https://dl.k8s.io", "release/v{version}/bin/linux/{arch}/{name}", "release/v{version}/bin/linux/{arch}/{name}.sha256"),
    SourceName.CRICTL: Layout(
        "https://github.com/kubernetes-sigs/cri-tools/releases/download",
        "v{version}/crictl-v{version}-linux-{arch}.tar.gz", "v{version}/crictl-v{version}-linux-{arch}.tar.gz.sha256"),
    SourceName.CNI_PLUGINS: Layout(
        "https://github.com/containernetworking/plugins/releases/download",
        "v{version}/cni-plugins-linux-{arch}-v{version}.tgz", "v{version}/cni-plugins-linux-{arch}-v{version}.tgz.sha256"),
    SourceName.CONTAINERD: Layout(
        "https://github.com/containerd/containerd/releases/download",
        "v{version}/containerd-{version}-linux-{arch}.tar.gz", "v{version}/containerd-{version}-linux-{arch}.tar.gz.sha256sum"),
    SourceName.RUNC: Layout(
        "https://github.com/opencontainers/runc/releases/download", "v{version}/runc.{arch}", "v{version}/runc.sha256sum"),
}

# Kubernetes release markers: the newest stable release overall, and per minor.
STABLE_MARKER = "release/stable.txt"
MINOR_MARKER = "release/stable-{minor}.txt"

SOURCE_OF: dict[Component, SourceName] = {
    Component.KUBELET: SourceName.KUBERNETES,
    Component.KUBEADM: SourceName.KUBERNETES,
    Component.KUBECTL: SourceName.KUBERNETES,
    Component.CRICTL: SourceName.CRICTL,
    Component.CNI_PLUGINS: SourceName.CNI_PLUGINS,
    Component.CONTAINERD: SourceName.CONTAINERD,
    Component.RUNC: SourceName.RUNC,
}


def relpath(component: Component, version: str, arch: Arch) -> str:
    """Path of an artifact below its source's base URL (also its place in a bundle)."""
    layout = LAYOUTS[SOURCE_OF[component]]
    return layout.artifact.format(version=version, arch=arch.value, name=component.value)


def checksum_relpath(component: Component, version: str, arch: Arch) -> str:
    layout = LAYOUTS[SOURCE_OF[component]]
    return layout.checksum.format(version=version, arch=arch.value, name=component.value)


@dataclasses.dataclass(frozen=True)
class Sources:
    """Effective base URL per source (the upstream default or its mirror)."""

    mirrors: Mapping[SourceName, str] = dataclasses.field(default_factory=dict)

    def base(self, source: SourceName) -> str:
        return (self.mirrors.get(source) or LAYOUTS[source].upstream).rstrip("/")

    def url(self, source: SourceName, path: str) -> str:
        return f"{self.base(source)}/{path}"

    def artifact_url(self, component: Component, version: str, arch: Arch) -> str:
        return self.url(SOURCE_OF[component], relpath(component, version, arch))

    def checksum_url(self, component: Component, version: str, arch: Arch) -> str:
        return self.url(SOURCE_OF[component], checksum_relpath(component, version, arch))

    def marker_url(self, minor: str | None = None) -> str:
        path = MINOR_MARKER.format(minor=minor) if minor else STABLE_MARKER
        return self.url(SourceName.KUBERNETES, path)

    def url_for(self, artifact: Artifact) -> str:
        return self.artifact_url(artifact.component, artifact.version, artifact.arch)

    def hint(self, source: SourceName) -> str:
        where = "mirror" if source in self.mirrors else "upstream"
        return (f"source '{source.value}' uses its {where} {redact_url(self.base(source))}; check the network, "
                f"or set mirrors.{source.value} in manifests/sources.yaml or ${source.env_var}")

    def to_dict(self) -> dict:
        return {s.value: {"base_url": redact_url(self.base(s)), "mirror": s in self.mirrors} for s in SourceName}

    @classmethod
    def load(cls, path: Path | str | None = DEFAULT_CONFIG, env: Mapping[str, str] | None = None) -> "Sources":
        """Mirrors from ``path`` (optional file), then ``NODEFORGE_MIRROR_*`` in ``env``.

        A mirror URL holding credentials (``user:pass@``, ``?token=``) is refused
        without echoing them; a mirror that needs a login reads it from
        ``~/.netrc`` (requests honours it)."""
        env = os.environ if env is None else env
        mirrors: dict[SourceName, str] = {}
        if path is not None and Path(path).exists():
            mirrors.update(_read_config(Path(path)))
        for source in SourceName:
            value = env.get(source.env_var)
            if value:
                mirrors[source] = _check_url(value, source.env_var)
            elif value == "":
                mirrors.pop(source, None)  # explicitly back to upstream
        return cls(mirrors)


Mirror = Annotated[vocab.BaseUrl | None, Rule("empty: the upstream default")]


class MirrorsDecl(Declared):
    """One mirror base URL per source (empty: the source's upstream)."""

    kubernetes: Mirror = None
    crictl: Mirror = None
    cni_plugins: Mirror = None
    containerd: Mirror = None
    runc: Mirror = None


class SourcesDecl(Declared):
    """Mirror settings (the environment's NODEFORGE_MIRROR_<SOURCE> wins over the file)."""

    mirrors: MirrorsDecl | None = None


KIND = register("sources", SourcesDecl, title="Mirror settings", path="manifests/sources.yaml",
                description="The base URL of a mirror per artifact source, with the upstream layout below it. "
                            "Credentials never go in a URL (refused without being echoed): a mirror that needs "
                            "a login reads it from ~/.netrc. `NODEFORGE_MIRROR_<SOURCE>` (same rule) wins.")


def _check_url(value: str, where: str) -> str:
    """``value`` as a mirror base URL (``vocab.check_base_url``); the error names
    ``where`` and shows the URL with its credentials redacted."""
    try:
        return vocab.check_base_url(value)
    except ValueError as exc:
        raise ConfigError(path=where, detail=str(exc)) from None


def _read_config(path: Path) -> dict[SourceName, str]:
    document = schema_load(path, format="yaml", limits=KIND.limits)
    if document.data is None:
        return {}
    decl = validate(document, SourcesDecl)
    if decl.mirrors is None:
        return {}
    return {SourceName(name): value for name, value in decl.mirrors.model_dump().items() if value}


_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


def parse_checksum_file(text: str, filename: str) -> str | None:
    """The sha256 for ``filename`` in a published checksum file, or None.

    Accepts a bare digest (the Kubernetes ``.sha256`` files) or ``sha256sum``
    output lines (``<hex>  <name>`` or ``<hex> *<name>``)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) == 1 and _HEX.match(lines[0][0]):
        return lines[0][0].lower()
    for name, digest in sums.parse(text, strict=False).items():
        if _HEX.match(digest) and name.rsplit("/", 1)[-1] == filename:
            return digest
    return None
