"""``image diff`` between build directories, the per-file manifest and the reproducibility helpers (fast).

Build directories come from ``builddir_factory.make_build_dir`` with a
per-file manifest written by :func:`contents.scan` over a small real tree.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from nodeforge.cli import main
from nodeforge.imagebuild import contents, disk, manifest as mf, reproducible
from nodeforge.publish import diff as imgdiff
from tests.imagebuild import builddir_factory
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.verify_fixture import write_verify
from tests.prereq import require_tools

EPOCH = 1764470553
PACKAGES = [{"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"},
            {"name": "openssl", "version": "3.0.17-1~deb12u2", "arch": "amd64"},
            {"name": "tzdata", "version": "2025b-0+deb12u1", "arch": "all"}]


def _nf(capsys, *args) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stdout + stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def _tree(root: Path, *, reverse: bool = False, extra: dict[str, str] | None = None) -> Path:
    """A small root filesystem; ``reverse`` creates the same content in the other order."""
    files = {"etc/hostname": "node\n", "etc/machine-id": "0123456789abcdef\n", "usr/bin/tool": "#!/bin/sh\n",
             "var/log/dpkg.log": "installed\n", "var/lib/dpkg/status-old": "old\n",
             "var/cache/ldconfig/aux-cache": "cache\n", "dev/kvm": "", **(extra or {})}
    items = sorted(files.items(), reverse=reverse)
    for rel, text in items:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.chmod(root / "usr/bin/tool", 0o4755)
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-again")
    os.symlink("tool", root / "usr/bin/tool-link")
    (root / "etc/shadow").write_text(f"root:*:{(EPOCH // 86400) - 30}:0:99999:7:::\nnobody:*::::::\n")
    return root


def _with_files(build_dir: Path, tree: Path, packages=None) -> Path:
    """Add ``tree``'s per-file manifest to a factory build directory (and to its manifest.json)."""
    entries = contents.scan(tree)
    files = contents.write(build_dir / contents.FILENAME, entries)
    m = json.loads((build_dir / "manifest.json").read_text())
    m["files"] = files
    m["reproducible"] = {"source_date_epoch": EPOCH, "inputs_sha256": "2" * 64}
    if packages is not None:
        m["packages"] = packages
    (build_dir / "manifest.json").write_text(mf.dumps(m))
    return build_dir


def _resum(d: Path) -> None:
    """SHA256SUMS/SHA512SUMS again for every file they list (after manifest.json changed)."""
    names = [line.split("  ", 1)[1] for line in (d / "SHA256SUMS").read_text().splitlines() if line.strip()]
    builddir_factory.write_sums(d, {n: {"sha256": hashlib.sha256((d / n).read_bytes()).hexdigest(),
                                        "sha512": hashlib.sha512((d / n).read_bytes()).hexdigest()} for n in names})


def _pair(tmp_path, *, b_packages=None, b_extra=None, verify: str | None = None, variants=("vm", "baremetal")):
    """Two build directories with per-file manifests of two trees made apart (``b_extra``: files
    only B has or has otherwise) and the same inputs; ``verify``: write a verify.json (publishable)."""
    ta = _tree(tmp_path / "tree-a")
    tb = _tree(tmp_path / "tree-b", reverse=True, extra=b_extra)
    for t in (ta, tb):
        reproducible.normalise(t, EPOCH)
    when = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    a = _with_files(make_build_dir(tmp_path / "builds", verify=None, packages=PACKAGES, build_time=when,
                                   variants=variants), ta)
    b = _with_files(make_build_dir(tmp_path / "builds", verify=None, packages=b_packages or PACKAGES,
                                   build_time=when + datetime.timedelta(hours=1), variants=variants), tb)
    # The factory digests the build id into the lockfile sha256; the same inputs here.
    for d in (a, b):
        m = json.loads((d / "manifest.json").read_text())
        m["lockfile"]["sha256"] = "3" * 64
        (d / "manifest.json").write_text(mf.dumps(m))
        _resum(d)
        if verify is not None:
            write_verify(d, verify)
    return a, b


def test_same_content_is_identical_whatever_the_build_id(tmp_path, capsys):
    a, b = _pair(tmp_path)
    d = imgdiff.diff_builds(a, b)
    assert d.identical and d.files is not None and d.files.identical and d.packages.identical
    assert d.identity_changed["build_id"][0] != d.identity_changed["build_id"][1]
    assert "build_time" in d.identity_changed
    code, out = _nf(capsys, "image", "diff", str(a), str(b))
    assert code == 0, out
    assert "same content" in out


