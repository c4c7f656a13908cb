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

:func:`render` is :func:`plan` then :func:`write`: the plan checks the inputs
and ``out`` and holds the whole tree in memory (:class:`Tree`, its digest from
:func:`entries_digest`, the same as :func:`tree_digest` gives once it is
written); ``image render --dry-run`` prints it and writes nothing.
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
from nodeforge.base.fs import sha256_file
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


@dataclasses.dataclass(frozen=True)
class TreeEntry:
    """One entry of a tree held in memory until :func:`write_entries` writes it: ``path`` relative to
    the tree's root (posix), ``kind`` ``dir``, ``file`` or ``link``, ``mode`` set after writing (None:
    left as created), a file's ``data``, a link's ``target``."""

    path: str
    kind: str
    mode: int | None = None
    data: bytes = b""
    target: str = ""

    @property
    def executable(self) -> bool:
        return self.mode is not None and bool(self.mode & 0o111)

    def to_dict(self) -> dict:
        return {"path": self.path, "type": self.kind,
                "mode": None if self.mode is None else f"{self.mode:04o}",
                "bytes": len(self.data) if self.kind == "file" else None,
                **({"target": self.target} if self.kind == "link" else {})}


def write_entries(root: Path, entries) -> None:
    """Write ``entries`` (:class:`TreeEntry`, parents before children) under ``root``."""
    root = Path(root)
    for e in entries:
        path = root / e.path
        if e.kind == "link":
            path.symlink_to(e.target)
            continue
        if e.kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(e.data)
        if e.mode is not None:
            os.chmod(path, e.mode)


@dataclasses.dataclass(frozen=True)
class Tree:
    """A render held in memory (:func:`tree`): every entry :func:`render` writes, relative to the
    render's root, and the digest of its ``elements/`` (what :func:`tree_digest` gives once written)."""

    entries: tuple[TreeEntry, ...]
    digest: str
    minor: str
    version: str
    arch: Arch
    distro: Distro

    def read(self, rel: str) -> bytes | None:
        """The content of the file ``rel`` (relative to the render's root), None if there is none."""
        return next((e.data for e in self.entries if e.path == rel and e.kind == "file"), None)

    def element_files(self) -> dict[str, bytes]:
        """The files of ``elements/`` by their path relative to it (what :mod:`.package_base` reads)."""
        return {e.path[len("elements/"):]: e.data for e in self.entries
                if e.kind == "file" and e.path.startswith("elements/")}

    def files(self) -> list[dict]:
        """Every file and link of the render (directories left out), in write order."""
        return [e.to_dict() for e in self.entries if e.kind != "dir"]


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What a render is made from, checked: the minor and architecture pinned, the distribution
    buildable, the hardening profile the lockfile's."""

    lock: Lockfile
    minor: str
    arch: Arch
    src: Path
    entry: object
    distro: Distro
    profile: dict
    pins: list

    @classmethod
    def of(cls, lock: Lockfile, minor: str, arch: Arch, src: Path) -> "_Inputs":
        entry = lock.minor(minor)
        distro = distro_for(lock)
        if arch not in lock.architectures:
            raise ConfigError(path=str(lock.path), detail=f"architecture {arch.value} is not pinned")
        return cls(lock, minor, arch, Path(src), entry, distro, load_profile(src, lock), pins_for(lock, minor, arch))


def tree(lock: Lockfile, minor: str, *, arch: Arch = Arch.AMD64, src: Path = ELEMENTS_SRC) -> Tree:
    """The render of ``src`` for ``minor``/``arch``, in memory (reads, writes nothing)."""
    return _tree(_Inputs.of(lock, minor, arch, src))


