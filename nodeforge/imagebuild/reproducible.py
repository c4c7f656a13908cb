"""Reproducible content: ``SOURCE_DATE_EPOCH`` from the inputs, and the finalised tree normalised.

``SOURCE_DATE_EPOCH`` (:func:`source_date_epoch`) is the newest ``Date`` of
the verified ``InRelease`` indexes the OS package lock was resolved from
(its ``index_dates``): an input, signed by the archive, the same for every
build from that lock, and never older than a package in the image. Without a
package lock it is :data:`FALLBACK_EPOCH` (fixed). The build passes it to
diskimage-builder (and so to every tool in the chroot that honours it:
``py_compile`` writes hash-checked ``.pyc``, ``useradd`` the password date,
``mkinitramfs`` the archive times) and to the disk tools (:mod:`.disk`).

:func:`normalise` runs on the unpacked root filesystem after
diskimage-builder finished (finalise and cleanup included) and before the
per-file manifest and the disks:

* what records the build rather than the content is removed: the dpkg and
  debconf ``*-old`` backups, the ``ldconfig`` aux cache, apt's binary caches
  and lists, man-db's index, systemd's random seed, the shadow ``-`` backups,
  ``/tmp`` and ``/var/tmp`` content, the dbus machine id, and ``/dev``'s
  content (the build host's device nodes: its disks, ``kvm``, loop devices;
  devtmpfs is mounted there at boot);
* ``/etc/machine-id`` is empty (systemd makes one on first boot); SSH host
  keys are removed (made on first boot: ``nodeforge-ssh-host-keys.service``
  and cloud-init); log files are truncated (owner and mode kept);
* the password-change day in ``/etc/shadow`` is the epoch's day;
* ``/etc/iscsi/initiatorname.iscsi``: a line ``InitiatorName=...`` becomes
  ``GenerateName=yes`` (open-iscsi makes a unique name on the node's first
  start). The fix is at the source: the package base writes the file with
  ``GenerateName=yes`` before open-iscsi is installed
  (:data:`nodeforge.imagebuild.package_base.ISCSI_NAME_TEXT`), so open-iscsi's
  postinst keeps it instead of drawing a random name, and the initramfs (its
  hook copies the file in) holds none either. This step is the safety net for
  a name something else wrote later (it rewrites the root filesystem only, not
  the initrd); in builds from such a package base it finds nothing to reset
  (``iSCSI initiator name reset: False`` in ``build.log``);
* in diskimage-builder's own record (``/etc/dib-manifests/dib_arguments``,
  ``dib_environment``) the build's scratch directory, the artifact cache and
  the Python environment are replaced by fixed names (``<work>``, ...): they
  are this host's paths, not the image's content;
* the image carries no apt sources and no mirror of the build host: the
  ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*.{list,sources}``
  diskimage-builder wrote for the build (the build host's mirrors, a test
  fixture's loopback URL) are removed, and in ``dib_environment`` the values
  of the mirror settings (``DIB_*MIRROR``, ``DIB_APT_SOURCES_CONF``) become
  :data:`MIRROR_PLACEHOLDER`. What apt installed is named by the OS package
  lock (versions and sha256s), not by where it came from; a node that needs
  apt sources gets them from its own configuration (cloud-init user-data
  ``apt:``; Debian's ``cloud.cfg`` preserves an existing sources list, so
  none is written unless the user-data asks). This is also what lets the
  package base's cache key leave the mirrors out (package_base.py);
* every ``.pyc`` file that matches its source gets the timestamp header that
  source has after the clamp below (:mod:`.pyc`): timestamp ``.pyc`` files
  whose sources the clamp re-dates would otherwise be stale (recompiled at
  every import until the node rewrites them), and the checked-hash ones
  ``py_compile`` wrote (because ``SOURCE_DATE_EPOCH`` was set) would make
  every import read and hash its source;
* then every entry's modification and access time is clamped to the epoch
  (``min(mtime, epoch)``, atime = mtime).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import glob
import hashlib
import json
import os
import re
import stat
from pathlib import Path

from nodeforge.imagebuild import pyc

FALLBACK_EPOCH = 1704067200      # 2024-01-01T00:00:00Z: builds without an OS package lock

# Removed (globs relative to the root); none of them is content a package ships.
REMOVE = (
    "var/lib/dpkg/*-old", "var/cache/debconf/*-old", "var/cache/ldconfig/aux-cache",
    "var/cache/apt/*.bin", "var/lib/apt/lists/*", "var/lib/apt/lists/partial/*", "var/lib/apt/extended_states-old",
    "var/cache/man/**/index.db", "var/cache/man/index.db", "var/lib/systemd/random-seed",
    "var/lib/dbus/machine-id", "etc/shadow-", "etc/gshadow-", "etc/passwd-", "etc/group-", "etc/subuid-",
    "etc/subgid-", "etc/ssh/ssh_host_*", "root/.bash_history", "root/.cache", "root/.wget-hsts",
    "tmp/*", "tmp/.*", "var/tmp/*", "var/tmp/.*", "var/lib/cloud/instance", "var/lib/cloud/instances/*",
    "var/log/journal/*/*", "var/cache/private/*", "var/lib/dhcp/*.leases", "var/backups/*",
    # The build host's device nodes (its disks, kvm, loop devices; group ids of the host) that end up in
    # the tree; the booted system mounts devtmpfs on /dev (the initramfs moves its own there).
    "dev/*", "dev/.*",
    # The apt sources diskimage-builder wrote for the build: the build host's mirrors (see the module).
    "etc/apt/sources.list", "etc/apt/sources.list.d/*.list", "etc/apt/sources.list.d/*.sources",
    "etc/apt/sources.list.d/.list",
)
EMPTY = ("etc/machine-id",)
TRUNCATE_UNDER = ("var/log",)
# Files that name the build host's paths (diskimage-builder's record of its run).
# diskimage-builder's record of its environment (``export`` output: ``declare -x NAME="value"``).
DIB_ENVIRONMENT = "etc/dib-manifests/dib_environment"
HOST_PATH_FILES = ("etc/dib-manifests/dib_arguments", DIB_ENVIRONMENT)
MIRROR_SETTING = re.compile(r"^(declare -x (?:DIB_APT_SOURCES_CONF|DIB_(?:[A-Z0-9]+_)*MIRROR))=.*$", re.M)
MIRROR_PLACEHOLDER = "<debian-mirror>"


def source_date_epoch(os_lock=None) -> tuple[int, str]:
    """(epoch, where it came from) for a build from ``os_lock`` (a PackageLock or None)."""
    dates = getattr(os_lock, "index_dates", None) or {}
    stamps = []
    for suite, text in sorted(dates.items()):
        try:
            stamps.append((int(email.utils.parsedate_to_datetime(text).timestamp()), suite))
        except (TypeError, ValueError):
            continue
    if stamps:
        epoch, suite = max(stamps)
        return epoch, f"newest InRelease Date of the OS package lock ({suite})"
    return FALLBACK_EPOCH, "fixed (no OS package lock with index dates)"


def iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def inputs_digest(inputs: dict) -> str:
    """sha256 of the canonical JSON of what a build is made from (the manifest records the dict)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        for dirpath, dirnames, filenames in os.walk(path, topdown=False):
            for name in filenames:
                os.unlink(os.path.join(dirpath, name))
            for name in dirnames:
                full = os.path.join(dirpath, name)
                os.unlink(full) if os.path.islink(full) else os.rmdir(full)
        os.rmdir(path)
    else:
        os.unlink(path)


