"""The content-addressed cache and downloader, against the local upstream mirror."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nodeforge.demo.upstream_mirror import FaultKind
from nodeforge.pins.cache import (
    Cache, ChecksumMismatch, DownloadError, Downloader, NotFoundError, UnreachableError,
)
from nodeforge.pins.lockfile import Arch, Component

from .conftest import FAST_RETRY

KUBELET = (Component.KUBELET, "1.35.1", Arch.AMD64)


@pytest.fixture
def kubelet(upstream, sources):
    url = sources.artifact_url(*KUBELET)
    return url, upstream.digests[KUBELET], upstream.path(*KUBELET).read_bytes()


def _leftovers(cache: Cache) -> list[Path]:
    tmp = cache.root / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []


def test_fetch_stores_verified_file_under_its_digest_then_hits_cache(mirror, downloader, kubelet):
    url, digest, data = kubelet
    first = downloader.fetch(url, digest, artifact="kubelet")
    assert first.downloaded and first.size == len(data)
    assert first.path == downloader.cache.root / "sha256" / digest[:2] / digest
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == digest
    second = downloader.fetch(url, digest, artifact="kubelet")
    assert not second.downloaded
    assert mirror.count("*/kubelet") == 1
    assert _leftovers(downloader.cache) == []


def test_corrupted_download_names_artifact_and_both_digests_and_caches_nothing(mirror, downloader, kubelet):
    url, digest, data = kubelet
    mirror.inject("*/kubelet", FaultKind.CORRUPT, times=None)
    with pytest.raises(ChecksumMismatch) as info:
        downloader.fetch(url, digest, artifact="kubelet 1.35.1 amd64")
    msg = str(info.value)
    assert "kubelet 1.35.1 amd64" in msg and digest in msg
    corrupted = bytearray(data)
    for i in range(0, len(corrupted), max(1, len(corrupted) // 7)):
        corrupted[i] ^= 0xFF
    assert hashlib.sha256(corrupted).hexdigest() in msg
    assert not downloader.cache.path_for(digest).exists()
    assert _leftovers(downloader.cache) == []
    assert mirror.count("*/kubelet") == 1  # a mismatch is not retried


def test_server_500_then_success_is_retried(mirror, downloader, kubelet):
    url, digest, _ = kubelet
    mirror.inject("*/kubelet", FaultKind.STATUS, times=2, status=500)
    assert downloader.fetch(url, digest, artifact="kubelet").downloaded
    assert mirror.count("*/kubelet") == 3


def test_persistent_503_gives_up_after_the_attempts(mirror, downloader, kubelet):
    url, digest, _ = kubelet
    mirror.inject("*/kubelet", FaultKind.STATUS, times=None, status=503)
    with pytest.raises(DownloadError, match=r"HTTP 503 .*after 3 attempts"):
        downloader.fetch(url, digest, artifact="kubelet")
    assert mirror.count("*/kubelet") == FAST_RETRY.attempts
    assert not downloader.cache.path_for(digest).exists()


def test_connection_dropped_mid_body_is_retried(mirror, downloader, kubelet):
    url, digest, _ = kubelet
    mirror.inject("*/kubelet", FaultKind.DROP, times=1)
    assert downloader.fetch(url, digest, artifact="kubelet").downloaded
    assert mirror.count("*/kubelet") == 2
    assert _leftovers(downloader.cache) == []


def test_not_found_is_not_retried(mirror, downloader, sources):
    url = sources.artifact_url(Component.KUBELET, "1.99.0", Arch.AMD64)
    with pytest.raises(NotFoundError, match="HTTP 404"):
        downloader.fetch(url, "0" * 64, artifact="kubelet")
    assert mirror.count("*/kubelet") == 1


def test_unreachable_server_gives_a_clear_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dl = Downloader(Cache(tmp_path / "c"), FAST_RETRY)
    with pytest.raises(UnreachableError) as info:
        dl.fetch(f"http://127.0.0.1:{port}/k/kubelet", "0" * 64, artifact="kubelet", hint="set a mirror")
    assert str(info.value) == (f"cannot reach http://127.0.0.1:{port}/k/kubelet after 3 attempts: "
                               "Connection refused")
    assert info.value.hint == "set a mirror"


def test_damaged_cache_entry_is_evicted_and_downloaded_again(mirror, downloader, kubelet):
    url, digest, data = kubelet
    path = downloader.fetch(url, digest, artifact="kubelet").path
    path.write_bytes(b"bit rot")
    again = downloader.fetch(url, digest, artifact="kubelet")
    assert again.downloaded and path.read_bytes() == data


def test_kill_during_download_leaves_no_file_under_the_final_name(mirror, upstream, sources, tmp_path):
    # Big enough that the first 1 MiB chunk reaches the disk before the stall.
    digest = upstream.add(Component.KUBELET, "1.35.9", size=3 << 20)[Arch.AMD64]
    url = sources.artifact_url(Component.KUBELET, "1.35.9", Arch.AMD64)
    mirror.inject("*/kubelet", FaultKind.STALL, times=None)
    cache = Cache(tmp_path / "killcache")
    script = textwrap.dedent(f"""
        from nodeforge.pins.cache import Cache, Downloader
        Downloader(Cache({str(cache.root)!r})).fetch({url!r}, {digest!r}, artifact="kubelet")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not any(p.stat().st_size for p in _leftovers(cache)):
            assert proc.poll() is None, "download ended instead of stalling"
            assert time.monotonic() < deadline, "no partial download appeared"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not cache.path_for(digest).exists()
    assert cache.lookup(digest) is None


