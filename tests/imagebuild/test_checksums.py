"""Single-pass checksums equal hashlib's, in sha256sum/sha512sum -c format."""

from __future__ import annotations

import hashlib
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
