"""The package base: a cached root filesystem with the base OS and every element package installed.

Most of a build's time goes into debootstrap and installing ~300 Debian
packages (plus two initramfs generations), none of which depends on the
Kubernetes pins. The package base is that part, built once by
diskimage-builder (``debian-minimal`` plus the generated
``nodeforge-package-base`` element whose ``package-installs.yaml`` is the union
of every nodeforge element's) and stored as an uncompressed tar, content-addressed:

* :class:`BaseSpec` lists every input that shapes the stage (recipe version,
  distribution element, release, components, architecture, the package lists,
  the generated element's digest, diskimage-builder version, and the OS
  package lock's digest when there is one; the Debian mirrors only when there
  is none: see docs/os-packages.md); :meth:`BaseSpec.key` is the sha256 of its
  canonical JSON. The Kubernetes version and artifact checksums are not
  inputs, so a patch bump (or another minor) reuses the base. With a lock
  every ``.deb`` is pinned by version and checked by sha256 (the apt hook), so
  the mirror is only a transport: what the base holds of the mirror's URLs
  (``/etc/apt/sources.list.d``, ``dib_environment``) is rewritten by the main
  build and removed by the normalisation (:mod:`.reproducible`), and the same
  base serves a build from any mirror that serves the locked files;
* :class:`BaseCache` keeps one directory per key (``<root>/<key>/`` with
  ``base.tar`` and ``meta.json``). An entry is written into a temporary
  directory, verified (``tar -t`` reads it whole, sha256 recorded) and renamed into place;
  a lookup re-checks the key and the tarball's sha256 and evicts an entry that
  does not match, so a partial or corrupt entry is never used. A lock file
  per key keeps two builds from building the same base at once.

The main build feeds the tarball to diskimage-builder's ``debootstrap`` root
element as its cached debootstrap tarball (``DIB_IMAGE_CACHE`` pointed at a
per-build directory holding it), through an override of that one element
(:func:`debootstrap_override`: diskimage-builder's own, with the root script
that unpacks the cache replaced by one that reads an uncompressed tar), so it
runs the same element graph as a build from scratch: ``apt-get dist-upgrade``
(a no-op unless the mirror published updates since the base was built, which
it then installs), the package installs (already satisfied) and the
Kubernetes-specific install steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Mapping, Union

import yaml

from nodeforge.base import fs, runner
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imagebuild import render as rd
from nodeforge.base.fs import sha256_file
from nodeforge.schema import loader

RECIPE = "nodeforge-package-base/2"   # /2: an uncompressed tar (was gzip)
ELEMENT = "nodeforge-package-base"
TARBALL = "base.tar"
META = "meta.json"
BLOCK_DEVICE = Path("nodeforge-rootfs") / "block-device-default.yaml"


class PackageBaseError(NodeforgeError):
    message = "package base: {detail}"


Elements = Union[Path, Mapping[str, bytes]]   # an element tree on disk, or its files by relative path
                                              # (a render held in memory: render.Tree.element_files)


def _element_file(elements: Elements, rel: str) -> tuple[str, bytes | None]:
    """(where, content) of the file ``rel`` of ``elements``; content None when there is no such file."""
    if isinstance(elements, Mapping):
        return rel, elements.get(rel)
    path = Path(elements) / rel
    return str(path), (loader.read_bytes(path) if path.is_file() else None)


def union_packages(elements_dir: Elements, names: list[str]) -> dict:
    """The union of the named elements' ``package-installs.yaml`` (name -> spec or None), sorted."""
    out: dict[str, object] = {}
    owner: dict[str, str] = {}
    for name in names:
        try:
            path, data = _element_file(elements_dir, f"{name}/package-installs.yaml")
            if data is None:
                continue
            data = loader.load(path, loader.decode(path, data)).data or {}
        except ConfigError as exc:
            raise PackageBaseError(detail=str(exc)) from None
        if not isinstance(data, dict):
            raise PackageBaseError(detail=f"{path}: expected a mapping of package names")
        for pkg, spec in data.items():
            if pkg in out and out[pkg] != spec:
                raise PackageBaseError(detail=f"package {pkg} has different settings in {owner[pkg]} and {name} "
                                              f"({out[pkg]!r} vs {spec!r}); make them agree")
            out.setdefault(pkg, spec)
            owner.setdefault(pkg, name)
    return {k: out[k] for k in sorted(out)}