def test_packages_files_and_inputs_that_changed_are_named(tmp_path, capsys):
    newer = [{"name": "bash", "version": "5.2.15-2+b7", "arch": "amd64"},
             {"name": "openssl", "version": "3.0.18-1~deb12u1", "arch": "amd64"},
             {"name": "libnew1", "version": "1.0-1", "arch": "amd64"}]
    a, b = _pair(tmp_path, b_packages=newer, b_extra={"usr/lib/libnew.so.1": "elf\n", "etc/hostname": "other\n"})
    d = imgdiff.diff_builds(a, b)
    assert not d.identical
    assert d.packages.changed == [{"name": "openssl", "arch": "amd64", "old": "3.0.17-1~deb12u2",
                                   "new": "3.0.18-1~deb12u1"}]
    assert d.packages.added == [{"name": "libnew1", "version": "1.0-1", "arch": "amd64"}]
    assert d.packages.removed == [{"name": "tzdata", "version": "2025b-0+deb12u1", "arch": "all"}]
    assert d.files.added == ["/usr/lib", "/usr/lib/libnew.so.1"]
    changed = {c["path"]: c["fields"] for c in d.files.changed}
    assert changed == {"/etc/hostname": {"sha256": [hashlib.sha256(b"node\n").hexdigest(),
                                                    hashlib.sha256(b"other\n").hexdigest()], "size": [5, 6]}}

    code, out = _nf(capsys, "-o", "json", "image", "diff", str(a), str(b))
    assert code == 10, out
    doc = json.loads(out)
    assert doc["identical"] is False and doc["packages"]["counts"] == {"added": 1, "removed": 1, "changed": 1}
    assert doc["files"]["counts"]["added"] == 2 and "/usr/lib/libnew.so.1" in doc["files"]["added"]
    code, out = _nf(capsys, "image", "diff", str(a), str(b))
    assert code == 10
    assert "openssl" in out and "3.0.18-1~deb12u1" in out and "/etc/hostname" in out


def test_a_tampered_file_manifest_and_a_non_build_are_refused(tmp_path, capsys):
    a, b = _pair(tmp_path)
    text = (b / contents.FILENAME).read_text().replace('"/etc/hostname"', '"/etc/hostnamx"')
    (b / contents.FILENAME).write_text(text)
    code, out = _nf(capsys, "image", "diff", str(a), str(b))
    assert code == 2
    assert f"{b / contents.FILENAME}: sha256" in out and "manifest.json records" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = _nf(capsys, "image", "diff", str(a), str(empty))
    assert code == 2 and "is not a build directory (no manifest.json)" in out
    code, out = _nf(capsys, "image", "diff", str(a), "some-image-name")
    assert code == 2 and "compare two build directories or two Glance images" in out


def test_a_build_without_a_file_manifest_is_compared_by_what_it_has(tmp_path):
    a, b = _pair(tmp_path)
    (b / contents.FILENAME).unlink()
    d = imgdiff.diff_builds(a, b)
    assert d.files is None and d.files_identical is True      # the digests manifest.json records agree
    assert d.identical and any("compared by digest only" in n for n in d.notes)


def test_normalised_trees_made_differently_have_the_same_file_manifest(tmp_path):
    ta = _tree(tmp_path / "a")
    tb = _tree(tmp_path / "b", reverse=True)
    os.utime(tb / "etc/hostname", (EPOCH + 5000, EPOCH + 5000))
    assert contents.dumps(contents.scan(ta)) != contents.dumps(contents.scan(tb))   # times differ before
    done = reproducible.normalise(ta, EPOCH)
    reproducible.normalise(tb, EPOCH)
    assert "/var/lib/dpkg/status-old" in done["removed"] and "/var/cache/ldconfig/aux-cache" in done["removed"]
    assert "/dev/kvm" in done["removed"] and (ta / "dev").is_dir()      # the build host's device nodes
    assert done["emptied"] == ["/etc/machine-id"] and done["truncated_logs"] == 1 and done["shadow_dates"] == 1
    ea, eb = contents.scan(ta), contents.scan(tb)
    assert contents.dumps(ea) == contents.dumps(eb)
    by = {e["path"]: e for e in ea}
    assert by["/etc/machine-id"]["size"] == 0 and by["/var/log/dpkg.log"]["size"] == 0
    assert by["/usr/bin/tool"]["mode"] == "4755" and by["/usr/bin/tool"]["links"] == 2
    assert by["/usr/bin/tool-again"]["sha256"] == hashlib.sha256(b"#!/bin/sh\n").hexdigest()
    assert by["/usr/bin/tool-link"] == {**by["/usr/bin/tool-link"], "type": "symlink", "target": "tool"}
    assert all(e["mtime"] <= EPOCH for e in ea)
    assert f"root:*:{EPOCH // 86400}:" in (ta / "etc/shadow").read_text()
    assert "nobody:*::" in (ta / "etc/shadow").read_text()
    iscsi = tb / "etc/iscsi/initiatorname.iscsi"
    iscsi.parent.mkdir(parents=True)
    iscsi.write_text("## The InitiatorName must be unique\nInitiatorName=iqn.1993-08.org.debian:01:ca1cccfb8f9f\n")
    assert reproducible.normalise(tb, EPOCH)["iscsi_initiator_reset"] is True
    assert iscsi.read_text() == "## The InitiatorName must be unique\nGenerateName=yes\n"
    iscsi.unlink()
    iscsi.parent.rmdir()
    reproducible.clamp_times(tb, EPOCH)
    # A change in one byte is one changed path.
    (tb / "usr/bin/tool").write_text("#!/bin/bash\n")
    reproducible.clamp_times(tb, EPOCH)
    d = contents.diff(ea, contents.scan(tb))
    assert [c["path"] for c in d.changed] == ["/usr/bin/tool", "/usr/bin/tool-again"]
    assert d.changed[0]["fields"]["size"] == [10, 12]


