"""One pipeline run at a time: an ``flock`` on ``<runs>/.lock`` that names its holder.

The holder writes its pid, host, run id and start time into the lock file
once it holds the lock; a second run that cannot take the lock reads them
and says who holds it. The kernel drops an ``flock`` when its process dies,
so a crashed run never leaves a stale lock behind (the holder text it leaves
is overwritten by the next run).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
from pathlib import Path

from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.schema import loader

LOCK_NAME = ".lock"
HOLDER_MAX_BYTES = 64 << 10     # the holder record nodeforge writes is one short JSON line


class PipelineLocked(NodeforgeError):
    message = "another pipeline run holds {path}: run {run_id}, pid {pid} on {host}, since {since}"
    hint = "wait for that run to finish (the lock goes when its process exits); then resume or start again"


def holder_text(run_id: str) -> dict:
    return {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


class RunLock:
    """``with RunLock(runs_dir, run_id):`` -- raises :class:`PipelineLocked` at once if held."""

    def __init__(self, runs_dir: Path, run_id: str):
        self.path = Path(runs_dir) / LOCK_NAME
        self.run_id = run_id
        self._fd: int | None = None

    def read_holder(self) -> dict:
        try:
            holder = loader.read_json(self.path, loader.Limits(max_bytes=HOLDER_MAX_BYTES))
        except ConfigError:      # empty (being written), damaged or not a file: holder unknown
            return {}
        return holder if isinstance(holder, dict) else {}

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            h = self.read_holder()
            raise PipelineLocked(path=self.path, run_id=h.get("run_id", "unknown"), pid=h.get("pid", "unknown"),
                                 host=h.get("host", "unknown"), since=h.get("since", "unknown")) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder_text(self.run_id)) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
