"""The image's .pyc files stay valid through the build's time clamp, as timestamp .pyc files.

A tree of real ``.pyc`` files compiled by this Python (``py_compile``, each
invalidation mode) from sources dated after the epoch, as a Debian package's
are; then :func:`pyc.restamp` run with this Python against the tree
(``chroot=False``; the build runs the same script under the image's own
Python in a chroot, which the real-build tests check), then the build's own
clamp (:func:`reproducible.clamp_times`). Then this Python's import system is
asked, with ``-v``, whether it uses each ``.pyc``.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

from nodeforge.imagebuild import pyc, reproducible

MODE = py_compile.PycInvalidationMode
EPOCH = 1704067200                 # 2024-01-01: the clamp's epoch
PACKAGED = 1750000000              # 2025-06-15: when the package's files were made, after the epoch
OLD = 1600000000                   # 2020-09-13: a source older than the epoch (the clamp leaves it)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    pkg = root / "usr" / "lib" / "demo"
    pkg.mkdir(parents=True)
    modes = {"fresh": MODE.CHECKED_HASH, "second": MODE.CHECKED_HASH, "stale": MODE.CHECKED_HASH,
             "orphan": MODE.CHECKED_HASH, "stamped": MODE.TIMESTAMP, "old": MODE.TIMESTAMP,
             "edited": MODE.TIMESTAMP, "unchecked": MODE.UNCHECKED_HASH}
    for i, (name, mode) in enumerate(modes.items()):
        (pkg / f"{name}.py").write_text(f"X = {i}\n")
        when = OLD if name == "old" else PACKAGED
        os.utime(pkg / f"{name}.py", (when, when))
        py_compile.compile(str(pkg / f"{name}.py"), invalidation_mode=mode, doraise=True)
    (pkg / "stale.py").write_text("X = 22\n")           # edited after compiling: its .pyc no longer matches
    (pkg / "edited.py").write_text("X = 100  # a longer line\n")
    os.utime(pkg / "edited.py", (PACKAGED + 60, PACKAGED + 60))
    (pkg / "orphan.py").unlink()                          # a .pyc without its source
    other = pkg / "__pycache__" / "fresh.cpython-39.pyc"    # another Python's .pyc (other magic number)
    other.write_bytes(b"\x61\x0d\x0d\x0a" + bytes(12) + b"code")
    return root, pkg


def _header_of(data: bytes) -> tuple[int, int, int]:
    """(flags, mtime, size) of a .pyc header."""
    return (int.from_bytes(data[4:8], "little"), int.from_bytes(data[8:12], "little"),
            int.from_bytes(data[12:16], "little"))


def _header(path: Path) -> tuple[int, int, int]:
    return _header_of(path.read_bytes()[:16])


def _uses_pyc(pkg: Path, module: str) -> bool:
    out = subprocess.run([sys.executable, "-v", "-B", "-c", f"import {module}"], cwd=pkg,
                         env={**os.environ, "PYTHONPATH": str(pkg)}, capture_output=True, text=True).stderr
    return any(line.startswith("# ") and " matches " in line and f"{module}.py" in line for line in out.splitlines())


def test_every_pyc_matching_its_source_is_valid_after_the_clamp(tmp_path):
    root, pkg = _tree(tmp_path)
    cache = pkg / "__pycache__"
    tag = sys.implementation.cache_tag
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    mtime_before = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}

    counts = pyc.restamp(root, EPOCH, chroot=False, python=sys.executable, tops=("/usr",))
    assert counts == pyc.PycCounts(converted=2, retimed=1, timestamp=1, unchecked_hash=1, other_python=1,
                                   no_source=1, stale=2)
    for name in ("fresh", "second", "stamped", "old"):
        path = cache / f"{name}.{tag}.pyc"
        assert path.read_bytes()[16:] == before[path.name][16:], name        # the code is left as compiled
        assert path.stat().st_mtime_ns == mtime_before[path.name], name       # and the .pyc's own times
    assert _header(cache / f"old.{tag}.pyc") == _header_of(before[f"old.{tag}.pyc"])   # nothing to change

    reproducible.clamp_times(root, EPOCH)

    for name in ("fresh", "second", "stamped", "old"):
        path = cache / f"{name}.{tag}.pyc"
        src = pkg / f"{name}.py"
        assert int(src.stat().st_mtime) == min(EPOCH, OLD if name == "old" else PACKAGED)
        assert _header(path) == (0, int(src.stat().st_mtime), src.stat().st_size), name
        assert _uses_pyc(pkg, name), name
    # Left alone: the two stale ones (Python recompiles them), the orphan, the unchecked one, the other Python's.
    for name in (f"stale.{tag}.pyc", f"edited.{tag}.pyc", f"orphan.{tag}.pyc", f"unchecked.{tag}.pyc",
                 "fresh.cpython-39.pyc"):
        assert (cache / name).read_bytes() == before[name], name
    assert not _uses_pyc(pkg, "stale") and not _uses_pyc(pkg, "edited")
    # Nothing left to change: a second run (after the clamp, as on a rebuilt tree) changes nothing.
    again = pyc.restamp(root, EPOCH, chroot=False, python=sys.executable, tops=("/usr",))
    assert (again.converted, again.retimed, again.timestamp, again.stale) == (0, 0, 4, 2)


def test_without_restamping_the_clamp_leaves_timestamp_pycs_stale(tmp_path):
    """Why the step exists: a Debian package's timestamp .pyc, its source dated after the epoch, no longer
    matches once the clamp re-dates the source (what made the vm image's first boot 10-13 s slower)."""
    root, pkg = _tree(tmp_path)
    assert _uses_pyc(pkg, "stamped")
    reproducible.clamp_times(root, EPOCH)
    assert not _uses_pyc(pkg, "stamped")


def test_an_edited_source_still_invalidates_a_restamped_pyc(tmp_path):
    root, pkg = _tree(tmp_path)
    pyc.restamp(root, EPOCH, chroot=False, python=sys.executable, tops=("/usr",))
    reproducible.clamp_times(root, EPOCH)
    assert _uses_pyc(pkg, "fresh") and _uses_pyc(pkg, "stamped")
    for name in ("fresh", "stamped"):
        (pkg / f"{name}.py").write_text("X = 100\n")      # a node's admin edits the file
        assert not _uses_pyc(pkg, name), name


def test_a_tree_without_python_is_left_alone(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    assert pyc.restamp(tmp_path, EPOCH) is None