def test_host_paths_in_dibs_record_are_replaced(tmp_path):
    env = tmp_path / "etc/dib-manifests/dib_environment"
    env.parent.mkdir(parents=True)
    env.write_text('declare -x DIB_ARGS="-o /var/tmp/nodeforge-build.x1/rootfs"\n'
                   'declare -x DIB_IMAGE_CACHE="/var/tmp/nodeforge-build.x1/dib-image-cache"\n'
                   'declare -x DIB_PYTHON_EXEC="/srv/checkout/.venv/bin/python"\n')
    os.utime(env, (EPOCH - 10, EPOCH - 10))
    done = reproducible.normalise(tmp_path, EPOCH, {"/var/tmp/nodeforge-build.x1": "<work>",
                                                    "/srv/checkout/.venv": "<python-env>", "/var/tmp": "<tmp>"})
    assert done["host_paths_replaced"] == ["/etc/dib-manifests/dib_environment"]
    assert env.read_text() == ('declare -x DIB_ARGS="-o <work>/rootfs"\n'
                               'declare -x DIB_IMAGE_CACHE="<work>/dib-image-cache"\n'
                               'declare -x DIB_PYTHON_EXEC="<python-env>/bin/python"\n')
    assert int(env.stat().st_mtime) == EPOCH - 10


def test_the_file_manifest_names_a_bad_line(tmp_path):
    path = tmp_path / contents.FILENAME
    path.write_text('{"path":"/","type":"dir"}\nnot json\n')
    with pytest.raises(contents.FileManifestError, match=r"files.jsonl:2: not JSON"):
        contents.load(path)
    path.write_text('{"path":"/","type":"dir"}\n[1]\n')
    with pytest.raises(contents.FileManifestError, match=r"files.jsonl:2: not a file entry"):
        contents.load(path)


def test_source_date_epoch_is_the_newest_index_date():
    class Lock:
        index_dates = {"bookworm": "Sat, 11 Jul 2026 10:16:37 UTC",
                       "bookworm-security": "Mon, 30 Nov 2026 00:22:33 UTC",
                       "bookworm-updates": "Mon, 30 Nov 2026 02:21:41 UTC"}
    epoch, where = reproducible.source_date_epoch(Lock())
    assert reproducible.iso(epoch) == "2026-11-30T02:21:41Z" and "bookworm-updates" in where
    assert reproducible.source_date_epoch(None)[0] == reproducible.FALLBACK_EPOCH


def _manifest(build_id: str, when: datetime.datetime, packages=PACKAGES, files_sha="4" * 64) -> dict:
    m = mf.build_manifest(
        build_id=build_id, build_time=when, minor="1.36", kubernetes_version="1.36.0",
        pause_image="registry.k8s.io/pause:3.10.1", base_os={"distro": "debian", "release": "12"}, arch="amd64",
        variants=["vm", "baremetal"], images={"vm": "a.qcow2", "baremetal": "b.raw"}, packages=packages,
        artifacts=[{"component": "kubelet", "version": "1.36.0", "arch": "amd64", "sha256": "a" * 64}],
        lockfile_path=Path(mf.__file__).resolve().parents[2] / "manifests" / "versions.yaml",
        element_tree_digest="b" * 64, hardening={"profile": "p", "version": "1"},
        dib={"version": "3.43.0", "args": ["-t", "tar"]}, source={"commit": "c", "dirty": False})
    m["files"] = {"path": contents.FILENAME, "sha256": files_sha, "entries": 10}
    m["reproducible"] = {"source_date_epoch": EPOCH, "inputs_sha256": "5" * 64}
    return m


