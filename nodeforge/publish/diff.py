"""``nodeforge image diff A B``: what changed between two builds or two Glance images.

Stable API (the pipeline's tests call these):

* :func:`diff_builds` ``(a, b)``: two build directories (``manifest.json``,
  and ``files.jsonl`` when the build wrote one);
* :func:`diff_images` ``(conn, a, b)``: two node images in Glance (ID or
  unique name), through the manifest ``image publish`` stored beside each
  (downloaded and checked against the image's ``nodeforge_manifest_sha256``)
  and, when published with it, the per-file manifest (``nodeforge_files_image``,
  checked against ``nodeforge_files_sha256``);
* :func:`diff_manifests` ``(ma, mb, files_a, files_b)``: the comparison itself.

The result (:class:`ImageDiff`) has **packages** added, removed and changed
(``name``, ``arch``, old -> new version), **artifacts** likewise (by
component), **files** from the per-file manifests (added, removed, changed
paths with the fields that changed; without both per-file manifests only
whether their digests agree), the **inputs** that differ (lockfile, OS package
lock, element tree, diskimage-builder, ``SOURCE_DATE_EPOCH``, ...) and, for
Glance images, the **properties** that differ. ``identity`` (build id and
time, Glance IDs and names, the manifest's and verify report's digests) and
``data`` (the image files' digests and sizes) are reported beside it but do
not make two images different: two builds of the same inputs have the same
content but not the same build id, and their disks are not byte for byte the
same (docs/image-build.md, "Reproducible content").

``identical`` is false when any of packages, artifacts, files, inputs or
properties differ; the command then exits 10 (as ``release check`` does
when it finds something new), 0 when identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from nodeforge.base import fs
from nodeforge.errors import ExitCode, NodeforgeError, UsageError
from nodeforge.imagebuild import contents
from nodeforge.publish import glance_api as g

MANIFEST = "manifest.json"
EXIT_DIFFERENT = 10

# Glance image fields and properties that name the image or the build, never its content.
IDENTITY_PROPERTIES = frozenset({
    "id", "name", "created_at", "updated_at", "self", "file", "schema", "locations", "direct_url", "owner",
    "image_build_date", "image_description", "nodeforge_build_id", "nodeforge_manifest_image",
    "nodeforge_manifest_sha256", "nodeforge_verify_report", "nodeforge_verify_sha256", "nodeforge_uploader",
    "nodeforge_files_image", "nodeforge_files_sha256", "nodeforge_provenance", "nodeforge_provenance_sha256",
    "stores", "os_glance_importing_to_stores", "os_glance_failed_import",
})
# The image data's digests and sizes (and what is computed from the bytes: signatures).
DATA_PROPERTIES = frozenset({
    "checksum", "os_hash_algo", "os_hash_value", "size", "virtual_size", "nodeforge_sha256", "img_signature",
    "min_disk",
})
# Manifest keys that name the build (compared, reported, never a difference).
IDENTITY_KEYS = ("build_id", "build_time", "source", "package_base.created", "package_base.sha256")


class DiffError(NodeforgeError):
    """Two images cannot be compared as given (a bad or changed input: exit 2)."""

    message = "image diff: {detail}"
    exit_code = ExitCode.USAGE


@dataclasses.dataclass
class VersionsDiff:
    """Added, removed and changed items keyed by name (and arch)."""

    added: list[dict] = dataclasses.field(default_factory=list)
    removed: list[dict] = dataclasses.field(default_factory=list)
    changed: list[dict] = dataclasses.field(default_factory=list)   # {name, arch, old, new}

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_dict(self) -> dict:
        return {"identical": self.identical,
                "counts": {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed)},
                "added": self.added, "removed": self.removed, "changed": self.changed}


@dataclasses.dataclass
class ImageDiff:
    a: str
    b: str
    packages: VersionsDiff
    artifacts: VersionsDiff
    files: contents.FilesDiff | None          # None: a per-file manifest is missing on one side
    files_digests: tuple[str | None, str | None]
    inputs_changed: dict[str, list]
    identity_changed: dict[str, list]
    properties_changed: dict[str, list] = dataclasses.field(default_factory=dict)
    data_changed: dict[str, list] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def files_identical(self) -> bool | None:
        """True/False from the per-file manifests (or their digests); None: unknown on one side."""
        if self.files is not None:
            return self.files.identical
        da, db = self.files_digests
        if da is None or db is None:
            return None
        return da == db

    @property
    def content_differs(self) -> bool:
        return (not self.packages.identical or not self.artifacts.identical or self.files_identical is False
                or bool(self.inputs_changed) or bool(self.properties_changed))

    @property
    def identical(self) -> bool:
        return not self.content_differs

    def summary(self) -> dict:
        def counts(d):
            return f"+{len(d.added)} -{len(d.removed)} ~{len(d.changed)}"
        f = self.files
        return {"packages": counts(self.packages), "artifacts": counts(self.artifacts),
                "files": (counts(f) if f is not None else
                          {True: "same digest", False: "digests differ", None: "unknown"}[self.files_identical]),
                "inputs": len(self.inputs_changed), "properties": len(self.properties_changed)}

    def to_dict(self, file_limit: int | None = None) -> dict:
        return {"a": self.a, "b": self.b, "identical": self.identical, "summary": self.summary(),
                "packages": self.packages.to_dict(), "artifacts": self.artifacts.to_dict(),
                "files": {**(self.files.to_dict(limit=file_limit) if self.files is not None else {}),
                          "digests": list(self.files_digests), "identical": self.files_identical},
                "inputs_changed": self.inputs_changed, "properties_changed": self.properties_changed,
                "identity_changed": self.identity_changed, "data_changed": self.data_changed,
                "notes": self.notes}

    def rows(self, file_limit: int = 200) -> list[dict]:
        """One row per difference, for the table: {kind, what, change, a, b}."""
        out = []
        for kind, d in (("package", self.packages), ("artifact", self.artifacts)):
            out += [{"kind": kind, "what": _label(p), "change": "added", "a": "", "b": p["version"]} for p in d.added]
            out += [{"kind": kind, "what": _label(p), "change": "removed", "a": p["version"], "b": ""}
                    for p in d.removed]
            out += [{"kind": kind, "what": _label(p), "change": "changed", "a": p["old"], "b": p["new"]}
                    for p in d.changed]
        if self.files is not None:
            f = self.files
            items = ([{"kind": "file", "what": p, "change": "added", "a": "", "b": ""} for p in f.added]
                     + [{"kind": "file", "what": p, "change": "removed", "a": "", "b": ""} for p in f.removed]
                     + [{"kind": "file", "what": c["path"], "change": "changed: " + ",".join(c["fields"]),
                         "a": _short(next(iter(c["fields"].values()))[0]),
                         "b": _short(next(iter(c["fields"].values()))[1])} for c in f.changed])
            out += items[:file_limit]
            if len(items) > file_limit:
                out.append({"kind": "file", "what": f"... {len(items) - file_limit} more (--output json lists all)",
                            "change": "", "a": "", "b": ""})
        elif self.files_identical is False:
            out.append({"kind": "files", "what": "per-file manifest", "change": "digests differ",
                        "a": _short(self.files_digests[0]), "b": _short(self.files_digests[1])})
        for kind, changed in (("input", self.inputs_changed), ("property", self.properties_changed)):
            out += [{"kind": kind, "what": k, "change": "changed", "a": _short(v[0]), "b": _short(v[1])}
                    for k, v in changed.items()]
        return out


def _label(p: dict) -> str:
    arch = p.get("arch")
    return f"{p['name']}:{arch}" if arch else p["name"]


def _short(value, n: int = 40) -> str:
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= n else text[:n - 3] + "..."


# --- the comparison ----------------------------------------------------------------------

def diff_versions(a: list[dict], b: list[dict], name_key: str = "name") -> VersionsDiff:
    """Items (``{name, version, arch}``) of ``a`` and ``b`` compared by (name, arch)."""
    def index(items):
        out = {}
        for item in items:
            out[(item[name_key], item.get("arch"))] = item
        return out

    old, new = index(a), index(b)

    def brief(item):
        d = {"name": item[name_key], "version": item.get("version")}
        if item.get("arch") is not None:
            d["arch"] = item["arch"]
        if item.get("sha256"):
            d["sha256"] = item["sha256"]
        return d

    changed = []
    for key in sorted(old.keys() & new.keys(), key=str):
        x, y = old[key], new[key]
        if (x.get("version"), x.get("sha256")) != (y.get("version"), y.get("sha256")):
            c = {"name": key[0], "old": x.get("version"), "new": y.get("version")}
            if key[1] is not None:
                c["arch"] = key[1]
            if x.get("sha256") != y.get("sha256"):
                c["old_sha256"], c["new_sha256"] = x.get("sha256"), y.get("sha256")
            changed.append(c)
    return VersionsDiff(added=[brief(new[k]) for k in sorted(new.keys() - old.keys(), key=str)],
                        removed=[brief(old[k]) for k in sorted(old.keys() - new.keys(), key=str)],
                        changed=changed)


def _get(doc: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def _inputs(m: dict) -> dict:
    """What a build is made from (beyond packages, artifacts and files)."""
    repro = m.get("reproducible") or {}
    return {
        "kubernetes.version": _get(m, "kubernetes.version"), "kubernetes.pause_image": _get(m, "kubernetes.pause_image"),
        "base_os": m.get("base_os"), "arch": m.get("arch"), "variants": sorted(m.get("variants") or []),
        "lockfile.sha256": _get(m, "lockfile.sha256"), "os_package_lock.digest": _get(m, "os_package_lock.digest"),
        "element_tree.sha256": _get(m, "element_tree.sha256"), "hardening": m.get("hardening"),
        "diskimage_builder.version": _get(m, "diskimage_builder.version"),
        "diskimage_builder.elements": _get(m, "diskimage_builder.elements"),
        "package_base.key": _get(m, "package_base.key"), "scope": m.get("scope"),
        "source_date_epoch": repro.get("source_date_epoch"),
    }


def diff_manifests(ma: dict, mb: dict, files_a: list[dict] | None = None, files_b: list[dict] | None = None, *,
                   a: str = "a", b: str = "b") -> ImageDiff:
    """Compare two build manifests (and their per-file manifests when given)."""
    for label, m in ((a, ma), (b, mb)):
        if not isinstance(m, dict) or not isinstance(m.get("packages"), list) or \
                not isinstance(m.get("artifacts"), list):
            raise DiffError(detail=f"{label}: not a build manifest (needs 'packages' and 'artifacts' lists)")
    packages = diff_versions(ma["packages"], mb["packages"])
    artifacts = diff_versions(ma["artifacts"], mb["artifacts"], name_key="component")
    ia, ib = _inputs(ma), _inputs(mb)
    inputs_changed = {k: [ia[k], ib[k]] for k in ia if ia[k] != ib[k]}
    identity = {k: [_get(ma, k), _get(mb, k)] for k in IDENTITY_KEYS if _get(ma, k) != _get(mb, k)}
    files = contents.diff(files_a, files_b) if files_a is not None and files_b is not None else None
    digests = (_get(ma, "files.sha256"), _get(mb, "files.sha256"))
    notes = []
    if files is None:
        missing = [label for label, f, d in ((a, files_a, digests[0]), (b, files_b, digests[1])) if f is None]
        notes.append(f"no per-file manifest for {', '.join(missing)}: files compared by digest only"
                     if all(digests) else f"no per-file manifest for {', '.join(missing)}: files not compared")
    return ImageDiff(a=a, b=b, packages=packages, artifacts=artifacts, files=files, files_digests=digests,
                     inputs_changed=inputs_changed, identity_changed=identity, notes=notes)


# --- build directories -------------------------------------------------------------------

def _read_manifest(build_dir: Path) -> dict:
    """A build directory's ``manifest.json`` through the one manifest reader (bounded, strict JSON,
    every field checked: a per-file manifest's ``path`` and the images are plain names)."""
    from nodeforge.imagebuild import manifest as mf

    path = build_dir / MANIFEST
    if not build_dir.is_dir() or not path.exists():
        raise UsageError(detail=f"{build_dir} is not a build directory (no {MANIFEST})")
    _, manifest = mf.read(path)
    return manifest.to_dict()