def _iscsi_initiator(root: Path) -> bool:
    """``InitiatorName=...`` in open-iscsi's initiator name file replaced by ``GenerateName=yes``."""
    path = root / "etc" / "iscsi" / "initiatorname.iscsi"
    if not path.is_file() or path.is_symlink():
        return False
    lines = path.read_text().splitlines()
    new = ["GenerateName=yes" if line.startswith("InitiatorName=") else line for line in lines]
    if new == lines:
        return False
    st = path.stat()
    path.write_text("\n".join(new) + "\n")
    os.chmod(path, stat.S_IMODE(st.st_mode))
    return True


def _shadow(root: Path, epoch: int) -> int:
    """Set every account's last-password-change day to the epoch's day; returns how many changed."""
    path = root / "etc" / "shadow"
    if not path.is_file() or path.is_symlink():
        return 0
    day = str(epoch // 86400)
    changed, lines = 0, []
    for line in path.read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2] not in ("", "0", day):
            fields[2] = day
            changed += 1
        lines.append(":".join(fields))
    if changed:
        st = path.stat()
        text = "\n".join(lines) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.chown(path, st.st_uid, st.st_gid)
        os.chmod(path, stat.S_IMODE(st.st_mode))
    return changed


def replace_host_paths(root: Path, replacements: dict[str, str], files=HOST_PATH_FILES) -> list[str]:
    """In ``files`` (relative to ``root``), every occurrence of each key of ``replacements`` (a host path)
    replaced by its value, longest first; returns the files changed."""
    changed = []
    for rel in files:
        path = Path(root) / rel
        if not path.is_file() or path.is_symlink():
            continue
        text = original = path.read_text(errors="surrogateescape")
        for old in sorted((k for k in replacements if k), key=len, reverse=True):
            text = text.replace(old, replacements[old])
        if text != original:
            st = path.stat()
            path.write_text(text, errors="surrogateescape")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            changed.append("/" + rel)
    return changed


