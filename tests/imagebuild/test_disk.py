"""Disk assembly without mounting: GPT + BIOS boot + ESP (mtools) + ext4 root (mkfs -d)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from nodeforge.imagebuild import disk
from tests.prereq import require, require_tools

HOST_GRUB = Path("/usr/lib/grub")


@pytest.fixture
def _host_disk_tools():
    require((HOST_GRUB / "x86_64-efi").is_dir() and (HOST_GRUB / "i386-pc").is_dir(),
            "host grub modules (grub-efi-amd64-bin, grub-pc-bin) not installed (make setup)")
    require_tools("sgdisk", "mkfs.ext4", "mkfs.vfat", "mcopy", "grub-mkimage", "debugfs")


needs_tools = pytest.mark.usefixtures("_host_disk_tools")


def test_install_bios_patches_sector_numbers(tmp_path):
    d = tmp_path / "d.raw"
    with open(d, "wb") as fh:
        fh.truncate(4 << 20)
        fh.seek(0x1B8)
        fh.write(b"SIGN" + b"\0\0" + b"P" * 64 + b"\x55\xaa")     # protective MBR tail to keep
    boot = bytes(512)
    core = bytearray(3 * 512 + 100)
    struct.pack_into("<QHH", core, 512 - 12, 1, 0, 0x820)
    disk.install_bios(d, boot, bytes(core), first_sector=2048, room=1 << 20)
    raw = d.read_bytes()
    assert struct.unpack_from("<Q", raw, 0x5C)[0] == 2048
    assert raw[0x1B8:0x1BC] == b"SIGN" and raw[510:512] == b"\x55\xaa"
    start, length, seg = struct.unpack_from("<QHH", raw, 2048 * 512 + 512 - 12)
    assert (start, length, seg) == (2049, 3, 0x820)   # 4 sectors of core.img, the rest after the first


def test_install_bios_refuses_oversized_core(tmp_path):
    d = tmp_path / "d.raw"
    d.write_bytes(bytes(4096))
    with pytest.raises(disk.DiskError, match="does not fit"):
        disk.install_bios(d, bytes(512), bytes(2048), first_sector=1, room=1024)


def _tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "boot").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "boot" / "vmlinuz-6.1.0-test").write_bytes(b"kernel")
    (tree / "boot" / "initrd.img-6.1.0-test").write_bytes(b"initrd")
    (tree / "vmlinuz").symlink_to("boot/vmlinuz-6.1.0-test")
    (tree / "initrd.img").symlink_to("boot/initrd.img-6.1.0-test")
    (tree / "usr" / "lib").mkdir(parents=True)
    shutil.copytree(HOST_GRUB, tree / "usr" / "lib" / "grub")
    return tree


@needs_tools
def test_assemble_gpt_esp_root(tmp_path):
    tree = _tree(tmp_path)
    root_uuid, esp_id = disk.prepare_tree(tree, cmdline="console=ttyS0,115200n8", title="test")
    work = tmp_path / "work"
    work.mkdir()
    d = disk.assemble(tree, tmp_path / "disk.raw", root_uuid=root_uuid, esp_id=esp_id, workdir=work,
                      extra_root=16 << 20)
    table = subprocess.run(["sgdisk", "-p", str(d.path)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^\s+1\s+2048\s+4095\s.*EF02", table, re.M)
    assert re.search(r"^\s+2\s+4096\s+\d+\s.*EF00", table, re.M)
    assert re.search(r"^\s+3\s+\d+\s+\d+\s.*8304", table, re.M)
    env = dict(os.environ, MTOOLS_SKIP_CHECK="1")
    listing = subprocess.run(["mdir", "-b", "-i", f"{d.path}@@{d.layout.esp_offset}", "::/EFI/BOOT"],
                             capture_output=True, text=True, env=env, check=True).stdout
    assert "BOOTX64.EFI" in listing
    # The ext4 root holds the tree with the fstab and grub.cfg naming the new filesystems.
    part = tmp_path / "root.img"
    with open(d.path, "rb") as fin, open(part, "wb") as fout:
        fin.seek(d.layout.root_offset)
        fout.write(fin.read(d.layout.root_size))
    def cat(path):
        return subprocess.run(["debugfs", "-R", f"cat {path}", str(part)], capture_output=True, text=True).stdout
    assert f"UUID={root_uuid}\t/\text4" in cat("/etc/fstab")
    assert f"UUID={d.esp_id}\t/boot/efi\tvfat" in cat("/etc/fstab")
    cfg = cat("/boot/grub/grub.cfg")
    assert f"linux /vmlinuz root=UUID={root_uuid} ro console=ttyS0,115200n8" in cfg
    # BIOS: boot.img in the MBR points at the BIOS boot partition.
    raw = d.path.read_bytes()[:512]
    assert struct.unpack_from("<Q", raw, 0x5C)[0] == 2048 and raw[510:] == b"\x55\xaa"


def test_kernel_paths_without_symlinks(tmp_path):
    tree = tmp_path / "t"
    (tree / "boot").mkdir(parents=True)
    (tree / "boot" / "vmlinuz-6.1.0-9").write_bytes(b"k")
    (tree / "boot" / "initrd.img-6.1.0-9").write_bytes(b"i")
    assert disk.kernel_paths(tree) == ("/boot/vmlinuz-6.1.0-9", "/boot/initrd.img-6.1.0-9")
    with pytest.raises(disk.DiskError, match="no kernel"):
        disk.kernel_paths(tmp_path)


def test_replace_file_breaks_hard_links(tmp_path):
    a = tmp_path / "a"
    a.write_text("shared")
    os.link(a, tmp_path / "b")
    disk.replace_file(tmp_path / "b", "mine")
    assert a.read_text() == "shared" and (tmp_path / "b").read_text() == "mine"