def _confined(build_dir: Path, name: str) -> Path:
    """``build_dir/name``, read only when it stays inside ``build_dir`` (:func:`fs.confined`)."""
    try:
        return fs.confined(build_dir, name)
    except ValueError as exc:
        raise DiffError(detail=f"{build_dir / MANIFEST}: files.path: {exc}; image diff reads only inside "
                               "the two build directories") from None


def _build_files(build_dir: Path, manifest: dict) -> list[dict] | None:
    """The per-file manifest of a build directory (None if it has none), checked against the manifest."""
    rec = manifest.get("files") or {}
    path = _confined(build_dir, rec.get("path") or contents.FILENAME)
    if not path.exists():
        return None
    raw = contents.read_bytes(path)      # a FIFO or device is refused, not taken for "none"
    want = rec.get("sha256")
    if want and hashlib.sha256(raw).hexdigest() != want:
        raise DiffError(detail=f"{path}: sha256 {hashlib.sha256(raw).hexdigest()} is not the "
                               f"{want} manifest.json records (changed since the build?)")
    return contents.loads(raw.decode("utf-8", "surrogateescape"), str(path))


def diff_builds(a: Path | str, b: Path | str) -> ImageDiff:
    """Compare two build directories."""
    a, b = Path(a), Path(b)
    ma, mb = _read_manifest(a), _read_manifest(b)
    return diff_manifests(ma, mb, _build_files(a, ma), _build_files(b, mb), a=str(a), b=str(b))


