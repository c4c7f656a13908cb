"""Build manifest: dpkg parsing, schema, SBOM."""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

from nodeforge.imagebuild import manifest
from nodeforge.pins import lockfile

STATUS = """Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.15-2+b7
Description: shell
 continued line: with a colon

Package: removed-thing
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u1
"""


def _manifest(**over):
    kw = dict(build_id="k8s-1.36.0-x", build_time=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
              minor="1.36", kubernetes_version="1.36.0", pause_image="registry.k8s.io/pause:3.10.1",
              base_os={"distro": "debian", "release": "12"}, arch="amd64", variants=["vm", "baremetal"],
              images={"vm": "a.qcow2", "baremetal": "b.raw"},
              packages=[{"name": "bash", "version": "5.2", "arch": "amd64"}],
              artifacts=[{"component": "kubelet", "version": "1.36.0", "arch": "amd64", "sha256": "a" * 64}],
              lockfile_path=lockfile.DEFAULT_PATH, element_tree_digest="b" * 64,
              hardening={"profile": "p", "version": "1"}, dib={"version": "3.43.0", "args": ["-t", "tar"]},
              source={"commit": "c", "dirty": False})
    kw.update(over)
    return manifest.build_manifest(**kw)


def test_dpkg_packages_reads_installed_only(tmp_path):
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(STATUS)
    assert manifest.dpkg_packages(tmp_path) == [
        {"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"},
        {"name": "tzdata", "version": "2025b-0+deb12u1", "arch": "all"},
    ]


def test_manifest_schema():
    m = _manifest()
    assert manifest.validate(m) == []
    assert m["build_time"] == "2026-01-02T03:04:05Z"
    assert m["lockfile"]["sha256"] == hashlib.sha256(lockfile.DEFAULT_PATH.read_bytes()).hexdigest()
    assert json.loads(manifest.dumps(m)) == m
    broken = dict(m)
    del broken["packages"]
    broken["artifacts"] = [{"component": "kubelet", "version": "1", "sha256": "short"}]
    problems = manifest.validate(broken)
    assert "packages: missing key 'packages'" in problems
    assert any(p.startswith("artifacts[0].sha256: expected a sha256 digest") for p in problems)
    assert manifest.validate([]) == ["(top level): expected a mapping, got a list"]
    assert manifest.validate(dict(m, extra=1)) == ["extra: unknown key (allowed: schema, build_id, build_time, "
                                                   "kubernetes, base_os, arch, variants, images, packages, artifacts, "
                                                   "lockfile, element_tree, hardening, diskimage_builder, source, "
                                                   "package_base, scope, os_package_lock, files, reproducible, "
                                                   "installed_artifacts)"]


def test_manifest_validate_reports_bad_entries():
    m = _manifest(packages=[{"name": "x"}], artifacts=[{"component": "k", "version": "1", "sha256": "x"}])
    problems = manifest.validate(m)
    assert any("packages[0]" in p for p in problems) and any("artifacts[0].sha256" in p for p in problems)


def test_sbom_is_cyclonedx_with_every_component():
    m = _manifest()
    doc = json.loads(manifest.sbom(m))
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    purls = {c["purl"] for c in doc["components"]}
    assert "pkg:deb/debian/bash@5.2?arch=amd64&distro=debian-12" in purls
    kubelet = next(c for c in doc["components"] if c["name"] == "kubelet")
    assert kubelet["hashes"] == [{"alg": "SHA-256", "content": "a" * 64}]
    assert manifest.sbom(m) == manifest.sbom(m)  # deterministic for one manifest


def test_manifest_records_the_lockfiles_scope_when_given():
    assert "scope" not in _manifest()                       # manifests before scopes: no key, still valid
    m = _manifest(scope="team-a")
    assert m["scope"] == "team-a" and manifest.validate(m) == []
    assert any(p.startswith("scope: must be 1-63") for p in manifest.validate(dict(m, scope="Not Valid")))
