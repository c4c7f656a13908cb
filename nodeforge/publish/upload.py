"""What an upload to Glance needs besides the API: the request body that hashes the image while it
is sent (:class:`HashingReader`), the disk size a server needs (:func:`virtual_size`), and the
identity of the process that owns an upload in flight (:func:`uploader_id`, :func:`uploader_alive`),
so that a second publisher can tell a live upload from one a killed process left behind."""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

from nodeforge.base import qemuimg, runner
from nodeforge.errors import NodeforgeError
from nodeforge.imageverify.builddir import VariantImage

log = logging.getLogger(__name__)
CHUNK = 1 << 20



class UploadStopped(Exception):
    """Raised by :meth:`HashingReader.read` once its ``stop`` event is set (the publisher was
    interrupted): the upload in flight ends at its next chunk and its image is removed."""


class HashingReader:
    """A file-like request body: reads ``path`` in 1 MiB chunks, feeding every
    hash object in ``hashers`` as it goes. ``requests`` sends it with a
    Content-Length (``__len__``) and calls ``read`` until it returns b"".
    ``stop``: an event that, once set, makes the next ``read`` raise :class:`UploadStopped`."""

    def __init__(self, path: Path, hashers: dict[str, object], progress=None, stop: threading.Event | None = None):
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()/__exit__
        self._size = os.fstat(self._f.fileno()).st_size
        self.hashers = hashers
        self.sent = 0
        self._progress = progress
        self._stop = stop

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._stop is not None and self._stop.is_set():
            raise UploadStopped("publish interrupted")
        # Ignore the caller's 16 KiB hint: bigger chunks mean far fewer
        # Python-level calls for multi-GiB images.
        chunk = self._f.read(CHUNK)
        if chunk:
            for h in self.hashers.values():
                h.update(chunk)
            self.sent += len(chunk)
            if self._progress:
                self._progress(len(chunk))
        return chunk

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def digests(self) -> dict[str, str]:
        return {name: h.hexdigest() for name, h in self.hashers.items()}


def virtual_size(image: VariantImage) -> int:
    """The disk size a server needs: qcow2's virtual size, a raw file's size."""
    if image.disk_format == "qcow2" and runner.which(qemuimg.TOOL):
        try:
            return qemuimg.virtual_size(image.path, "qcow2", timeout=60)
        except (NodeforgeError, ValueError, KeyError, OSError):
            log.warning("qemu-img info failed on %s; min_disk from the file size", image.path)
    return image.size



def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def uploader_id() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid) or 0}"


def uploader_alive(owner: str | None) -> int | None:
    """The pid of the live process on this host that owns an upload, else None."""
    if not owner:
        return None
    try:
        host, pid_s, start = owner.rsplit(":", 2)
        pid = int(pid_s)
    except ValueError:
        return None
    if host != socket.gethostname() or pid == os.getpid():
        return None
    return pid if _proc_start(pid) == start else None
