"""Credential references: env:, file:, fernet:, plaintext refused; fingerprints."""

from __future__ import annotations

import pytest

from nodeforge.base import secrets as s
from nodeforge.redact import Secret, scrub


def test_env_and_file(tmp_path):
    (tmp_path / "pw").write_text("from-file-pw\n")
    r = s.Resolver(tmp_path, environ={"BMC_PASSWORD": "from-env-pw"})
    assert r.resolve("env:BMC_PASSWORD").reveal() == "from-env-pw"
    assert r.resolve("file:pw").reveal() == "from-file-pw"
    with pytest.raises(s.SecretRefError, match="NODEFORGE_SECRET_MISSING is not set"):
        r.resolve("env:NODEFORGE_SECRET_MISSING")
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


# --- hostile references ----------------------------------------------------------------------------

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
                 "password: 'env:NODEFORGE_SECRET_OVERMASK_PW'}\n")
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
    monkeypatch.setenv("NODEFORGE_SECRET_OVERMASK_PW", "ipmi")
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
    monkeypatch.setenv("NODEFORGE_SECRET_OVERMASK_PW", "nf-same-as-user-42")
    inv = _inventory(tmp_path, "redfish://10.0.0.1", "nf-same-as-user-42")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, "-o", "json")
    assert code == 0, err
    [node] = json.loads(out)["nodes"]
    assert node["driver_info"]["redfish_username"] == "nf-same-as-user-42"
    assert node["driver_info"]["redfish_password"] == "***"
    # the value shows only as the username, never in a password field
    assert [k for k, v in _strings(node) if v == "nf-same-as-user-42"] == ["driver_info.redfish_username"]


