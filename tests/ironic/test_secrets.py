"""Credential references: env:, file:, fernet:, plaintext refused; fingerprints."""

from __future__ import annotations

import pytest

from nodeforge.base import secrets as s
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


# --- issue 13 ----------------------------------------------------------------------------

import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from nodeforge import cli  # noqa: E402


def _cli(capsys, monkeypatch, *args, stdin: bytes | None = None):
    if stdin is not None:
        # as Python sets up sys.stdin on POSIX: no newline translation (a CRLF keeps its \r)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", newline="\n"))
    capsys.readouterr()
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def no_key_env(monkeypatch):
    monkeypatch.delenv(s.KEY_ENV, raising=False)
    monkeypatch.delenv(s.KEY_FILE_ENV, raising=False)


def test_non_utf8_file_secret_is_a_clear_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "pw").write_bytes(b"\xff\xfepass\n")
    with pytest.raises(s.SecretRefError, match="secret file .*pw is not UTF-8 text"):
        s.Resolver(tmp_path).resolve("file:pw")
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nnodes:\n  - name: n1\n    bmc: {address: 'ipmi://10.0.0.1', username: u, "
                   "password: 'file:pw'}\n")
    code, _, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv)
    assert code == 2 and "nodes[0].bmc.password: secret file" in err and "is not UTF-8 text" in err


def test_file_secret_drops_one_crlf(tmp_path):
    # (read as bytes now; the same result as the text read before)
    (tmp_path / "pw").write_bytes(b"crlf-password-1\r\n")
    assert s.Resolver(tmp_path).resolve("file:pw").reveal() == "crlf-password-1"


def test_keygen_into_a_missing_directory(tmp_path, capsys, monkeypatch):
    code, _, err = _cli(capsys, monkeypatch, "baremetal", "keygen", tmp_path / "nope" / "inv.key")
    assert code == 2 and f"directory {tmp_path / 'nope'} does not exist" in err


def test_encrypt_with_a_malformed_key(tmp_path, capsys, monkeypatch, no_key_env):
    bad = tmp_path / "bad.key"
    bad.write_text("not-a-fernet-key\n")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "encrypt", "--key-file", bad, stdin=b"pw-1\n")
    assert code == 2 and out == ""
    assert f"inventory key file {bad} does not hold a Fernet key" in err and "not-a-fernet-key" not in err
    monkeypatch.setenv(s.KEY_ENV, "short")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "encrypt", stdin=b"pw-1\n")
    assert code == 2 and f"${s.KEY_ENV} does not hold a Fernet key" in err


def test_missing_key_file_exits_2_by_option_and_by_environment(tmp_path, capsys, monkeypatch, no_key_env):
    inv = tmp_path / "inv.yaml"
    token = s.encrypt("enc-pw-9a7b", s.generate_key())
    inv.write_text(f"version: 1\nnodes:\n  - name: n1\n    bmc: {{address: 'ipmi://10.0.0.1', username: u, "
                   f"password: '{token}'}}\n")
    missing = tmp_path / "missing.key"
    by_option = _cli(capsys, monkeypatch, "baremetal", "validate", "--key-file", missing, inv)
    monkeypatch.setenv(s.KEY_FILE_ENV, str(missing))
    by_env = _cli(capsys, monkeypatch, "baremetal", "validate", inv)
    assert by_option[0] == by_env[0] == 2
    assert f"cannot read inventory key file {missing}" in by_option[2]
    assert f"cannot read inventory key file {missing}" in by_env[2]
    code, _, err = _cli(capsys, monkeypatch, "baremetal", "encrypt", "--key-file", missing, stdin=b"pw\n")
    assert code == 2 and f"cannot read inventory key file {missing}" in err


