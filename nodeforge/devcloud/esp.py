"""The EFI system partition image Ironic puts on the UEFI virtual-media ISOs it builds
(``[conductor] bootloader``).

Ironic builds a UEFI-bootable ISO from a kernel and a ramdisk by embedding this image as the El
Torito boot image (``boot/grub/efiboot.img``) and writing its own ``grub.cfg`` (menu entry: the
kernel with Ironic's command line, the ramdisk) into the ISO 9660 file system at ``[DEFAULT]
grub_config_path`` (:data:`GRUB_CONFIG_PATH`), not into the ESP. The firmware starts
``EFI/BOOT/BOOTX64.EFI`` from the ESP; that GRUB must find the ISO's ``grub.cfg`` itself.

Made here without mounting FAT (no loop mounts on these hosts): GRUB from the host's
``grub-efi-amd64-bin`` modules with ``grub-mkimage`` (every module built in, none loaded from
disk), an embedded early config that sends GRUB's terminal to the serial console, searches every
device for the file at ``GRUB_CONFIG_PATH`` and sets ``$prefix`` to its directory, so GRUB's
normal mode reads Ironic's ``grub.cfg``; then ``mkfs.vfat`` and ``mmd``/``mcopy``, as the image
build makes its ESP (``nodeforge/imagebuild/disk.py``).

Not Debian's signed shim + GRUB: its GRUB looks for its config under ``/EFI/debian/`` on the
device it started from (the ESP, where Ironic writes nothing), and the machines' OVMF does not
enforce Secure Boot, so a signature buys nothing here.

Built once per state directory and inputs (cached under ``data/ironic/bootloader/``, the name
carries a hash of the early config, the module list and the host's GRUB modules), at ``devcloud
up`` (Ironic's prepare step).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from nodeforge.base import fs, runner
from nodeforge.devcloud.paths import Paths
from nodeforge.errors import NodeforgeError

GRUB_CONFIG_PATH = "EFI/BOOT/grub.cfg"          # Ironic's [DEFAULT] grub_config_path (its default, said explicitly)
GRUB_EFI_DIR = Path("/usr/lib/grub/x86_64-efi")   # grub-efi-amd64-bin
EFI_BINARY = "EFI/BOOT/BOOTX64.EFI"
LABEL = "NF-VMEDIA"
MODULES = ("part_gpt", "part_msdos", "fat", "iso9660", "search", "search_fs_file", "normal", "configfile",
           "linux", "echo", "test", "serial", "terminal", "sleep", "reboot", "halt", "efi_gop", "all_video",
           "video", "video_fb", "gzio", "ls", "cat", "minicmd")
TOOLS = ("grub-mkimage", "mkfs.vfat", "mmd", "mcopy")


class EspError(NodeforgeError):
    message = "the ESP image for Ironic's virtual media: {detail}"


def early_cfg(config_path: str = GRUB_CONFIG_PATH) -> str:
    """GRUB's embedded config: serial console, then ``$prefix`` at the ISO's ``grub.cfg``."""
    path = "/" + config_path.strip("/")
    directory = path.rsplit("/", 1)[0] or "/"
    return ("serial --unit=0 --speed=115200 --word=8 --parity=no --stop=1\n"
            "terminal_input serial console\n"
            "terminal_output serial console\n"
            f"search --no-floppy --file --set=root {path}\n"
            f"set prefix=($root){directory}\n")


def _key(config_path: str, grub_dir: Path) -> str:
    h = hashlib.sha256(early_cfg(config_path).encode())
    h.update(" ".join(MODULES).encode())
    for name in ("moddep.lst", "kernel.img"):
        try:
            h.update((grub_dir / name).read_bytes())
        except OSError:
            h.update(b"-")
    return h.hexdigest()[:16]


def image_dir(paths: Paths) -> Path:
    return paths.data / "ironic" / "bootloader"


def image_path(paths: Paths, config_path: str = GRUB_CONFIG_PATH, grub_dir: Path = GRUB_EFI_DIR) -> Path:
    """Where the image for these inputs is (or will be) cached."""
    return image_dir(paths) / f"esp-{_key(config_path, grub_dir)}.img"


def build(dest: Path, config_path: str = GRUB_CONFIG_PATH, grub_dir: Path = GRUB_EFI_DIR) -> Path:
    """Make the ESP image at ``dest`` (atomically: a half-made image never has the final name)."""
    if not (grub_dir / "moddep.lst").is_file():
        raise EspError(detail=f"{grub_dir}: no GRUB EFI modules (Debian package grub-efi-amd64-bin); "
                              "run 'make setup'")
    tools = runner.require(*TOOLS)
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MTOOLS_SKIP_CHECK="1")
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".esp-") as tmp:
        work = Path(tmp)
        cfg, efi, img = work / "early.cfg", work / "BOOTX64.EFI", work / "esp.img"
        cfg.write_text(early_cfg(config_path))
        runner.run([tools["grub-mkimage"], "-d", str(grub_dir), "-O", "x86_64-efi", "-o", str(efi),
                    "-c", str(cfg), "-p", "/EFI/BOOT", *MODULES], error=EspError)
        kib = max(2048, -(-int(efi.stat().st_size * 1.25 + 256 * 1024) // (1024 * 1024)) * 1024)
        runner.run([tools["mkfs.vfat"], "-n", LABEL, "-C", str(img), str(kib)], error=EspError)
        runner.run([tools["mmd"], "-i", str(img), "::/EFI", "::/EFI/BOOT"], env=env, error=EspError)
        runner.run([tools["mcopy"], "-i", str(img), str(efi), "::/" + EFI_BINARY], env=env, error=EspError)
        os.chmod(img, 0o644)
        fs.move_into_place(img, dest)
    return dest


def ensure(paths: Paths, config_path: str = GRUB_CONFIG_PATH) -> Path:
    """The cached ESP image for this state directory, built if it is missing; older ones removed."""
    dest = image_path(paths, config_path)
    if not dest.is_file():
        build(dest, config_path)
    for old in image_dir(paths).glob("esp-*.img"):
        if old != dest:
            old.unlink(missing_ok=True)
    return dest
