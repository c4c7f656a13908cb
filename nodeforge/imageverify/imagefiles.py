"""Reading a disk image offline, never mounted and never written: the root partition of its GPT
(:func:`gpt_root_partition`), files of its ext4 root file system through ``debugfs``
(:class:`Ext4Reader`), the image's own kernel for the accelerator probe (:func:`probe_kernel`), and
the facts the image-scope hardening checks need (:func:`image_facts`)."""

from __future__ import annotations

import json
import re
import struct
import uuid
from pathlib import Path

from nodeforge.base import qemuimg, runner
from nodeforge.errors import NodeforgeError
from nodeforge.imageverify import accel as accel_mod, builddir, verifychecks as vc

LINUX_ROOT_X86_64 = uuid.UUID("4f68bce3-e8cd-4db1-96e7-fbcaf984b709")
LINUX_DATA = uuid.UUID("0fc63daf-8483-4772-8e79-3d69d8477de4")


def gpt_root_partition(raw: Path) -> tuple[int, int]:
    """(byte offset, byte size) of the root partition in a GPT disk image: the
    Linux x86-64 root type, else the last Linux data partition."""
    with open(raw, "rb") as fh:
        fh.seek(512)
        header = fh.read(92)
        if header[:8] != b"EFI PART":
            raise NodeforgeError(f"{raw}: no GPT header")
        entries_lba, count, size = struct.unpack_from("<QII", header, 72)
        fh.seek(entries_lba * 512)
        table = fh.read(count * size)
    found = []
    for i in range(count):
        entry = table[i * size:(i + 1) * size]
        type_guid = uuid.UUID(bytes_le=entry[:16])
        first, last = struct.unpack_from("<QQ", entry, 32)
        if type_guid in (LINUX_ROOT_X86_64, LINUX_DATA):
            found.append((type_guid == LINUX_ROOT_X86_64, i, first * 512, (last - first + 1) * 512))
    if not found:
        raise NodeforgeError(f"{raw}: no Linux root partition in the GPT")
    _, _, offset, length = max(found)
    return offset, length


class Ext4Reader:
    """Read-only access to an ext4 file system at a byte offset of a disk file
    with ``debugfs`` (never mounted, never written)."""

    def __init__(self, disk: Path, offset: int, debugfs: str = "debugfs"):
        self.spec = f"{disk}?offset={offset}"
        self.debugfs = debugfs

    def _run(self, request: str) -> runner.CompletedProcess:
        return runner.run([self.debugfs, "-R", request, self.spec], merge=False, text=False, check=False)

    def listdir(self, path: str) -> dict[str, dict] | None:
        """``{name: {mode, size}}`` of a directory, None if it does not exist."""
        proc = self._run(f'ls -p "{path}"')
        err = proc.stderr.decode("utf-8", "replace")
        if "File not found" in err or "not a directory" in err.lower():
            return None
        out = {}
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            # /inode/mode/uid/gid/name/size/
            parts = line.split("/")
            if len(parts) >= 7 and parts[0] == "":
                name = "/".join(parts[5:-2])
                out[name] = {"mode": parts[2], "size": int(parts[-2]) if parts[-2].isdigit() else None}
        if not out and proc.returncode != 0:
            raise NodeforgeError(f"debugfs could not read {path} in {self.spec}: {err.strip()[-300:]}")
        return out

    def read(self, path: str) -> bytes | None:
        parent, _, name = path.rpartition("/")
        listing = self.listdir(parent or "/")
        if not listing or name not in listing:
            return None
        return self._run(f'cat "{path}"').stdout


def _version_key(name: str) -> list:
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)]


def probe_kernel(build: builddir.BuildDir, tools: dict[str, str], work: Path) -> Path:
    """The image's own kernel (the newest ``/boot/vmlinuz-*`` of its root file system), copied to
    ``work`` for the accelerator probe (:func:`accel.decide`). Read from a raw variant in place, else
    from a scratch raw conversion of the qcow2."""
    images = sorted(build.variants.values(), key=lambda i: i.disk_format != "raw")
    image = images[0]
    raw = image.path
    if image.disk_format != "raw":
        raw = work / "probe-image.raw"
        qemuimg.convert(image.path, raw, src_fmt=image.disk_format, dest_fmt="raw", qemu_img=tools["qemu-img"])
    try:
        offset, _ = gpt_root_partition(raw)
        fs = Ext4Reader(raw, offset, tools["debugfs"])
        kernels = sorted((n for n in (fs.listdir("/boot") or {}) if n.startswith("vmlinuz-")), key=_version_key)
        data = fs.read(f"/boot/{kernels[-1]}") if kernels else None
    finally:
        if raw != image.path:
            raw.unlink(missing_ok=True)
    if not data:
        raise NodeforgeError(f"{image.path.name}: no /boot/vmlinuz-* in its root file system for the KVM probe",
                             hint=f"use --accel tcg (or ${accel_mod.ENV_ACCEL}=tcg) to boot without probing KVM")
    out = work / "probe-vmlinuz"
    out.write_bytes(data)
    return out


def image_facts(raw: Path, controls: list[dict], debugfs: str = "debugfs") -> dict:
    """What the image-scope checks need, read from the image file."""
    offset, length = gpt_root_partition(raw)
    fs = Ext4Reader(raw, offset, debugfs)
    globs, files = vc.image_paths(controls)
    facts: dict = {"root_partition_offset": offset, "root_partition_bytes": length, "globs": {}, "files": {}}
    for pattern in globs:
        directory = pattern.rpartition("/")[0] or "/"
        if any(ch in directory for ch in "*?["):
            raise NodeforgeError(f"hardening check path {pattern}: only the last component may be a glob")
        listing = fs.listdir(directory)
        facts["globs"][pattern] = vc.glob_in_listing(pattern, None if listing is None else list(listing))
    for path in files:
        parent, _, name = path.rpartition("/")
        listing = fs.listdir(parent or "/") or {}
        facts["files"][path] = {"size": listing[name]["size"]} if name in listing else None
    data = fs.read(vc.HARDENING_IN_IMAGE)
    if data is None:
        facts["hardening"], facts["hardening_error"] = None, f"{vc.HARDENING_IN_IMAGE} missing"
    else:
        try:
            facts["hardening"] = json.loads(data)
        except ValueError as exc:
            facts["hardening"], facts["hardening_error"] = None, f"not JSON: {exc}"
    return facts