OS_LOCK_FILES = "nodeforge-os-lock-files"
OS_LOCK_ROOT_SCRIPT = """#!/bin/bash
# nodeforge: pin every package to the OS package lock and check every .deb
# against it, before the first apt run (debian-minimal's root.d/75 step).
set -eu
set -o pipefail
sudo cp -r "$TMP_HOOKS_PATH/""" + OS_LOCK_FILES + """/." "$TARGET_ROOT/"
sudo chmod 0755 "$TARGET_ROOT/usr/local/sbin/nodeforge-verify-debs"
"""


ISCSI_NAME_FILE = "/etc/iscsi/initiatorname.iscsi"
# What the package base holds in open-iscsi's initiator name file: no name, open-iscsi makes one on the
# node's first start (iscsid.service's ExecStartPre /lib/open-iscsi/startup-checks.sh replaces a file
# holding ``GenerateName=yes`` with a generated ``InitiatorName``). Written before open-iscsi is installed
# (base's install.d/00-baseline-environment), its postinst keeps an existing file instead of drawing a
# random name, so the initramfs (its hook copies the file in) and every node from the base never share one.
ISCSI_NAME_TEXT = (
    "## nodeforge: no InitiatorName in the image; open-iscsi generates a unique one\n"
    "## on this node's first start (/lib/open-iscsi/startup-checks.sh).\n"
    "GenerateName=yes\n")
ISCSI_PRE_INSTALL = "00-nodeforge-iscsi-initiator"
ISCSI_PRE_INSTALL_SCRIPT = """#!/bin/bash
# nodeforge: open-iscsi's initiator name file says GenerateName=yes before open-iscsi is
# installed, so its postinst draws no random InitiatorName into the package base (and its
# initramfs hook copies no name into the initrd); the node makes its own on first start.
set -eu
set -o pipefail
NAMEFILE=""" + ISCSI_NAME_FILE + """
if [ -e "$NAMEFILE" ] && ! grep -q '^InitiatorName=' "$NAMEFILE"; then
    exit 0
fi
install -d -m 0755 "$(dirname "$NAMEFILE")"
cat > "$NAMEFILE" <<'NODEFORGE_EOF'
""" + ISCSI_NAME_TEXT + """NODEFORGE_EOF
chmod 0600 "$NAMEFILE"
"""


BASE_FILES = "nodeforge-base-files"
# Files of the nodeforge elements that must be in place before the package base installs its
# packages: dpkg's path filters (what it leaves out of every package, kernel drivers included) and
# the initramfs hook (the kernel's postinst builds the initramfs). (element, path in the image under
# the element's ``<element>-files`` directory, mode); the elements install them again in the main
# build (``cp -r /tmp/in_target.d/<element>-files/. /``), the same bytes.
BASE_FILE_SOURCES = (
    ("image-hygiene", "etc/dpkg/dpkg.cfg.d/90-nodeforge-minimal", 0o644),
    ("k8s-hardening", "etc/dpkg/dpkg.cfg.d/90-nodeforge-no-unused-drivers", 0o644),
    ("image-hygiene", "etc/initramfs-tools/hooks/nodeforge-local-root-only", 0o755),
)
BASE_FILES_ROOT_SCRIPT = """#!/bin/bash
# nodeforge: dpkg's path filters and the initramfs hook of the nodeforge elements are in
# place before the first package is installed (debian-minimal's root.d/75 step).
set -eu
set -o pipefail
sudo cp -r "$TMP_HOOKS_PATH/""" + BASE_FILES + """/." "$TARGET_ROOT/"
"""


def write_element(dest: Path, packages: dict, source_elements: Elements, os_lock=None) -> Path:
    """Write the ``nodeforge-package-base`` element (:func:`element_entries`) under ``dest`` (an
    ELEMENTS_PATH dir); returns ``dest``."""
    rd.write_entries(dest, element_entries(packages, source_elements, os_lock))
    return Path(dest)


