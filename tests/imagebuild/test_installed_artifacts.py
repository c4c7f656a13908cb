"""The installed artifacts' digests the build records in manifest.json (``installed_artifacts``).

Fast: small tar archives and trees made here, the manifest writer, and the
manifest's strict declaration with and without the field.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from nodeforge.imagebuild import contents, manifest as mf
from nodeforge.imageverify import verifychecks as vc
from nodeforge.schema import SchemaError

CRICTL = b"#!/bin/sh\necho crictl version v1.36.0\n"
CONTAINERD = b"#!/bin/sh\necho containerd v2.3.4\n"
KUBELET = b"#!/bin/sh\necho Kubernetes v1.36.0\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


CRICTL_TGZ = tar_gz({"./crictl": CRICTL})
CONTAINERD_TGZ = tar_gz({"bin/ctr": b"ctr", "bin/containerd": CONTAINERD, "bin/containerd-shim-runc-v2": b"shim"})
ARTIFACTS = [{"component": "kubelet", "version": "1.36.0", "arch": "amd64", "sha256": sha(KUBELET)},
             {"component": "crictl", "version": "1.36.0", "arch": "amd64", "sha256": sha(CRICTL_TGZ)},
             {"component": "containerd", "version": "2.3.4", "arch": "amd64", "sha256": sha(CONTAINERD_TGZ)}]
RECORDED = {"kubelet": {"path": "/usr/local/bin/kubelet", "sha256": sha(KUBELET)},
            "crictl": {"path": "/usr/local/bin/crictl", "member": "crictl", "sha256": sha(CRICTL)},
            "containerd": {"path": "/usr/local/bin/containerd", "member": "bin/containerd",
                           "sha256": sha(CONTAINERD)}}


def archive_dir(tmp_path: Path) -> dict[str, Path]:
    """The pinned files under their sha256, as the artifact cache holds them."""
    d = tmp_path / "archives"
    d.mkdir()
    out = {}
    for data in (KUBELET, CRICTL_TGZ, CONTAINERD_TGZ):
        (d / sha(data)).write_bytes(data)
        out[sha(data)] = d / sha(data)
    return out


def root_tree(tmp_path: Path, files: dict[str, bytes]) -> list[dict]:
    """The per-file manifest entries of a small root filesystem holding ``files``."""
    root = tmp_path / "root"
    for rel, data in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return contents.scan(root, workers=1)


# --- the build: what it records --------------------------------------------------------------

def test_the_build_records_each_installed_files_digest_checked_against_its_pin(tmp_path):
    archives = archive_dir(tmp_path)
    pinned = mf.pinned_file_digests(ARTIFACTS, archives.__getitem__)
    # Only the pinned components; an archive's entry is its member's digest, a file's its pin.
    assert pinned == RECORDED
    entries = root_tree(tmp_path, {"/usr/local/bin/kubelet": KUBELET, "/usr/local/bin/crictl": CRICTL,
                                   "/usr/local/bin/containerd": CONTAINERD, "/usr/local/bin/ctr": b"ctr"})
    assert mf.installed_artifacts(pinned, entries) == RECORDED


def test_an_archive_without_the_member_the_image_installs_fails_the_build_naming_it(tmp_path):
    archives = archive_dir(tmp_path)
    renamed = tar_gz({"bin/containerd-renamed": CONTAINERD})
    (tmp_path / "renamed").write_bytes(renamed)
    artifacts = [dict(a, sha256=sha(renamed)) if a["component"] == "containerd" else a for a in ARTIFACTS]
    lookup = {**archives, sha(renamed): tmp_path / "renamed"}
    with pytest.raises(mf.InstalledFileError) as exc:
        mf.pinned_file_digests(artifacts, lookup.__getitem__)
    assert str(exc.value) == (f"containerd 2.3.4: the pinned archive sha256:{sha(renamed)} ({tmp_path / 'renamed'}) "
                              "has no regular file 'bin/containerd', the file the image installs as "
                              "/usr/local/bin/containerd and boot verification compares")
    (tmp_path / "not-a-tar").write_bytes(b"plain bytes")
    with pytest.raises(mf.InstalledFileError, match="cannot be read as a tar archive"):
        mf.pinned_file_digests(artifacts, lambda _: tmp_path / "not-a-tar")


@pytest.mark.parametrize("files, error", [
    ({"/usr/local/bin/kubelet": KUBELET, "/usr/local/bin/crictl": CRICTL},
     "/usr/local/bin/containerd is not in the root filesystem; the containerd element installs member "
     "'bin/containerd' of the pinned containerd archive there"),
    ({"/usr/local/bin/kubelet": KUBELET, "/usr/local/bin/crictl": CRICTL, "/usr/local/bin/containerd": b"other"},
     f"/usr/local/bin/containerd has sha256 {sha(b'other')}; member 'bin/containerd' of the pinned containerd "
     f"archive has {sha(CONTAINERD)}"),
    ({"/usr/local/bin/kubelet/x": KUBELET, "/usr/local/bin/crictl": CRICTL, "/usr/local/bin/containerd": CONTAINERD},
     "/usr/local/bin/kubelet is a dir, not a regular file (the pinned kubelet file)"),
])
def test_an_installed_file_that_is_not_its_pin_fails_the_build_naming_it(tmp_path, files, error):
    pinned = mf.pinned_file_digests(ARTIFACTS, archive_dir(tmp_path).__getitem__)
    with pytest.raises(mf.InstalledFileError) as exc:
        mf.installed_artifacts(pinned, root_tree(tmp_path, files))
    assert str(exc.value) == error


def _manifest(**over) -> dict:
    from nodeforge.pins import lockfile
    import datetime
    kw = dict(build_id="k8s-1.36.0-x", build_time=datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc),
              minor="1.36", kubernetes_version="1.36.0", pause_image="registry.k8s.io/pause:3.10.1",
              base_os={"distro": "debian", "release": "12"}, arch="amd64", variants=["vm"],
              images={"vm": "a.qcow2"}, packages=[{"name": "bash", "version": "5.2", "arch": "amd64"}],
              artifacts=ARTIFACTS, lockfile_path=lockfile.DEFAULT_PATH, element_tree_digest="b" * 64,
              hardening={"profile": "p", "version": "1"}, dib={"version": "3.43.0", "args": []},
              source={"commit": "c", "dirty": False})
    kw.update(over)
    return mf.build_manifest(**kw)


def test_the_manifest_writer_records_them_outside_the_content_digest_and_the_sbom():
    old, new = _manifest(), _manifest(installed=RECORDED)
    assert "installed_artifacts" not in old
    written = json.loads(mf.dumps(new))
    assert written["installed_artifacts"] == RECORDED
    assert mf.parse(mf.dumps(new)).to_dict()["installed_artifacts"] == RECORDED
    # Derived from the pinned artifacts (already in the content digest) and the per-file manifest:
    # the same content has the same content id and SBOM with or without them.
    assert mf.content_id(new) == mf.content_id(old)
    assert mf.sbom(new) == mf.sbom(old)


# --- the manifest's declaration ----------------------------------------------------------------

def test_the_declaration_accepts_manifests_with_and_without_the_field():
    assert mf.validate(_manifest()) == []
    assert mf.validate(_manifest(installed=RECORDED)) == []
    assert mf.validate(_manifest(installed={})) == []


@pytest.mark.parametrize("entry, problem", [
    ({"path": "/usr/local/bin/crictl", "sha256": "xyz"},
     "installed_artifacts.crictl.sha256: expected a sha256 digest (64 lowercase hex characters), got 'xyz'"),
    ({"path": "usr/local/bin/crictl", "sha256": "a" * 64},
     "installed_artifacts.crictl.path: expected an absolute path in the image, got 'usr/local/bin/crictl'"),
    ({"path": "/usr/local/bin/crictl", "member": "/crictl", "sha256": "a" * 64},
     "installed_artifacts.crictl.member: expected a file name inside the pinned archive (relative), got '/crictl'"),
    ({"path": "/usr/local/bin/crictl"}, "installed_artifacts.crictl.sha256: missing key 'sha256'"),
    ({"path": "/usr/local/bin/crictl", "sha256": "a" * 64, "size": 1},
     "installed_artifacts.crictl.size: unknown key (allowed: path, member, sha256)"),
])
def test_the_declaration_refuses_a_malformed_entry_naming_the_field(entry, problem):
    m = _manifest(installed={"crictl": entry})
    assert mf.validate(m) == [problem]
    with pytest.raises(SchemaError) as exc:       # the strict reader of manifest.json names it too
        mf.parse(json.dumps(m, indent=2))
    assert problem.split(":")[0] in str(exc.value)


def test_the_declaration_refuses_an_unknown_component_and_a_non_mapping():
    problems = mf.validate(_manifest(installed={"kubelett": RECORDED["kubelet"]}))
    assert len(problems) == 1
    assert problems[0].startswith("installed_artifacts.kubelett: key expected a pinned component (kubelet, ")
    assert mf.validate(_manifest(installed=[RECORDED["kubelet"]])) == [
        "installed_artifacts: expected a mapping, got a list"]


def test_the_checks_read_the_files_the_build_records():
    assert [(p.component, p.path, p.member) for p in vc.ARTIFACTS] == [
        (f.component, f.path, f.member) for f in mf.INSTALLED_FILES]
