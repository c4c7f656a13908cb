"""Small build directories for the hostile tests (a factory build with a per-file manifest)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from nodeforge.imagebuild import contents, manifest as mf
from tests.imagebuild import builddir_factory
from tests.imagebuild.builddir_factory import make_build_dir


def resum(d: Path) -> None:
    names = [line.split("  ", 1)[1] for line in (d / "SHA256SUMS").read_text().splitlines() if line.strip()]
    builddir_factory.write_sums(d, {n: {"sha256": hashlib.sha256((d / n).read_bytes()).hexdigest(),
                                        "sha512": hashlib.sha512((d / n).read_bytes()).hexdigest()} for n in names})


def build(root: Path, name: str) -> Path:
    """A factory build directory with a small per-file manifest recorded in its manifest."""
    d = make_build_dir(root / name, verify=None, variants=("vm",), size=16 * 1024)
    tree = root / f"{name}-tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc/hostname").write_text("node\n")
    files = contents.write(d / contents.FILENAME, contents.scan(tree))
    m = json.loads((d / "manifest.json").read_text())
    m["files"] = files
    (d / "manifest.json").write_text(mf.dumps(m))
    resum(d)
    return d


def set_manifest(d: Path, change) -> None:
    m = json.loads((d / "manifest.json").read_text())
    change(m)
    (d / "manifest.json").write_text(json.dumps(m, indent=2))
    resum(d)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst
