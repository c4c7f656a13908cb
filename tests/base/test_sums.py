"""nodeforge.base.sums: SHA256SUMS/SHA512SUMS read and written in one place."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from nodeforge.base import sums
from nodeforge.errors import ExitCode


def test_written_files_pass_coreutils(tmp_path):
    files = {}
    for name, data in (("a.qcow2", b"a" * 1000), ("manifest.json", b"{}")):
        (tmp_path / name).write_bytes(data)
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}
    sums.write_sums(tmp_path, files)
    for tool, fname in (("sha256sum", "SHA256SUMS"), ("sha512sum", "SHA512SUMS")):
        exe = shutil.which(tool)
        assert exe, f"{tool} (coreutils) missing"
        proc = subprocess.run([exe, "--quiet", "-c", fname], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sums.read_sums(tmp_path / "SHA256SUMS") == {n: d["sha256"] for n, d in files.items()}
    assert not list(tmp_path.glob(".*.tmp"))   # written atomically, nothing left behind


def test_strict_parse_names_the_file_and_line(tmp_path):
    p = tmp_path / "SHA256SUMS"
    p.write_text(f"{'a' * 64}  good\nnot a checksum line\n")
    with pytest.raises(sums.SumsError) as exc:
        sums.read_sums(p)
    assert str(exc.value) == f"{p}: line 2 is not '<hex>  <file>'" and exc.value.exit_code == ExitCode.USAGE


def test_binary_marker_case_and_first_digest_wins():
    text = f"{'A' * 64} *img.raw\n{'b' * 64}  img.raw\n"
    assert sums.parse(text) == {"img.raw": "a" * 64}


def test_lenient_parse_skips_other_lines():
    text = f"# comment\n{'c' * 64} one-space-name\nsha512: nope\n"
    assert sums.parse(text, strict=False) == {"one-space-name": "c" * 64}
    with pytest.raises(sums.SumsError):
        sums.parse(text)


def test_missing_ok():
    from pathlib import Path
    assert sums.read_sums(Path("/nonexistent/SHA256SUMS"), missing_ok=True) == {}
    with pytest.raises(sums.SumsError, match="/nonexistent/SHA256SUMS: not a regular file"):
        sums.read_sums(Path("/nonexistent/SHA256SUMS"))


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/hostname", "sub/img.raw", "..", "."])
def test_a_name_that_is_a_path_is_refused_naming_the_line(tmp_path, name):
    """A SUMS file lists the files beside it: an absolute, ``../`` or nested name would make a
    checker read outside the build directory."""
    p = tmp_path / "SHA256SUMS"
    p.write_text(f"{'a' * 64}  img.raw\n{'b' * 64}  {name}\n")
    with pytest.raises(sums.SumsError, match=f"{p}: line 2: .* is not a file name in this directory"):
        sums.read_sums(p)
    assert sums.parse(f"{'b' * 64}  {name}\n", strict=False) == {name: "b" * 64}     # upstream files: as written


def test_only_a_small_regular_utf8_file_is_read(tmp_path):
    import os
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(sums.SumsError, match="not a regular file"):
        sums.read_sums(fifo)                                      # never opened: a FIFO would block
    big = tmp_path / "SHA512SUMS"
    with open(big, "wb") as fh:
        fh.truncate(sums.MAX_BYTES + 1)
    with pytest.raises(sums.SumsError, match=f"a SUMS file has at most {sums.MAX_BYTES}"):
        sums.read_sums(big)
    bad = tmp_path / "SHA256SUMS"
    bad.write_bytes(b"a" * 64 + b"  img\xff.raw\n")
    with pytest.raises(sums.SumsError, match="not UTF-8 text"):
        sums.read_sums(bad)