def _tree(inp: _Inputs) -> Tree:
    lock, minor, arch, entry, profile, pins = inp.lock, inp.minor, inp.arch, inp.entry, inp.profile, inp.pins
    context = {
        "minor": minor, "arch": arch.value, "lockfile_name": lock.path.name,
        "pins": {p.component.value: p for p in pins}, "pause_image": entry.pause_image,
        "hardening": {"profile": lock.hardening.profile, "version": lock.hardening.version},
        "profile": profile,
    }
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    entries = {e.path: e for e in _render_entries(inp.src, "elements", env, context)}

    def add(rel: str, text: str) -> None:
        entries[rel] = TreeEntry(rel, "file", 0o644, text.encode())

    hardening = {"profile": profile["profile"], "version": str(profile["version"]), "controls": profile["controls"]}
    add(f"elements/{HARDENING_JSON.as_posix()}", _json(hardening))
    add("pins.json", _json({"minor": minor, "kubernetes_version": str(entry.version), "arch": arch.value,
                            "pause_image": entry.pause_image, "artifacts": [p.to_dict() for p in pins]}))
    element_list = [inp.distro.element, *DIB_ELEMENTS]
    env_lines = [
        "# diskimage-builder settings rendered by nodeforge (host-specific mirrors are added at build time)",
        f"export DIB_RELEASE={inp.distro.release}",
        "export DIB_DEBIAN_COMPONENTS=main",
        f"export NODEFORGE_ELEMENTS=\"{' '.join(element_list)}\"",
        f"export NODEFORGE_KUBERNETES_VERSION={entry.version}",
        f"export NODEFORGE_ARCH={arch.value}",
    ]
    add("nodeforge.env", "\n".join(env_lines) + "\n")
    add(MARKER, "rendered by nodeforge image render\n")
    digest = entries_digest(entries.values(), under="elements")
    add(RECORD, _json(_record(lock, minor, arch, digest, inp.src)))
    return Tree(tuple(entries.values()), digest, minor, str(entry.version), arch, inp.distro)


# What --out holds before a render: nothing, an empty directory or a previous render (both replaced).
OUT_STATES = {"absent": None, "empty": "empty directory", "render": "previous render"}


@dataclasses.dataclass(frozen=True)
class RenderPlan:
    """What :func:`write` would do: the tree (in memory) and the directory it replaces or creates."""

    out: Path
    state: str          # a key of OUT_STATES
    tree: Tree

    @property
    def action(self) -> str:
        return "create" if self.state == "absent" else "replace"

    def to_dict(self) -> dict:
        t = self.tree
        return {"root": str(self.out), "action": self.action, "existing": OUT_STATES[self.state],
                "minor": t.minor, "kubernetes_version": t.version, "arch": t.arch.value,
                "distro": {"element": t.distro.element, "release": t.distro.release},
                "element_tree_digest": t.digest, "files": t.files()}


def _check_out(out) -> tuple[Path, str]:
    """``out`` as the directory to write and what it holds now; refused (:class:`RenderOutError`)
    when it is empty, the current directory or a parent, not a directory, or someone else's."""
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
    state = "absent" if not out.exists() else "render" if (out / MARKER).exists() else "empty"
    if out.name in ("", ".", ".."):           # "x/.." and the like: stage beside the real directory
        out = target
    return out, state


def plan(lock: Lockfile, minor: str, out: Path, *, arch: Arch = Arch.AMD64, src: Path = ELEMENTS_SRC) -> RenderPlan:
    """Every check :func:`render` makes, and the tree it would write into ``out``; writes nothing."""
    inputs = _Inputs.of(lock, minor, arch, src)
    out, state = _check_out(out)
    return RenderPlan(out, state, _tree(inputs))


def write(plan: RenderPlan) -> Rendered:
    """Write the planned tree into its directory (replaced atomically)."""
    out, t = plan.out, plan.tree
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_entries(tmp, t.entries)
        written = tree_digest(tmp / "elements")
        if written != t.digest:
            raise RenderError(detail=f"the written element tree has digest {written[:16]}, not the planned "
                                     f"{t.digest[:16]} (a nodeforge bug)")
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
    return Rendered(out, out / "elements", out / "nodeforge.env", out / "pins.json", t.digest, t.minor,
                    t.version, t.arch, t.distro)


def render(lock: Lockfile, minor: str, out: Path, *, arch: Arch = Arch.AMD64,
           src: Path = ELEMENTS_SRC) -> Rendered:
    """Render ``src`` for ``minor``/``arch`` into ``out`` (replaced atomically): :func:`plan`, then :func:`write`."""
    return write(plan(lock, minor, out, arch=arch, src=src))


