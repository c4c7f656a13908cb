"""Fixtures: a local upstream mirror with generated releases, and a lockfile pinning them.

The fixture artifacts are small fake binaries; their digests are not the real
published ones, so tests that download use the fixture lockfile written here,
never ``manifests/versions.yaml``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge import cli
# What the fixture upstream publishes and the fixture lockfile pins at first: the demo's releases.
from nodeforge.demo.fixtures import COMPANIONS, KUBERNETES, add_releases
from nodeforge.demo.upstream_mirror import FixtureUpstream, MirrorServer
from nodeforge.pins.cache import Cache, Downloader, DownloadSettings
from nodeforge.pins.sources import Sources, SourceName

FAST_RETRY = DownloadSettings(attempts=3, initial=0.01, maximum=0.05, connect_timeout=2, read_timeout=5)


@pytest.fixture
def upstream(tmp_path) -> FixtureUpstream:
    return add_releases(FixtureUpstream(tmp_path / "upstream"), KUBERNETES)


@pytest.fixture
def mirror(upstream):
    with MirrorServer(upstream.root) as server:
        yield server


@pytest.fixture
def sources(mirror) -> Sources:
    return Sources({s: mirror.base_url(s) for s in SourceName})


@pytest.fixture
def downloader(tmp_path) -> Downloader:
    return Downloader(Cache(tmp_path / "cache"), FAST_RETRY)


@pytest.fixture
def fixture_lock(tmp_path, upstream, mirror) -> Path:
    """``<tmp>/manifests/versions.yaml`` pinning the fixture releases, with a
    ``sources.yaml`` beside it pointing every source at the local mirror."""
    d = tmp_path / "manifests"
    d.mkdir()
    path = d / "versions.yaml"
    path.write_text(upstream.lockfile_text(KUBERNETES, COMPANIONS))
    (d / "sources.yaml").write_text(
        "mirrors:\n" + "".join(f"  {s.value}: {mirror.base_url(s)}\n" for s in SourceName))
    return path


@pytest.fixture
def run_cli(capsys, monkeypatch, tmp_path):
    """Run ``nodeforge`` in-process through ``cli.main`` (real exit-code mapping)."""
    monkeypatch.setenv("NODEFORGE_CACHE_DIR", str(tmp_path / "cli-cache"))
    monkeypatch.setenv("NODEFORGE_DOWNLOAD_RETRIES", "3")
    monkeypatch.setenv("NODEFORGE_DOWNLOAD_BACKOFF", "0.01")
    for s in SourceName:
        monkeypatch.delenv(s.env_var, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # `release check` exits 10 this way
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
