"""The image's checked-hash .pyc files become timestamp-based, and only when they match their source.

A tree of real ``.pyc`` files compiled by this Python (``py_compile``, each
invalidation mode), the conversion run with this Python against the tree
(``chroot=False``; the build runs the same script under the image's own
Python in a chroot, which the real-build tests check). Then this Python's
import system is asked, with ``-v``, whether it uses each ``.pyc``.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

from nodeforge.imagebuild import pyc

MODE = py_compile.PycInvalidationMode


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    pkg = root / "usr" / "lib" / "demo"
    pkg.mkdir(parents=True)
    sources = {"fresh": "X = 1\n", "stale": "X = 2\n", "orphan": "X = 3\n", "stamped": "X = 4\n",
               "second": "X = 5\n"}
    for name, text in sources.items():
        (pkg / f"{name}.py").write_text(text)
        os.utime(pkg / f"{name}.py", (1704067200, 1704067200))       # clamped, like the build's tree
    for name in ("fresh", "stale", "orphan", "second"):
        py_compile.compile(str(pkg / f"{name}.py"), invalidation_mode=MODE.CHECKED_HASH, doraise=True)
    py_compile.compile(str(pkg / "stamped.py"), invalidation_mode=MODE.TIMESTAMP, doraise=True)
    (pkg / "stale.py").write_text("X = 22\n")          # edited after compiling: its .pyc no longer matches
    os.utime(pkg / "stale.py", (1704067200, 1704067200))
    (pkg / "orphan.py").unlink()                         # a .pyc without its source
    other = pkg / "__pycache__" / "fresh.cpython-39.pyc"   # another Python's .pyc (other magic number)
    other.write_bytes(b"\x61\x0d\x0d\x0a" + bytes(12) + b"code")
    return root, pkg


def _header(path: Path) -> tuple[int, int, int]:
    head = path.read_bytes()[:16]
    return (int.from_bytes(head[4:8], "little"), int.from_bytes(head[8:12], "little"),
            int.from_bytes(head[12:16], "little"))


def _uses_pyc(pkg: Path, module: str) -> bool:
    out = subprocess.run([sys.executable, "-v", "-B", "-c", f"import {module}"], cwd=pkg,
                         env={**os.environ, "PYTHONPATH": str(pkg)}, capture_output=True, text=True).stderr
    return any(line.startswith("# ") and " matches " in line and f"{module}.py" in line for line in out.splitlines())


def test_checked_hash_pycs_matching_their_source_become_timestamp_pycs(tmp_path):
    root, pkg = _tree(tmp_path)
    cache = pkg / "__pycache__"
    tag = sys.implementation.cache_tag
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    mtime_before = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}

    counts = pyc.to_timestamp(root, chroot=False, python=sys.executable, tops=("/usr",))

    assert counts == pyc.PycCounts(converted=2, timestamp=1, other_python=1, no_source=1, stale=1)
    for name in ("fresh", "second"):
        path = cache / f"{name}.{tag}.pyc"
        src = pkg / f"{name}.py"
        assert _header(path) == (0, int(src.stat().st_mtime), src.stat().st_size)
        assert path.read_bytes()[16:] == before[path.name][16:]          # the code is left as compiled
        assert path.stat().st_mtime_ns == mtime_before[path.name]         # and the .pyc's own times
        assert _uses_pyc(pkg, name)
    # Left alone: the stale one (Python recompiles it), the timestamp one, the orphan, the other Python's.
    for name in (f"stale.{tag}.pyc", f"stamped.{tag}.pyc", f"orphan.{tag}.pyc", "fresh.cpython-39.pyc"):
        assert (cache / name).read_bytes() == before[name], name
    assert _header(cache / f"stale.{tag}.pyc")[0] == 0b11 and not _uses_pyc(pkg, "stale")
    # Converted once, nothing left to convert: a second run changes nothing.
    again = pyc.to_timestamp(root, chroot=False, python=sys.executable, tops=("/usr",))
    assert again.converted == 0 and again.timestamp == 3


def test_an_edited_source_still_invalidates_a_converted_pyc(tmp_path):
    root, pkg = _tree(tmp_path)
    pyc.to_timestamp(root, chroot=False, python=sys.executable, tops=("/usr",))
    assert _uses_pyc(pkg, "fresh")
    (pkg / "fresh.py").write_text("X = 100\n")      # a node's admin edits the file
    assert not _uses_pyc(pkg, "fresh")


def test_a_tree_without_python_is_left_alone(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    assert pyc.to_timestamp(tmp_path) is None