def _record(lock: Lockfile, minor: str, arch: Arch, digest: str, src: Path) -> dict:
    return {"schema": RECORD_SCHEMA, "minor": minor, "arch": arch.value,
            "lockfile": {"path": lock.path.name, "sha256": sha256_file(lock.path)},
            "element_tree_sha256": digest, "elements_source_sha256": tree_digest(src, skip=SKIP_DIRS)}


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
    if not (root / RECORD).exists():
        stale(f"no {RECORD}: rendered by an older nodeforge")
    try:
        record = loader.read_json(root / RECORD)
    except ConfigError as exc:
        stale(f"{RECORD} cannot be read ({exc})")
    if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
        stale(f"{RECORD}: schema is not {RECORD_SCHEMA}")
    lock_sha = sha256_file(lock.path)
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


def _render_entries(src: Path, under: str, env: jinja2.Environment, context: dict) -> list[TreeEntry]:
    """``src`` rendered, as entries below ``under``: templates (``.j2``) rendered, the rest copied;
    directories 0755, files 0755 when executable else 0644, links kept."""
    out: list[TreeEntry] = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        rel = Path(under) / Path(dirpath).relative_to(src)
        out.append(TreeEntry(rel.as_posix(), "dir", 0o755))
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            path = Path(dirpath) / name
            if path.is_symlink():
                out.append(TreeEntry((rel / name).as_posix(), "link", target=os.readlink(path)))
                continue
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            if name.endswith(".j2"):
                try:
                    text = env.from_string(path.read_text()).render(context)
                except jinja2.TemplateError as exc:
                    raise RenderError(detail=f"{path}: {exc}") from None
                out.append(TreeEntry((rel / name[:-3]).as_posix(), "file", mode, text.encode()))
            else:
                out.append(TreeEntry((rel / name).as_posix(), "file", mode, path.read_bytes()))
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
    return out


def _json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


# Elements of another image under elements/: the agent ramdisk's (imagebuild/ramdisk.py builds them).
RAMDISK_ELEMENTS = ("nodeforge-agent",)
SKIP_DIRS = ("__pycache__", *RAMDISK_ELEMENTS)   # left out of a node image's render (and of the source digest)


def tree_digest(root: Path, *, skip: tuple[str, ...] = ()) -> str:
    """sha256 over every entry's relative path, type, mode and content, in sorted order
    (directories named in ``skip`` left out)."""
    root = Path(root)
    lines = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                lines[rel] = f"L {rel} {os.readlink(path)}\n"
            elif path.is_dir():
                lines[rel] = f"D {rel}\n"
            else:
                lines[rel] = _file_line(rel, os.access(path, os.X_OK), path.read_bytes())
    return _digest(lines)


def entries_digest(entries, *, under: str = "") -> str:
    """:func:`tree_digest` of what :func:`write_entries` would write from ``entries`` (of the
    subtree ``under``), computed without writing it; parents it creates on the way count."""
    prefix = f"{under.rstrip('/')}/" if under else ""
    lines = {}
    for e in entries:
        if not e.path.startswith(prefix) or e.path == prefix:
            continue
        rel = e.path[len(prefix):]
        parts = rel.split("/")
        for i in range(1, len(parts)):
            lines.setdefault("/".join(parts[:i]), f"D {'/'.join(parts[:i])}\n")
        if e.kind == "link":
            lines[rel] = f"L {rel} {e.target}\n"
        elif e.kind == "dir":
            lines[rel] = f"D {rel}\n"
        else:
            lines[rel] = _file_line(rel, e.executable, e.data)
    return _digest(lines)


def _file_line(rel: str, executable: bool, data: bytes) -> str:
    return f"F {rel} {'x' if executable else '-'} {hashlib.sha256(data).hexdigest()}\n"


def _digest(lines: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(lines):
        h.update(lines[rel].encode())
    return h.hexdigest()


def rendered_env(path: Path) -> dict[str, str]:
    return parse_env(Path(path).read_text())


def parse_env(text: str) -> dict[str, str]:
    """The ``export KEY=value`` lines of a rendered ``nodeforge.env``."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            out[key] = value.strip('"')
    return out
