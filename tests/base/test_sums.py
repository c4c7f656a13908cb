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
    with pytest.raises(FileNotFoundError):
        sums.read_sums(Path("/nonexistent/SHA256SUMS"))