def replace_mirror_settings(root: Path, rel: str = DIB_ENVIRONMENT) -> list[str]:
    """In diskimage-builder's environment record, the value of every mirror setting replaced by
    :data:`MIRROR_PLACEHOLDER` (times kept); returns the settings replaced."""
    path = Path(root) / rel
    if not path.is_file() or path.is_symlink():
        return []
    text = path.read_text(errors="surrogateescape")
    names = [m.group(1).split()[-1] for m in MIRROR_SETTING.finditer(text)]
    new = MIRROR_SETTING.sub(lambda m: f'{m.group(1)}="{MIRROR_PLACEHOLDER}"', text)
    if new != text:
        st = path.stat()
        path.write_text(new, errors="surrogateescape")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return names


def normalise(root: Path, epoch: int, host_paths: dict[str, str] | None = None) -> dict:
    """Normalise the tree at ``root`` in place (see the module); ``host_paths``: host path -> fixed name
    for :func:`replace_host_paths`. Returns what was done (counts and the removed paths)."""
    root = Path(root)
    replaced = replace_host_paths(root, host_paths or {})
    mirror_settings = replace_mirror_settings(root)
    removed = []
    for pattern in REMOVE:
        for path in sorted(glob.glob(str(root / pattern), recursive=True)):
            if os.path.lexists(path) and os.path.basename(path) not in (".", ".."):
                _remove(path)
                removed.append("/" + os.path.relpath(path, root))
    emptied = []
    for rel in EMPTY:
        path = root / rel
        if path.is_file() and not path.is_symlink() and path.stat().st_size:
            os.truncate(path, 0)
            emptied.append("/" + rel)
    truncated = 0
    for top in TRUNCATE_UNDER:
        for dirpath, _dirs, files in os.walk(root / top):
            for name in files:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                if stat.S_ISREG(st.st_mode) and st.st_size:
                    os.truncate(full, 0)
                    truncated += 1
    shadow = _shadow(root, epoch)
    iscsi = _iscsi_initiator(root)
    counts = pyc.restamp(root, epoch)          # before the clamp: it re-dates what the clamp will
    clamped = clamp_times(root, epoch)
    return {"epoch": epoch, "removed": removed, "emptied": emptied, "truncated_logs": truncated,
            "shadow_dates": shadow, "host_paths_replaced": replaced, "iscsi_initiator_reset": iscsi,
            "mirror_settings_replaced": mirror_settings, "clamped": clamped,
            "pyc": dataclasses.asdict(counts) if counts else None}


def clamp_times(root: Path, epoch: int) -> int:
    """Every entry's mtime to ``min(mtime, epoch)`` and its atime to the same (symlinks themselves, not
    their targets); returns how many entries had a newer mtime."""
    newer = 0
    top_dev = os.lstat(root).st_dev

    def fix(path: str, st: os.stat_result) -> None:
        nonlocal newer
        mtime = st.st_mtime_ns
        if mtime > epoch * 1_000_000_000:
            newer += 1
            mtime = epoch * 1_000_000_000
        mtime = mtime // 1_000_000_000 * 1_000_000_000     # whole seconds (ext4 would keep the rest)
        if (st.st_atime_ns, st.st_mtime_ns) != (mtime, mtime):
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)

    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if st.st_dev == top_dev:
                fix(full, st)
    fix(str(root), os.lstat(root))
    return newer


def clamp_paths(rootfs: Path, epoch: int, rels: list[str]) -> None:
    for rel in rels:
        path = rootfs / rel
        st = os.lstat(path)
        when = min(int(st.st_mtime), epoch) * 1_000_000_000
        os.utime(path, ns=(when, when), follow_symlinks=False)


def record(manifest: dict, epoch: int, source: str, done: dict, excludes) -> dict:
    """A build manifest's ``reproducible``: what the content is a function of (``inputs``, digested),
    the epoch, the per-file manifest's ``excludes`` and the normalisation ``done``."""
    inputs = {
        "lockfile_sha256": manifest["lockfile"]["sha256"],
        "os_package_lock": (manifest.get("os_package_lock") or {}).get("digest"),
        "element_tree_sha256": manifest["element_tree"]["sha256"],
        "package_base_key": (manifest.get("package_base") or {}).get("key"),
        "diskimage_builder": manifest["diskimage_builder"]["version"],
        "arch": manifest["arch"], "kubernetes": manifest["kubernetes"]["version"],
        "artifacts": sorted(a["sha256"] for a in manifest["artifacts"]),
    }
    return {"source_date_epoch": epoch, "source_date": iso(epoch), "source_date_from": source,
            "inputs": inputs, "inputs_sha256": inputs_digest(inputs),
            "file_manifest_excludes": list(excludes),
            "normalised": {"removed": len(done["removed"]), "truncated_logs": done["truncated_logs"],
                           "clamped": done["clamped"]}}
