"""Reading a built disk image without mounting it: its GPT partitions (sgdisk), its root partition as a
file, and that file's contents (debugfs). Shared by the real-build tests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def run(*argv, **kw) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kw).stdout


def partitions(raw: Path) -> dict[int, tuple[int, int, str]]:
    """{number: (start sector, end sector, type code)} from sgdisk -p."""
    out = {}
    for line in run("sgdisk", "-p", str(raw)).splitlines():
        m = re.match(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+([0-9A-F]{4})\s", line)
        if m:
            out[int(m[1])] = (int(m[2]), int(m[3]), m[4])
    return out


def root_fs(image: Path, tmp: Path) -> Path:
    """The root partition of a disk image as a file debugfs can read."""
    raw = image
    if image.suffix == ".qcow2":
        raw = tmp / (image.stem + ".raw")
        run("qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(image), str(raw))
    start, end, _ = partitions(raw)[3]
    part = tmp / (image.stem + ".root.ext4")
    with open(raw, "rb") as fin, open(part, "wb") as fout:
        fin.seek(start * 512)
        left = (end - start + 1) * 512
        while left:
            block = fin.read(min(left, 8 << 20))
            if not block:
                break
            fout.write(block)
            left -= len(block)
    if raw is not image:
        raw.unlink()
    return part


def cat(fs: Path, path: str) -> str:
    return subprocess.run(["debugfs", "-R", f"cat {path}", str(fs)], capture_output=True, text=True).stdout


def mtime_and_size(fs: Path, path: str) -> tuple[int, int]:
    out = subprocess.run(["debugfs", "-R", f"stat {path}", str(fs)], capture_output=True, text=True).stdout
    mtime, size = re.search(r"mtime: 0x([0-9a-f]+)", out), re.search(r"Size: ([0-9]+)", out)
    assert mtime and size, f"debugfs could not stat {path}: {out[:200]}"
    return int(mtime.group(1), 16), int(size.group(1))