def test_password_never_appears_in_validate_output(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NODEFORGE_SECRET_OVERMASK_PW", "pw-Never-Shown-77")
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


# --- what a reference may reach: file: bounded to the inventory's (or the secrets) directory, regular
# files of at most 64 KiB, one line; env: on an allow-list; key files and stdin bounded -------------

import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

INSIDE_PW = "inside-pw-5521"


@contextmanager
def _no_hang(seconds: int = 10):
    """Fail (instead of hanging) when a blocking open or read takes longer than ``seconds``."""
    def alarm(*_):
        raise AssertionError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def layout(tmp_path):
    """An inventory directory with a good secret, and a directory beside it (outside) with another."""
    inv = tmp_path / "inv"
    (inv / "secrets").mkdir(parents=True)
    (inv / "secrets" / "bmc.pw").write_text(INSIDE_PW + "\n")
    out = tmp_path / "outside"
    out.mkdir()
    (out / "stolen.pw").write_text("outside-pw-8812\n")
    return inv, out


def _refused(resolver, ref: str, match: str) -> str:
    t0 = time.perf_counter()
    with _no_hang(), pytest.raises(s.SecretRefError, match=match) as err:
        resolver.resolve(ref)
    assert time.perf_counter() - t0 < 1.0, f"{ref}: the refusal took {time.perf_counter() - t0:.2f} s"
    return str(err.value)


def test_file_inside_the_inventory_directory_resolves(layout):
    inv, _ = layout
    r = s.Resolver(inv, environ={})
    assert r.resolve("file:secrets/bmc.pw").reveal() == INSIDE_PW
    assert r.resolve(f"file:{inv / 'secrets' / 'bmc.pw'}").reveal() == INSIDE_PW          # absolute, inside
    assert r.resolve("file:secrets/../secrets/bmc.pw").reveal() == INSIDE_PW              # .. that stays inside
    (inv / "link.pw").symlink_to(inv / "secrets" / "bmc.pw")                                # a symlink within
    assert r.resolve("file:link.pw").reveal() == INSIDE_PW


@pytest.mark.parametrize("ref", ["file:../outside/stolen.pw", "file:{out}/stolen.pw", "file:/etc/passwd",
                                 "file:/proc/self/environ", "file:/dev/zero", "file:~/.ssh/id_rsa"])
def test_file_outside_the_inventory_directory_is_refused(layout, ref):
    inv, out = layout
    text = _refused(s.Resolver(inv, environ={}), ref.format(out=out), "outside the inventory's directory")
    assert "outside-pw-8812" not in text and "--secrets-dir" in text and s.SECRETS_DIR_ENV in text


def test_a_symlink_leading_out_is_refused(layout):
    inv, out = layout
    (inv / "secrets" / "leak.pw").symlink_to(out / "stolen.pw")
    (inv / "linkdir").symlink_to(out, target_is_directory=True)
    r = s.Resolver(inv, environ={})
    for ref in ("file:secrets/leak.pw", "file:linkdir/stolen.pw"):
        text = _refused(r, ref, "leads through a symlink to .*stolen.pw, which is outside")
        assert "outside-pw-8812" not in text


def test_the_configured_secrets_directory_is_allowed_too(layout):
    inv, out = layout
    for r in (s.Resolver(inv, environ={}, secrets_dir=out), s.Resolver(inv, environ={s.SECRETS_DIR_ENV: str(out)})):
        assert r.resolve(f"file:{out}/stolen.pw").reveal() == "outside-pw-8812"
        assert r.resolve("file:../outside/stolen.pw").reveal() == "outside-pw-8812"   # relative to the inventory
        _refused(r, "file:/etc/hostname", f"outside the inventory's directory .* or the secrets directory {out}")
    with pytest.raises(s.SecretRefError, match="secrets directory .*missing .* is not a directory"):
        s.Resolver(inv, environ={}, secrets_dir=out / "missing")


def test_fifo_device_and_proc_files_are_refused_without_reading(layout):
    inv, _ = layout
    os.mkfifo(inv / "secrets" / "fifo")          # a writer never comes: an open or read would block forever
    r = s.Resolver(inv, environ={})
    _refused(r, "file:secrets/fifo", r"is a FIFO \(named pipe\), not a regular file")
    _refused(r, "file:secrets", "is a directory, not a regular file")
    # Even inside an allowed directory: /dev/zero (a device that never ends), /proc files (size 0, any length).
    _refused(s.Resolver(inv, environ={}, secrets_dir="/dev"), "file:/dev/zero", "is a character device")
    _refused(s.Resolver(inv, environ={}, secrets_dir="/proc/self"), "file:/proc/self/environ",
             "is a /proc or /sys file")


def test_file_size_limit(layout):
    inv, _ = layout
    (inv / "max.pw").write_text("m" * s.FILE_LIMIT)
    (inv / "over.pw").write_text("o" * s.FILE_LIMIT + "\n")
    with open(inv / "huge.pw", "wb") as f:        # 200 MB, sparse: refused from its size, never read
        f.truncate(200 * 1024 * 1024)
    r = s.Resolver(inv, environ={})
    assert len(r.resolve("file:max.pw").reveal()) == s.FILE_LIMIT
    _refused(r, "file:over.pw", "is larger than 64 KiB")
    _refused(r, "file:huge.pw", "is larger than 64 KiB")


def test_read_bounded_stops_at_the_limit_whatever_the_size_says(tmp_path, monkeypatch):
    # A file whose size grew after the check (or lies, as /proc files do): the read stops at limit + 1.
    p = tmp_path / "grows"
    p.write_bytes(b"x" * 5000)
    real_stat = os.stat
    st = real_stat(p)
    small = os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 10,
                            st.st_atime, st.st_mtime, st.st_ctime))
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: small if str(path) == str(p) else real_stat(path, *a, **k))
    with pytest.raises(s.SecretRefError, match="larger than 4 KiB"):
        s.read_bounded(p, limit=4096, what="inventory key file")
    assert s.read_bounded(p, limit=8192, what="secret file") == b"x" * 5000


