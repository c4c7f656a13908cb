"""Render the element tree: pins and the hardening profile into diskimage-builder elements.

``elements/`` in the checkout is the source. :func:`render` copies it into a
self-contained tree for one Kubernetes minor and architecture:

* files ending in ``.j2`` are jinja2 templates, rendered with the pins (their
  ``.j2`` suffix dropped); everything else is copied byte for byte;
* ``k8s-hardening/k8s-hardening-files/etc/nodeforge/hardening.json`` is generated from
  ``k8s-hardening/profile.yaml`` (the controls and their checks);
* ``nodeforge.env`` next to ``elements/`` holds the diskimage-builder settings
  that do not depend on the build host (distribution element, release,
  element list); ``pins.json`` lists the artifacts the elements install.

Each element has one concern (see its ``README.rst``): one element per pinned
artifact (``kubelet``, ``kubeadm``, ``kubectl``, ``crictl``, ``containerd``,
``runc``, ``cni-plugins``: :data:`COMPONENT_ELEMENT`), each reading only its
own pins from its rendered ``environment.d/10-<element>``; ``kubernetes-node``
is a meta element depending on all of them; ``k8s-hardening`` (settings and
permissions), ``image-hygiene``, ``nodeforge-rootfs`` and the two variants.
:data:`DIB_ELEMENTS` is what disk-image-create is given;
:data:`NODEFORGE_ELEMENTS` adds the nodeforge elements those pull in through
``element-deps`` (every nodeforge element in the image: the package base
takes the union of their package lists).

The output is deterministic: same inputs, byte-identical tree (sorted walks,
fixed file modes, sorted JSON keys, no timestamps). :func:`tree_digest` names
a tree by its content; it goes into the build manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import jinja2

from nodeforge.base import fs
from nodeforge.errors import ConfigError, ExitCode, NodeforgeError
from nodeforge.pins.lockfile import Arch, BaseOS, Component, Lockfile
from nodeforge.pins.sources import relpath
from nodeforge.schema import loader

ELEMENTS_SRC = Path(__file__).resolve().parents[2] / "elements"
MARKER = ".nodeforge-render"
RECORD = "render.json"        # what the tree was rendered from (read back by :func:`load`)
RECORD_SCHEMA = "nodeforge-render/1"
PROFILE = Path("k8s-hardening") / "profile.yaml"
HARDENING_JSON = Path("k8s-hardening") / "k8s-hardening-files" / "etc" / "nodeforge" / "hardening.json"

# nodeforge's elements given to disk-image-create after the distribution element, in
# that order (nodeforge.env's NODEFORGE_ELEMENTS); their element-deps pull in the rest.
DIB_ELEMENTS = ("nodeforge-rootfs", "kubernetes-node", "k8s-hardening", "image-hygiene",
                "nodeforge-vm", "nodeforge-baremetal")
VARIANTS = ("vm", "baremetal")


def element_closure(elements_dir: Path, names) -> tuple[str, ...]:
    """``names`` and every element under ``elements_dir`` they reach through
    ``element-deps``, each once, depth first in the order given (elements not
    under ``elements_dir``, such as diskimage-builder's own, are left out)."""
    out: list[str] = []

    def visit(name: str) -> None:
        elem = Path(elements_dir) / name
        if name in out or not elem.is_dir():
            return
        out.append(name)
        deps = elem / "element-deps"
        if deps.is_file():
            for line in deps.read_text().splitlines():
                dep = line.split("#", 1)[0].strip()
                if dep:
                    visit(dep)

    for name in names:
        visit(name)
    return tuple(out)


# Every nodeforge element in the image: DIB_ELEMENTS and the nodeforge elements they depend on.
NODEFORGE_ELEMENTS = element_closure(ELEMENTS_SRC, DIB_ELEMENTS)


@dataclasses.dataclass(frozen=True)
class Distro:
    element: str      # diskimage-builder distribution element
    release: str      # DIB_RELEASE


DISTROS: dict[BaseOS, Distro] = {
    BaseOS.DEBIAN_12: Distro("debian-minimal", "bookworm"),
}

# The element that installs each pinned artifact (its environment.d carries that pin only).
COMPONENT_ELEMENT = {
    Component.KUBELET: "kubelet", Component.KUBEADM: "kubeadm", Component.KUBECTL: "kubectl",
    Component.CRICTL: "crictl", Component.CONTAINERD: "containerd", Component.RUNC: "runc",
    Component.CNI_PLUGINS: "cni-plugins",
}

# File name each element stages an artifact under (see the elements' extra-data.d).
STAGED_NAME = {
    Component.KUBELET: "kubelet", Component.KUBEADM: "kubeadm", Component.KUBECTL: "kubectl",
    Component.CRICTL: "crictl.tar.gz", Component.CONTAINERD: "containerd.tar.gz",
    Component.RUNC: "runc", Component.CNI_PLUGINS: "cni-plugins.tgz",
}


class RenderError(NodeforgeError):
    message = "render: {detail}"


class RenderOutError(RenderError):
    """``--out`` names no usable directory (empty, or someone else's): a usage error."""

    exit_code = ExitCode.USAGE


@dataclasses.dataclass(frozen=True)
class Rendered:
    root: Path
    elements: Path
    env_file: Path
    pins_file: Path
    digest: str
    minor: str
    version: str
    arch: Arch
    distro: Distro

    def to_dict(self) -> dict:
        return {"root": str(self.root), "elements": str(self.elements), "env_file": str(self.env_file),
                "pins": str(self.pins_file), "element_tree_digest": self.digest, "minor": self.minor,
                "kubernetes_version": self.version, "arch": self.arch.value,
                "distro": {"element": self.distro.element, "release": self.distro.release}}


def distro_for(lock: Lockfile) -> Distro:
    try:
        return DISTROS[lock.base_os]
    except KeyError:
        supported = ", ".join(f"{b.distro} {b.release}" for b in DISTROS)
        raise ConfigError(path=str(lock.path), detail=f"base_os {lock.base_os.distro} {lock.base_os.release} "
                                                      f"cannot be built yet (image build supports: {supported})") from None


@dataclasses.dataclass(frozen=True)
class StagedArtifact:
    """One pinned artifact an image installs: what the elements stage (``file``, checked by
    ``sha256``), where the upstream release server has it (``source_path``) and what the manifest
    records. The templates read its fields (``pins.kubelet.sha256``); ``pins.json`` holds
    :meth:`to_dict`."""

    component: Component
    version: str
    arch: Arch
    sha256: str
    file: str
    source_path: str

    @property
    def name(self) -> str:
        return f"{self.component.value} {self.version} {self.arch.value}"

    def to_dict(self) -> dict:
        return {"component": self.component.value, "version": self.version, "arch": self.arch.value,
                "sha256": self.sha256, "file": self.file, "source_path": self.source_path}

    def manifest_entry(self) -> dict:
        """The manifest's ``artifacts[]`` item (no staging name: that is the build's business)."""
        return {k: v for k, v in self.to_dict().items() if k != "file"}


def pins_for(lock: Lockfile, minor: str, arch: Arch) -> list[StagedArtifact]:
    """The artifacts one image installs, in a stable order."""
    entry = lock.minor(minor)
    return [StagedArtifact(comp, entry.pins[comp].version, arch, entry.pins[comp].sha256[arch], STAGED_NAME[comp],
                           relpath(comp, entry.pins[comp].version, arch)) for comp in Component]


def load_profile(src: Path, lock: Lockfile) -> dict:
    path = src / PROFILE
    try:
        profile = loader.load(path).data
    except ConfigError as exc:
        why = exc.kwargs.get("detail", exc)
        raise ConfigError(path=str(path), detail=f"cannot read the hardening profile: {why}") from None
    if not isinstance(profile, dict) or not isinstance(profile.get("controls"), list):
        raise ConfigError(path=str(path), detail="expected a mapping with 'profile', 'version' and 'controls'")
    want = (lock.hardening.profile, lock.hardening.version)
    have = (str(profile.get("profile")), str(profile.get("version")))
    if have != want:
        raise ConfigError(path=str(path), detail=f"profile {have[0]} {have[1]} does not match the lockfile's "
                                                 f"hardening {want[0]} {want[1]}",
                          hint="bump the profile version in both files together")
    ids = [c.get("id") for c in profile["controls"]]
    if len(set(ids)) != len(ids) or not all(isinstance(i, str) and i.startswith("NF-HARD-") for i in ids):
        raise ConfigError(path=str(path), detail="every control needs a unique id NF-HARD-NNN")
    return profile


def render(lock: Lockfile, minor: str, out: Path, *, arch: Arch = Arch.AMD64,
           src: Path = ELEMENTS_SRC) -> Rendered:
    """Render ``src`` for ``minor``/``arch`` into ``out`` (replaced atomically)."""
    entry = lock.minor(minor)
    distro = distro_for(lock)
    if arch not in lock.architectures:
        raise ConfigError(path=str(lock.path), detail=f"architecture {arch.value} is not pinned")
    profile = load_profile(src, lock)
    pins = pins_for(lock, minor, arch)
    context = {
        "minor": minor, "arch": arch.value, "lockfile_name": lock.path.name,
        "pins": {p.component.value: p for p in pins}, "pause_image": entry.pause_image,
        "hardening": {"profile": lock.hardening.profile, "version": lock.hardening.version},
        "profile": profile,
    }
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)

    if not str(out).strip():
        raise RenderOutError(detail="--out is empty; name the directory for the rendered tree")
    out = Path(out)
    target = Path(os.path.abspath(out))
    if target == Path.cwd() or target in Path.cwd().parents:
        raise RenderOutError(detail=f"--out {out} is the current directory or one of its parents, which the render "
                                    "would replace; name a new directory")
    if out.exists() and not out.is_dir():
        raise RenderOutError(detail=f"{out} exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise RenderOutError(detail=f"{out} exists and is not a nodeforge render; choose an empty or new directory")
    if out.name in ("", ".", ".."):           # "x/.." and the like: stage beside the real directory
        out = target
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        elements = tmp / "elements"
        _render_tree(src, elements, env, context)
        hardening = {"profile": profile["profile"], "version": str(profile["version"]),
                     "controls": profile["controls"]}
        _write(elements / HARDENING_JSON, _json(hardening), 0o644)
        _write(tmp / "pins.json", _json({"minor": minor, "kubernetes_version": str(entry.version),
                                         "arch": arch.value, "pause_image": entry.pause_image,
                                         "artifacts": [p.to_dict() for p in pins]}), 0o644)
        element_list = [distro.element, *DIB_ELEMENTS]
        env_lines = [
            "# diskimage-builder settings rendered by nodeforge (host-specific mirrors are added at build time)",
            f"export DIB_RELEASE={distro.release}",
            "export DIB_DEBIAN_COMPONENTS=main",
            f"export NODEFORGE_ELEMENTS=\"{' '.join(element_list)}\"",
            f"export NODEFORGE_KUBERNETES_VERSION={entry.version}",
            f"export NODEFORGE_ARCH={arch.value}",
        ]
        _write(tmp / "nodeforge.env", "\n".join(env_lines) + "\n", 0o644)
        _write(tmp / MARKER, "rendered by nodeforge image render\n", 0o644)
        digest = tree_digest(elements)
        _write(tmp / RECORD, _json(_record(lock, minor, arch, digest, src)), 0o644)
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old.{os.getpid()}")
            fs.move_into_place(out, old)
            fs.move_into_place(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            fs.move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Rendered(out, out / "elements", out / "nodeforge.env", out / "pins.json", digest, minor,
                    str(entry.version), arch, distro)


def _record(lock: Lockfile, minor: str, arch: Arch, digest: str, src: Path) -> dict:
    return {"schema": RECORD_SCHEMA, "minor": minor, "arch": arch.value,
            "lockfile": {"path": lock.path.name, "sha256": _sha256_file(lock.path)},
            "element_tree_sha256": digest, "elements_source_sha256": tree_digest(src, skip=SKIP_DIRS)}


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class StaleRenderError(RenderError):
    """A rendered tree given to the build that is not this lockfile's and elements' render (exit 2)."""

    message = "rendered tree {root}: {detail}"
    exit_code = ExitCode.USAGE


def load(root: Path, lock: Lockfile, minor: str, *, arch: Arch = Arch.AMD64, src: Path = ELEMENTS_SRC) -> Rendered:
    """The render in ``root`` (written by :func:`render`), read back for ``lock``/``minor``/``arch``.
    Refused (:class:`StaleRenderError`, naming ``root``) unless it is exactly what :func:`render`
    would write now: rendered from this lockfile (its sha256), minor and architecture and from
    these elements (the digest of ``src``), and its element tree unchanged since (its digest)."""
    root = Path(os.path.abspath(root))

    def stale(detail: str, hint: str | None = None):
        raise StaleRenderError(root=root, detail=detail,
                               hint=hint or f"render it again: nodeforge image render --k8s {minor} --out {root}")

    if not (root / MARKER).is_file() or not (root / "elements").is_dir():
        stale("not a nodeforge render (no .nodeforge-render and elements/)")
    try:
        record = json.loads((root / RECORD).read_text())
    except FileNotFoundError:
        stale(f"no {RECORD}: rendered by an older nodeforge")
    except (ValueError, UnicodeDecodeError) as exc:
        stale(f"{RECORD} is not JSON ({exc})")
    if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
        stale(f"{RECORD}: schema is not {RECORD_SCHEMA}")
    lock_sha = _sha256_file(lock.path)
    if (record.get("lockfile") or {}).get("sha256") != lock_sha:
        stale(f"stale: rendered from a lockfile with sha256 {str((record.get('lockfile') or {}).get('sha256'))[:16]}, "
              f"{lock.path} now has {lock_sha[:16]}")
    if (record.get("minor"), record.get("arch")) != (minor, arch.value):
        stale(f"rendered for Kubernetes {record.get('minor')} {record.get('arch')}, not {minor} {arch.value}")
    if record.get("elements_source_sha256") != tree_digest(src, skip=SKIP_DIRS):
        stale(f"stale: {src} changed since it was rendered")
    digest = tree_digest(root / "elements")
    if digest != record.get("element_tree_sha256"):
        stale(f"its elements/ changed since it was rendered (digest {digest[:16]}, rendered "
              f"{str(record.get('element_tree_sha256'))[:16]})")
    entry = lock.minor(minor)
    return Rendered(root, root / "elements", root / "nodeforge.env", root / "pins.json", digest, minor,
                    str(entry.version), arch, distro_for(lock))


def _render_tree(src: Path, dest: Path, env: jinja2.Environment, context: dict) -> None:
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = Path(dirpath).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        os.chmod(dest / rel, 0o755)
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            path = Path(dirpath) / name
            if path.is_symlink():
                (dest / rel / name).symlink_to(os.readlink(path))
                continue
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            if name.endswith(".j2"):
                try:
                    text = env.from_string(path.read_text()).render(context)
                except jinja2.TemplateError as exc:
                    raise RenderError(detail=f"{path}: {exc}") from None
                _write(dest / rel / name[:-3], text, mode)
            else:
                _write(dest / rel / name, path.read_bytes(), mode)
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]


def _write(path: Path, data: str | bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def _json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


SKIP_DIRS = ("__pycache__",)   # left out of a render (and of the source digest)


def tree_digest(root: Path, *, skip: tuple[str, ...] = ()) -> str:
    """sha256 over every entry's relative path, type, mode and content, in sorted order
    (directories named in ``skip`` left out)."""
    h = hashlib.sha256()
    root = Path(root)
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            entries.append(Path(dirpath) / name)
    for path in sorted(entries, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_dir():
            h.update(f"D {rel}\n".encode())
        else:
            mode = "x" if os.access(path, os.X_OK) else "-"
            h.update(f"F {rel} {mode} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()