def test_stalled_body_times_out_and_is_retried(mirror, upstream, sources, tmp_path):
    digest = upstream.add(Component.KUBELET, "1.35.8", size=3 << 20)[Arch.AMD64]
    url = sources.artifact_url(Component.KUBELET, "1.35.8", Arch.AMD64)
    mirror.inject("*/kubelet", FaultKind.STALL, times=1)
    dl = Downloader(Cache(tmp_path / "c"), dataclasses.replace(FAST_RETRY, read_timeout=0.5))
    got = dl.fetch(url, digest, artifact="kubelet")
    assert got.downloaded and got.size == 3 << 20
    assert mirror.count("*/kubelet") == 2
    assert _leftovers(dl.cache) == []


def test_downloads_from_one_server_share_one_connection(mirror, upstream, downloader, sources):
    accepted = []
    get_request = mirror._httpd.get_request

    def counting_get_request():        # the real server's accept(), counted
        conn = get_request()
        accepted.append(conn[1])
        return conn

    mirror._httpd.get_request = counting_get_request
    urls = [(sources.artifact_url(Component.KUBELET, "1.35.1", arch), upstream.digests[(Component.KUBELET,
             "1.35.1", arch)]) for arch in upstream.arches]
    assert len(urls) >= 2
    for url, digest in urls:
        assert downloader.fetch(url, digest, artifact="kubelet").downloaded
    assert len(accepted) == 1     # kept alive: each body was read to its end and the connection handed back


def test_local_write_error_is_not_retried_and_leaves_nothing(mirror, upstream, sources, tmp_path):
    # A real write failure: the file-size limit (RLIMIT_FSIZE) of a child process, below the artifact's size.
    digest = upstream.add(Component.KUBELET, "1.35.7", size=3 << 20)[Arch.AMD64]
    url = sources.artifact_url(Component.KUBELET, "1.35.7", Arch.AMD64)
    cache = Cache(tmp_path / "fullcache")
    script = textwrap.dedent(f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        from nodeforge.pins.cache import Cache, Downloader, DownloadSettings
        try:
            Downloader(Cache({str(cache.root)!r}), DownloadSettings(attempts=3, initial=0.01)).fetch(
                {url!r}, {digest!r}, artifact="kubelet")
        except OSError as exc:
            print("OSError", exc.errno)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["OSError", str(errno.EFBIG)], proc.stdout + proc.stderr
    assert mirror.count("*/kubelet") == 1       # a local disk error is not a network error: no retry
    assert not cache.path_for(digest).exists() and _leftovers(cache) == []
