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
    assert f"UUID={root_uuid}\t/\text4\tdefaults,errors=remount-ro,x-systemd.growfs\t0\t1" in cat("/etc/fstab")
    assert f"UUID={d.esp_id}\t/boot/efi\tvfat" in cat("/etc/fstab")
    cfg = cat("/boot/grub/grub.cfg")
    assert f"linux /vmlinuz root=UUID={root_uuid} ro console=ttyS0,115200n8" in cfg
    # BIOS: boot.img in the MBR points at the BIOS boot partition.
    raw = d.path.read_bytes()[:512]
    assert struct.unpack_from("<Q", raw, 0x5C)[0] == 2048 and raw[510:] == b"\x55\xaa"


REPART_D = Path(__file__).resolve().parents[2] / "elements/nodeforge-rootfs/nodeforge-rootfs-files/usr/lib/repart.d"


def _partitions(path: Path) -> dict[int, tuple[int, int, str]]:
    """{number: (first sector, last sector, type GUID)} as sfdisk reads the disk file."""
    import json
    doc = json.loads(subprocess.run(["sfdisk", "--json", str(path)], capture_output=True, text=True,
                                    check=True).stdout)
    return {int(re.search(r"(\d+)$", p["node"]).group(1)): (p["start"], p["start"] + p["size"] - 1, p["type"])
            for p in doc["partitiontable"]["partitions"]}


@needs_tools
@pytest.mark.parametrize("after", [None, "config-drive"])
def test_root_partition_grows_by_the_elements_repart_definition(tmp_path, after):
    """The image's own systemd-repart definition, run by the real systemd-repart on a disk
    nodeforge assembled and then made larger (as a node's disk is): the root partition grows into
    the free space after it (up to a partition Ironic put after it, a config drive), and nothing
    else moves."""
    require_tools("systemd-repart", "sfdisk")
    tree = _tree(tmp_path)
    root_uuid, esp_id = disk.prepare_tree(tree, cmdline="console=ttyS0,115200n8", title="test")
    work = tmp_path / "work"
    work.mkdir()
    d = disk.assemble(tree, tmp_path / "disk.raw", root_uuid=root_uuid, esp_id=esp_id, workdir=work,
                      extra_root=16 << 20)
    before = _partitions(d.path)
    with open(d.path, "r+b") as fh:
        fh.truncate(d.layout.disk_size + (96 << 20))
    subprocess.run(["sgdisk", "-e", str(d.path)], capture_output=True, check=True)   # backup GPT to the new end
    if after:
        # A 16 MiB Linux data partition at the end, as Ironic's agent writes the config drive.
        end = _partitions(d.path)[3][1]
        subprocess.run(["sgdisk", f"-n4:{end + 1 + (64 << 11)}:+16M", "-t4:8300", str(d.path)],
                       capture_output=True, check=True)
    bounded = _partitions(d.path)
    run = subprocess.run(["systemd-repart", f"--definitions={REPART_D}", "--dry-run=no", "--no-pager",
                          str(d.path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    grown = _partitions(d.path)
    assert grown[1] == before[1] and grown[2] == before[2]                     # BIOS boot, ESP: untouched
    assert grown[3][0] == before[3][0] and grown[3][2] == before[3][2].upper() == disk.ROOT_TYPE
    if after:
        assert grown[4] == bounded[4]                                          # the config drive stays
        assert grown[3][1] == grown[4][0] - 1                                  # root grew up to it
    else:
        last_usable = (d.layout.disk_size + (96 << 20)) // disk.SECTOR - 34    # the backup GPT after it
        assert last_usable - grown[3][1] < (4 << 20) // disk.SECTOR            # root grew to the end
    assert grown[3][1] - before[3][1] >= (60 << 20) // disk.SECTOR


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