def test_the_sbom_depends_on_the_content_only():
    t = datetime.datetime(2026, 12, 1, 10, tzinfo=datetime.timezone.utc)
    one, two = _manifest("k8s-1.36.0-a", t), _manifest("k8s-1.36.0-b", t + datetime.timedelta(hours=2))
    assert mf.validate(one) == []
    assert mf.sbom(one) == mf.sbom(two)
    doc = json.loads(mf.sbom(one))
    assert doc["metadata"]["timestamp"].startswith(reproducible.iso(EPOCH)[:19])
    assert mf.sbom(one) != mf.sbom(_manifest("k8s-1.36.0-a", t, files_sha="6" * 64))
    assert mf.sbom(one) != mf.sbom(_manifest("k8s-1.36.0-a", t, packages=PACKAGES[:2]))


def test_disk_ids_are_derived_from_the_seed():
    x, y = disk.derived_ids("files-sha:vm"), disk.derived_ids("files-sha:vm")
    assert x == y and x != disk.derived_ids("files-sha:baremetal")
    assert len(x.esp_id) == 8 and len({x.root_uuid, x.disk_guid.lower(), x.hash_seed, *x.partition_guids}) == 6
    assert disk.random_ids() != disk.random_ids()


def test_two_esp_images_made_apart_in_time_are_byte_identical(tmp_path):
    require_tools("mkfs.vfat", "mmd", "mcopy", why="ESP assembly")
    efi = tmp_path / "BOOTX64.EFI"
    efi.write_bytes(b"MZ" + bytes(4000))
    images = []
    for name, delay in (("a.img", 0), ("b.img", 2.1)):
        if delay:
            import time
            time.sleep(delay)
        img = tmp_path / name
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), TZ="UTC", MTOOLS_SKIP_CHECK="1")
        subprocess.run(["mkfs.vfat", "-F", "32", "-n", disk.ESP_LABEL, "-i", "ABCD1234", "-C", str(img), "65536"],
                       env=env, check=True, capture_output=True)
        assert disk.fat_label_time(img, EPOCH)
        os.utime(efi, (EPOCH, EPOCH))
        subprocess.run(["mmd", "-i", str(img), "::/EFI", "::/EFI/BOOT"], env=env, check=True)
        subprocess.run(["mcopy", "-m", "-i", str(img), str(efi), "::/EFI/BOOT/BOOTX64.EFI"], env=env, check=True)
        images.append(img)
    cmp = imgdiff.compare_bytes(*images)
    assert cmp["identical"], cmp
    with open(images[1], "r+b") as fh:
        fh.seek(5000)
        fh.write(b"\xff\xfe")
    cmp = imgdiff.compare_bytes(*images, regions=[("head", 0, 4096), ("second", 4096, 8192)])
    assert (cmp["differing_bytes"], cmp["differing_blocks"], cmp["first_blocks"]) == (2, 1, [1])
    assert cmp["regions"] == {"head": 0, "second": 1}


def test_inode_times_in_the_ext4_image_are_the_epoch(tmp_path):
    require_tools("mkfs.ext4", "debugfs", why="root filesystem assembly")
    tree = _tree(tmp_path / "tree", extra={"usr/lib/systemd/system/system-systemd\\x2dcryptsetup.slice": "[Unit]\n",
                                           'etc/a "quoted" name': "x\n"})
    reproducible.normalise(tree, EPOCH)
    for rel in ("etc/hostname", "usr/bin"):          # read after clamping: atime moves (relatime)
        os.utime(tree / rel, (EPOCH + 99, EPOCH - 5))
    img, offset = tmp_path / "disk.raw", 1 << 20
    with open(img, "wb") as fh:
        fh.truncate(offset + (64 << 20))
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), "-E", f"offset={offset}", str(img), "65536k"],
                   check=True, capture_output=True, env=dict(os.environ, E2FSPROGS_FAKE_TIME=str(EPOCH)))
    n = disk.set_inode_times(img, offset, tree, EPOCH, tmp_path)
    assert n == len(contents.scan(tree))
    for path in ("/", "/etc/hostname", "/usr/bin", "/usr/bin/tool-link",
                 '"/usr/lib/systemd/system/system-systemd\\x2dcryptsetup.slice"', '"/etc/a ""quoted"" name"'):
        out = subprocess.run(["debugfs", "-R", f"stat {path}", f"{img}?offset={offset}"], capture_output=True,
                             text=True).stdout
        times = dict(re.findall(r"^\s*(\w+): 0x([0-9a-f]{8})", out, re.M))
        assert int(times["ctime"], 16) == EPOCH and int(times["atime"], 16) == EPOCH, (path, times)
    (tree / "etc/missing").write_text("not in the image\n")
    with pytest.raises(disk.DiskError, match="debugfs could not set inode times"):
        disk.set_inode_times(img, offset, tree, EPOCH, tmp_path)
