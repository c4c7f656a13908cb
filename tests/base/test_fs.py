"""nodeforge.base.fs: atomic writes and renames into place."""

from __future__ import annotations

import os
import stat
import time

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


def test_locked_waits_for_another_holder_and_says_so_once(tmp_path):
    """flock: a second holder (another open file, as another process would have) waits; on_wait
    is called once, before waiting; with the lock free it is not called at all."""
    import threading

    lock = tmp_path / "sub" / ".lock"
    held, release, order = threading.Event(), threading.Event(), []

    def holder():
        with fs.locked(lock):
            held.set()
            release.wait(10)
            order.append("released")

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    waits = []

    def on_wait():
        waits.append(1)
        threading.Timer(0.2, release.set).start()

    with fs.locked(lock, on_wait=on_wait):
        order.append("acquired")
    t.join(10)
    assert waits == [1] and order == ["released", "acquired"]
    assert oct(lock.stat().st_mode & 0o777) == "0o600"
    called = []
    with fs.locked(lock, on_wait=lambda: called.append(1)):
        pass
    assert called == []


def test_the_build_waits_for_diskimage_builders_cache_and_logs_it(tmp_path):
    """Two builds on one host share diskimage-builder's apt cache; the second waits for the first."""
    import threading

    from nodeforge.imagebuild import build

    cache = tmp_path / "dib"
    held, release, order = threading.Event(), threading.Event(), []

    def other_build():
        with fs.locked(cache / build.DIB_CACHE_LOCK):
            held.set()
            release.wait(10)
            order.append("other build done")

    t = threading.Thread(target=other_build)
    t.start()
    assert held.wait(10)
    lines = []
    log = build.BuildLog(tmp_path / "build.log", lambda line: (lines.append(line), release.set()))
    with build._dib_cache_lock(cache, log):
        order.append("this build")
    log.close()
    t.join(10)
    assert order == ["other build done", "this build"] and len(lines) == 1 and "waiting for another build using diskimage-builder's cache" in lines[0]
    assert str(cache) in (tmp_path / "build.log").read_text()


def test_unused_for_counts_from_the_last_mark_used(tmp_path):
    entry = tmp_path / "entry"
    entry.write_text("x")
    now = time.time()
    long_ago = now - 15 * 86400
    os.utime(entry, (long_ago, long_ago))
    assert fs.unused_for(entry, 14, now=now) and not fs.unused_for(entry, 16, now=now)
    fs.mark_used(entry, tmp_path / "gone")            # a missing path is left alone, no error
    assert not fs.unused_for(entry, 14)
    assert not fs.unused_for(tmp_path / "gone", 0)    # what cannot be read is never called unused
