"""The local cloud's publishing key, against the session cloud's real Barbican: made and stored
on first use, reused after (no second upload), stored again when its Barbican secret is gone;
the key file private, and what it signs verifies against the certificate Barbican returns."""

from __future__ import annotations

import hashlib
import stat

import pytest

from nodeforge.devcloud import signing_key
from nodeforge.devcloud.paths import Paths
from nodeforge.publish import signing

pytestmark = [pytest.mark.devcloud]


def test_the_publishing_key_is_made_once_and_stored_again_when_its_secret_is_gone(devcloud, tmp_path):
    admin = devcloud.admin()
    paths = Paths(tmp_path / "cloud")             # a state directory of its own: the session's is left alone
    first = signing_key.ensure(paths, admin)
    try:
        assert stat.S_IMODE(first.key.stat().st_mode) == 0o600
        assert stat.S_IMODE(signing_key.directory(paths).stat().st_mode) == 0o700
        cert = signing.fetch_certificate(admin, first.cert_id)
        signer = signing.load_signer(first.key)
        signing.check_key_matches(signer, cert, first.cert_id)          # Glance would accept its signatures
        digest = hashlib.sha256(b"image").digest()
        assert signer.sign(digest)

        again = signing_key.ensure(paths, admin)
        assert again == first                                           # nothing made or stored twice
        admin.key_manager.delete_secret(first.cert_id)
        renewed = signing_key.ensure(paths, admin)
        assert renewed.cert_id != first.cert_id and renewed.key == first.key
        signing.check_key_matches(signer, signing.fetch_certificate(admin, renewed.cert_id), renewed.cert_id)
    finally:
        for secret in {first.cert_id, signing_key.ensure(paths, admin).cert_id}:
            admin.key_manager.delete_secret(secret, ignore_missing=True)
