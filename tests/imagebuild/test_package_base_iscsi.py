"""The package base leaves open-iscsi's initiator name file at ``GenerateName=yes``.

open-iscsi's postinst draws a random ``InitiatorName`` only when
``/etc/iscsi/initiatorname.iscsi`` does not exist, and its initramfs hook
copies that file into the initrd; the generated ``nodeforge-package-base``
element writes the file before open-iscsi is installed, so neither the root
filesystem nor the initramfs built in the package base holds a name. These
tests run the element's script itself (bash) on a scratch root.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from nodeforge.imagebuild import package_base as pb, package_lock, render, reproducible
from nodeforge.oslock import lock as ol
from tests.prereq import require

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def element(tmp_path) -> Path:
    pb.write_element(tmp_path / "elements", {"open-iscsi": None}, render.ELEMENTS_SRC)
    return tmp_path / "elements" / pb.ELEMENT


def _run(script: Path, root: Path) -> subprocess.CompletedProcess:
    """The element's script with its file under ``root`` (the chroot's ``/`` in a real build)."""
    text = script.read_text()
    assert text.count(f"NAMEFILE={pb.ISCSI_NAME_FILE}\n") == 1
    local = root.parent / "script.sh"
    local.write_text(text.replace(f"NAMEFILE={pb.ISCSI_NAME_FILE}\n", f"NAMEFILE={root}{pb.ISCSI_NAME_FILE}\n"))
    return subprocess.run(["bash", str(local)], capture_output=True, text=True)


def test_element_has_the_pre_install_script(element):
    script = element / "pre-install.d" / pb.ISCSI_PRE_INSTALL
    assert script.is_file() and stat.S_IMODE(script.stat().st_mode) == 0o755
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n") and "set -eu\n" in text
    assert pb.ISCSI_NAME_TEXT in text
    # It runs in the chroot before anything of the phase that installs packages
    # (package-installs' 01-package-installs, base's 03-baseline-tools).
    assert sorted([pb.ISCSI_PRE_INSTALL, "01-package-installs", "03-baseline-tools"])[0] == pb.ISCSI_PRE_INSTALL


def test_element_with_an_os_lock_has_the_same_script(element, tmp_path):
    lock = ol.load(REPO / "manifests" / ol.FILENAME)
    pb.write_element(tmp_path / "locked", {"open-iscsi": None}, render.ELEMENTS_SRC, os_lock=lock)
    locked = tmp_path / "locked" / pb.ELEMENT
    assert (locked / "root.d" / "70-nodeforge-os-lock").is_file()
    script = locked / "pre-install.d" / pb.ISCSI_PRE_INSTALL
    assert script.read_bytes() == (element / "pre-install.d" / pb.ISCSI_PRE_INSTALL).read_bytes()
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_name_text_asks_open_iscsi_to_generate_a_name():
    lines = pb.ISCSI_NAME_TEXT.splitlines()
    # What /lib/open-iscsi/startup-checks.sh (iscsid.service's ExecStartPre) looks for before it
    # writes a generated name; no InitiatorName line that iscsid or the initramfs would use.
    assert "GenerateName=yes" in lines
    assert not [x for x in lines if x.startswith("InitiatorName")]
    assert all(x.startswith("#") or x == "GenerateName=yes" for x in lines)


def test_script_writes_the_file_on_a_fresh_root(element, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    done = _run(element / "pre-install.d" / pb.ISCSI_PRE_INSTALL, root)
    assert done.returncode == 0, done.stderr
    path = root / pb.ISCSI_NAME_FILE.lstrip("/")
    assert path.read_text() == pb.ISCSI_NAME_TEXT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    # The root filesystem's normalisation then finds nothing to reset.
    assert reproducible._iscsi_initiator(root) is False
    assert path.read_text() == pb.ISCSI_NAME_TEXT


def test_script_keeps_a_file_that_already_generates(element, tmp_path):
    root = tmp_path / "root"
    path = root / pb.ISCSI_NAME_FILE.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("# site\nGenerateName=yes\n")
    os.chmod(path, 0o644)
    done = _run(element / "pre-install.d" / pb.ISCSI_PRE_INSTALL, root)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == "# site\nGenerateName=yes\n" and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_script_replaces_a_drawn_name(element, tmp_path):
    root = tmp_path / "root"
    path = root / pb.ISCSI_NAME_FILE.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("## DO NOT EDIT\nInitiatorName=iqn.1993-08.org.debian:01:0123456789ab\n")
    done = _run(element / "pre-install.d" / pb.ISCSI_PRE_INSTALL, root)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == pb.ISCSI_NAME_TEXT


def test_open_iscsi_is_installed_after_pre_install():
    """diskimage-builder's base element installs open-iscsi in install.d (after every pre-install.d
    script), so the file exists when open-iscsi's postinst runs."""
    elements = package_lock.dib_elements_dir()
    require(elements is not None, "diskimage-builder not installed (make setup)")
    assert "open-iscsi" in package_lock.DIB_SCRIPT_INSTALLS
    installs = [p for p in (elements / "base").rglob("*") if p.is_file()
                and re.search(r"install-packages\b.*\biscsi_package\b", p.read_text(errors="replace"))]
    assert installs, "diskimage-builder's base element no longer installs iscsi_package"
    assert {p.parent.name for p in installs} == {"install.d"}, installs
