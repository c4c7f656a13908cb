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

Reproducible content (``docs/image-build.md``): ``files`` records the
per-file manifest of the root filesystem (``files.jsonl``, by sha256; see
:mod:`.contents`) and ``reproducible`` the ``SOURCE_DATE_EPOCH`` and the
digest of the inputs. ``build_id`` and ``build_time`` name *this* build (a
Glance image is published per build id) and are the only clock-derived
values; the SBOM (:func:`sbom`) is made from the content alone, so two
builds of the same inputs have the same SBOM.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field

from nodeforge import scope as IC
from nodeforge.base import runner
from nodeforge.pins.cache import sha256_file
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



def build_manifest(*, build_id: str, build_time: datetime.datetime, minor: str, kubernetes_version: str,
                   pause_image: str, base_os: dict, arch: str, variants: list[str], images: dict[str, str],
                   packages: list[dict], artifacts: list[dict], lockfile_path: Path, element_tree_digest: str,
                   hardening: dict, dib: dict, source: dict, package_base: dict | None = None,
                   scope: str | None = None) -> dict:
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
    return out


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


# --- the declaration (validate() checks a manifest against it; docs/schemas.md) --------

def _schema(value: str) -> str:
    if value != SCHEMA:
        raise ValueError(f"schema is {value!r}, expected {SCHEMA!r}")
    return value


def _scope(value: str) -> str:
    why = IC.scope_problem(value)
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


class DigestDecl(_Open):
    sha256: vocab.Sha256


class DibDecl(_Open):
    """The diskimage-builder that made the images."""

    version: str
    args: list[str]


class FilesDecl(_Open):
    """The per-file manifest of the root filesystem (``files.jsonl`` beside the manifest)."""

    path: str
    sha256: vocab.Sha256
    entries: int


class ReproducibleDecl(_Open):
    """What the content is a function of: ``SOURCE_DATE_EPOCH`` and the inputs' digest."""

    source_date_epoch: int
    inputs_sha256: vocab.Sha256


class ManifestDecl(Declared):
    """``manifest.json``: what one build put into its images (written by ``image build``)."""

    schema_: Annotated[str, AfterValidator(_schema), Rule(SCHEMA), Field(alias="schema")]
    build_id: str
    build_time: Annotated[str, Rule("UTC, YYYY-MM-DDTHH:MM:SSZ")]
    kubernetes: KubernetesDecl
    base_os: dict[str, str]
    arch: str
    variants: list[str]
    images: dict[str, str]
    packages: list[PackageDecl]
    artifacts: list[ArtifactDecl]
    lockfile: dict[str, Any]
    element_tree: DigestDecl
    hardening: dict[str, Any]
    diskimage_builder: DibDecl
    source: dict[str, Any]
    package_base: dict[str, Any] | None = None
    scope: Annotated[str, AfterValidator(_scope), Rule(IC.SCOPE_RULE)] | None = None
    os_package_lock: dict[str, Any] | None = None
    files: FilesDecl | None = None
    reproducible: ReproducibleDecl | None = None


KIND = register("manifest", ManifestDecl, title="Build manifest", path="<build dir>/manifest.json",
                formats=("json",), description="Written by `image build`, checked by `image verify` and the tests.")


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

    Reproducible: for a manifest with ``reproducible`` (written since issue 16) the image
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
