"""Files written so that readers see the old or the new content, never a
mix, and never with looser permissions than intended; plus an advisory lock.

The one home of atomic replacement: :func:`atomic_write` for content in
memory, :func:`move_into_place` for a file or directory produced beside its
target (a download's ``.part``, a build directory staged as ``.partial``).
``tests/test_import_graph.py`` fails on an ``os.replace``/``rename`` elsewhere.

Also the one file hasher: :func:`digest_file` makes every digest a caller asks
for in one read pass (:func:`sha256_file` is its one-digest form), and the one
confinement rule for a name read from a file (:func:`confined`: a plain name
that stays inside its directory)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

CHUNK = 8 << 20


def config_home() -> Path:
    """nodeforge's per-user configuration directory: ``$XDG_CONFIG_HOME/nodeforge`` (default
    ``~/.config/nodeforge``); keys nodeforge makes for the user live here (the verifier's)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "nodeforge"


def cache_home() -> Path:
    """nodeforge's per-user cache directory: ``$XDG_CACHE_HOME/nodeforge`` (default ``~/.cache/nodeforge``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "nodeforge"


def mark_used(*paths: Path) -> None:
    """Set each path's modification time to now: a cache entry read now counts as used now
    (:func:`unused_for`). A path that cannot be touched is left as it is."""
    for path in paths:
        try:
            os.utime(path)
        except OSError:
            pass


def unused_for(path: Path, days: float, *, now: float | None = None) -> bool:
    """Whether the cache entry ``path`` was last used (:func:`mark_used`, or written) more than
    ``days`` days before ``now``; False when it cannot be read (gone, or another's)."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return False
    return mtime < (now if now is not None else time.time()) - days * 86400


def atomic_write(path: Path, data: bytes | str, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` atomically.

    The content goes to a temporary file in the same directory, created with
    the final mode before any byte is written (0600 stays 0600 throughout), is
    flushed to disk and renamed over the target; the directory is synced too.
    A crash at any point leaves the old file intact. ``mode`` defaults to the
    existing file's mode, else 0644.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
    return path


def move_into_place(src: Path, dest: Path) -> Path:
    """Rename ``src`` over ``dest`` in one step (same file system): readers see
    the old or the new one, never a mix. A directory ``dest`` must not exist
    (or be empty). Returns ``dest``."""
    os.replace(src, dest)
    return Path(dest)


@contextlib.contextmanager
def locked(lockfile: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lockfile`` (created 0600) while inside. When another
    process holds it, ``on_wait()`` is called once (to say so) before waiting for it."""
    lockfile = Path(lockfile)
    lockfile.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def digest_file(path: Path | str, algorithms: Iterable[str] = ("sha256", "sha512"), *,
                chunk: int = CHUNK) -> dict[str, str]:
    """Hex digests of ``path`` for each of ``algorithms`` (hashlib names), from one read pass.

    The file is read in large blocks; with several algorithms each block feeds every hash on its
    own thread (hashlib releases the GIL for updates over 2 KiB), overlapped with the next read,
    so the wall time is near the slowest hash alone (``bench/bench_checksums.py``)."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    if len(hashers) == 1:
        [h] = hashers.values()
        with open(path, "rb", buffering=0) as fh:
            while block := fh.read(chunk):
                h.update(block)
        return {name: h.hexdigest() for name, h in hashers.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(hashers)) as pool, \
            open(path, "rb", buffering=0) as fh:
        pending: list[concurrent.futures.Future] = []
        while True:
            block = fh.read(chunk)
            # Wait for the previous block's updates (keeps order and bounds memory to two
            # blocks) while this one is already in memory.
            for fut in pending:
                fut.result()
            if not block:
                break
            pending = [pool.submit(h.update, block) for h in hashers.values()]
    return {name: h.hexdigest() for name, h in hashers.items()}


def sha256_file(path: Path | str) -> str:
    """The hex sha256 of ``path`` (:func:`digest_file`)."""
    return digest_file(path, ("sha256",))["sha256"]


def plain_name_problem(name) -> str | None:
    """Why ``name`` is not a plain file name of one directory (None: it is one). A name read from a
    file (a SUMS entry, a manifest's image or per-file manifest) is never a path."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return f"{name!r} is not a file name in this directory (a path, '..' or a NUL byte)"
    return None


def confined(root: Path | str, name: str) -> Path:
    """``root/name`` when ``name`` is a plain file name (:func:`plain_name_problem`) and the file it
    names, symlinks followed, lies inside ``root`` (a symlink leading out is refused too).
    ValueError says why not."""
    problem = plain_name_problem(name)
    if problem:
        raise ValueError(problem)
    root = Path(root)
    path = root / name
    real_root = root.resolve()
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise ValueError(f"{name!r} leads out of {root} (a symlink to {real})")
    return path