# --- Glance images -----------------------------------------------------------------------

FILES_IMAGE = "nodeforge_files_image"       # the node image's link to its per-file manifest image
FILES_SHA256 = "nodeforge_files_sha256"     # sha256 of files.jsonl (also in the manifest's files.sha256)
FILES_ROLE = "files"
FILES_TAG = "nodeforge-files"


def build_files_bytes(build) -> bytes | None:
    """A build directory's ``files.jsonl`` bytes, checked against the digest its manifest records (None:
    the build has none: built before per-file manifests)."""
    from nodeforge.imagebuild import manifest as mf

    rec = mf.parse(build.manifest_bytes(), str(build.manifest_path)).to_dict().get("files") or {}
    path = _confined(Path(build.path), rec.get("path") or contents.FILENAME)
    if not rec.get("sha256") or not path.exists():
        return None
    data = contents.read_bytes(path)
    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise DiffError(detail=f"{path}: sha256 {hashlib.sha256(data).hexdigest()} is not the {rec['sha256']} "
                               f"{build.manifest_path.name} records")
    return data


def _stored_manifest(raw: bytes, label: str) -> dict:
    """A manifest downloaded from Glance, read by the one manifest reader (as a build directory's)."""
    from nodeforge.imagebuild import manifest as mf

    return mf.parse(raw, label).to_dict()