@pytest.mark.parametrize("content,value", [
    (b"pw-one-line\n", "pw-one-line"), (b"pw-crlf\r\n", "pw-crlf"), (b"  spaced pw  \n", "  spaced pw  "),
    (b"no-newline", "no-newline"), (b"alpha-pw\nlines\n", None), (b"bravo-pw\n\n", None), (b"charlie-pw\rx", None),
])
def test_only_one_trailing_newline_is_dropped_and_several_lines_are_refused(tmp_path, content, value):
    (tmp_path / "pw").write_bytes(content)
    r = s.Resolver(tmp_path, environ={})
    if value is None:
        text = _refused(r, "file:pw", "has several lines; a secret is one line")
        assert "-pw" not in text
    else:
        assert r.resolve("file:pw").reveal() == value


def test_env_allow_list():
    environ = {"BMC_PASSWORD": "a-pw-1", "NF_TEST_BMC_PASSWORD": "b-pw-2", "NODEFORGE_SECRET_RACK1": "c-pw-3",
               "AWS_SECRET_ACCESS_KEY": "d-pw-4", "HOME": "/root"}
    r = s.Resolver(Path("."), environ=environ)
    assert [r.resolve(f"env:{n}").reveal() for n in ("BMC_PASSWORD", "NF_TEST_BMC_PASSWORD",
                                                     "NODEFORGE_SECRET_RACK1")] == ["a-pw-1", "b-pw-2", "c-pw-3"]
    for name in ("AWS_SECRET_ACCESS_KEY", "HOME"):
        text = _refused(r, f"env:{name}", f"{name} is not on the allow-list of secret variables")
        assert s.ENV_ALLOW_ENV in text and "d-pw-4" not in text


def test_env_allow_list_is_extended_by_the_environment_only():
    environ = {"RACK7_BMC": "r7-pw-1", "OTHER": "o-pw-2", s.ENV_ALLOW_ENV: " RACK7_BMC , ,NODEFORGE_INVENTORY_KEY",
               s.KEY_ENV: "k" * 44}
    r = s.Resolver(Path("."), environ=environ)
    assert r.resolve("env:RACK7_BMC").reveal() == "r7-pw-1"
    _refused(r, "env:OTHER", "not on the allow-list")
    # Never readable, listed or not: the key (it would go to a BMC) and nodeforge's own settings,
    # the allow-list itself included (it starts NODEFORGE_SECRET_).
    for name in (s.KEY_ENV, s.KEY_FILE_ENV, s.ENV_ALLOW_ENV, s.SECRETS_DIR_ENV):
        text = _refused(r, f"env:{name}", "nodeforge's own configuration, never a BMC secret")
        assert "k" * 44 not in text
    with pytest.raises(s.SecretRefError, match="'BAD-NAME' is not an environment variable name"):
        s.Resolver(Path("."), environ={s.ENV_ALLOW_ENV: "OK_NAME,BAD-NAME"})


def test_operator_policy_reaches_any_file_and_variable_but_keeps_the_bounds(tmp_path):
    (tmp_path / "pass").write_text("signing-pass-1\n")
    r = s.Resolver(Path("/"), environ={"SIGNING_PASS": "signing-pass-2"}, policy=s.Policy.operator())
    assert r.resolve(f"file:{tmp_path / 'pass'}").reveal() == "signing-pass-1"
    assert r.resolve("env:SIGNING_PASS").reveal() == "signing-pass-2"
    _refused(r, "file:/dev/zero", "is a character device")
    _refused(r, "file:/proc/self/environ", "is a /proc or /sys file")
    _refused(r, f"env:{s.KEY_ENV}", "never a BMC secret")