def element_entries(packages: dict, source_elements: Elements, os_lock=None) -> list[rd.TreeEntry]:
    """The ``nodeforge-package-base`` element's files, in memory (its digest without writing it:
    :func:`nodeforge.imagebuild.render.entries_digest`).

    With ``os_lock`` (a :class:`nodeforge.oslock.lock.PackageLock`) the element
    also pins every package to its locked version and installs the apt hook
    that refuses any ``.deb`` not in the lock (:mod:`nodeforge.oslock.apt_pinning`). Always: the
    ``pre-install.d`` script that leaves open-iscsi's initiator name file at ``GenerateName=yes``
    (:data:`ISCSI_NAME_TEXT`) before open-iscsi is installed, and the ``root.d`` script that puts the
    elements' files of :data:`BASE_FILE_SOURCES` in place before any package is."""
    where, block_device = _element_file(source_elements, BLOCK_DEVICE.as_posix())
    if block_device is None:
        raise FileNotFoundError(f"{where}: no such file (the package base's block-device config)")

    def entry(rel: str, text: str | bytes, mode: int | None = None) -> rd.TreeEntry:
        return rd.TreeEntry(f"{ELEMENT}/{rel}", "file", mode, text.encode() if isinstance(text, str) else text)

    out = [
        entry("README.rst", "nodeforge-package-base\n======================\n\n"
              "Generated by nodeforge: installs every package the nodeforge elements list, nothing else.\n"
              "Its output is cached as the package base (see nodeforge/imagebuild/package_base.py).\n"),
        entry("element-deps", "package-installs\n"),
        entry("package-installs.yaml", "# Union of the nodeforge elements' package-installs.yaml (generated).\n"
              + yaml.safe_dump(packages, sort_keys=True, default_flow_style=False)),
        entry("block-device-default.yaml", block_device),
        entry(f"pre-install.d/{ISCSI_PRE_INSTALL}", ISCSI_PRE_INSTALL_SCRIPT, 0o755),
        entry("root.d/60-nodeforge-base-files", BASE_FILES_ROOT_SCRIPT, 0o755),
    ]
    for element, rel, mode in BASE_FILE_SOURCES:
        where, data = _element_file(source_elements, f"{element}/{element}-files/{rel}")
        if data is None:
            raise FileNotFoundError(f"{where}: no such file (the package base installs it first)")
        out.append(entry(f"{BASE_FILES}/{rel}", data, mode))
    if os_lock is not None:
        from nodeforge.oslock import apt_pinning

        for rel, text, mode in ((apt_pinning.PREFERENCES, apt_pinning.apt_preferences(os_lock), 0o644),
                                (apt_pinning.HOOK_CONF, apt_pinning.HOOK_CONF_TEXT, 0o644),
                                (apt_pinning.HOOK, apt_pinning.HOOK_TEXT, 0o755),
                                (apt_pinning.SUMS, apt_pinning.sha256_list(os_lock), 0o644)):
            out.append(entry(f"{OS_LOCK_FILES}/{rel}", text, mode))
        out.append(entry("root.d/70-nodeforge-os-lock", OS_LOCK_ROOT_SCRIPT, 0o755))
    return out


def spec_mirrors(mirrors: dict, os_lock) -> dict | None:
    """The mirrors as a package-base input: sorted, or None when the build has an OS package lock
    (every .deb pinned and checked by its locked sha256; the base does not depend on where it came from)."""
    return None if os_lock is not None else dict(sorted(mirrors.items()))


@dataclasses.dataclass(frozen=True)
class BaseSpec:
    distro_element: str
    release: str
    components: str
    arch: str
    mirrors: dict | None      # None with an OS package lock (the mirror is then only a transport)
    packages: dict
    element_digest: str
    dib_version: str
    recipe: str = RECIPE
    os_package_lock: str | None = None   # the OS package lock's digest, when the build has one
    # With a lock: the SOURCE_DATE_EPOCH the base is built with (the lock's newest index date). The
    # initramfs and every file a maintainer script writes carry it, so a base built for another
    # epoch (the same packages, re-resolved later) would give other content.
    source_date_epoch: int | None = None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if out["os_package_lock"] is None:   # keys of builds without a package lock stay as they were
            del out["os_package_lock"]
        if out["source_date_epoch"] is None:
            del out["source_date_epoch"]
        if out["mirrors"] is None:           # with a lock: the locked sha256s name the content, not the mirror
            del out["mirrors"]
        return out

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    meta: dict

    @property
    def tarball(self) -> Path:
        return self.path / TARBALL



