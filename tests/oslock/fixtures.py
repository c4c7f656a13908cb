"""The signed apt repository fixtures, shared by tests/oslock and the release tests
(imported into each conftest/module that uses them): a signing key once per session
(key generation is the slow part), a fresh repository per test, served on loopback."""

from __future__ import annotations

import pytest

from tests.oslock.aptrepo import AptRepo, SigningKey, standard_repo
from tests.prereq import require_tools


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory) -> SigningKey:
    require_tools("gpg", "gpgv", "dpkg-deb", "apt-get", why="the signed apt repository fixture")
    return SigningKey(tmp_path_factory.mktemp("oslock-key"), "nodeforge test archive <archive@invalid>")


@pytest.fixture(scope="session")
def other_key(tmp_path_factory) -> SigningKey:
    """A key that is NOT in the archive keyring."""
    return SigningKey(tmp_path_factory.mktemp("oslock-other-key"), "someone else <other@invalid>")


@pytest.fixture
def apt_repo(tmp_path, signing_key, monkeypatch) -> AptRepo:
    repo = standard_repo(tmp_path / "archive", signing_key).start()
    for k, v in repo.env().items():
        monkeypatch.setenv(k, v)
    yield repo
    repo.stop()
