"""The build manifest (``manifest.json``) and the CycloneDX SBOM (``sbom.cdx.json``).

The manifest says exactly what one build put into its images: every dpkg
package in the root filesystem (read from ``var/lib/dpkg/status``, no chroot),
every non-dpkg artifact with version and sha256, the lockfile and element
tree digests, the package base the root filesystem was built from (its cache
key and tarball sha256), the diskimage-builder version and arguments, the source commit
and the build time, and the ownership ``scope`` of the lockfile it was built
from (``image publish`` marks the images with it; optional: manifests written
before scopes have none). The same file is stored inside every image at
``/etc/nodeforge/manifest.json``; the image checksums are in ``SHA256SUMS``
beside it (an image cannot contain its own digest).

``installed_artifacts`` records, for every pinned artifact boot verification
compares (:data:`INSTALLED_FILES`: kubelet, kubeadm, kubectl, crictl,
containerd, runc), the installed file's path and sha256; for crictl and
containerd, pinned as archives, that is the digest of the archive member the
image installs. The build checks each against its pin before recording it
(:func:`pinned_file_digests`, :func:`installed_artifacts`), so ``image verify``
needs only the build directory (optional: manifests written before it have
none, and verify reads those members from the artifact cache).

Reproducible content (``docs/image-build.md``): ``files`` records the
per-file manifest of the root filesystem (``files.jsonl``, by sha256; see
:mod:`.contents`) and ``reproducible`` the ``SOURCE_DATE_EPOCH`` and the
digest of the inputs. ``build_id`` and ``build_time`` name *this* build (a
Glance image is published per build id) and are the only clock-derived
values; the SBOM (:func:`sbom`) is made from the content alone, so two
builds of the same inputs have the same SBOM.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import tarfile
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable

from pydantic import AfterValidator, ConfigDict, Field

from nodeforge.scope import SCOPE_RULE, scope_problem
from nodeforge.base import runner
from nodeforge.errors import NodeforgeError
from nodeforge.base.fs import sha256_file
from nodeforge.pins.lockfile import Component
from nodeforge.schema import Declared, Problem, Rule, SchemaError, register, validate_data, vocab

SCHEMA = "nodeforge-image-manifest/1"
IN_IMAGE_PATH = "etc/nodeforge/manifest.json"

def dpkg_packages(root: Path) -> list[dict]:
    """Installed packages in ``root``'s dpkg database: name, version, arch (sorted)."""
    status = Path(root) / "var" / "lib" / "dpkg" / "status"
    out = []
    for stanza in status.read_text(errors="replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            out.append({"name": fields["Package"], "version": fields.get("Version", ""),
                        "arch": fields.get("Architecture", "")})
    return sorted(out, key=lambda p: (p["name"], p["arch"]))


def source_commit(repo: Path) -> dict:
    def git(*args):
        return runner.run(["git", "-C", str(repo), *args], merge=False, check=False)

    rev = git("rev-parse", "HEAD")
    if rev.returncode != 0:
        return {"commit": None, "dirty": None}
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "elements", "nodeforge", "manifests")
    return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


# --- installed artifacts: the files boot verification compares with the pins ---------------

@dataclasses.dataclass(frozen=True)
class InstalledFile:
    """Where the image installs a pinned artifact's file (its element), and which file of the pinned
    artifact it is."""

    component: str
    path: str                   # absolute, in the image
    member: str | None = None   # the file inside the pinned archive (None: the pinned file itself)


# The files the elements install and ``image verify``'s artifact checks compare
# (nodeforge/imageverify/verifychecks.py ARTIFACTS is made from this table).
INSTALLED_FILES = (
    InstalledFile("kubelet", "/usr/local/bin/kubelet"),
    InstalledFile("kubeadm", "/usr/local/bin/kubeadm"),
    InstalledFile("kubectl", "/usr/local/bin/kubectl"),
    InstalledFile("crictl", "/usr/local/bin/crictl", member="crictl"),
    InstalledFile("containerd", "/usr/local/bin/containerd", member="bin/containerd"),
    InstalledFile("runc", "/usr/local/sbin/runc"),
)


class InstalledFileError(NodeforgeError):
    """A file the manifest must record is not what its pin says (or not there)."""

    message = "{detail}"


