"""Synthetic build directories for publish tests.

Real image files (a qcow2 from ``qemu-img create`` holding some random data,
a raw file of random bytes), correct ``SHA256SUMS``/``SHA512SUMS`` and a
``manifest.json`` in the shape ``nodeforge image build`` writes; optionally a
``verify.json``. Each call makes unique content, so digests never collide
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

from nodeforge.imagebuild.builddir import write_sums

# A few hundred packages make a manifest of realistic size (~25 KiB).
_PACKAGES = [{"name": f"pkg-{i:03d}", "version": f"1.{i}.0-1", "arch": "amd64"} for i in range(300)]


def make_build_dir(root: Path, *, k8s: str = "1.36.0", variants=("vm", "baremetal"), size: int = 256 * 1024,
                   verify: str | None = "passed", build_id: str | None = None,
                   build_time: datetime.datetime | None = None, packages: list | None = None) -> Path:
    """Create ``root/<build id>/`` and return it. ``verify``: passed, failed or None (no verify.json)."""
    build_id = build_id or f"nf-test-{k8s}-{uuid.uuid4().hex[:10]}"
    d = root / build_id
    d.mkdir(parents=True)
    images, sums = {}, {}
    for variant in variants:
        if variant == "vm":
            name = f"k8s-{k8s}-vm.qcow2"
            raw = d / "tmp.raw"
            raw.write_bytes(os.urandom(size))
            if shutil.which("qemu-img"):
                subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(d / name)],
                               check=True, capture_output=True)
                raw.unlink()
            else:
                raw.rename(d / name)
            images["vm"] = {"file": name, "format": "qcow2", "firmware": "bios"}
        else:
            name = f"k8s-{k8s}-baremetal.raw"
            (d / name).write_bytes(os.urandom(size))
            images["baremetal"] = {"file": name, "format": "raw", "firmware": "uefi"}
        data = (d / name).read_bytes()
        sums[name] = {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}
    write_sums(d, sums)
    when = build_time or datetime.datetime.now(datetime.timezone.utc)
    manifest = {
        "build_id": build_id,
        "build_time": when.isoformat(),
        "kubernetes": {"version": k8s, "minor": ".".join(k8s.split(".")[:2])},
        "os": {"distro": "debian", "version": "12"},
        "architecture": "amd64",
        "lockfile_digest": "sha256:" + hashlib.sha256(build_id.encode()).hexdigest(),
        "images": images,
        "packages": packages if packages is not None else _PACKAGES,
        "artifacts": [{"name": "kubelet", "version": f"v{k8s}", "sha256": "0" * 64}],
    }
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if verify is not None:
        (d / "verify.json").write_text(json.dumps({
            "variants": {v: {"passed": verify == "passed", "checks": [
                {"id": "kubelet-version", "result": "pass" if verify == "passed" else "fail"}]} for v in variants}
        }))
    return d
