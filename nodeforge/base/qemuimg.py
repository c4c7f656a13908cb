"""``qemu-img``: the one place nodeforge calls it (info, convert, overlay)."""

from __future__ import annotations

import json
from pathlib import Path

from nodeforge.base import runner
from nodeforge.errors import NodeforgeError

TOOL = "qemu-img"


def _exe(qemu_img: str | None) -> str:
    return qemu_img or runner.require(TOOL, path=runner.sbin_path())[TOOL]


def info(path: Path | str, fmt: str, *, qemu_img: str | None = None, timeout: float | None = None,
         error: type[NodeforgeError] = runner.CommandError) -> dict:
    """``qemu-img info --output json`` of ``path`` read as ``fmt`` (never probed)."""
    out = runner.output([_exe(qemu_img), "info", "--output", "json", "-f", fmt, str(path)], error=error,
                        timeout=timeout, tail_chars=500)
    return json.loads(out)


def virtual_size(path: Path | str, fmt: str, **kw) -> int:
    """The image's virtual disk size in bytes."""
    return int(info(path, fmt, **kw)["virtual-size"])


def convert(src: Path | str, dest: Path | str, *, src_fmt: str, dest_fmt: str, options: tuple[str, ...] = (),
            qemu_img: str | None = None, log=None, error: type[NodeforgeError] = runner.CommandError) -> Path:
    """``qemu-img convert -f SRC_FMT -O DEST_FMT [options] SRC DEST``."""
    runner.run([_exe(qemu_img), "convert", "-f", src_fmt, "-O", dest_fmt, *options, str(src), str(dest)],
               log=log, error=error)
    return Path(dest)


def overlay(backing: Path | str, backing_fmt: str, dest: Path | str, size: int, *, qemu_img: str | None = None,
            error: type[NodeforgeError] = runner.CommandError) -> Path:
    """A copy-on-write qcow2 ``dest`` over ``backing`` (left untouched), ``size`` bytes."""
    runner.run([_exe(qemu_img), "create", "-q", "-f", "qcow2", "-b", str(Path(backing).resolve()),
                "-F", backing_fmt, str(dest), str(size)], merge=False, tail_chars=500, error=error)
    return Path(dest)