@pytest.mark.parametrize("stdin,password", [
    (b"pw with spaces  \n", "pw with spaces  "),
    (b"crlf-pw\r\n", "crlf-pw"),
    (b"no-newline", "no-newline"),
    (b"one\n\n", None),          # a second (empty) line: refused
    (b"line-1\nline-2\n", None),
])
def test_encrypt_takes_all_of_stdin_less_one_newline(tmp_path, capsys, monkeypatch, no_key_env, stdin, password):
    key = s.generate_key()
    keyfile = tmp_path / "inv.key"
    keyfile.write_bytes(key + b"\n")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "encrypt", "--key-file", keyfile, stdin=stdin)
    if password is None:
        assert code == 2 and out == "" and "has several lines" in err
        return
    assert code == 0
    assert s.Resolver(tmp_path, key=key).resolve(out.strip()).reveal() == password


def _inventory(tmp_path, address, username):
    p = tmp_path / "inv.yaml"
    p.write_text(f"version: 1\nnodes:\n  - name: node-a\n    bmc: {{address: '{address}', username: {username}, "
                 "password: 'env:NF_OVERMASK_PW'}\n")
    return p


def _strings(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from ((f"{k}.{p}" if p else k, x) for p, x in _strings(v))
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield "", obj


def test_short_password_does_not_mask_the_driver_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NF_OVERMASK_PW", "ipmi")
    inv = _inventory(tmp_path, "ipmi://10.0.0.1", "admin")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, "-o", "json")
    assert code == 0, err
    [node] = json.loads(out)["nodes"]
    assert node["driver"] == "ipmi"
    assert node["driver_info"] == {"ipmi_address": "10.0.0.1", "ipmi_port": 623, "ipmi_username": "admin",
                                   "ipmi_password": "***"}
    assert node["interfaces"] == {"management_interface": "ipmitool", "power_interface": "ipmitool"}
    # "ipmi" appears only where it is the driver's or the URL's, never as the password
    assert all(not k.endswith("password") for k, v in _strings(node) if v == "ipmi")
    code, out, _ = _cli(capsys, monkeypatch, "baremetal", "validate", inv)   # the table too
    assert code == 0 and "***" not in out and " ipmi " in out


def test_password_equal_to_the_username_masks_only_the_password(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NF_OVERMASK_PW", "nf-same-as-user-42")
    inv = _inventory(tmp_path, "redfish://10.0.0.1", "nf-same-as-user-42")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, "-o", "json")
    assert code == 0, err
    [node] = json.loads(out)["nodes"]
    assert node["driver_info"]["redfish_username"] == "nf-same-as-user-42"
    assert node["driver_info"]["redfish_password"] == "***"
    # the value shows only as the username, never in a password field
    assert [k for k, v in _strings(node) if v == "nf-same-as-user-42"] == ["driver_info.redfish_username"]


def test_password_never_appears_in_validate_output(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NF_OVERMASK_PW", "pw-Never-Shown-77")
    inv = _inventory(tmp_path, "redfish://10.0.0.1", "admin")
    for args in ([], ["-o", "json"], ["-o", "yaml"], ["--log-format", "json", "-vv"]):
        code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, *args)
        assert code == 0 and "pw-Never-Shown-77" not in out + err
    # nor in an error (a broken inventory with the same secret)
    inv.write_text(inv.read_text() + "    colour: red\n")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, "-o", "json")
    assert code == 2 and "pw-Never-Shown-77" not in out + err


def test_keygen_and_encrypt_print_documents_with_output_json(tmp_path, capsys, monkeypatch, no_key_env):
    # Found by the hostile-input tests: with -o json, encrypt printed the bare token and keygen nothing.
    keyfile = tmp_path / "inv.key"
    code, out, _ = _cli(capsys, monkeypatch, "-o", "json", "baremetal", "keygen", keyfile)
    assert code == 0 and json.loads(out) == {"key_file": str(keyfile), "mode": "0600"}
    code, out, _ = _cli(capsys, monkeypatch, "-o", "json", "baremetal", "encrypt", "--key-file", keyfile,
                        stdin=b"json-pw-42\n")
    assert code == 0
    reference = json.loads(out)["reference"]
    assert reference.startswith("fernet:") and "json-pw-42" not in out
    key = keyfile.read_bytes().strip()
    assert s.Resolver(tmp_path, key=key).resolve(reference).reveal() == "json-pw-42"
