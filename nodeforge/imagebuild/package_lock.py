"""The OS package lock's resolve inputs, computed from the image's elements.

What ``nodeforge release lock-packages`` resolves: every package the element
graph installs through ``package-installs.yaml`` (element-deps followed, arch
filters and pkg-map applied), plus what diskimage-builder's debian-minimal
root step and base scripts install outside it. It lives in the build stage
because it reads the element tree (:mod:`nodeforge.imagebuild.render`); the
lock itself, its resolution and watch are :mod:`nodeforge.oslock`, and its
path beside the lockfile :func:`nodeforge.pins.release.package_lock_path`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from nodeforge.errors import ConfigError
from nodeforge.imagebuild import render as rd
from nodeforge.oslock import lock as ol, watch
from nodeforge.oslock.lock import PackageLock, Resolve
from nodeforge.pins.lockfile import Lockfile
from nodeforge.schema import loader

# What diskimage-builder's debian-minimal root step installs after debootstrap
# (root.d/75-debian-minimal-baseinstall), with recommends.
DIB_BASE_INSTALLS = ("systemd-sysv", "busybox", "sudo", "gnupg2", "python3")
# What diskimage-builder's base element scripts install outside package-installs.yaml,
# without recommends (pre-install.d/03-baseline-tools; the pkg-map'd iscsi package).
DIB_SCRIPT_INSTALLS = ("apt-transport-https", "software-properties-common", "open-iscsi")
# debootstrap's own additions to minbase on a merged-/usr release.
DEBOOTSTRAP_BASE = ("apt", "usr-is-merged")
# Elements disk-image-create always adds, then the distribution element and nodeforge's.
DIB_IMPLICIT_ELEMENTS = ("base",)


def dib_elements_dir() -> Path | None:
    try:
        import diskimage_builder
    except ImportError:
        return None
    return Path(diskimage_builder.__file__).parent / "elements"


def _arch_ok(spec, arch: str) -> bool:
    if not isinstance(spec, dict):
        return True
    if spec.get("uninstall") or spec.get("build-only"):
        return False
    if spec.get("arch") and arch not in [a.strip() for a in str(spec["arch"]).split(",")]:
        return False
    if spec.get("not-arch") and arch in [a.strip() for a in str(spec["not-arch"]).split(",")]:
        return False
    return True


def element_packages(start: Iterable[str], arch: str, dirs: Iterable[Path],
                     distro: str = "debian") -> list[str]:
    """Every package the element graph from ``start`` installs through package-installs
    (element-deps followed, arch filters and each element's pkg-map applied)."""
    dirs = [Path(d) for d in dirs]
    seen: set[str] = set()
    todo = list(start)
    out: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        elem = next((d / name for d in dirs if (d / name).is_dir()), None)
        if elem is None:
            continue
        deps = elem / "element-deps"
        if deps.is_file():
            todo += [line.split("#", 1)[0].strip() for line in deps.read_text().splitlines()
                     if line.split("#", 1)[0].strip()]
        mapping: dict = {}
        if (elem / "pkg-map").is_file():
            try:
                pm = loader.read_json(elem / "pkg-map")
                mapping = {**pm.get("default", {}), **pm.get("family", {}).get(distro, {}),
                           **pm.get("distro", {}).get(distro, {})}
            except (ConfigError, AttributeError, TypeError):
                mapping = {}
        pi = elem / "package-installs.yaml"
        if pi.is_file():
            data = loader.load(pi).data or {}
            for pkg, spec in (data.items() if isinstance(data, dict) else []):
                if _arch_ok(spec, arch):
                    for mapped in str(mapping.get(pkg, pkg)).split():
                        out.add(mapped)
    return sorted(out)


def package_lock_template(lock: Lockfile, *, arch: str = "amd64"):
    """The OS package lock's resolve inputs for ``lock``'s base OS (no packages yet)."""
    distro = rd.distro_for(lock)
    dirs = [rd.ELEMENTS_SRC] + ([dib_elements_dir()] if dib_elements_dir() else [])
    install = sorted(set(element_packages([*DIB_IMPLICIT_ELEMENTS, distro.element, *rd.NODEFORGE_ELEMENTS], arch,
                                          dirs)) | set(DIB_SCRIPT_INSTALLS))
    codename = distro.release
    return PackageLock(release=codename, architecture=arch,
                       suites={codename: "main", f"{codename}-updates": "main", f"{codename}-security": "security"},
                       resolve=Resolve(priorities=("required",), base=DEBOOTSTRAP_BASE, recommends=DIB_BASE_INSTALLS,
                                       install=tuple(install)),
                       packages=())


def lock_packages(lock: Lockfile, path: Path, mirrors: dict[str, str], *, keyring: Path | None = None,
                  arch: str = "amd64", dry_run: bool = False):
    """Resolve the image's package set afresh (inputs from the elements) and write the package lock."""
    old = ol.load(path) if Path(path).exists() else None
    template = dataclasses.replace(package_lock_template(lock, arch=arch), path=Path(path),
                                   index_dates=dict(old.index_dates) if old else {})
    config = watch.config_for(template, mirrors, keyring)   # never from an index older than the lock's
    new, _ = watch.resolve_lock(template, config)
    old = old or dataclasses.replace(template, packages=())
    changes = watch.diff(old, new, {s.name for s in config.suites if s.security})
    written = (not Path(path).exists() or old.dumps() != new.dumps()) and not dry_run
    if written:
        new.save(path)
    return watch.PackageBump(str(path), changes, len(new.packages), written, dry_run, new.digest())
