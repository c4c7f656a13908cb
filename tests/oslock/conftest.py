"""Fixtures: a signing key (once per session: key generation is the slow part),
a fresh signed apt repository per test, served on loopback."""

from __future__ import annotations

import pytest

from tests.oslock.aptrepo import lock_template
from tests.oslock.fixtures import apt_repo, other_key, signing_key  # noqa: F401 - fixtures


@pytest.fixture
def package_lock(tmp_path, apt_repo):
    """A package lock resolved against the fixture repository (nf-app, nf-lib, nf-base), written."""
    from nodeforge.oslock import watch

    template = lock_template(tmp_path / "manifests" / "os-packages.lock.yaml")
    config = watch.config_for(template, apt_repo.mirrors(), apt_repo.key.keyring)
    lock, _ = watch.resolve_lock(template, config)
    lock.save()
    return lock
