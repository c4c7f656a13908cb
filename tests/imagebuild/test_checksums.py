"""Single-pass checksums equal hashlib's, in sha256sum/sha512sum -c format."""

from __future__ import annotations

import hashlib
import os
import time
import subprocess

from nodeforge.imagebuild import checksums


def test_single_pass_equals_hashlib(tmp_path):
    data = bytes(range(256)) * 40000 + b"tail"   # several chunks with a small one
    f = tmp_path / "img.raw"
    f.write_bytes(data)
    got = checksums.digest_file(f, chunk=1 << 16)
    assert got == {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}


def test_empty_file(tmp_path):
    (tmp_path / "e").write_bytes(b"")
    assert checksums.digest_file(tmp_path / "e")["sha256"] == hashlib.sha256(b"").hexdigest()


def test_reads_each_file_once(tmp_path, monkeypatch):
    f = tmp_path / "x"
    f.write_bytes(b"a" * 100000)
    opened = []
    real_open = open

    def counting_open(path, *a, **kw):
        opened.append(str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", counting_open)
    checksums.digest_file(f, chunk=4096)
    assert opened.count(str(f)) == 1


def test_sums_files_pass_coreutils_check(tmp_path):
    for name, content in {"a.qcow2": b"one", "b.raw": b"two" * 1000, "manifest.json": b"{}"}.items():
        (tmp_path / name).write_bytes(content)
    checksums.sum_files(tmp_path, ["a.qcow2", "b.raw", "manifest.json"])
    for tool, sums in (("sha256sum", "SHA256SUMS"), ("sha512sum", "SHA512SUMS")):
        proc = subprocess.run([tool, "-c", sums], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert checksums.verify_sums(tmp_path) == []
    (tmp_path / "b.raw").write_bytes(b"tampered")
    assert checksums.verify_sums(tmp_path) == ["b.raw"]


def test_digests_the_caller_took_are_written_without_reading_the_file_again(tmp_path, monkeypatch):
    for name, content in {"disk.raw": b"disk" * 1000, "manifest.json": b"{}"}.items():
        (tmp_path / name).write_bytes(content)
    taken = checksums.digest_file(tmp_path / "disk.raw")
    read = []
    real = checksums.digest_file
    monkeypatch.setattr(checksums, "digest_file", lambda path, *a, **kw: read.append(path.name) or real(path, *a, **kw))
    got = checksums.sum_files(tmp_path, ["disk.raw", "manifest.json"], known={"disk.raw": taken,
                                                                             "manifest.json": {"sha256": "0" * 64}})
    assert read == ["manifest.json"]            # one algorithm known is not enough: read
    assert got["disk.raw"] == taken and checksums.verify_sums(tmp_path) == []


def _summed(tmp_path):
    for name, content in {"a.qcow2": b"one" * 1000, "b.raw": b"two" * 1000}.items():
        (tmp_path / name).write_bytes(content)
    checksums.sum_files(tmp_path, ["a.qcow2", "b.raw"])
    return checksums.fingerprints(tmp_path, ["a.qcow2", "b.raw"])


def _check(tmp_path, seen):
    """verify_sums as boottest calls it: the unchanged names skipped."""
    return checksums.verify_sums(tmp_path, skip=checksums.unchanged_names(tmp_path, ["a.qcow2", "b.raw"], seen))


def _reads(monkeypatch):
    read = []
    real = checksums.digest_file
    monkeypatch.setattr(checksums, "digest_file", lambda path, *a, **kw: read.append(path.name) or real(path, *a, **kw))
    return read


def test_files_unchanged_since_they_were_summed_are_not_read_again(tmp_path, monkeypatch):
    seen = _summed(tmp_path)
    assert set(seen) == {"a.qcow2", "b.raw", "SHA256SUMS", "SHA512SUMS"}
    read = _reads(monkeypatch)
    skip = checksums.unchanged_names(tmp_path, ["a.qcow2", "b.raw"], seen)
    assert skip == ["a.qcow2", "b.raw"] and checksums.verify_sums(tmp_path, skip=skip) == [] and read == []
    assert checksums.verify_sums(tmp_path) == [] and sorted(read) == ["a.qcow2", "b.raw"]


def test_a_file_written_after_its_fingerprint_is_read_and_refused(tmp_path, monkeypatch):
    seen = _summed(tmp_path)
    data = (tmp_path / "b.raw").read_bytes()
    st = (tmp_path / "b.raw").stat()
    time.sleep(0.05)                                                    # past the file system's clock tick
    (tmp_path / "b.raw").write_bytes(b"X" + data[1:])                 # same size,
    os.utime(tmp_path / "b.raw", ns=(st.st_atime_ns, st.st_mtime_ns))   # same mtime: the ctime moved
    read = _reads(monkeypatch)
    assert _check(tmp_path, seen) == ["b.raw"] and read == ["b.raw"]


def test_a_replaced_file_or_a_changed_sums_file_means_everything_is_read(tmp_path, monkeypatch):
    seen = _summed(tmp_path)
    (tmp_path / "a.qcow2.new").write_bytes((tmp_path / "a.qcow2").read_bytes())
    os.replace(tmp_path / "a.qcow2.new", tmp_path / "a.qcow2")        # same bytes, another inode
    read = _reads(monkeypatch)
    assert _check(tmp_path, seen) == [] and read == ["a.qcow2"]
    seen = checksums.fingerprints(tmp_path, ["a.qcow2", "b.raw"])
    sums = tmp_path / "SHA256SUMS"
    time.sleep(0.05)
    sums.write_text(sums.read_text())                                  # rewritten: trust nothing
    read.clear()
    assert _check(tmp_path, seen) == [] and sorted(read) == ["a.qcow2", "b.raw"]
    (tmp_path / "b.raw").unlink()
    assert _check(tmp_path, seen) == ["b.raw"]
