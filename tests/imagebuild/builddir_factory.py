"""Synthetic build directories for publish tests.

Real image files (a qcow2 from ``qemu-img create`` holding some random data,
a raw file of random bytes), correct ``SHA256SUMS``/``SHA512SUMS`` and a
``manifest.json`` in the shape ``nodeforge image build`` writes; optionally a
``verify.json``, written by the product's writer (``boottest.write_report``,
through ``tests/imagebuild/verify_fixture.py``) in the strict form publish and
promote require. Each call makes unique content, so digests never collide
between tests sharing the local Glance.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from nodeforge.base.sums import write_sums
from tests.imagebuild.verify_fixture import write_verify

# A few hundred packages make a manifest of realistic size (~25 KiB).
_PACKAGES = [{"name": f"pkg-{i:03d}", "version": f"1.{i}.0-1", "arch": "amd64"} for i in range(300)]


def make_build_dir(root: Path, *, k8s: str = "1.36.0", variants=("vm", "baremetal"), size: int = 256 * 1024,
                   verify: str | None = "passed", build_id: str | None = None,
                   build_time: datetime.datetime | None = None, packages: list | None = None,
                   baremetal_image: tuple[Path, str, str] | None = None, artifacts: list | None = None,
                   hardening: dict | None = None, manifest_extra: dict | None = None) -> Path:
    """Create ``root/<build id>/`` and return it. ``verify``: passed, failed (NF-HARD-003 failed) for
    every variant, or None (no verify.json). ``baremetal_image``: (path, sha256, sha512) of an existing
    raw image to hard-link as the baremetal image instead of ``size`` random bytes (a benchmark's one
    big file). ``artifacts``, ``hardening``: the manifest's pinned artifacts (default: kubelet) and
    hardening profile (default: one that is not the repository's); ``manifest_extra``: more manifest
    keys (e.g. ``installed_artifacts``)."""
    build_id = build_id or f"nf-test-{k8s}-{uuid.uuid4().hex[:10]}"
    d = root / build_id
    d.mkdir(parents=True)
    images, sums = {}, {}
    for variant in variants:
        if variant == "vm":
            name = f"nodeforge-k8s-{k8s}-vm.qcow2"
            raw = d / "tmp.raw"
            raw.write_bytes(os.urandom(size))
            if shutil.which("qemu-img"):
                subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(d / name)],
                               check=True, capture_output=True)
                raw.unlink()
            else:
                raw.rename(d / name)
            images["vm"] = name
        else:
            name = f"nodeforge-k8s-{k8s}-baremetal.raw"
            images["baremetal"] = name
            if baremetal_image is not None:
                os.link(baremetal_image[0], d / name)
                sums[name] = {"sha256": baremetal_image[1], "sha512": baremetal_image[2]}
                continue
            (d / name).write_bytes(os.urandom(size))
        data = (d / name).read_bytes()
        sums[name] = {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}
    when = build_time or datetime.datetime.now(datetime.timezone.utc)
    # The keys nodeforge/imagebuild/manifest.py writes (schema nodeforge-image-manifest/1).
    manifest = {
        "schema": "nodeforge-image-manifest/1",
        "build_id": build_id,
        "build_time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kubernetes": {"minor": ".".join(k8s.split(".")[:2]), "version": k8s, "pause_image": "registry.k8s.io/pause:3.10"},
        "base_os": {"distro": "debian", "release": "12", "codename": "bookworm"},
        "arch": "amd64",
        "variants": list(variants),
        "images": images,
        "packages": packages if packages is not None else _PACKAGES,
        "artifacts": artifacts if artifacts is not None else [
            {"component": "kubelet", "version": k8s, "arch": "amd64", "sha256": "0" * 64,
             "source_path": f"v{k8s}/bin/linux/amd64/kubelet"}],
        "lockfile": {"path": "versions.yaml", "sha256": hashlib.sha256(build_id.encode()).hexdigest()},
        "element_tree": {"sha256": "1" * 64},
        "hardening": hardening or {"profile": "nodeforge-k8s", "version": 1},
        "diskimage_builder": {"version": "3.43.0", "args": []},
        "source": {"commit": None, "dirty": None},
        **(manifest_extra or {}),
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (d / "manifest.json").write_text(text)
    # Like `image build`: the SUMS files cover the manifest too.
    sums["manifest.json"] = {"sha256": hashlib.sha256(text.encode()).hexdigest(),
                             "sha512": hashlib.sha512(text.encode()).hexdigest()}
    write_sums(d, sums)
    if verify is not None:
        if verify not in ("passed", "failed"):
            raise ValueError(f"verify={verify!r}: passed, failed or None")
        write_verify(d, verify)
    return d


def change_last_byte(path: Path) -> None:
    """Change a file after its SHA*SUMS were written: its last byte is flipped, never set to a value
    it may already hold (random content ends in any byte)."""
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
