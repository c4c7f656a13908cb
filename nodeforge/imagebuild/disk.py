"""Assemble bootable disks from a root filesystem tree, without mounting anything.

diskimage-builder builds one root filesystem; this module lays it out as a
disk, using only tools that work on plain files (no loop partitions,
device-mapper or FAT mounts):

* GPT (``sgdisk``): ``1`` BIOS boot (1 MiB), ``2`` EFI system partition,
  ``3`` root (Linux x86-64 root type, grows to the disk on first boot);
* root: ``mkfs.ext4 -d TREE -E offset=...`` writes the populated filesystem
  straight into the disk file at the partition's offset;
* ESP: ``mkfs.vfat`` on a separate file, the UEFI boot loader
  (``EFI/BOOT/BOOTX64.EFI``) copied in with mtools, then the file copied into
  the partition;
* boot loaders are built with ``grub-mkimage`` from the grub modules *inside
  the tree* (``grub-efi-amd64-bin``, ``grub-pc-bin``: dpkg packages listed in
  the manifest). UEFI: a GRUB image in the ESP. BIOS: GRUB's ``boot.img`` in
  the protective MBR and ``core.img`` in the BIOS boot partition, with the
  sector numbers patched in as ``grub-bios-setup`` would. Both embed a small
  config that finds the root filesystem by UUID and reads
  ``/boot/grub/grub.cfg`` there, so one disk boots under UEFI (OVMF, bare
  metal) and legacy BIOS (SeaBIOS, the OpenStack default).

Reproducible (``docs/image-build.md``, "Reproducible content"): given
:class:`DiskIds` derived from the content (:func:`derived_ids`) and an
``epoch`` (``SOURCE_DATE_EPOCH``), nothing on the disk comes from the clock or
a random source: the GPT disk and partition GUIDs, the ext4 UUID and
directory hash seed, the FAT volume id are the ids; mkfs.ext4 runs with
``E2FSPROGS_FAKE_TIME``, mkfs.vfat and mtools with ``SOURCE_DATE_EPOCH``
(the volume-label entry mkfs.vfat stamps with the clock is set to the epoch).
``mkfs.ext4 -d`` copies each inode's ctime and atime from the tree (the time
the build wrote the file, the time it was last read), so both are set to the
epoch afterwards with ``debugfs -w`` (:func:`set_inode_times`).
"""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid
from pathlib import Path

from nodeforge.base import qemuimg, runner
from nodeforge.errors import NodeforgeError

SECTOR = 512
MIB = 1 << 20
BIOS_BOOT = (1 * MIB, 1 * MIB)          # (offset, size)
ESP_SIZE = 128 * MIB
ROOT_TYPE = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"  # Linux root (x86-64), discoverable partitions spec
ROOT_LABEL = "nf-root"
ESP_LABEL = "NF-ESP"

# Modules embedded in the GRUB images: no module is ever loaded from disk.
COMMON_MODULES = ["part_gpt", "part_msdos", "ext2", "fat", "search", "search_fs_uuid", "search_label",
                  "normal", "linux", "echo", "test", "configfile", "gzio", "serial", "terminal", "ls",
                  "cat", "reboot", "halt", "sleep", "minicmd"]
EFI_MODULES = COMMON_MODULES + ["efi_gop", "all_video", "video", "video_fb"]
BIOS_MODULES = COMMON_MODULES + ["biosdisk", "vga"]


class DiskError(NodeforgeError):
    message = "disk assembly: {detail}"


@dataclasses.dataclass(frozen=True)
class DiskIds:
    """Every identifier a disk carries; from :func:`derived_ids` (reproducible) or :func:`random_ids`."""

    root_uuid: str          # ext4 filesystem UUID (fstab, grub)
    esp_id: str             # FAT volume id, 8 hex digits (fstab: ABCD-1234)
    disk_guid: str          # GPT disk GUID
    partition_guids: tuple[str, str, str]   # GPT unique partition GUIDs: bios-boot, ESP, root
    hash_seed: str          # ext4 directory hash seed


_NAMESPACE = uuid.UUID("6f7e0b9c-6a43-5d1e-9a51-2b7d1c0e4f21")   # nodeforge disk ids (fixed)