def image_properties(image: dict) -> dict:
    """A Glance image's fields and properties that say what it is (tags sorted)."""
    out = {k: v for k, v in image.items() if k not in IDENTITY_PROPERTIES}
    if isinstance(out.get("tags"), list):
        out["tags"] = sorted(out["tags"])
    return out


def diff_images(conn, a: str, b: str) -> ImageDiff:
    """Compare two node images in Glance (ID, or unique name) through their stored manifests."""
    images, manifests, files, unreadable = [], [], [], []
    for ref in (a, b):
        image = g.find_image(conn, ref)
        if image.get(f"{g.P}role", "image") != "image" or not image.get(f"{g.P}manifest_image"):
            raise DiffError(detail=f"{ref}: image {image['id']} is not a nodeforge node image "
                                   f"(no {g.P}manifest_image; published by 'nodeforge image publish'?)")
        raw = g.download_manifest(conn, image)
        manifest = _stored_manifest(raw, f"{ref} (the manifest stored beside image {image['id']})")
        images.append(image)
        manifests.append(manifest)
        try:
            files.append(_glance_files(conn, image, manifest))
        except g.PublishError as exc:      # linked but not readable here (another project's private image)
            if "is gone" not in str(exc):    # a digest mismatch is an error, never a silent fallback
                raise
            files.append(None)
            unreadable.append(f"{ref}: per-file manifest not readable ({exc})")
    d = diff_manifests(manifests[0], manifests[1], files[0], files[1],
                       a=f"{images[0].get('name') or images[0]['id']} ({images[0]['id']})",
                       b=f"{images[1].get('name') or images[1]['id']} ({images[1]['id']})")
    d.notes += unreadable
    pa, pb = image_properties(images[0]), image_properties(images[1])
    for key in sorted(pa.keys() | pb.keys()):
        if pa.get(key) == pb.get(key):
            continue
        target = d.data_changed if key in DATA_PROPERTIES or key.startswith("img_signature") else d.properties_changed
        target[key] = [pa.get(key), pb.get(key)]
    for key in sorted(IDENTITY_PROPERTIES & (images[0].keys() | images[1].keys())):
        if key in ("id", "name", "nodeforge_build_id") and images[0].get(key) != images[1].get(key):
            d.identity_changed[f"glance.{key}"] = [images[0].get(key), images[1].get(key)]
    return d


