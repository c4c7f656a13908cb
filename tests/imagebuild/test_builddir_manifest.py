"""One typed manifest (``nodeforge.imagebuild.manifest.Manifest``): what ``image build`` writes reads
back unchanged; an older shape goes through the one converter (``upgrade``); a bad field is named."""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest

from nodeforge.base.sums import write_sums
from nodeforge.imagebuild import manifest as mf
from nodeforge.imageverify import builddir
from nodeforge.pins import lockfile
from nodeforge.schema import SchemaError
from tests.imagebuild.builddir_factory import make_build_dir


def _written() -> dict:
    """A manifest as ``image build`` writes one (build_manifest, then what _build adds)."""
    m = mf.build_manifest(
        build_id="k8s-1.36.0-20261201T000000Z-abcdef12",
        build_time=datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc), minor="1.36",
        kubernetes_version="1.36.0", pause_image="registry.k8s.io/pause:3.10.1",
        base_os={"distro": "debian", "release": "12", "codename": "bookworm"}, arch="amd64",
        variants=["vm", "baremetal"],
        images={"vm": "nodeforge-k8s-1.36.0-vm.qcow2", "baremetal": "nodeforge-k8s-1.36.0-baremetal.raw"},
        packages=[{"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"}],
        artifacts=[{"component": "kubelet", "version": "1.36.0", "arch": "amd64", "sha256": "a" * 64,
                    "source_path": "v1.36.0/bin/linux/amd64/kubelet"}],
        lockfile_path=lockfile.DEFAULT_PATH, element_tree_digest="b" * 64,
        hardening={"profile": "nodeforge-k8s", "version": "1"},
        dib={"version": "3.43.0", "args": ["-a", "amd64", "-t", "tar"], "elements": ["debian-minimal"]},
        source={"commit": "c" * 40, "dirty": False},
        package_base={"key": "d" * 64, "sha256": "e" * 64, "created": "2026-11-30T00:00:00Z", "recipe": 3},
        scope="team-a")
    m["os_package_lock"] = {"path": "os-packages.lock.yaml", "digest": "f" * 64, "packages": 294}
    m["files"] = {"path": "files.jsonl", "sha256": "1" * 64, "entries": 12345, "bytes": 987654}
    m["reproducible"] = {"source_date_epoch": 1764547200, "inputs_sha256": "2" * 64, "source_date_from": "x"}
    return m


def test_what_the_build_writes_reads_back_unchanged():
    m = _written()
    text = mf.dumps(m)
    got = mf.parse(text.encode())
    assert got.to_dict() == m
    assert mf.dumps(got.to_dict()) == text
    assert (got.kubernetes.version, got.base_os.release, got.lockfile.sha256) == (
        "1.36.0", "12", hashlib.sha256(lockfile.DEFAULT_PATH.read_bytes()).hexdigest())


def test_the_writer_refuses_a_manifest_off_the_declaration():
    m = _written()
    m["packages"][0]["version"] = 5
    with pytest.raises(SchemaError, match=r"packages\[0\]\.version"):
        mf.dumps(m)