def test_key_file_is_bounded(tmp_path, monkeypatch, no_key_env):
    os.mkfifo(tmp_path / "key.fifo")
    (tmp_path / "big.key").write_bytes(b"k" * (s.KEY_LIMIT + 1))
    for path, match in (("/dev/zero", "is a character device"),
                        (tmp_path / "key.fifo", r"is a FIFO .*NODEFORGE_INVENTORY_KEY"),
                        (tmp_path / "big.key", "larger than 4 KiB"), ("/proc/self/environ", "/proc or /sys file"),
                        (tmp_path, "is a directory")):
        t0 = time.perf_counter()
        with _no_hang(), pytest.raises(s.SecretRefError, match=match):
            s.load_key(Path(path))
        monkeypatch.setenv(s.KEY_FILE_ENV, str(path))
        with _no_hang(), pytest.raises(s.SecretRefError, match=match):
            s.load_key()
        monkeypatch.delenv(s.KEY_FILE_ENV)
        assert time.perf_counter() - t0 < 1.0


def test_read_stream_is_bounded():
    assert s.read_stream(io.BytesIO(b"pw\n")) == b"pw\n"
    with pytest.raises(s.SecretRefError, match="more than 4096 bytes"):
        s.read_stream(io.BytesIO(b"y\n" * 100_000))
    with open("/dev/zero", "rb") as dev, pytest.raises(s.SecretRefError, match="is a character device"):
        s.read_stream(dev)


def test_encrypt_refuses_a_long_stdin(tmp_path, capsys, monkeypatch, no_key_env):
    keyfile = tmp_path / "inv.key"
    keyfile.write_bytes(s.generate_key() + b"\n")
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "encrypt", "--key-file", keyfile,
                          stdin=b"y\n" * 10_000)
    assert code == 2 and out == "" and "more than 4096 bytes" in err
    code, out, _ = _cli(capsys, monkeypatch, "baremetal", "encrypt", "--key-file", keyfile,
                        stdin=b"p" * s.KEY_LIMIT)
    assert code == 0 and out.startswith("fernet:")


def test_a_file_shared_by_every_node_is_read_once(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("shared-pw-1\n")
    reads = []
    real = s.read_bounded
    monkeypatch.setattr(s, "read_bounded", lambda *a, **k: reads.append(a) or real(*a, **k))
    r = s.Resolver(tmp_path, environ={})
    assert {r.resolve("file:pw").reveal() for _ in range(3)} == {"shared-pw-1"}
    assert len(reads) == 1


# --- in an inventory: file, line, field and node named; numbers and booleans refused ---------------

def _validate(capsys, monkeypatch, inv: Path, *args):
    code, out, err = _cli(capsys, monkeypatch, "baremetal", "validate", inv, *args)
    return code, out + err


def test_refusals_name_file_line_field_and_node(layout, capsys, monkeypatch):
    inv, out = layout
    os.mkfifo(inv / "secrets" / "fifo")
    path = inv / "inv.yaml"
    path.write_text("version: 1\n"
                    "nodes:\n"
                    "  - name: n-zero\n"
                    "    bmc: {address: 'ipmi://10.0.0.1', username: u, password: 'file:/dev/zero'}\n"
                    "  - name: n-fifo\n"
                    "    bmc: {address: 'ipmi://10.0.0.2', username: u, password: 'file:secrets/fifo'}\n"
                    "  - name: n-out\n"
                    "    bmc: {address: 'ipmi://10.0.0.3', username: u, password: 'file:../outside/stolen.pw'}\n"
                    "  - name: n-env\n"
                    "    bmc: {address: 'ipmi://10.0.0.4', username: u, password: 'env:NF_STEAL_ME'}\n"
                    "  - name: n-ok\n"
                    "    bmc: {address: 'ipmi://10.0.0.5', username: u, password: 'file:secrets/bmc.pw'}\n")
    monkeypatch.setenv("NF_STEAL_ME", "steal-me-pw-4410")
    with _no_hang():
        code, text = _validate(capsys, monkeypatch, path)
    assert code == 2
    assert f"{path}:4: nodes[0].bmc.password: secret file /dev/zero is outside" in text and "(node n-zero)" in text
    assert f"{path}:6: nodes[1].bmc.password: secret file {inv}/secrets/fifo is a FIFO" in text
    assert f"{path}:8: nodes[2].bmc.password: secret file {inv}/../outside/stolen.pw is outside" in text
    assert f"{path}:10: nodes[3].bmc.password: environment variable NF_STEAL_ME is not on the allow-list" in text
    assert "(node n-env)" in text and "n-ok" not in text
    for value in ("steal-me-pw-4410", "outside-pw-8812", INSIDE_PW):
        assert value not in text
    monkeypatch.setenv(s.ENV_ALLOW_ENV, "NF_STEAL_ME")          # the operator allows it: that problem is gone
    code, text = _validate(capsys, monkeypatch, path, "--secrets-dir", out)
    assert code == 2 and "NF_STEAL_ME" not in text and "stolen.pw" not in text and "fifo" in text


def test_a_refused_default_is_one_problem_not_one_a_node(tmp_path, capsys, monkeypatch):
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\ndefaults:\n  bmc: {username: u, password: 'env:NF_STEAL_ME'}\nnodes:\n" +
                    "".join(f"  - {{name: n{i}, bmc: {{address: 'ipmi://10.0.0.{i}'}}}}\n" for i in range(1, 6)))
    code, text = _validate(capsys, monkeypatch, path)
    assert code == 2
    assert text.count("defaults.bmc.password: environment variable NF_STEAL_ME is not on the allow-list") == 1
    assert "(node " not in text