def _glance_files(conn, image: dict, manifest: dict) -> list[dict] | None:
    """The per-file manifest linked from a node image (None when it was published without one)."""
    if not image.get(FILES_IMAGE):
        return None
    raw = g.download_linked(conn, image, FILES_IMAGE, FILES_SHA256, "per-file manifest")
    want = (manifest.get("files") or {}).get("sha256")
    if want and hashlib.sha256(raw).hexdigest() != want:
        raise DiffError(detail=f"image {image['id']}: its per-file manifest is not the one its build manifest "
                               f"records ({want})")
    return contents.loads(raw.decode("utf-8", "surrogateescape"), f"image {image['id']} per-file manifest")


# --- bytes ---------------------------------------------------------------------------------

def compare_bytes(a: Path, b: Path, *, block: int = 4096, regions: list[tuple[str, int, int]] | None = None,
                  chunk: int = 8 << 20, keep: int = 64) -> dict:
    """How far two files are from byte-identical: differing bytes and ``block``-sized blocks (the
    shorter file's missing tail counts as differing), the first differing blocks, and per named
    region (``(name, start, end)`` byte offsets) the differing blocks. ``first_blocks``: the first ``keep``
    differing block numbers."""
    a, b = Path(a), Path(b)
    size_a, size_b = a.stat().st_size, b.stat().st_size
    diff_bytes = diff_blocks = 0
    first: list[int] = []
    per_region = {name: 0 for name, _s, _e in regions or []}
    offset = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            ca, cb = fa.read(chunk), fb.read(chunk)
            if not ca and not cb:
                break
            if ca != cb:
                n = max(len(ca), len(cb))
                for i in range(0, n, block):
                    xa, xb = ca[i:i + block], cb[i:i + block]
                    if xa == xb:
                        continue
                    diff_blocks += 1
                    common = min(len(xa), len(xb))
                    diff_bytes += sum(1 for x, y in zip(xa[:common], xb[:common]) if x != y) + \
                        abs(len(xa) - len(xb))
                    number = (offset + i) // block
                    if len(first) < keep:
                        first.append(number)
                    for name, start, end in regions or []:
                        if start <= offset + i < end:
                            per_region[name] += 1
            offset += max(len(ca), len(cb))
    return {"size_a": size_a, "size_b": size_b, "identical": diff_bytes == 0 and size_a == size_b,
            "block": block, "blocks": (max(size_a, size_b) + block - 1) // block,
            "differing_bytes": diff_bytes, "differing_blocks": diff_blocks, "first_blocks": first,
            "regions": per_region}
