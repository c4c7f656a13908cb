"""image verify's expected digests of the installed artifacts: from the build's manifest
(``installed_artifacts``), or, for a build made before builds recorded them, from the pinned
archives in the artifact cache (and the dry run says which). Fast: no boot, no QEMU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeforge import cli
from nodeforge.imageverify import boottest, verifychecks as vc
from nodeforge.pins.cache import Cache
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.test_installed_artifacts import (ARTIFACTS, CONTAINERD, CONTAINERD_TGZ, CRICTL, CRICTL_TGZ,
                                                       KUBELET, RECORDED, sha)


def cache_with(root: Path, *archives: bytes) -> Cache:
    cache = Cache(root)
    for data in archives:
        path = cache.path_for(sha(data))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return cache


def test_recorded_digests_need_no_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(Cache, "lookup", lambda *a: pytest.fail("the cache was read"))
    monkeypatch.setattr(Cache, "peek", lambda *a: pytest.fail("the cache was looked at"))
    manifest = {"kubernetes": {"minor": "1.36"}, "artifacts": ARTIFACTS, "installed_artifacts": RECORDED}
    cache = Cache(tmp_path / "no-cache")
    exp = boottest.artifact_expectations(manifest, cache)
    assert {c: (e["sha256"], e["source"]) for c, e in exp.items()} == {
        "kubelet": (sha(KUBELET), "manifest"), "crictl": (sha(CRICTL), "manifest"),
        "containerd": (sha(CONTAINERD), "manifest")}
    assert exp["containerd"]["note"] == (f"bin/containerd inside the pinned archive sha256:{sha(CONTAINERD_TGZ)}, "
                                         "recorded by the build in manifest.json (installed_artifacts)")
    assert boottest.archives_in_cache(manifest, cache) == {
        "crictl": {"sha256": sha(CRICTL_TGZ), "member": "crictl", "source": "manifest",
                   "member_sha256": sha(CRICTL),
                   "note": "recorded by the build in manifest.json (installed_artifacts)"},
        "containerd": {"sha256": sha(CONTAINERD_TGZ), "member": "bin/containerd", "source": "manifest",
                       "member_sha256": sha(CONTAINERD),
                       "note": "recorded by the build in manifest.json (installed_artifacts)"}}
    assert not cache.root.exists()
    # The check passes on the installed files' digests.
    guest = {"commands": {"containerd": {"rc": 0, "output": "containerd github.com/x v2.3.4 abc"}},
             "files": {"/usr/local/bin/containerd": {"sha256": sha(CONTAINERD)}}}
    probe = next(p for p in vc.ARTIFACTS if p.component == "containerd")
    check = vc._artifact(probe, exp["containerd"], guest)
    assert check["passed"] and exp["containerd"]["note"] in check["evidence"]


OLDER = "manifest.json has no installed_artifacts: built before builds recorded the installed files' digests"


def test_an_older_manifest_falls_back_to_the_cache_and_says_so(tmp_path):
    manifest = {"kubernetes": {"minor": "1.36"}, "artifacts": ARTIFACTS}
    cache = cache_with(tmp_path / "cache", CRICTL_TGZ, CONTAINERD_TGZ)
    exp = boottest.artifact_expectations(manifest, cache)
    assert exp["kubelet"] == {"version": "1.36.0", "sha256": sha(KUBELET), "note": None, "source": "manifest"}
    assert (exp["crictl"]["sha256"], exp["crictl"]["source"]) == (sha(CRICTL), "cache")
    assert (exp["containerd"]["sha256"], exp["containerd"]["source"]) == (sha(CONTAINERD), "cache")
    assert exp["containerd"]["note"] == (f"{OLDER}; bin/containerd inside the pinned archive "
                                         f"sha256:{sha(CONTAINERD_TGZ)}, read from the artifact cache {cache.root}")
    plan = boottest.archives_in_cache(manifest, cache)
    assert plan["crictl"] == {"sha256": sha(CRICTL_TGZ), "member": "crictl", "source": "cache", "in_cache": True,
                              "note": OLDER}


def test_an_older_manifest_without_the_archive_in_the_cache_says_what_to_run(tmp_path):
    manifest = {"kubernetes": {"minor": "1.36"}, "artifacts": ARTIFACTS}
    cache = cache_with(tmp_path / "cache", CRICTL_TGZ)
    exp = boottest.artifact_expectations(manifest, cache)
    assert exp["crictl"]["sha256"] == sha(CRICTL)
    assert exp["containerd"]["sha256"] is None and exp["containerd"]["source"] == "cache"
    assert exp["containerd"]["note"] == (f"{OLDER}; the pinned archive {sha(CONTAINERD_TGZ)[:16]}... is not in the "
                                         f"artifact cache {cache.root}: run 'nodeforge release prefetch --minor 1.36' "
                                         "with the lockfile it was built from, or pass --cache-dir")
    assert boottest.archives_in_cache(manifest, cache)["containerd"]["in_cache"] is False
    guest = {"commands": {"containerd": {"rc": 0, "output": "containerd github.com/x v2.3.4 abc"}},
             "files": {"/usr/local/bin/containerd": {"sha256": sha(CONTAINERD)}}}
    probe = next(p for p in vc.ARTIFACTS if p.component == "containerd")
    check = vc._artifact(probe, exp["containerd"], guest)
    assert not check["passed"] and check["expected"]["sha256"] == f"unknown ({exp['containerd']['note']})"


def test_a_manifest_recording_another_file_falls_back_naming_both(tmp_path):
    moved = dict(RECORDED, crictl={"path": "/usr/bin/crictl", "member": "crictl", "sha256": sha(CRICTL)})
    manifest = {"kubernetes": {"minor": "1.36"}, "artifacts": ARTIFACTS, "installed_artifacts": moved}
    exp = boottest.artifact_expectations(manifest, cache_with(tmp_path / "cache"))
    assert exp["crictl"]["sha256"] is None and exp["crictl"]["note"].startswith(
        "manifest.json installed_artifacts records crictl as /usr/bin/crictl (member crictl); the check reads "
        "/usr/local/bin/crictl (member crictl); the pinned archive")
    assert exp["containerd"]["source"] == "manifest"


def test_verify_dry_run_shows_where_each_expected_digest_comes_from(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(boottest, "require_tools", lambda: {t: f"/nonexistent/bin/{t}" for t in boottest.TOOLS})
    monkeypatch.setattr(boottest, "boot", lambda *a, **k: pytest.fail("booted"))
    monkeypatch.delenv(boottest.ENV_ACCEL, raising=False)
    new = make_build_dir(tmp_path / "builds", variants=("vm",), verify=None, artifacts=ARTIFACTS,
                         manifest_extra={"installed_artifacts": RECORDED})
    old = make_build_dir(tmp_path / "builds", variants=("vm",), verify=None, artifacts=ARTIFACTS)
    args = ["--dry-run", "--accel", "tcg", "--cache-dir", str(tmp_path / "empty-cache")]

    assert cli.main(["image", "verify", str(new), *args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c: a["source"] for c, a in doc["archives"].items()} == {"crictl": "manifest", "containerd": "manifest"}
    assert doc["archives"]["containerd"]["member_sha256"] == sha(CONTAINERD)
    assert cli.main(["image", "verify", str(new), *args]) == 0
    out = capsys.readouterr().out
    assert (f"containerd: bin/containerd in the pinned archive {sha(CONTAINERD_TGZ)[:16]}...: expected sha256 "
            f"{sha(CONTAINERD)[:16]}... recorded by the build in manifest.json (installed_artifacts)") in out

    assert cli.main(["image", "verify", str(old), *args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["archives"]["crictl"] == {"sha256": sha(CRICTL_TGZ), "member": "crictl", "source": "cache",
                                         "in_cache": False, "note": OLDER}
    assert cli.main(["image", "verify", str(old), *args]) == 0
    out = capsys.readouterr().out
    assert (f"crictl: crictl in the pinned archive {sha(CRICTL_TGZ)[:16]}...: the archive is not in the cache: "
            f"artifact-crictl would fail ({OLDER}); run 'nodeforge release prefetch' or pass --cache-dir") in out
    assert not (tmp_path / "empty-cache").exists()