class BaseCache:
    """Package bases by key (see the module docstring). A lookup that finds an entry marks it used
    (its ``meta.json``'s time); storing a new entry removes the entries not used for
    :data:`KEEP_DAYS` days, and what a killed build left half-written as long: each base is about
    0.75 GB, and a new OS package lock or diskimage-builder version makes a new one."""

    KEEP_DAYS = 14

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key

    def lookup(self, key: str, *, evict: bool = True) -> Entry | None:
        """The verified entry for ``key``, or None (a damaged entry is removed)."""
        path = self.path(key)
        if not path.exists():
            return None
        problem = self._check(key, path)
        if problem is None:
            fs.mark_used(path / META)      # used now: kept another KEEP_DAYS
            return Entry(key, path, loader.read_json(path / META))
        if evict:
            self._remove(path)
        return None

    def present(self, key: str) -> bool:
        """Whether an entry for ``key`` looks whole (its ``meta.json`` names the key, its tarball has the
        recorded size). Read-only: not re-hashed (:meth:`lookup` does that before a build uses it),
        never removed, no lock taken, no directory made."""
        return self._check(key, self.path(key), rehash=False) is None

    def _check(self, key: str, path: Path, *, rehash: bool = True) -> str | None:
        try:
            meta = loader.read_json(path / META)
        except ConfigError as exc:
            return f"unreadable {META}: {exc}"
        if not isinstance(meta, dict) or meta.get("key") != key:
            return "key mismatch"
        tar = path / TARBALL
        try:
            if tar.stat().st_size != meta.get("size"):
                return "size mismatch"
            if rehash and sha256_file(tar) != meta.get("sha256"):
                return "sha256 mismatch"
        except OSError as exc:
            return f"unreadable tarball: {exc}"
        return None

    @contextlib.contextmanager
    def locked(self, key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        with fs.locked(self.root / f".{key}.lock", on_wait):
            yield

    def store(self, key: str, produce: Callable[[Path], None], *, inputs: dict | None = None) -> Entry:
        """Make the entry for ``key``: ``produce(tarball_path)`` writes the tarball into a temporary
        directory; it is verified and the directory renamed into place (never a partial entry)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.prune(keep=key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.partial.", dir=self.root))
        try:
            tar = tmp / TARBALL
            produce(tar)
            if not tar.is_file() or tar.stat().st_size == 0:
                raise PackageBaseError(detail=f"no tarball was written for {key}")
            with open(os.devnull, "wb") as listing:
                test = runner.run(["tar", "-tf", str(tar)], stdout=listing, merge=False, check=False)
            if test.returncode != 0:
                raise PackageBaseError(detail=f"the new tarball for {key} is damaged: {runner.tail_of(test.stderr)}")
            meta = {"key": key, "sha256": sha256_file(tar), "size": tar.stat().st_size,
                    "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "inputs": inputs or {}}
            (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            for f in (tar, tmp / META):
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            os.chmod(tmp, 0o755)
            final = self.path(key)
            if final.exists():   # damaged or stale: replace it
                self._remove(final)
            fs.move_into_place(tmp, final)
            return Entry(key, final, meta)
        except BaseException:
            self._remove(tmp)
            raise

    def prune(self, *, keep: str | None = None, now: float | None = None) -> list[str]:
        """Remove the entries (other than ``keep``) whose ``meta.json`` is older than
        :data:`KEEP_DAYS` days, and partial or discarded directories as old; returns their names."""
        removed = []
        for path in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not path.is_dir() or path.name == keep:
                continue
            if path.name.startswith("."):       # a build's partial or discarded directory, or nothing of ours
                marker = path if ".partial." in path.name or ".trash." in path.name else None
            else:                               # an entry; one without meta.json is as old as its directory
                marker = path / META if (path / META).exists() else path
            if marker is not None and fs.unused_for(marker, self.KEEP_DAYS, now=now):
                self._remove(path)
                removed.append(path.name)
        return removed

    def _remove(self, path: Path) -> None:
        if not path.exists():
            return
        trash = path.with_name(f".{path.name}.trash.{os.getpid()}")
        try:
            fs.move_into_place(path, trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)


def tar_to_base(dib_tar: Path, dest: Path, *, log=None) -> None:
    """Turn diskimage-builder's ``-t tar`` output into the package base's tarball ``dest`` (moved there).

    dib leaves ``./proc`` and ``./sys`` out of its tarball; the root elements
    mount there, so they are appended (empty). Not compressed: every build
    unpacks it, and through GNU gzip that took 5-6 s of each build's root
    filesystem step, for 15 s of ``gzip -1`` once per base (measured
    2026-12-06: the 0.74 GB tar unpacked into a tmpfs in 0.45 s, its
    ``gzip -1`` form in 5.5-5.7 s, a stored-deflate gzip in 4.3-4.4 s); the
    cost is 0.74 GB of disk per cached base instead of 0.27 GB."""
    with tempfile.TemporaryDirectory(prefix="nf-base-dirs.", dir=Path(dest).parent) as d:
        for name, mode in (("proc", 0o555), ("sys", 0o555), ("dev", 0o755)):
            os.mkdir(os.path.join(d, name))
            os.chmod(os.path.join(d, name), mode)
        runner.run(["tar", "--numeric-owner", "--owner=0", "--group=0", "-rf", str(dib_tar), "-C", d,
                    "./proc", "./sys", "./dev"], log=log, error=PackageBaseError)
    shutil.move(str(dib_tar), str(dest))


DEBOOTSTRAP = "debootstrap"
DEBOOTSTRAP_ROOT_SCRIPT = "root.d/08-debootstrap"
# What the upstream script does with a cached tarball (checked before it is replaced: a
# diskimage-builder whose element changed must be looked at again, not overridden blindly).
DEBOOTSTRAP_CACHE_LINES = (
    'DEBOOTSTRAP_TARBALL=$DIB_IMAGE_CACHE/debootstrap-${DISTRO_NAME}-${DIB_RELEASE}-${ARCH}.tar.gz',
    'sudo tar -C $TARGET_ROOT --numeric-owner -xzf $DEBOOTSTRAP_TARBALL',
    'sudo rm -f ${TARGET_ROOT}/.extra_settings',
)
DEBOOTSTRAP_OVERRIDE_SCRIPT = """#!/bin/bash
# nodeforge: diskimage-builder's debootstrap element, with this one script replaced (written for
# each build by nodeforge/imagebuild/package_base.py, debootstrap_override). The root filesystem
# starts as the package base, an uncompressed tar, where the upstream script unpacks a gzip
# tarball of the same tree through GNU gzip; nothing is ever bootstrapped here: the package
# base build runs the upstream element.
if [ ${DIB_DEBUG_TRACE:-1} -gt 0 ]; then
    set -x
fi
set -eu
set -o pipefail

BASE=$DIB_IMAGE_CACHE/debootstrap-${DISTRO_NAME}-${DIB_RELEASE}-${ARCH}.tar
if [ ! -f "$BASE" ]; then
    echo "nodeforge: no package base at $BASE" >&2
    exit 1
fi
echo "nodeforge: the root filesystem from the package base $BASE"
sudo tar -C "$TARGET_ROOT" --numeric-owner -xf "$BASE"
sudo rm -f "$TARGET_ROOT/.extra_settings"
"""


def debootstrap_override(dest: Path, upstream: Path) -> Path:
    """Write under ``dest`` (an ELEMENTS_PATH directory placed before diskimage-builder's own) a
    ``debootstrap`` element that is ``upstream`` (diskimage-builder's) with its root script replaced
    by :data:`DEBOOTSTRAP_OVERRIDE_SCRIPT`; returns ``dest``. diskimage-builder takes the first
    element of a name along ELEMENTS_PATH (and logs that it overrides its own)."""
    script = Path(upstream) / DEBOOTSTRAP_ROOT_SCRIPT
    try:
        text = script.read_text()
    except OSError as exc:
        raise PackageBaseError(detail=f"diskimage-builder's {DEBOOTSTRAP} element: {exc}") from exc
    missing = [line for line in DEBOOTSTRAP_CACHE_LINES if line not in text]
    if missing:
        raise PackageBaseError(detail=f"{script} no longer unpacks its cached tarball as nodeforge expects "
                                      f"(not found: {missing[0]!r}); its override must be checked against it")
    element = Path(dest) / DEBOOTSTRAP
    if element.exists():   # a step run again in the same work directory
        shutil.rmtree(element)
    shutil.copytree(upstream, element, symlinks=True)
    target = element / DEBOOTSTRAP_ROOT_SCRIPT
    target.write_text(DEBOOTSTRAP_OVERRIDE_SCRIPT)
    target.chmod(0o755)
    return Path(dest)


def image_cache_for(entry: Entry, dest: Path, shared_cache: Path, *, distro_name: str, release: str,
                    arch: str) -> Path:
    """A per-build ``DIB_IMAGE_CACHE``: the base as the debootstrap tarball, the shared apt archives linked in."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"debootstrap-{distro_name}-{release}-{arch}.tar").symlink_to(entry.tarball)
    shared_apt = Path(shared_cache) / "apt"
    shared_apt.mkdir(parents=True, exist_ok=True)
    (dest / "apt").symlink_to(shared_apt)
    return dest
