"""Credential references: env:, file:, fernet:, plaintext refused; fingerprints."""

from __future__ import annotations

import pytest

from nodeforge.ironic import secrets as s
from nodeforge.redact import Secret, scrub


def test_env_and_file(tmp_path):
    (tmp_path / "pw").write_text("from-file-pw\n")
    r = s.Resolver(tmp_path, environ={"BMC_PW": "from-env-pw"})
    assert r.resolve("env:BMC_PW").reveal() == "from-env-pw"
    assert r.resolve("file:pw").reveal() == "from-file-pw"
    with pytest.raises(s.SecretRefError, match="BMC_MISSING is not set"):
        r.resolve("env:BMC_MISSING")
    with pytest.raises(s.SecretRefError, match="cannot read secret file"):
        r.resolve("file:nope")


def test_fernet_roundtrip_and_wrong_key(tmp_path, monkeypatch):
    key = s.generate_key()
    token = s.encrypt("enc-pw-9a7b", key)
    assert token.startswith("fernet:") and "enc-pw-9a7b" not in token
    assert s.Resolver(tmp_path, key=key).resolve(token).reveal() == "enc-pw-9a7b"
    with pytest.raises(s.SecretRefError, match="does not decrypt") as err:
        s.Resolver(tmp_path, key=s.generate_key()).resolve(token)
    assert "enc-pw-9a7b" not in str(err.value)
    monkeypatch.delenv(s.KEY_ENV, raising=False)
    monkeypatch.delenv(s.KEY_FILE_ENV, raising=False)
    with pytest.raises(s.KeyMissingError):
        s.Resolver(tmp_path).resolve(token)
    keyfile = tmp_path / "inv.key"
    keyfile.write_bytes(key + b"\n")
    monkeypatch.setenv(s.KEY_FILE_ENV, str(keyfile))
    assert s.Resolver(tmp_path).resolve(token).reveal() == "enc-pw-9a7b"


def test_plaintext_refused_but_registered(tmp_path):
    with pytest.raises(s.SecretRefError) as err:
        s.Resolver(tmp_path).resolve("plain-Refused-pw")
    assert "plain-Refused-pw" not in str(err.value)
    # even refused, the value is masked if it turns up in a log line
    assert scrub("x plain-Refused-pw y") == "x *** y"
    assert s.Resolver(tmp_path, allow_plaintext=True).resolve("plain-Refused-pw").reveal() == "plain-Refused-pw"


def test_fingerprint_detects_rotation_and_hides_password():
    a = s.fingerprint("admin", Secret("pw-one-111"), "ipmi://10.0.0.1")
    assert a == s.fingerprint("admin", Secret("pw-one-111"), "ipmi://10.0.0.1")
    assert a != s.fingerprint("admin", Secret("pw-two-222"), "ipmi://10.0.0.1")
    assert a != s.fingerprint("root", Secret("pw-one-111"), "ipmi://10.0.0.1")
    assert a != s.fingerprint("admin", Secret("pw-one-111"), "ipmi://10.0.0.2")  # salted per BMC
    assert "pw-one-111" not in a