def derived_ids(seed: str) -> DiskIds:
    """Identifiers derived from ``seed`` (uuid5): the same content and variant, the same ids."""
    def u(what: str) -> uuid.UUID:
        return uuid.uuid5(_NAMESPACE, f"{seed}:{what}")
    return DiskIds(root_uuid=str(u("root-fs")), esp_id=u("esp-volume-id").hex[:8].upper(),
                   disk_guid=str(u("gpt-disk")).upper(),
                   partition_guids=tuple(str(u(f"gpt-partition-{n}")).upper() for n in (1, 2, 3)),
                   hash_seed=str(u("ext4-hash-seed")))


def random_ids() -> DiskIds:
    return derived_ids(uuid.uuid4().hex)


@dataclasses.dataclass(frozen=True)
class Layout:
    disk_size: int
    esp_offset: int
    root_offset: int
    root_size: int

    @classmethod
    def for_root(cls, root_size: int) -> "Layout":
        root_size = _round_up(root_size, MIB)
        esp_offset = BIOS_BOOT[0] + BIOS_BOOT[1]
        root_offset = esp_offset + ESP_SIZE
        return cls(root_offset + root_size + MIB, esp_offset, root_offset, root_size)


@dataclasses.dataclass(frozen=True)
class Disk:
    path: Path
    layout: Layout
    root_uuid: str
    esp_id: str          # FAT volume id, as in /etc/fstab (ABCD-1234)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "size": self.layout.disk_size, "root_uuid": self.root_uuid,
                "esp_id": self.esp_id, "partitions": {
                    "bios_boot": {"offset": BIOS_BOOT[0], "size": BIOS_BOOT[1]},
                    "esp": {"offset": self.layout.esp_offset, "size": ESP_SIZE},
                    "root": {"offset": self.layout.root_offset, "size": self.layout.root_size}}}


def _round_up(n: int, unit: int) -> int:
    return (n + unit - 1) // unit * unit


def _run(argv: list[str], log=None, **kw) -> runner.CompletedProcess:
    return runner.run(argv, log=log, error=DiskError, **kw)


def tree_size(tree: Path) -> int:
    """Apparent size of the tree's files plus per-inode overhead (like du, counting hard links once)."""
    total = 0
    seen = set()
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames + dirnames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            if st.st_ino in seen:
                continue
            seen.add(st.st_ino)
            total += _round_up(st.st_size, 4096) + 256
    return total


def grub_cfg(*, root_uuid: str, cmdline: str, title: str, kernel: str, initrd: str) -> str:
    return (
        "# Written by nodeforge (image build); the boot loaders read this file.\n"
        "serial --unit=0 --speed=115200 --word=8 --parity=no --stop=1\n"
        "terminal_input serial console\n"
        "terminal_output serial console\n"
        # One entry: boot it at once, no menu (its countdown cost every boot a second of waiting).
        "set timeout=0\n"
        "set default=0\n"
        f"menuentry '{title}' {{\n"
        f"    search --no-floppy --fs-uuid --set=root {root_uuid}\n"
        f"    linux {kernel} root=UUID={root_uuid} ro {cmdline}\n"
        f"    initrd {initrd}\n"
        "}\n")


def early_cfg(root_uuid: str) -> str:
    return (f"search --no-floppy --fs-uuid --set=root {root_uuid}\n"
            "set prefix=($root)/boot/grub\n")


def kernel_paths(tree: Path) -> tuple[str, str]:
    """Kernel and initrd as the boot loader sees them: Debian's /vmlinuz and
    /initrd.img symlinks when present (kept current by kernel upgrades)."""
    if (tree / "vmlinuz").is_symlink() and (tree / "initrd.img").is_symlink():
        return "/vmlinuz", "/initrd.img"
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise DiskError(detail=f"no kernel in {tree}/boot (is linux-image installed?)")
    version = kernels[-1].name[len("vmlinuz-"):]
    if not (tree / "boot" / f"initrd.img-{version}").exists():
        raise DiskError(detail=f"no initrd for kernel {version} in {tree}/boot")
    return f"/boot/vmlinuz-{version}", f"/boot/initrd.img-{version}"