def test_builddir_reads_the_typed_manifest(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    b = builddir.load(d)
    doc = json.loads((d / "manifest.json").read_text())
    assert b.manifest.to_dict() == doc
    assert (b.build_id, b.k8s_version, b.os_distro, b.os_version, b.architecture) == (
        doc["build_id"], "1.36.0", "debian", "12", "x86_64")
    assert b.lockfile_sha256 == doc["lockfile"]["sha256"]
    assert {v: (i.disk_format, i.firmware) for v, i in b.variants.items()} == {
        "vm": ("qcow2", "bios"), "baremetal": ("raw", "uefi")}


def _legacy(doc: dict) -> dict:
    """``doc`` in the spellings the tolerant reader accepted before the schema was read (/0)."""
    old = {k: v for k, v in doc.items()
           if k not in ("schema", "build_id", "build_time", "base_os", "arch", "lockfile", "images", "kubernetes")}
    old["build"] = {"id": doc["build_id"], "time": doc["build_time"]}
    old["kubernetes"] = {"minor": doc["kubernetes"]["minor"], "pause_image": doc["kubernetes"]["pause_image"]}
    old["k8s_version"] = "v" + doc["kubernetes"]["version"]
    old["os"] = {"distro": doc["base_os"]["distro"], "version": doc["base_os"]["release"]}
    old["architecture"] = "x86_64"
    old["lockfile_digest"] = "sha256:" + doc["lockfile"]["sha256"]
    old["images"] = {v: {"file": name, "format": "qcow2" if v == "vm" else "raw",
                         "firmware": "bios" if v == "vm" else "uefi"} for v, name in doc["images"].items()}
    old["image_source"] = "https://example.invalid/never-written"
    return old


def _rewrite(d, doc: dict) -> None:
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    (d / "manifest.json").write_text(text)
    names = [*doc["images"].values()] if all(isinstance(v, str) for v in doc["images"].values()) else \
        [e["file"] for e in doc["images"].values()]
    write_sums(d, {n: {"sha256": hashlib.sha256((d / n).read_bytes()).hexdigest(),
                       "sha512": hashlib.sha512((d / n).read_bytes()).hexdigest()} for n in [*names, "manifest.json"]})


def test_an_old_shape_manifest_goes_through_the_converter(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    current = json.loads((d / "manifest.json").read_text())
    before = builddir.load(d)
    old = _legacy(current)
    up = mf.upgrade(old)
    assert up["schema"] == mf.SCHEMA and "schema" not in old     # the input is not changed
    want = dict(current)
    want["base_os"] = {k: v for k, v in current["base_os"].items() if k != "codename"}
    want["lockfile"] = {"sha256": current["lockfile"]["sha256"]}    # /0 named no lockfile file
    assert up == want
    _rewrite(d, old)
    after = builddir.load(d)
    for field in ("build_id", "k8s_version", "os_distro", "os_version", "architecture", "build_time",
                  "lockfile_sha256"):
        assert getattr(after, field) == getattr(before, field), field
    assert {v: (i.path, i.disk_format, i.firmware, i.sha256) for v, i in after.variants.items()} == \
        {v: (i.path, i.disk_format, i.firmware, i.sha256) for v, i in before.variants.items()}
    assert after.image_source is None


def test_the_converter_refuses_what_it_cannot_map():
    old = _legacy(_written())
    old["images"]["vm"]["format"] = "raw"
    with pytest.raises(SchemaError, match=r"images\.vm\.format: is \"raw\"; a vm image .* is qcow2"):
        mf.upgrade(old)
    with pytest.raises(SchemaError, match=r"schema: schema is \"nodeforge-image-manifest/9\""):
        mf.upgrade(dict(_written(), schema="nodeforge-image-manifest/9"))
    # Renamed only: a field the old shape lacks is named as missing, never invented.
    old = _legacy(_written())
    del old["kubernetes"]["pause_image"]
    with pytest.raises(SchemaError, match=r"read as nodeforge-image-manifest/0\): kubernetes\.pause_image"):
        mf.parse(json.dumps(old))


@pytest.mark.parametrize("key, value, match", [
    (("kubernetes", "version"), 136, r"manifest\.json:\d+: kubernetes\.version: expected a string"),
    (("lockfile", "sha256"), "nope", r"manifest\.json:\d+: lockfile\.sha256: expected a sha256"),
    (("images",), ["a.qcow2"], r"manifest\.json:\d+: images: expected a mapping"),
    (("build_time",), None, r"manifest\.json:\d+: build_time"),
])
def test_a_bad_field_is_named(tmp_path, key, value, match):
    d = make_build_dir(tmp_path, verify=None)
    doc = json.loads((d / "manifest.json").read_text())
    node = doc
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    (d / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    with pytest.raises(SchemaError, match=match) as err:
        builddir.load(d)
    assert err.value.exit_code == 2
