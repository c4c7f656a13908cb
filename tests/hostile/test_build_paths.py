"""Names and documents read from a build directory stay inside it and are bounded.

``image diff`` and ``image publish`` read names out of a build's own files: the per-file
manifest's ``files.path``, the ``images`` of ``manifest.json``, the SUMS entries. A name that is
a path (absolute, ``..``), or a symlink leading out of the build directory, is refused with exit 2
naming the file and the field, and nothing outside the two build directories is read (the sha256
of ``/etc/hostname`` is never printed). A manifest or per-file manifest that is not JSON, nested
too deep, holds NaN or a number no field takes, or is a FIFO or a device, is refused the same way,
in a child process under CPU-time and address-space limits (:func:`conftest.run_cli`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from nodeforge.imagebuild import contents
from tests.hostile.builds import build, copy, set_manifest
from tests.hostile.conftest import check, run_cli

OUTSIDE = Path("/etc/hostname")


def _files_path(value):
    def change(m):
        m["files"]["path"] = value
    return change


def _files_symlink_out(d: Path) -> None:
    """files.jsonl replaced by a symlink to a file outside, its digest recorded (a forger's best)."""
    (d / contents.FILENAME).unlink()
    (d / contents.FILENAME).symlink_to(OUTSIDE)
    set_manifest(d, lambda m: m["files"].update(sha256=hashlib.sha256(OUTSIDE.read_bytes()).hexdigest()))


def _image_path(value):
    def change(m):
        m["images"]["vm"] = value
    return change


def _raw_manifest(text: str):
    def write(d: Path) -> None:
        (d / "manifest.json").write_text(text)
    return write


def _files_text(text: str):
    """A per-file manifest of the given text, its digest recorded (so only its content is judged)."""
    def write(d: Path) -> None:
        (d / contents.FILENAME).write_text(text)
        set_manifest(d, lambda m: m["files"].update(sha256=hashlib.sha256(text.encode()).hexdigest()))
    return write


def _fifo(name: str):
    def write(d: Path) -> None:
        (d / name).unlink()
        os.mkfifo(d / name)
    return write


def _device(name: str):
    def write(d: Path) -> None:
        (d / name).unlink()
        (d / name).symlink_to("/dev/zero")
    return write


CASES = {
    # name: (how B is spoiled, text the message must hold)
    "files-path-absolute": (lambda d: set_manifest(d, _files_path(str(OUTSIDE))), "files.path"),
    "files-path-dotdot": (lambda d: set_manifest(d, _files_path("../../../etc/hostname")), "files.path"),
    "files-path-dot": (lambda d: set_manifest(d, _files_path("..")), "files.path"),
    "files-symlink-out": (_files_symlink_out, "leads out of"),
    "image-absolute": (lambda d: set_manifest(d, _image_path(str(OUTSIDE))), "images.vm"),
    "image-dotdot": (lambda d: set_manifest(d, _image_path("../x.qcow2")), "images.vm"),
    "manifest-nan": (lambda d: set_manifest(d, lambda m: m.update(build_time=float("nan"))),
                     "build_time: a number out of range"),
    "manifest-deep": (_raw_manifest("[" * 200 + "]" * 200), "nested more than"),
    "manifest-many": (_raw_manifest("[" + "0," * 100_000 + "0]"), "more than 80000 values"),
    "manifest-huge-int": (lambda d: set_manifest(d, lambda m: m["files"].update(entries=10 ** 30)),
                          "files.entries: a number out of range"),
    "manifest-fifo": (_fifo("manifest.json"), "not a regular file"),
    "manifest-device": (_device("manifest.json"), "not a regular file"),
    "files-not-json": (_files_text('{"path": "/a", "type": "file"}\nnot json\n'), "files.jsonl:2"),
    "files-deep": (_files_text("[" * 100_000 + "]" * 100_000 + "\n"), "files.jsonl:1"),
    "files-nan": (_files_text('{"path": "/a", "type": "file", "size": NaN}\n'), "files.jsonl:1"),
    "files-wrong-shape": (_files_text('[1, 2]\n'), "not a file entry"),
    "files-fifo": (_fifo(contents.FILENAME), "not a regular file"),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("build-paths")
    return build(root, "a"), build(root, "b")


def test_the_pair_compares(pair, tmp_path):
    """The unspoiled pair is read by both commands (so each refusal below is the spoiled part's)."""
    a, b = pair
    run = run_cli(["-o", "json", "image", "diff", a, b])
    check(run, codes=(0, 10))
    assert json.loads(run.out)["files"] is not None, run.out


@pytest.mark.parametrize("case", sorted(CASES))
def test_image_diff_reads_only_inside_the_builds(case, pair, tmp_path):
    a, b = pair
    spoil, words = CASES[case]
    b = copy(b, tmp_path / "b")
    spoil(b)
    outside_digest = hashlib.sha256(OUTSIDE.read_bytes()).hexdigest()
    for args in (["image", "diff", a, b], ["-o", "json", "image", "diff", a, b]):
        run = run_cli(args)
        check(run, codes=(2,), json_out="-o" in args, note=f"({case})")
        assert words in run.out + run.err, f"{case}: {words!r} not in\n{run.out}{run.err}"
        assert outside_digest not in run.out + run.err, f"{case}: a file outside the builds was read"


@pytest.mark.parametrize("case", sorted(c for c in CASES if not c.startswith("files-")))
def test_image_publish_reads_only_inside_the_build(case, pair, tmp_path):
    """The same manifest spoils reach ``image publish`` (it reads the build before any cloud)."""
    _, b = pair
    spoil, words = CASES[case]
    b = copy(b, tmp_path / "b")
    spoil(b)
    run = run_cli(["image", "publish", b, "--dry-run"])
    check(run, codes=(2,), note=f"({case})")
    assert words in run.err, f"{case}: {words!r} not in\n{run.err}"