def replace_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``path`` as a new inode (the tree is a hard-linked copy: never write in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_text(text)
    os.chmod(path, mode)


def prepare_tree(tree: Path, *, cmdline: str, title: str, ids: DiskIds | None = None) -> tuple[str, str]:
    """Write fstab and grub.cfg into ``tree`` naming ``ids`` (default: random ones); returns
    (root_uuid, esp_id).

    Also restores the mount points diskimage-builder's tar leaves out
    (``/proc``, ``/sys``) and drops the build filesystem's ``lost+found``
    (mkfs makes a new one)."""
    for name, mode in (("proc", 0o555), ("sys", 0o555), ("dev", 0o755), ("run", 0o755), ("tmp", 0o1777)):
        (tree / name).mkdir(exist_ok=True)
        os.chmod(tree / name, mode)
    lost = tree / "lost+found"
    if lost.is_dir() and not any(lost.iterdir()):
        lost.rmdir()
    ids = ids or random_ids()
    root_uuid, esp_id = ids.root_uuid, ids.esp_id
    esp_fstab = f"{esp_id[:4]}-{esp_id[4:]}"
    replace_file(tree / "etc" / "fstab",
                 "# Written by nodeforge (image build)\n"
                 f"UUID={root_uuid}\t/\text4\tdefaults,errors=remount-ro\t0\t1\n"
                 f"UUID={esp_fstab}\t/boot/efi\tvfat\tumask=0077,nofail\t0\t2\n")
    (tree / "boot" / "efi").mkdir(parents=True, exist_ok=True)
    kernel, initrd = kernel_paths(tree)
    replace_file(tree / "boot" / "grub" / "grub.cfg",
                 grub_cfg(root_uuid=root_uuid, cmdline=cmdline, title=title, kernel=kernel, initrd=initrd))
    return root_uuid, esp_id


def assemble(tree: Path, disk_path: Path, *, root_uuid: str, esp_id: str, workdir: Path,
             log=None, extra_root: int = 256 * MIB, ids: DiskIds | None = None, epoch: int | None = None) -> Disk:
    """Write a raw GPT disk at ``disk_path`` holding ``tree`` as its root filesystem. With ``ids``
    (whose root_uuid/esp_id are the ones given) and ``epoch`` nothing random or clock-derived is
    written (the module's "Reproducible")."""
    if ids is not None and (ids.root_uuid, ids.esp_id) != (root_uuid, esp_id):
        raise DiskError(detail="assemble: ids do not match root_uuid/esp_id")
    env = dict(os.environ)
    guid_args: list[str] = []
    hash_args: list[str] = []
    if ids is not None:
        guid_args = [f"-U{ids.disk_guid}", *(f"-u{n}:{g}" for n, g in enumerate(ids.partition_guids, 1))]
        hash_args = [f"hash_seed={ids.hash_seed}"]
    if epoch is not None:
        env.update(E2FSPROGS_FAKE_TIME=str(epoch), SOURCE_DATE_EPOCH=str(epoch), TZ="UTC")
    layout = Layout.for_root(int(tree_size(tree) * 1.15) + extra_root)
    disk_path = Path(disk_path)
    disk_path.unlink(missing_ok=True)
    with open(disk_path, "wb") as fh:
        fh.truncate(layout.disk_size)
    s = SECTOR
    _run(["sgdisk",
          f"-n1:{BIOS_BOOT[0] // s}:{(BIOS_BOOT[0] + BIOS_BOOT[1]) // s - 1}", "-t1:EF02", "-c1:bios-boot",
          f"-n2:{layout.esp_offset // s}:{(layout.esp_offset + ESP_SIZE) // s - 1}", "-t2:EF00", "-c2:EFI",
          f"-n3:{layout.root_offset // s}:{(layout.root_offset + layout.root_size) // s - 1}",
          f"-t3:{ROOT_TYPE}", "-c3:root", *guid_args, str(disk_path)], log)
    # Root filesystem, populated from the tree, written at the partition's offset.
    _run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-U", root_uuid, "-i", "8192", "-d", str(tree),
          "-E", ",".join([f"offset={layout.root_offset}", *hash_args]), str(disk_path),
          f"{layout.root_size // 1024}k"], log, env=env)

    if epoch is not None:
        set_inode_times(disk_path, layout.root_offset, tree, epoch, workdir, log=log, env=env)

    early = workdir / "early.cfg"
    early.write_text(early_cfg(root_uuid))
    _install_uefi(tree, disk_path, layout, esp_id, early, workdir, env=env, epoch=epoch, log=log)
    _install_bios(tree, disk_path, early, workdir, log=log)
    return Disk(disk_path, layout, root_uuid, f"{esp_id[:4]}-{esp_id[4:]}")


def _install_uefi(tree: Path, disk_path: Path, layout: Layout, esp_id: str, early: Path, workdir: Path, *,
                  env: dict, epoch: int | None, log) -> None:
    """UEFI: GRUB in the ESP, the ESP written at its partition's offset."""
    efi_img = workdir / "BOOTX64.EFI"
    _run(["grub-mkimage", "-d", str(tree / "usr/lib/grub/x86_64-efi"), "-O", "x86_64-efi", "-o", str(efi_img),
          "-c", str(early), "-p", "/boot/grub", *EFI_MODULES], log)
    esp = workdir / "esp.img"
    esp.unlink(missing_ok=True)
    _run(["mkfs.vfat", "-F", "32", "-n", ESP_LABEL, "-i", esp_id, "-C", str(esp), str(ESP_SIZE // 1024)], log,
         env=env)
    if epoch is not None:
        fat_label_time(esp, epoch)
        os.utime(efi_img, (epoch, epoch))
    env = dict(env, MTOOLS_SKIP_CHECK="1")
    _run(["mmd", "-i", str(esp), "::/EFI", "::/EFI/BOOT"], log, env=env)
    _run(["mcopy", *(["-m"] if epoch is not None else []), "-i", str(esp), str(efi_img),
          "::/EFI/BOOT/BOOTX64.EFI"], log, env=env)
    _copy_into(esp, disk_path, layout.esp_offset)


def _install_bios(tree: Path, disk_path: Path, early: Path, workdir: Path, *, log) -> None:
    """BIOS: boot.img in the MBR, core.img in the BIOS boot partition."""
    core = workdir / "core.img"
    bios_dir = tree / "usr/lib/grub/i386-pc"
    _run(["grub-mkimage", "-d", str(bios_dir), "-O", "i386-pc", "-o", str(core), "-c", str(early),
          "-p", "/boot/grub", *BIOS_MODULES], log)
    install_bios(disk_path, (bios_dir / "boot.img").read_bytes(), core.read_bytes(), BIOS_BOOT[0] // SECTOR,
                 BIOS_BOOT[1])


def set_inode_times(disk_path: Path, offset: int, tree: Path, epoch: int, workdir: Path, *, log=None,
                    env=None) -> int:
    """Set atime and ctime of every inode of the ext4 filesystem at ``offset`` in ``disk_path`` that
    holds an entry of ``tree`` to ``epoch`` (one ``debugfs -w`` run; it also writes the superblock,
    at ``E2FSPROGS_FAKE_TIME``). Returns the number of paths. A name with a newline (debugfs reads one
    command a line) is refused."""
    lines = ["/"]
    tree = os.fspath(tree)
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            rel = "/" + os.path.relpath(os.path.join(dirpath, name), tree)
            if "\n" in rel:
                raise DiskError(detail=f"cannot set the times of {rel!r} (a newline in the name)")
            lines.append(rel.replace('"', '""'))    # debugfs: "" is a quote inside quotes; \ is literal
    cmds = Path(workdir) / "inode-times.debugfs"
    cmds.write_text("".join(f'sif "{p}" atime @{epoch}\nsif "{p}" ctime @{epoch}\n' for p in lines))   # @: seconds (not YYYYMMDD...)
    proc = _run(["debugfs", "-w", "-f", str(cmds), f"{disk_path}?offset={offset}"], None,
                env=dict(env or os.environ, E2FSPROGS_FAKE_TIME=str(epoch)))
    # debugfs echoes each command as "debugfs: ..."; anything else is a complaint about one.
    errors = [line for line in (proc.stdout or "").splitlines() if line.strip() and not line.startswith("debugfs")]
    if log is not None:
        log.write(f"debugfs: atime and ctime of {len(lines)} paths set to {epoch}"
                  + (f"; {len(errors)} message(s): {' | '.join(errors[:5])}" if errors else ""))
    if errors:
        raise DiskError(detail=f"debugfs could not set inode times: {' | '.join(errors[:5])}")
    cmds.unlink()
    return len(lines)


def _fat_stamp(epoch: int) -> tuple[int, int]:
    """(time, date) of ``epoch`` (UTC) in FAT's directory-entry encoding."""
    import time as _time
    t = _time.gmtime(max(epoch, 315532800))      # FAT dates start in 1980
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday


def fat_label_time(image: Path, epoch: int) -> bool:
    """Set the FAT32 volume-label directory entry's times to ``epoch`` (mkfs.vfat stamps it with the
    clock whatever SOURCE_DATE_EPOCH says). Returns whether a label entry was found."""
    with open(image, "r+b") as fh:
        boot = fh.read(SECTOR)
        bps, spc = struct.unpack_from("<HB", boot, 0x0B)
        reserved, nfats = struct.unpack_from("<HB", boot, 0x0E)
        fat_size, = struct.unpack_from("<I", boot, 0x24)
        root_cluster, = struct.unpack_from("<I", boot, 0x2C)
        offset = (reserved + nfats * fat_size + (root_cluster - 2) * spc) * bps
        fh.seek(offset)
        cluster = bytearray(fh.read(bps * spc))
        tm, dt = _fat_stamp(epoch)
        for i in range(0, len(cluster), 32):
            if cluster[i] == 0:
                break
            if cluster[i] != 0xE5 and cluster[i + 11] == 0x08:     # the volume label
                cluster[i + 13] = 0
                struct.pack_into("<HHH", cluster, i + 14, tm, dt, dt)
                struct.pack_into("<HH", cluster, i + 22, tm, dt)
                fh.seek(offset + i)
                fh.write(cluster[i:i + 32])
                return True
    return False


def _copy_into(src: Path, disk: Path, offset: int) -> None:
    with open(src, "rb") as fin, open(disk, "r+b") as fout:
        fout.seek(offset)
        while block := fin.read(8 * MIB):
            fout.write(block)


# grub-2.06 include/grub/i386/pc/boot.h and diskboot.S
_KERNEL_SECTOR = 0x5C           # boot.img: LBA of core.img's first sector (8 bytes)
_BOOT_DRIVE_CHECK = 0x66        # boot.img: a "jmp" for buggy BIOSes, kept
_MBR_KEEP = (0x1B8, 0x200)      # disk signature + partition table + 0x55AA stay from the GPT's protective MBR
_BLOCKLIST = SECTOR - 12        # diskboot.img: {start: u64, len: u16, segment: u16}


def install_bios(disk: Path, boot_img: bytes, core_img: bytes, first_sector: int, room: int) -> None:
    """Do what ``grub-bios-setup`` does for a GPT disk with a BIOS boot partition."""
    if len(boot_img) != SECTOR:
        raise DiskError(detail=f"boot.img is {len(boot_img)} bytes, expected {SECTOR}")
    if len(core_img) > room:
        raise DiskError(detail=f"core.img ({len(core_img)} bytes) does not fit the BIOS boot partition ({room})")
    core = bytearray(core_img + b"\0" * (-len(core_img) % SECTOR))
    sectors = len(core) // SECTOR
    start, length, segment = struct.unpack_from("<QHH", core, _BLOCKLIST)
    struct.pack_into("<QHH", core, _BLOCKLIST, first_sector + 1, sectors - 1, segment)
    with open(disk, "r+b") as fh:
        mbr = bytearray(fh.read(SECTOR))
        new = bytearray(boot_img)
        new[_MBR_KEEP[0]:_MBR_KEEP[1]] = mbr[_MBR_KEEP[0]:_MBR_KEEP[1]]
        struct.pack_into("<Q", new, _KERNEL_SECTOR, first_sector)
        fh.seek(0)
        fh.write(new)
        fh.seek(first_sector * SECTOR)
        fh.write(core)


def to_qcow2(raw: Path, dest: Path, log=None) -> None:
    qemuimg.convert(raw, dest, src_fmt="raw", dest_fmt="qcow2", log=log, error=DiskError)