@pytest.mark.parametrize("written,kind", [("0123", "a number"), ("98765", "a number"), ("true", "a boolean"),
                                          ("no", None), ("12.5", "a number"), ("1e3", "a number"),
                                          ("2024-01-02", "a date")])
def test_a_secret_written_as_a_number_or_boolean_is_refused(tmp_path, capsys, monkeypatch, written, kind):
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\nnodes:\n  - name: n1\n"
                    f"    bmc: {{address: 'ipmi://10.0.0.1', username: u, password: {written}}}\n"
                    "  - name: n2\n    bmc: {address: 'ipmi://10.0.0.2', username: u, password: 'env:BMC_PASSWORD'}\n"
                    f"    driver_info: {{ipmi_kg_key: {written}}}\n")
    monkeypatch.setenv("BMC_PASSWORD", "bmc-pw-1234")
    code, text = _validate(capsys, monkeypatch, path, "--allow-plaintext-secrets")
    if kind is None:            # YAML 1.2 reads these as strings: plaintext, allowed here
        assert code == 0, text
        return
    assert code == 2
    assert f"{path}:4: nodes[0].bmc.password: expected a string, got {kind}; quote it" in text
    assert f"{path}:7: nodes[1].driver_info.ipmi_kg_key: expected a string, got {kind}; quote it" in text
    assert "(node n2)" in text
    assert written not in text.replace(str(path), "") and written.lstrip("0") not in text.replace(str(path), "")


@pytest.mark.parametrize("name,text", [
    ("bulk.yaml", "nodes:\n  - name: n1\n    driver: ipmi\n    driver_info:\n      ipmi_address: 10.0.0.1\n"
                  "      ipmi_username: u\n      ipmi_password: 0123\n"),
    ("bf.json", '{"n1": {"name": "n1", "driver": "ipmi", "driver_info": {"power": {"ipmi_address": "10.0.0.1", '
                '"ipmi_username": "u", "ipmi_password": 4711}}, "nics": [{"mac": "02:00:00:00:00:01"}]}}'),
])
def test_numbers_are_refused_in_every_format(tmp_path, capsys, monkeypatch, name, text):
    path = tmp_path / name
    path.write_text(text)
    code, out = _validate(capsys, monkeypatch, path, "--allow-plaintext-secrets")
    assert code == 2 and "ipmi_password: expected a string, got a number; quote it" in out
    assert "4711" not in out and "0123" not in out and ":123" not in out
