"""The real build: both variants from one root filesystem, against the local mirror.

Marked slow and devcloud: the build is the test run's one real build, made by
the release pipeline on the session's local cloud (tests/release_fixture.py)
and shared with the boot, publish and end-to-end tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest

from nodeforge.base import sums as base_sums
from nodeforge.imagebuild import manifest as mf
from nodeforge.pins import lockfile
from nodeforge.pins.lockfile import Arch, Component
from tests.imagebuild.image_files import cat as _cat, mtime_and_size as _mtime_and_size, partitions as _partitions
from tests.imagebuild.image_files import root_fs as _root_fs, run as _run

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]
MTOOLS_ENV = dict(os.environ, MTOOLS_SKIP_CHECK="1")


def test_vm_image_is_qcow2(built_image):
    info = json.loads(_run("qemu-img", "info", "--output", "json", str(built_image.image("vm"))))
    assert info["format"] == "qcow2"
    assert info["virtual-size"] > 1 << 30


def test_baremetal_image_is_gpt_with_esp_and_bootloader(built_image):
    raw = built_image.image("baremetal")
    assert _run("qemu-img", "info", "--output", "json", str(raw)).count('"format": "raw"') == 1
    parts = _partitions(raw)
    assert parts[1][2] == "EF02" and parts[2][2] == "EF00" and parts[3][2] == "8304"
    listing = _run("mdir", "-b", "-i", f"{raw}@@{parts[2][0] * 512}", "::/EFI/BOOT", env=MTOOLS_ENV)
    assert "BOOTX64.EFI" in listing
    with open(raw, "rb") as fh:
        mbr = fh.read(512)
    assert mbr[510:] == b"\x55\xaa" and mbr[:2] != b"\0\0"   # BIOS boot code in the protective MBR


def test_checksums_pass_coreutils(built_image):
    # Both tools at once (each reads every image: ~2.7 GB), one per core.
    procs = [(tool, subprocess.Popen([tool, "-c", sums], cwd=built_image.path, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
             for tool, sums in (("sha256sum", "SHA256SUMS"), ("sha512sum", "SHA512SUMS"))]
    for tool, proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{tool}: {out}"
    names = set(base_sums.read_sums(built_image.path / "SHA256SUMS"))
    assert set(built_image.manifest["images"].values()) <= names and "manifest.json" in names


def test_manifest_lists_the_pins(built_image):
    m = built_image.manifest
    assert mf.validate(m) == []
    pins = lockfile.load(built_image.lockfile).minor("1.36")
    arts = {a["component"]: a for a in m["artifacts"]}
    assert arts["kubelet"]["version"] == str(pins.version) == m["kubernetes"]["version"]
    assert arts["kubelet"]["sha256"] == pins.pins[Component.KUBELET].sha256[Arch.AMD64]
    for comp in Component:
        assert arts[comp.value]["sha256"] == pins.pins[comp].sha256[Arch.AMD64]
    assert m["lockfile"]["sha256"] == hashlib.sha256(built_image.lockfile.read_bytes()).hexdigest()
    assert m["diskimage_builder"]["version"] and "-t" in m["diskimage_builder"]["args"]
    names = {p["name"] for p in m["packages"]}
    assert {"linux-image-amd64", "openssh-server", "auditd", "cloud-init", "grub-efi-amd64-bin"} <= names
    sbom = json.loads((built_image.path / "sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX" and len(sbom["components"]) == len(m["packages"]) + len(m["artifacts"])
    log = (built_image.path / "build.log").read_text()
    # Every .pyc was valid for its source before the clamp and is after it (nodeforge/imagebuild/pyc.py): the
    # checked-hash ones py_compile wrote became timestamp-based, and the stdlib's were re-dated.
    assert re.search(r"normalised: [1-9][0-9]* checked-hash \.pyc made timestamp-based, [1-9][0-9]* timestamp "
                     r"\.pyc re-dated to their clamped sources; left: [0-9]+ already valid, 0 not matching their "
                     r"source", log), "no .pyc line in build.log"


@pytest.mark.parametrize("variant", ["baremetal", "vm"])
def test_image_content_matches_the_manifest(built_image, variant, tmp_path):
    fs = _root_fs(built_image.image(variant), tmp_path)
    # dpkg's database inside the image lists exactly the manifest's packages (same in both variants).
    status_dir = tmp_path / "root" / "var" / "lib" / "dpkg"
    status_dir.mkdir(parents=True)
    (status_dir / "status").write_text(_cat(fs, "/var/lib/dpkg/status"))
    assert mf.dpkg_packages(tmp_path / "root") == built_image.manifest["packages"]
    # The same manifest is stored inside the image.
    assert json.loads(_cat(fs, "/etc/nodeforge/manifest.json")) == built_image.manifest
    hardening = json.loads(_cat(fs, "/etc/nodeforge/hardening.json"))
    assert hardening["controls"][0]["id"] == "NF-HARD-001"
    # Hygiene: no SSH host keys, empty machine-id.
    ssh = subprocess.run(["debugfs", "-R", "ls /etc/ssh", str(fs)], capture_output=True, text=True).stdout
    assert "ssh_host_" not in ssh
    assert _cat(fs, "/etc/machine-id") == ""
    # Python's .pyc files are timestamp-based, as on a Debian system (no source read and hashed per import),
    # and valid for their clamped sources (nodeforge/imagebuild/pyc.py): cloud-init's (py_compile wrote
    # checked-hash ones) and the stdlib's (py3compile's, whose sources the clamp re-dated).
    for pkg, module in (("/usr/lib/python3/dist-packages/cloudinit", "util"), ("/usr/lib/python3.11/email", "policy"),
                        ("/usr/lib/python3.11/json", "decoder")):
        listing = subprocess.run(["debugfs", "-R", f"ls {pkg}/__pycache__", str(fs)], capture_output=True,
                                 text=True).stdout
        name = next(n for n in listing.split() if n.startswith(f"{module}.cpython-") and n.endswith(".pyc"))
        subprocess.run(["debugfs", "-R", f"dump {pkg}/__pycache__/{name} {tmp_path / name}", str(fs)], check=True,
                       capture_output=True)
        head = (tmp_path / name).read_bytes()[:16]
        header = tuple(int.from_bytes(head[i:i + 4], "little") for i in (4, 8, 12))
        assert header == (0, *_mtime_and_size(fs, f"{pkg}/{module}.py")), f"{pkg}/__pycache__/{name}: {header}"
    # Kernel command line with the serial console; the pinned kubelet installed.
    assert "console=ttyS0" in _cat(fs, "/boot/grub/grub.cfg")
    assert f"Kubernetes v{built_image.manifest['kubernetes']['version']}" in _cat(fs, "/usr/local/bin/kubelet")
    assert 'sandbox = "registry.k8s.io/pause:3.10.1"' in _cat(fs, "/etc/containerd/config.toml")
    network = _cat(fs, "/etc/systemd/network/90-nodeforge-dhcp-all.network")
    assert ("DHCP=yes" in network) == (variant == "baremetal")
