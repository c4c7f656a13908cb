"""nodeforge.base.fs: atomic writes and renames into place."""

from __future__ import annotations

import os
import stat

from nodeforge.base import fs


def test_atomic_write_mode_before_content_and_no_leftovers(tmp_path):
    p = tmp_path / "sub" / "secret.json"
    fs.atomic_write(p, "one", 0o600)
    assert p.read_text() == "one" and stat.S_IMODE(p.stat().st_mode) == 0o600
    fs.atomic_write(p, b"two")                       # keeps the existing mode
    assert p.read_bytes() == b"two" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(os.listdir(p.parent)) == ["secret.json"]


def test_move_into_place_replaces_a_file_and_places_a_directory(tmp_path):
    old, new = tmp_path / "f", tmp_path / ".f.part"
    old.write_text("old")
    new.write_text("new")
    assert fs.move_into_place(new, old) == old and old.read_text() == "new" and not new.exists()
    stage = tmp_path / ".out.partial"
    stage.mkdir()
    (stage / "x").write_text("x")
    out = fs.move_into_place(stage, tmp_path / "out")
    assert (out / "x").read_text() == "x" and not stage.exists()
