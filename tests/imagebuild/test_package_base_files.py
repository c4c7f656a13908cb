"""What the package base puts in place before its first package: dpkg's path filters and the
initramfs hook of the nodeforge elements.

The filters are run by real dpkg (``--root`` on a scratch tree, the file's lines given as its
``--path-exclude``/``--path-include`` options in their order, as dpkg reads them from
``dpkg.cfg.d``); the hook by ``sh`` on a scratch initramfs tree with a ``modules.dep``, as
mkinitramfs runs it (``DESTDIR``, ``MODULESDIR``, ``version`` exported).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from nodeforge.imagebuild import package_base as pb, render
from nodeforge.imageverify import verify_guest
from tests.prereq import require_tools

SOURCES = {rel: render.ELEMENTS_SRC / element / f"{element}-files" / rel for element, rel, _ in pb.BASE_FILE_SOURCES}
MINIMAL = "etc/dpkg/dpkg.cfg.d/90-nodeforge-minimal"
DRIVERS = "etc/dpkg/dpkg.cfg.d/90-nodeforge-no-unused-drivers"
HOOK = "etc/initramfs-tools/hooks/nodeforge-local-root-only"


def test_the_base_element_installs_the_files_first(tmp_path):
    elem = pb.write_element(tmp_path, {"nf-app": None}, render.ELEMENTS_SRC) / pb.ELEMENT
    script = elem / "root.d" / "60-nodeforge-base-files"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755 and pb.BASE_FILES in script.read_text()
    # root.d runs before debian-minimal's 75 step and every package install (pre-install.d and later).
    assert sorted([script.name, "75-debian-minimal-baseinstall"])[0] == script.name
    for element, rel, mode in pb.BASE_FILE_SOURCES:
        copy = elem / pb.BASE_FILES / rel
        assert copy.read_bytes() == SOURCES[rel].read_bytes(), rel
        assert stat.S_IMODE(copy.stat().st_mode) == mode, rel
        # The element installs the same file again in the main build.
        install = (render.ELEMENTS_SRC / element / "install.d").glob("*")
        assert any(f"cp -r /tmp/in_target.d/{element}-files/. /" in p.read_text() for p in install), element
    assert set(SOURCES) == {MINIMAL, DRIVERS, HOOK}


def test_a_changed_file_changes_the_element_digest(tmp_path):
    # The files are part of the generated element, whose digest is an input of the base key
    # (BaseSpec.element_digest): a changed filter makes a new package base.
    src = tmp_path / "src"
    shutil.copytree(render.ELEMENTS_SRC, src)
    before = render.entries_digest(pb.element_entries({"nf-app": None}, src))
    path = src / "image-hygiene" / "image-hygiene-files" / MINIMAL
    path.write_text(path.read_text() + "path-exclude=/usr/share/lintian/*\n")
    assert render.entries_digest(pb.element_entries({"nf-app": None}, src)) != before


def test_a_missing_file_is_named(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(render.ELEMENTS_SRC, src)
    (src / "k8s-hardening" / "k8s-hardening-files" / DRIVERS).unlink()
    with pytest.raises(FileNotFoundError, match="90-nodeforge-no-unused-drivers"):
        pb.element_entries({"nf-app": None}, src)


# --- dpkg's path filters, run by dpkg ----------------------------------------------------

PAYLOAD = {
    "usr/share/doc/nf-kernel/README": "kept out",
    "usr/share/doc/nf-kernel/copyright": "kept",
    "usr/share/man/man1/nf.1": "kept out",
    "usr/share/locale/de/LC_MESSAGES/nf.mo": "kept out",
    "usr/share/locale/locale.alias": "kept",
    "lib/modules/6.1.0-1-amd64/kernel/sound/core/snd.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/net/wireless/intel/iwlwifi.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/net/wireless/cfg80211.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/net/mac80211/mac80211.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/net/bluetooth/bluetooth.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/bluetooth/btusb.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/media/usb/uvc/uvcvideo.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/media/rc/rc-core.ko": "kept",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/media/rc/ir-nec-decoder.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/media/cec/core/cec.ko": "kept",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/staging/rtl8192e/r8192e.ko": "kept out",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko": "kept",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/gpu/drm/display/drm_display_helper.ko": "kept",
    "lib/modules/6.1.0-1-amd64/kernel/drivers/scsi/sd_mod.ko": "kept",
}


def _deb(tmp: Path) -> Path:
    tree = tmp / "deb"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text("Package: nf-kernel\nVersion: 1.0-1\nArchitecture: all\n"
                                         "Maintainer: nodeforge tests <tests@invalid>\nDescription: filters\n")
    for rel, text in PAYLOAD.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text + "\n")
    deb = tmp / "nf-kernel_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(deb)], check=True,
                   capture_output=True)
    return deb


def _install(deb: Path, root: Path, configs: list[Path]) -> set[str]:
    """Install ``deb`` into ``root`` with dpkg, the filter lines of ``configs`` given as options;
    the files of the package that are there after."""
    admin = root / "var/lib/dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").write_text("")
    opts = [f"--{line.strip()}" for cfg in configs for line in cfg.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert all(o.startswith(("--path-exclude=", "--path-include=")) for o in opts)
    proc = subprocess.run(["dpkg", f"--root={root}", "--force-script-chrootless", *opts, "-i", str(deb)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {rel for rel in PAYLOAD if (root / rel).exists()}


def test_dpkg_leaves_out_what_the_filters_say(tmp_path):
    require_tools("dpkg", "dpkg-deb", why="the filters are run by dpkg")
    deb = _deb(tmp_path)
    # Without the filters (dpkg's own configuration only) the package installs every file ...
    assert _install(deb, tmp_path / "plain", []) == set(PAYLOAD)
    # ... with them, exactly the files marked "kept".
    installed = _install(deb, tmp_path / "filtered", [SOURCES[MINIMAL], SOURCES[DRIVERS]])
    assert installed == {rel for rel, what in PAYLOAD.items() if what == "kept"}


def test_the_hardening_control_checks_what_the_filters_leave_out():
    profile = render.ELEMENTS_SRC / "k8s-hardening" / "profile.yaml"
    controls = {c["id"]: c for c in yaml.safe_load(profile.read_text())["controls"]}
    paths = [c["path"] for c in controls["NF-HARD-014"]["checks"] if c["kind"] == "absent"]
    excluded = [line.split("=", 1)[1] for line in SOURCES[DRIVERS].read_text().splitlines()
                if line.startswith("path-exclude=/usr/lib/modules/")]
    # Every absent check is a directory the filters empty (the image is merged-/usr: /lib is /usr/lib).
    for path in paths:
        assert any(path.startswith(e[:-1]) for e in excluded), path
    assert len(paths) >= 5


def test_the_booted_node_is_checked_for_module_files_at_any_depth(tmp_path):
    kernel = tmp_path / "usr/lib/modules/6.1.0-1-amd64/kernel"
    (kernel / "sound/core").mkdir(parents=True)            # emptied by dpkg's filters, kept as a directory
    (kernel / "drivers/net/wireless/intel/iwlwifi/mvm").mkdir(parents=True)
    pattern = f"{tmp_path}/usr/lib/modules/*/kernel/drivers/net/wireless/**/*.ko*"
    assert verify_guest.matches(f"{tmp_path}/usr/lib/modules/*/kernel/sound/**/*.ko*") == []
    assert verify_guest.matches(pattern) == []
    deep = kernel / "drivers/net/wireless/intel/iwlwifi/mvm/iwlmvm.ko"
    deep.write_bytes(b"")
    assert verify_guest.matches(pattern) == [str(deep)]


# --- the initramfs hook -----------------------------------------------------------------

def test_the_initramfs_hook_keeps_only_what_a_local_ext4_root_needs(tmp_path):
    require_tools("sh", "awk", "comm", "grep", why="the hook is a shell script")
    version = "6.1.0-1-amd64"
    system = tmp_path / "system" / "lib" / "modules" / version   # the root file system's modules
    dest = tmp_path / "initramfs"
    initrd_mods = dest / str(system).lstrip("/")                 # ${DESTDIR}${MODULESDIR}
    modules = {
        "kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko": [],
        "kernel/drivers/net/ethernet/broadcom/cnic.ko": ["kernel/drivers/net/mdio.ko"],
        "kernel/drivers/net/mdio.ko": [],
        "kernel/drivers/net/virtio_net.ko": ["kernel/drivers/net/net_failover.ko"],
        "kernel/drivers/net/net_failover.ko": [],
        "kernel/drivers/scsi/bnx2fc/bnx2fc.ko": ["kernel/drivers/net/ethernet/broadcom/cnic.ko",
                                                 "kernel/drivers/net/mdio.ko"],
        "kernel/drivers/scsi/sd_mod.ko": [],
        "kernel/drivers/nvme/host/nvme-rdma.ko": ["kernel/fs/configfs/configfs.ko"],
        "kernel/fs/configfs/configfs.ko": [],
        "kernel/fs/ext4/ext4.ko": ["kernel/lib/crc16.ko", "kernel/fs/mbcache.ko", "kernel/fs/jbd2/jbd2.ko"],
        "kernel/fs/jbd2/jbd2.ko": [],
        "kernel/fs/mbcache.ko": [],
        "kernel/lib/crc16.ko": [],
        "kernel/fs/xfs/xfs.ko": ["kernel/lib/libcrc32c.ko"],
        "kernel/lib/libcrc32c.ko": [],
        "kernel/fs/nfs/nfs.ko": ["kernel/fs/lockd/lockd.ko", "kernel/net/sunrpc/sunrpc.ko"],
        "kernel/fs/lockd/lockd.ko": [],
        "kernel/net/sunrpc/sunrpc.ko": [],
    }
    system.mkdir(parents=True)
    (system / "modules.dep").write_text("".join(f"{m}: {' '.join(d)}\n" for m, d in modules.items()))
    for m in modules:
        (initrd_mods / m).parent.mkdir(parents=True, exist_ok=True)
        (initrd_mods / m).write_bytes(b"\x7fELF")
    env = {**os.environ, "DESTDIR": str(dest), "MODULESDIR": str(system), "version": version}
    proc = subprocess.run(["sh", str(SOURCES[HOOK])], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    left = {str(p.relative_to(initrd_mods)) for p in initrd_mods.rglob("*.ko")}
    assert left == {"kernel/drivers/net/ethernet/broadcom/cnic.ko", "kernel/drivers/net/mdio.ko",
                    "kernel/drivers/scsi/bnx2fc/bnx2fc.ko", "kernel/drivers/scsi/sd_mod.ko",
                    "kernel/drivers/nvme/host/nvme-rdma.ko", "kernel/fs/configfs/configfs.ko",
                    "kernel/fs/ext4/ext4.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/mbcache.ko",
                    # outside the two directories: left alone, needed or not
                    "kernel/lib/crc16.ko", "kernel/lib/libcrc32c.ko", "kernel/net/sunrpc/sunrpc.ko"}
    for gone in ("kernel/drivers/net/ethernet/intel", "kernel/fs/xfs", "kernel/fs/nfs", "kernel/fs/lockd"):
        assert not (initrd_mods / gone).exists(), gone                          # emptied directories go
    # mkinitramfs asks a hook for its prerequisites first.
    pre = subprocess.run(["sh", str(SOURCES[HOOK]), "prereqs"], env=env, capture_output=True, text=True)
    assert pre.returncode == 0 and pre.stdout.strip() == ""
