"""Hostile secret references: what an inventory from somewhere else can make nodeforge read.

Each case runs ``nodeforge`` in a child process under a CPU-time and an
address-space limit (a read that grows without bound dies of MemoryError, a
loop of SIGXCPU: either fails the exit-code check) and a wall-clock timeout
(a FIFO that blocks fails instead of hanging the run). Every refusal must be
exit 2 with no traceback, name the inventory file, line, field and node, and
print no planted secret: neither the ones the references try to reach (a file
outside the inventory's directory, an environment variable, the inventory key)
nor the good ones beside them.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.conftest import REPO, SECRETS, secret_forms

NF = [sys.executable, "-m", "nodeforge.cli"]
ADDRESS_SPACE = 768 * 1024 * 1024     # the refusals need ~60 MB; an unbounded read of /dev/zero reached 1.9 GB
CPU_SECONDS = 30                      # CPU time, not wall clock: a loaded machine does not fail the test
WALL_SECONDS = 120                    # only so a FIFO that blocks fails instead of hanging the test run

OUTSIDE_PW = "NFhostile-outside-pw-Y7r1"     # in a file beside the inventory's directory
STEAL_PW = "NFhostile-steal-env-pw-Q2m5"     # in an environment variable not on the allow-list
KEY = "NFhostile-inventory-key-for-the-test-0000="  # a planted $NODEFORGE_INVENTORY_KEY (not a Fernet key: never read)
PLANTED = [*SECRETS.values(), OUTSIDE_PW, STEAL_PW, KEY]


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


@dataclasses.dataclass
class Proc:
    args: list
    code: int
    out: str
    err: str
    cpu: float


@pytest.fixture
def env(no_cloud_env) -> dict:
    """The hostile suite's environment (no cloud, NODEFORGE_* cleared, BMC_PASSWORD and
    NF_TEST_BMC_PASSWORD planted) plus a variable off the allow-list and the inventory key."""
    out = {k: v for k, v in os.environ.items() if k not in no_cloud_env}
    out.update({k: v for k, v in no_cloud_env.items() if v is not None})
    out.update(NF_HOSTILE_STEAL=STEAL_PW, PYTHONDONTWRITEBYTECODE="1")
    return out


def nodeforge(args, env: dict, *, stdin=subprocess.DEVNULL, cwd: Path | None = None) -> Proc:
    args = [str(a) for a in args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(NF + args, env=env, stdin=stdin, capture_output=True, text=True, errors="replace",
                              timeout=WALL_SECONDS, preexec_fn=_limits, cwd=cwd or REPO)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"nodeforge {' '.join(args)}: still running after {WALL_SECONDS} s (blocked)") from None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Proc(args, proc.returncode, proc.stdout, proc.stderr, cpu)


def refused(p: Proc, *expect: str) -> str:
    """Exit 2, no traceback, each of ``expect`` in the output, no planted secret in it."""
    where = f"nodeforge {' '.join(p.args)}"
    text = p.out + p.err
    assert p.code == 2, f"{where}: exit {p.code} (negative: killed by that signal)\n{p.err[-3000:]}"
    assert "Traceback" not in text and "MemoryError" not in text, f"{where}:\n{p.err[-3000:]}"
    for e in expect:
        assert e in text, f"{where}: {e!r} not in\n{text[-3000:]}"
    for form, value in secret_forms(PLANTED).items():
        assert form not in text, f"{where}: secret {value!r} printed"
    return text


@pytest.fixture
def site(tmp_path) -> tuple[Path, Path]:
    """``inv/`` (an inventory's directory, with a good secret and a FIFO) and ``outside/`` beside it."""
    inv, outside = tmp_path / "inv", tmp_path / "outside"
    (inv / "secrets").mkdir(parents=True)
    outside.mkdir()
    (inv / "secrets" / "bmc.pw").write_text(SECRETS["bmc_file"] + "\n")
    (outside / "stolen.pw").write_text(OUTSIDE_PW + "\n")
    os.mkfifo(inv / "secrets" / "fifo")         # no writer ever opens it
    return inv, outside


def _inventory(inv: Path, password: str, *, name: str = "victim-01") -> Path:
    """A nodeforge inventory whose second node's password is ``password`` (line 7); the first node's is good."""
    path = inv / "inventory.yaml"
    path.write_text("version: 1\n"
                    "nodes:\n"
                    "  - name: good-01\n"
                    "    bmc: {address: 'ipmi://10.9.0.1', username: admin, password: 'file:secrets/bmc.pw'}\n"
                    f"  - name: {name}\n"
                    "    bmc:\n"
                    f"      password: {password}\n"
                    "      address: 'redfish+https://attacker.example/redfish/v1/Systems/1'\n"
                    "      username: admin\n")
    return path


def _field(path: Path, detail: str) -> tuple[str, str, str]:
    """What the refusal of node victim-01's password names: file, line, field; the detail; the node."""
    return f"{path}:7: nodes[1].bmc.password: {'secret file' if 'file' in detail else ''}", detail, "(node victim-01)"


# ----------------------------------------------------------------------------- file:

@pytest.mark.parametrize("ref,detail,extra", [
    ("file:/dev/zero", "secret file /dev/zero is outside the inventory's directory", []),
    ("file:/dev/zero", "secret file /dev/zero is a character device, not a regular file", ["--secrets-dir", "/dev"]),
    ("file:secrets/fifo", "is a FIFO (named pipe), not a regular file", []),
    ("file:/proc/self/environ", "secret file /proc/self/environ is outside the inventory's directory", []),
    ("file:/proc/self/environ", "is a /proc or /sys file, not a regular file", ["--secrets-dir", "/proc/self"]),
    ("file:../outside/stolen.pw", "stolen.pw is outside the inventory's directory", []),
    ("file:{outside}/stolen.pw", "stolen.pw is outside the inventory's directory", []),
    ("file:/etc/passwd", "secret file /etc/passwd is outside the inventory's directory", []),
    ("file:secrets/leak.pw", "leads through a symlink to {outside}/stolen.pw, which is outside", []),
    ("file:linked/stolen.pw", "leads through a symlink to {outside}/stolen.pw, which is outside", []),
    ("file:secrets/big.pw", "is larger than 64 KiB", []),
    ("file:secrets/huge.pw", "is larger than 64 KiB", []),
    ("file:secrets/lines.pw", "has several lines; a secret is one line", []),
])
def test_file_reference_refused(site, env, ref, detail, extra):
    inv, outside = site
    (inv / "secrets" / "leak.pw").symlink_to(outside / "stolen.pw")
    (inv / "linked").symlink_to(outside, target_is_directory=True)
    (inv / "secrets" / "big.pw").write_text("b" * (64 * 1024) + "\n" + "b")
    with open(inv / "secrets" / "huge.pw", "wb") as f:     # 1 GiB, sparse: refused by its size, never read
        f.truncate(1 << 30)
    (inv / "secrets" / "lines.pw").write_text(OUTSIDE_PW + "\nsecond line\n")
    path = _inventory(inv, f"'{ref.format(outside=outside)}'")
    p = nodeforge(["baremetal", "validate", path, *extra], env)
    refused(p, *_field(path, detail.format(outside=outside)))
    assert p.cpu < 10, f"{ref}: {p.cpu:.1f} s of CPU for a refusal"


def test_file_in_the_configured_secrets_directory_is_accepted(site, env):
    inv, outside = site
    path = _inventory(inv, "'file:../outside/stolen.pw'")
    for how, run_env in ((["--secrets-dir", outside], env), ([], {**env, "NODEFORGE_SECRETS_DIR": str(outside)})):
        p = nodeforge(["baremetal", "validate", path, "-o", "json", *how], run_env)
        assert p.code == 0, p.err
        assert OUTSIDE_PW not in p.out + p.err


# ----------------------------------------------------------------------------- env:

def test_env_reference_off_the_allow_list_refused(site, env):
    inv, _ = site
    path = _inventory(inv, "'env:NF_HOSTILE_STEAL'")
    refused(nodeforge(["baremetal", "validate", path], env),
            *_field(path, "environment variable NF_HOSTILE_STEAL is not on the allow-list"),
            "NODEFORGE_SECRET_ENV_ALLOW")


def test_env_allow_list_extended_by_the_operator(site, env):
    inv, _ = site
    path = _inventory(inv, "'env:NF_HOSTILE_STEAL'")
    p = nodeforge(["baremetal", "validate", path, "-o", "json"],
                  {**env, "NODEFORGE_SECRET_ENV_ALLOW": "NF_HOSTILE_STEAL"})
    assert p.code == 0, p.err
    assert STEAL_PW not in p.out + p.err
    for name in ("BMC_PASSWORD", "NF_TEST_BMC_PASSWORD"):       # the documented names, without configuration
        p = nodeforge(["baremetal", "validate", _inventory(inv, f"'env:{name}'")], env)
        assert p.code == 0, p.err


@pytest.mark.parametrize("password,detail", [
    ("'env:NODEFORGE_INVENTORY_KEY'", "environment variable NODEFORGE_INVENTORY_KEY is nodeforge's own configuration"),
    ("'env:NODEFORGE_SECRET_ENV_ALLOW'", "environment variable NODEFORGE_SECRET_ENV_ALLOW is nodeforge's own"),
])
def test_the_inventory_cannot_reach_the_key_or_the_allow_list(site, env, password, detail):
    inv, _ = site
    path = _inventory(inv, password)
    # Even with the key's variable on the allow-list: the key never goes to a BMC.
    run_env = {**env, "NODEFORGE_INVENTORY_KEY": KEY, "NODEFORGE_SECRET_ENV_ALLOW": "NODEFORGE_INVENTORY_KEY"}
    refused(nodeforge(["baremetal", "validate", path], run_env), *_field(path, detail))


def test_the_inventory_cannot_widen_the_allow_list(site, env):
    inv, _ = site
    path = inv / "inventory.yaml"
    path.write_text("version: 1\n"
                    "secret_env_allow: [NF_HOSTILE_STEAL]\n"
                    "secrets_dir: /\n"
                    "nodes:\n"
                    "  - name: victim-01\n"
                    "    bmc: {address: 'ipmi://10.9.0.2', username: admin, password: 'env:NF_HOSTILE_STEAL'}\n")
    refused(nodeforge(["baremetal", "validate", path], env),
            f"{path}:2: secret_env_allow: unknown key", f"{path}:3: secrets_dir: unknown key",
            f"{path}:6: nodes[0].bmc.password: environment variable NF_HOSTILE_STEAL is not on the allow-list")


# ----------------------------------------------------------------------------- types

@pytest.mark.parametrize("written,kind", [("0123", "a number"), ("4711", "a number"), ("true", "a boolean"),
                                          ("6.5", "a number")])
def test_number_or_boolean_secret_refused(site, env, written, kind):
    inv, _ = site
    path = _inventory(inv, written)
    text = refused(nodeforge(["baremetal", "validate", path, "--allow-plaintext-secrets"], env),
                   f"{path}:7: nodes[1].bmc.password: expected a string, got {kind}; quote it")
    assert written not in text.replace(str(path), "")


def test_number_in_a_bulk_driver_info_secret_refused(site, env):
    inv, _ = site
    path = inv / "bulk.yaml"
    path.write_text("nodes:\n"
                    "  - name: victim-01\n"
                    "    driver: ipmi\n"
                    "    driver_info: {ipmi_address: 10.9.0.3, ipmi_username: admin,\n"
                    "                  ipmi_password: 'env:BMC_PASSWORD', ipmi_kg_key: 0123}\n")
    text = refused(nodeforge(["baremetal", "validate", path, "--allow-plaintext-secrets"], env),
                   f"{path}:5: nodes[0].driver_info.ipmi_kg_key: expected a string, got a number; quote it",
                   "(node victim-01)")
    assert "0123" not in text and ": 123" not in text


# ----------------------------------------------------------------------------- key file and stdin

@pytest.mark.parametrize("key,detail", [
    ("/dev/zero", "inventory key file /dev/zero is a character device, not a regular file"),
    ("{inv}/secrets/fifo", "is a FIFO (named pipe), not a regular file (a key from another program: set "
                           "$NODEFORGE_INVENTORY_KEY)"),
    ("{inv}/secrets/huge.key", "is larger than 4 KiB"),
    ("/proc/self/environ", "is a /proc or /sys file"),
])
@pytest.mark.parametrize("how", ["option", "environment"])
def test_key_file_refused(site, env, key, detail, how):
    inv, _ = site
    with open(inv / "secrets" / "huge.key", "wb") as f:
        f.truncate(1 << 30)
    key = key.format(inv=inv)
    path = _inventory(inv, "'fernet:gAAAAABhostile'")
    if how == "option":
        p = nodeforge(["baremetal", "validate", path, "--key-file", key], env)
    else:
        p = nodeforge(["baremetal", "validate", path], {**env, "NODEFORGE_INVENTORY_KEY_FILE": key})
    refused(p, detail)
    p = nodeforge(["baremetal", "encrypt", "--key-file", key], env, stdin=subprocess.DEVNULL)
    refused(p, detail)


@pytest.fixture
def key_file(tmp_path) -> Path:
    from cryptography.fernet import Fernet

    path = tmp_path / "inventory.key"
    path.write_bytes(Fernet.generate_key() + b"\n")
    return path


def test_encrypt_from_a_stdin_that_never_ends(env, key_file):
    yes = subprocess.Popen(["yes", SECRETS["fernet_plain"]], stdout=subprocess.PIPE)
    try:
        p = nodeforge(["baremetal", "encrypt", "--key-file", key_file], env, stdin=yes.stdout)
    finally:
        yes.stdout.close()
        yes.kill()
        yes.wait()
    refused(p, "the password on stdin holds more than 4096 bytes")


def test_encrypt_from_dev_zero(env, key_file):
    with open("/dev/zero", "rb") as zero:
        p = nodeforge(["baremetal", "encrypt", "--key-file", key_file], env, stdin=zero)
    refused(p, "the password on stdin is a character device")


def test_encrypt_from_a_pipe_and_a_file_still_works(env, key_file, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text(SECRETS["fernet_plain"] + "\n")
    with open(pw, "rb") as f:
        p = nodeforge(["baremetal", "encrypt", "--key-file", key_file], env, stdin=f)
    assert p.code == 0 and p.out.startswith("fernet:"), p.err
    echo = subprocess.Popen(["printf", "%s", SECRETS["fernet_plain"]], stdout=subprocess.PIPE)
    p = nodeforge(["baremetal", "encrypt", "--key-file", key_file], env, stdin=echo.stdout)
    echo.stdout.close()
    echo.wait()
    assert p.code == 0 and p.out.startswith("fernet:"), p.err


# ----------------------------------------------------------------------------- what must keep working

VALID = [("docs/examples/inventory.yaml", []), ("docs/examples/inventory.csv", []),
         ("docs/examples/inventory-ironicclient.yaml", []), ("docs/examples/inventory-bifrost.json", []),
         ("tests/ironic/data/nodeforge.yaml", []), ("tests/ironic/data/ironicclient.yaml", []),
         ("tests/ironic/data/ironicclient-bulk.yaml", []), ("tests/ironic/data/bifrost.json", []),
         ("tests/ironic/data/nodes.csv", []), ("tests/hostile/corpus/inventory.yaml", ["--secrets-dir", "{key_dir}"])]


@pytest.mark.parametrize("name,extra", VALID)
def test_the_repository_inventories_still_load(name, extra, env, key_file, tmp_path):
    """Every valid inventory in the repository loads under the policy with only the documented variables
    set; the placeholders of the example and the corpus (token, CA bundle, the corpus's secret file
    beside the key) are filled in a copy."""
    from cryptography.fernet import Fernet

    src = REPO / name
    token = Fernet(key_file.read_bytes().strip()).encrypt(SECRETS["fernet_plain"].encode()).decode()
    shared = key_file.parent / "bmc.pw"
    shared.write_text(SECRETS["bmc_file"] + "\n")
    text = src.read_text()
    if "@FERNET@" in text or "gAAAAABexample" in text:
        d = tmp_path / "copy"
        shutil.copytree(src.parent, d, ignore=shutil.ignore_patterns("*.py"))
        text = text.replace("@FERNET@", token).replace("@SECRETFILE@", str(shared))
        text = text.replace("fernet:gAAAAABexample-token-from-nodeforge-baremetal-encrypt", f"fernet:{token}")
        (d / "bmc-ca.pem").write_text("")
        text = text.replace("/etc/pki/bmc-ca.pem", "bmc-ca.pem")     # the example's CA bundle, beside the copy
        (d / src.name).write_text(text)
        src = d / src.name
    args = [a.format(key_dir=key_file.parent) for a in extra]
    p = nodeforge(["baremetal", "validate", src, "--key-file", key_file, "-o", "json", *args], env)
    assert p.code == 0, p.err
    for form, value in secret_forms(PLANTED).items():
        assert form not in p.out + p.err, f"{name}: secret {value!r} printed"