def _tar_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def member_sha256(archive: Path, member: str) -> str | None:
    """sha256 of the regular file ``member`` inside the tar archive ``archive`` (compressed or not; a
    leading ``./`` ignored on both sides); None if the archive holds no such regular file."""
    want = _tar_name(member)
    with tarfile.open(archive) as tar:
        for info in tar:
            if info.isfile() and _tar_name(info.name) == want:
                fh = tar.extractfile(info)
                if fh is None:
                    return None
                h = hashlib.sha256()
                while block := fh.read(1 << 20):
                    h.update(block)
                return h.hexdigest()
    return None


def pinned_file_digests(artifacts: list[dict], archive_for: Callable[[str], Path],
                        files: Iterable[InstalledFile] = INSTALLED_FILES) -> dict[str, dict]:
    """component -> ``{path, member (archives only), sha256}``: the sha256 each installed file of
    ``files`` must have, from the pins in ``artifacts`` (the manifest's list): a pinned file's own
    sha256, or for a pinned archive the sha256 of its ``member``, read from ``archive_for(the
    archive's sha256)`` (the verified artifact cache). A component not pinned is left out. Raises
    :class:`InstalledFileError` naming the archive and the member when the archive lacks it or
    cannot be read."""
    pins = {a["component"]: a for a in artifacts}
    out: dict[str, dict] = {}
    for f in files:
        pin = pins.get(f.component)
        if pin is None:
            continue
        digest = pin["sha256"]
        if f.member is not None:
            archive = archive_for(pin["sha256"])
            what = (f"{f.component} {pin.get('version', '')}: the pinned archive sha256:{pin['sha256']} "
                    f"({archive})")
            try:
                digest = member_sha256(archive, f.member)
            except (OSError, tarfile.TarError) as exc:
                raise InstalledFileError(detail=f"{what} cannot be read as a tar archive: {exc}") from None
            if digest is None:
                raise InstalledFileError(detail=f"{what} has no regular file {f.member!r}, the file the image "
                                                f"installs as {f.path} and boot verification compares")
        out[f.component] = {"path": f.path, **({"member": f.member} if f.member else {}), "sha256": digest}
    return out


def installed_artifacts(expected: dict[str, dict], entries: Iterable[dict]) -> dict[str, dict]:
    """The manifest's ``installed_artifacts``: each file of ``expected`` (:func:`pinned_file_digests`)
    as the root filesystem holds it, from its per-file manifest ``entries`` (:mod:`.contents`): a
    regular file at its path whose sha256 is the pinned one. The digest recorded is the installed
    file's. Raises :class:`InstalledFileError` naming the path when a file is missing, not a
    regular file, or not the pinned file."""
    paths = {want["path"] for want in expected.values()}
    found = {e["path"]: e for e in entries if e.get("path") in paths}
    out: dict[str, dict] = {}
    for component, want in sorted(expected.items()):
        pinned = (f"member {want['member']!r} of the pinned {component} archive" if want.get("member")
                  else f"the pinned {component} file")
        entry = found.get(want["path"])
        if entry is None:
            raise InstalledFileError(detail=f"{want['path']} is not in the root filesystem; the {component} "
                                            f"element installs {pinned} there")
        if entry.get("type") != "file":
            raise InstalledFileError(detail=f"{want['path']} is a {entry.get('type')}, not a regular file "
                                            f"({pinned})")
        if entry.get("sha256") != want["sha256"]:
            raise InstalledFileError(detail=f"{want['path']} has sha256 {entry.get('sha256')}; {pinned} has "
                                            f"{want['sha256']}")
        out[component] = dict(want, sha256=entry["sha256"])
    return out


def build_manifest(*, build_id: str, build_time: datetime.datetime, minor: str, kubernetes_version: str,
                   pause_image: str, base_os: dict, arch: str, variants: list[str], images: dict[str, str],
                   packages: list[dict], artifacts: list[dict], lockfile_path: Path, element_tree_digest: str,
                   hardening: dict, dib: dict, source: dict, package_base: dict | None = None,
                   scope: str | None = None, installed: dict[str, dict] | None = None) -> dict:
    out = {
        "schema": SCHEMA,
        "build_id": build_id,
        "build_time": build_time.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kubernetes": {"minor": minor, "version": kubernetes_version, "pause_image": pause_image},
        "base_os": base_os,
        "arch": arch,
        "variants": variants,
        "images": images,
        "packages": packages,
        "artifacts": artifacts,
        "lockfile": {"path": lockfile_path.name, "sha256": sha256_file(lockfile_path)},
        "element_tree": {"sha256": element_tree_digest},
        "hardening": hardening,
        "diskimage_builder": dib,
        "source": source,
    }
    if package_base is not None:
        # The cached root filesystem the build started from (key = sha256 of its inputs,
        # see nodeforge/imagebuild/package_base.py); the packages above are read from the final tree.
        out["package_base"] = package_base
    if scope is not None:
        # The lockfile's ownership scope (its 'scope:', else derived from its path): publish's default.
        out["scope"] = scope
    if installed is not None:
        # Each verified artifact's installed file and its sha256 (installed_artifacts()): what
        # 'image verify' compares the booted files with, without the artifact cache.
        out["installed_artifacts"] = installed
    return out


def dumps(manifest: dict) -> str:
    """The text of ``manifest.json``; the manifest must hold the declaration (:class:`Manifest`):
    every manifest nodeforge writes is one :func:`read` reads back unchanged."""
    validate_data("manifest.json (as written)", manifest, Manifest)
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


# --- the declaration (validate() checks a manifest against it; docs/schemas.md) --------

def _schema(value: str) -> str:
    if value != SCHEMA:
        raise ValueError(f"schema is {value!r}, expected {SCHEMA!r}")
    return value


def _scope(value: str) -> str:
    why = scope_problem(value)
    if why is not None:
        raise ValueError(why)
    return value


class _Open(Declared):
    """A section whose other keys are kept as they are."""

    model_config = ConfigDict(extra="allow")


class KubernetesDecl(Declared):
    minor: vocab.KubeMinor
    version: str
    pause_image: str


class PackageDecl(Declared):
    """One dpkg package of the root filesystem."""

    name: str
    version: str
    arch: str


class ArtifactDecl(_Open):
    """One non-dpkg artifact (from the lockfile)."""

    component: str
    version: str
    sha256: vocab.Sha256
    arch: str | None = None


def _component(value: str) -> str:
    if value not in {c.value for c in Component}:
        raise ValueError(f"expected a pinned component ({', '.join(c.value for c in Component)}), got {value!r}")
    return value


def _image_path(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise ValueError(f"expected an absolute path in the image, got {value!r}")
    return value


def _member(value: str) -> str:
    if not value or value.startswith("/") or "\x00" in value:
        raise ValueError(f"expected a file name inside the pinned archive (relative), got {value!r}")
    return value


class InstalledArtifactDecl(Declared):
    """The installed file of one pinned artifact, as the build found it in the root filesystem and
    checked against the pin (``image verify`` compares the booted file with ``sha256``)."""

    path: Annotated[str, AfterValidator(_image_path), Rule("an absolute path in the image")]
    member: Annotated[str, AfterValidator(_member),
                      Rule("the file inside the pinned archive the installed file is (archives only)")] | None = None
    sha256: vocab.Sha256


class DigestDecl(_Open):
    sha256: vocab.Sha256


class DibDecl(_Open):
    """The diskimage-builder that made the images."""

    version: str
    args: list[str]


class FilesDecl(_Open):
    """The per-file manifest of the root filesystem (``files.jsonl`` beside the manifest)."""

    path: vocab.FileName
    sha256: vocab.Sha256
    entries: int


class ReproducibleDecl(_Open):
    """What the content is a function of: ``SOURCE_DATE_EPOCH`` and the inputs' digest."""

    source_date_epoch: int
    inputs_sha256: vocab.Sha256


class BaseOsDecl(_Open):
    """The base OS of the image (the lockfile's ``base_os``; ``codename`` the Debian release name)."""

    distro: str
    release: str
    codename: str | None = None


class LockfileDecl(_Open):
    """The version lockfile the build was made from: its file name and sha256."""

    path: Annotated[str, Rule("absent only in a manifest converted from " + "nodeforge-image-manifest/0")] | None = None
    sha256: vocab.Sha256


class ManifestDecl(Declared):
    """``manifest.json``: what one build put into its images (written by ``image build``; read by
    ``image verify``/``publish`` through :func:`read`, older shapes through :func:`upgrade`)."""

    schema_: Annotated[str, AfterValidator(_schema), Rule(SCHEMA), Field(alias="schema")]
    build_id: str
    build_time: Annotated[str, Rule("UTC, YYYY-MM-DDTHH:MM:SSZ")]
    kubernetes: KubernetesDecl
    base_os: BaseOsDecl
    arch: str
    variants: list[str]
    images: dict[str, vocab.FileName]
    packages: list[PackageDecl]
    artifacts: list[ArtifactDecl]
    lockfile: LockfileDecl
    element_tree: DigestDecl
    hardening: dict[str, Any]
    diskimage_builder: DibDecl
    source: dict[str, Any]
    package_base: dict[str, Any] | None = None
    scope: Annotated[str, AfterValidator(_scope), Rule(SCOPE_RULE)] | None = None
    os_package_lock: dict[str, Any] | None = None
    files: FilesDecl | None = None
    reproducible: ReproducibleDecl | None = None
    installed_artifacts: Annotated[dict[Annotated[str, AfterValidator(_component)], InstalledArtifactDecl],
                                   Rule("keys: pinned components; absent in manifests written before builds "
                                        "recorded them")] | None = None

    # -- what readers use (one derivation each) -----------------------------------------
    def to_dict(self) -> dict:
        """The manifest as written (keys absent from the file stay absent)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @staticmethod
    def disk_format(file_name: str) -> str:
        """An image's disk format: qcow2 for a ``.qcow2`` file (the vm variant), else raw."""
        return "qcow2" if file_name.endswith(".qcow2") else "raw"

    @staticmethod
    def firmware(variant: str) -> str:
        """The firmware a variant's image is published for: uefi for baremetal, else bios (the
        OpenStack default; nodeforge disks boot both)."""
        return "uefi" if variant == "baremetal" else "bios"


Manifest = ManifestDecl   # the one typed manifest: written by build (dumps), read by read()


KIND = register("manifest", ManifestDecl, title="Build manifest", path="<build dir>/manifest.json",
                formats=("json",), description="Written by `image build`, checked by `image verify` and the tests.")


# --- reading: one reader, one converter for older shapes -----------------------------------

LEGACY_SCHEMA = "nodeforge-image-manifest/0"
MAX_BYTES = 16 << 20
# Glance/Nova architecture spellings -> the Debian ones the manifest records.
_GLANCE_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class ManifestError(SchemaError):
    """A ``manifest.json`` that is not a manifest nodeforge can read (exit 2, names the field)."""


def _legacy_problem(path: str, key: str, detail: str) -> SchemaError:
    return SchemaError(path, [Problem(path, None, tuple(key.split(".")), detail)],
                       hint=f"the manifest has no 'schema' and was read as {LEGACY_SCHEMA}; rebuild the image "
                            "(nodeforge image build) for a current manifest")


def upgrade(doc: dict, path: str = "manifest.json") -> dict:
    """``doc`` as a :data:`SCHEMA` manifest: the one converter for older shapes.

    * ``SCHEMA`` (what ``image build`` has written since the manifest exists, commit 3c085bb):
      returned as it is; later additions (package_base, scope, os_package_lock, files,
      reproducible, installed_artifacts) are optional fields of the same schema.
    * no ``schema`` key: :data:`LEGACY_SCHEMA`, the spellings the build-directory reader accepted
      besides the current ones since it was written (8e0af9c; no nodeforge writer produced
      them): ``build.id``/``build.time``; ``k8s_version``/``kubernetes_version``;
      ``os.distro``/``os.version`` and ``base_os.version``; ``architecture`` (Glance names);
      ``lockfile_digest``/``lockfile_sha256`` (``sha256:`` prefix allowed); ``images`` entries
      ``{file | path, format, firmware}`` (format and firmware must be what the current schema
      derives: :meth:`Manifest.disk_format`, :meth:`Manifest.firmware`); ``image_source``,
      ``source_url``, ``source.url``, ``original_user``, ``image_original_user`` (never set by
      nodeforge; dropped). Renamed only: a field the old shape lacks stays missing and the
      declaration names it.
    * any other ``schema``: refused, naming it."""
    if not isinstance(doc, dict):
        return doc
    if "schema" in doc:
        if doc["schema"] != SCHEMA:
            raise SchemaError(path, [Problem(path, None, ("schema",),
                                             f"schema is {json.dumps(doc['schema'])[:60]}, expected {SCHEMA!r} "
                                             f"(or none: {LEGACY_SCHEMA})")])
        return doc
    out = dict(doc)
    if isinstance(out.get("build"), dict):
        out["build"] = dict(out["build"])     # copied: build.id and build.time are taken out of it
    for new, old in (("build_id", "build.id"), ("build_time", "build.time")):
        value = _take(out, new, old)
        if value is not None:
            out[new] = value
    _legacy_kubernetes(out, path)
    _legacy_base_os(out)
    arch = _take(out, "arch", "architecture")
    if arch is not None:
        out["arch"] = _GLANCE_ARCH.get(arch, arch) if isinstance(arch, str) else arch
    _legacy_lockfile(out)
    if isinstance(out.get("source"), dict) and "url" in out["source"]:
        out["source"] = {k: v for k, v in out["source"].items() if k != "url"}
    _take(out, "image_source", "source_url", "original_user", "image_original_user")
    if isinstance(out.get("images"), dict):
        out["images"] = _legacy_images(out["images"], path)
    out["schema"] = SCHEMA
    return out


def _take(out: dict, *keys):
    """The first of ``keys`` (dotted) present, removed from ``out`` (all of them removed)."""
    found = None
    for key in keys:
        head, _, rest = key.partition(".")
        node = out.get(head)
        if rest:
            value = node.pop(rest, None) if isinstance(node, dict) else None
            if isinstance(node, dict) and not node:
                out.pop(head)
        else:
            value = out.pop(head, None)
        if found is None and value not in (None, ""):
            found = value
    return found


def _legacy_kubernetes(out: dict, path: str) -> None:
    """``k8s_version``/``kubernetes_version`` into ``kubernetes.version`` and ``.minor``."""
    version = _take(out, "k8s_version", "kubernetes_version")
    if version is not None:
        kube = dict(out.get("kubernetes") or {})
        if not isinstance(version, str):
            raise _legacy_problem(path, "k8s_version", f"expected a string, got {type(version).__name__}")
        kube.setdefault("version", version.lstrip("v"))
        kube.setdefault("minor", ".".join(kube["version"].split(".")[:2]))
        out["kubernetes"] = kube


def _legacy_base_os(out: dict) -> None:
    """``os.distro``/``os.version`` and ``base_os.version`` into ``base_os.distro``/``.release``."""
    if isinstance(out.get("os"), dict) and "base_os" not in out:
        old = out.pop("os")
        out["base_os"] = {k: v for k, v in (("distro", old.get("distro")), ("release", old.get("version")))
                          if v is not None}
    if isinstance(out.get("base_os"), dict) and "version" in out["base_os"]:
        base = dict(out["base_os"])
        base.setdefault("release", base.pop("version"))
        base.pop("version", None)
        out["base_os"] = base


def _legacy_lockfile(out: dict) -> None:
    """``lockfile_digest``/``lockfile_sha256`` (``sha256:`` prefix allowed) into ``lockfile.sha256``."""
    digest = _take(out, "lockfile_digest", "lockfile_sha256")
    if digest is not None:
        lock = dict(out.get("lockfile") or {})
        lock.setdefault("sha256", digest.split(":", 1)[1] if isinstance(digest, str) and digest.startswith("sha256:")
                        else digest)
        out["lockfile"] = lock


def _legacy_images(entries: dict, path: str) -> dict:
    """``images`` entries ``{file | path, format, firmware}`` as file names (format and firmware
    must be what the current schema derives)."""
    images = {}
    for variant, entry in entries.items():
        if isinstance(entry, dict):
            name = entry.get("file") or entry.get("path")
            if not isinstance(name, str) or not name:
                raise _legacy_problem(path, f"images.{variant}", "an image entry needs 'file' (a file name)")
            for key, want in (("format", Manifest.disk_format(name)), ("firmware", Manifest.firmware(variant))):
                if entry.get(key) not in (None, want):
                    raise _legacy_problem(path, f"images.{variant}.{key}",
                                          f"is {json.dumps(entry[key])[:40]}; a {variant} image {name} is {want}")
            entry = name
        images[variant] = entry
    return images


def parse(data: bytes | str, path: str = "manifest.json") -> Manifest:
    """The manifest in ``data`` (the text of ``path``): strict JSON, :func:`upgrade`, then the
    declaration; every problem names the field (``path:line: key.path: detail``, a
    :class:`~nodeforge.schema.SchemaError`, exit 2)."""
    from nodeforge.schema import Document, loader, validate

    if len(data) > MAX_BYTES:
        raise SchemaError(path, [Problem(path, None, (), f"larger than {MAX_BYTES >> 20} MiB: not a build manifest")])
    text = data if isinstance(data, str) else loader.decode(path, data)
    document = loader.load(path, text, format="json", limits=dataclasses.replace(loader.DEFAULT_LIMITS,
                                                                                  max_bytes=MAX_BYTES))
    upgraded = upgrade(document.data, path)
    if upgraded is not document.data:   # converted: lines of the old spelling would mislead
        document = Document(f"{path} (read as {LEGACY_SCHEMA})", "data", upgraded, upgraded)
    return validate(document, Manifest)


def read(path: Path | str) -> tuple[bytes, Manifest]:
    """``path``'s bytes (what digests and verify reports are bound to) and its :class:`Manifest`."""
    from nodeforge.schema import loader

    raw = loader.read_bytes(path, dataclasses.replace(loader.DEFAULT_LIMITS, max_bytes=MAX_BYTES))
    return raw, parse(raw, str(path))


def problems(manifest: Any, file: str = "manifest.json") -> list[Problem]:
    """Every problem of ``manifest`` (data already parsed) as :class:`~nodeforge.schema.Problem`."""
    try:
        validate_data(file, manifest, ManifestDecl)
    except SchemaError as exc:
        return exc.problems
    return []


def validate(manifest: Any) -> list[str]:
    """Problems with a manifest's shape, as ``key.path: detail`` (empty list: valid)."""
    return [f"{p.key}: {p.detail}" for p in problems(manifest)]


def content_id(manifest: dict) -> str:
    """sha256 of what the image contains (packages, artifacts, the per-file manifest's digest and the
    base OS): the same for two builds of the same content, whatever their build ids."""
    doc = {"packages": manifest["packages"], "artifacts": [{k: a.get(k) for k in ("component", "version", "arch",
                                                                                   "sha256")}
                                                           for a in manifest["artifacts"]],
           "files": (manifest.get("files") or {}).get("sha256"), "base_os": manifest["base_os"],
           "kubernetes": manifest["kubernetes"], "variants": manifest["variants"]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sbom(manifest: dict) -> str:
    """A CycloneDX 1.6 JSON SBOM of the image content (dpkg packages and pinned artifacts).

    Reproducible: for a manifest with ``reproducible`` (written by reproducible builds) the image
    component's version is ``<kubernetes version>+<content id prefix>``, the timestamp is
    ``SOURCE_DATE_EPOCH`` and the serial number is derived from the content id, so the SBOM depends
    on the content only; older manifests keep the build id and build time."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    distro = f"{manifest['base_os']['distro']}-{manifest['base_os']['release']}"
    repro = manifest.get("reproducible")
    cid = content_id(manifest)
    version = f"{manifest['kubernetes']['version']}+{cid[:16]}" if repro else manifest["build_id"]
    image = Component(
        name=f"nodeforge-k8s-node-{manifest['kubernetes']['version']}", version=version,
        type=ComponentType.OPERATING_SYSTEM, bom_ref="image",
        properties=[Property(name="nodeforge:variants", value=",".join(manifest["variants"])),
                    Property(name="nodeforge:element_tree_sha256", value=manifest["element_tree"]["sha256"]),
                    Property(name="nodeforge:lockfile_sha256", value=manifest["lockfile"]["sha256"]),
                    *([Property(name="nodeforge:files_sha256", value=manifest["files"]["sha256"]),
                       Property(name="nodeforge:source_date_epoch", value=str(repro["source_date_epoch"]))]
                      if repro and manifest.get("files") else [])])
    bom = Bom()
    bom.metadata.component = image
    if repro:
        bom.metadata.timestamp = datetime.datetime.fromtimestamp(int(repro["source_date_epoch"]),
                                                                 datetime.timezone.utc)
    else:
        bom.metadata.timestamp = datetime.datetime.fromisoformat(manifest["build_time"].replace("Z", "+00:00"))
    for pkg in manifest["packages"]:
        purl = PackageURL(type="deb", namespace=manifest["base_os"]["distro"], name=pkg["name"],
                          version=pkg["version"], qualifiers={"arch": pkg["arch"], "distro": distro})
        bom.components.add(Component(name=pkg["name"], version=pkg["version"], type=ComponentType.LIBRARY,
                                     purl=purl, bom_ref=f"deb:{pkg['name']}:{pkg['arch']}"))
    for art in manifest["artifacts"]:
        purl = PackageURL(type="generic", name=art["component"], version=art["version"],
                          qualifiers={"arch": art["arch"]})
        bom.components.add(Component(
            name=art["component"], version=art["version"], type=ComponentType.APPLICATION, purl=purl,
            bom_ref=f"artifact:{art['component']}",
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=art["sha256"])]))
    bom.register_dependency(image, list(bom.components))
    # Fixed serial number derived from the build: same manifest, same SBOM.
    import uuid as _uuid
    bom.serial_number = _uuid.uuid5(_uuid.NAMESPACE_URL, f"nodeforge:content:{cid}" if repro
                                    else f"nodeforge:{manifest['build_id']}")
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
