"""Every kind of file a person writes for nodeforge, mutated (hypothesis),
read by the real command that reads it: exit 0 or 2 (never 1, never a
traceback), valid JSON on stdout with ``--output json``, JSON lines on stderr
with ``--log-format json``, bounded time (the profile's deadline) and memory
(:data:`conftest.MEMORY_MARGIN`), and no planted secret in anything printed
or written.

Commands that need a cloud are run without one: a file that still validates
gets as far as connecting, which is the usage error "no cloud selected"
(exit 2); :func:`test_every_seed_is_valid` proves each seed gets that far.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from tests.hostile import mutate
from tests.hostile.conftest import CORPUS, HOSTILE, REPO, SECRETS, check, run_cli, secret_forms

NO_CLOUD = "no cloud selected"


def _formats(draw) -> tuple[list[str], bool, bool]:
    """Global output options for one run: (args, --output json?, --log-format json?)."""
    out_json = draw(st.booleans())
    log_json = draw(st.integers(0, 3)) == 0
    args = (["-o", "json"] if out_json else []) + (["--log-format", "json"] if log_json else [])
    return args, out_json, log_json


def _check_log_lines(run, log_json: bool) -> None:
    if not log_json:
        return
    for line in run.err.splitlines():
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                raise AssertionError(f"nodeforge {' '.join(run.args)}: stderr line not JSON with "
                                     f"--log-format json: {line[:300]!r}") from None


def _seed(name: str, **subst: str) -> str:
    text = (CORPUS / name).read_text() if (CORPUS / name).exists() else (REPO / name).read_text()
    for k, v in subst.items():
        text = text.replace(f"@{k}@", v)
    return text


# ----------------------------------------------------------------------------- kinds

def _inventory_seed(name, fernet_key, secret_dir: Path) -> str:
    """The inventory seed ``name`` with its secrets in place: ``secrets/bmc.pw`` beside it (where
    tests/ironic/data/nodeforge.yaml points) and, for the corpus file, a session-wide file (its path
    is in the text, so it must not change between examples)."""
    (secret_dir / "secrets").mkdir(exist_ok=True)
    (secret_dir / "secrets" / "bmc.pw").write_text(SECRETS["bmc_file"] + "\n")
    shared = fernet_key[0].parent / "bmc.pw"
    shared.write_text(SECRETS["bmc_file"] + "\n")
    return _seed(name, FERNET=fernet_key[1], SECRETFILE=str(shared))


INVENTORIES = [("inventory.yaml", "yaml", None), ("docs/examples/inventory-ironicclient.yaml", "yaml", None),
               ("docs/examples/inventory-bifrost.json", "json", "bifrost"),
               ("tests/ironic/data/nodeforge.yaml", "yaml", None),
               ("tests/ironic/data/ironicclient.yaml", "yaml", None)]


def _cmd_inventory(path: Path, fmt, fernet_key):
    # --secrets-dir: the corpus file's shared secret file is beside the key, outside the inventory's directory.
    return ["baremetal", "validate", path, "--key-file", fernet_key[0], "--secrets-dir", fernet_key[0].parent,
            *(["--format", fmt] if fmt else [])]


SEEDS = {
    "lockfile": ("manifests/versions.yaml", "yaml"),
    "profiles": ("manifests/hardware-profiles.yaml", "yaml"),
    "flavors": ("manifests/flavors.yaml", "yaml"),
    "template-baremetal": ("manifests/templates/k8s-1.36-baremetal.yaml", "yaml"),
    "template-vm": ("manifests/templates/k8s-1.36-vm.yaml", "yaml"),
    "retention": ("manifests/image-retention.yaml", "yaml"),
    "sources": ("sources.yaml", "yaml"),
    "canary-policy": ("docs/examples/canary-policy.yaml", "yaml"),
}


def _setup(kind: str, d: Path, data: bytes, *, mirror: str | None = None) -> tuple[list, tuple, Path]:
    """Write the mutated ``data`` where the command reads it; the command, allowed exit codes and out dir."""
    out = d / "out"
    out.mkdir()
    if kind == "lockfile":
        (d / "versions.yaml").write_bytes(data)
        return ["image", "render", "--k8s", "1.36", "--lockfile", d / "versions.yaml", "--out", out / "render"], \
            (0, 2), out
    if kind == "profiles":
        (d / "p.yaml").write_bytes(data)
        return ["baremetal", "classify", "--profiles", d / "p.yaml", "--dry-run"], (2,), out
    if kind == "flavors":
        shutil.copy(REPO / "manifests/hardware-profiles.yaml", d / "hardware-profiles.yaml")
        (d / "flavors.yaml").write_bytes(data)
        return ["flavor", "sync", "--flavors", d / "flavors.yaml", "--dry-run"], (2,), out
    if kind.startswith("template"):
        (d / "templates").mkdir()
        (d / "templates" / "t.yaml").write_bytes(data)
        return ["template", "check", "--templates", d / "templates"], (2,), out
    if kind == "retention":
        (d / "retention.yaml").write_bytes(data)
        return ["image", "promote", "--retention", d / "retention.yaml", "--dry-run", "some-image"], (2,), out
    if kind == "canary-policy":
        # The policy is read before the build directory (an empty one here: exit 2 after the policy).
        (d / "canary-policy.yaml").write_bytes(data)
        (d / "build").mkdir()
        return ["image", "canary", d / "build", "--canary-policy", d / "canary-policy.yaml", "--dry-run"], (2,), out
    if kind == "sources":
        (d / "sources.yaml").write_bytes(data)
        # --no-packages: the OS package lock beside versions.yaml would send every valid example to the
        # real Debian mirror (the package check has its own tests in tests/oslock).
        return ["release", "check", "--lockfile", REPO / "manifests/versions.yaml", "--sources", d / "sources.yaml",
                "--cache-dir", out / "cache", "--no-packages"], (0, 2), out
    raise AssertionError(kind)


def _seed_text(kind: str, mirror: str, *, credentials: bool = False) -> str:
    """The seed of ``kind``; for sources, ``credentials`` puts a password in one mirror URL
    (refused: credentials go in ~/.netrc; the refusal must not echo it)."""
    name, _ = SEEDS[kind]
    if kind == "sources":
        crictl = mirror.replace("http://", f"http://nf-mirror:{SECRETS['mirror_pw']}@") if credentials else mirror
        return _seed(name, MIRROR=mirror + "/", CRICTL=crictl + "/")
    return _seed(name)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_every_seed_is_valid(kind, workdir, no_cloud_env, marker_mirror):
    """The unmutated seed is a valid file: its command succeeds, or gets as far as connecting to a cloud."""
    d = workdir()
    args, _, out = _setup(kind, d, _seed_text(kind, marker_mirror).encode(), mirror=marker_mirror)
    run = run_cli(args, env=no_cloud_env)
    check(run, secrets=secret_forms(SECRETS.values()), written=out)
    assert run.code == 0 or NO_CLOUD in run.err, run.err


@pytest.mark.parametrize("name,kind,fmt", INVENTORIES)
def test_every_inventory_seed_is_valid(name, kind, fmt, workdir, no_cloud_env, fernet_key):
    d = workdir()
    (d / "inv").write_text(_inventory_seed(name, fernet_key, d))
    run = run_cli(_cmd_inventory(d / "inv", fmt, fernet_key) + ["-o", "json"], env=no_cloud_env)
    check(run, codes=(0,), json_out=True, secrets=secret_forms(SECRETS.values()))
    assert json.loads(run.out)["valid"] is True


def _file_property(kind):
    @HOSTILE
    @given(data=st.data())
    def test(data, workdir, no_cloud_env, marker_mirror):
        text = _seed_text(kind, marker_mirror, credentials=kind == "sources" and data.draw(st.booleans()))
        ops = mutate.URL_SAFE_BYTE_OPS if kind == "sources" else mutate.BYTE_OPS
        blob = data.draw(mutate.mutated_file(text, SEEDS[kind][1], ops), label="file")
        fmt_args, out_json, log_json = _formats(data.draw)
        d = workdir()
        args, codes, out = _setup(kind, d, blob, mirror=marker_mirror)
        run = run_cli(args + fmt_args, env=no_cloud_env)
        if kind == "sources" and run.code == 1 and "uses its upstream" in run.err:
            # A mirror mutated away (null, deleted): the source falls back to its
            # upstream server, unreachable offline. A network failure, not bad input.
            codes = (1,)
        check(run, codes=codes, json_out=out_json, secrets=secret_forms(SECRETS.values()), written=out,
              note=f"(input {blob[:300]!r})")
        _check_log_lines(run, log_json)

    test.__name__ = f"test_hostile_{kind.replace('-', '_')}"
    return test


test_hostile_lockfile = _file_property("lockfile")
test_hostile_sources = _file_property("sources")
test_hostile_profiles = _file_property("profiles")
test_hostile_flavors = _file_property("flavors")
test_hostile_template_baremetal = _file_property("template-baremetal")
test_hostile_template_vm = _file_property("template-vm")
test_hostile_retention = _file_property("retention")
test_hostile_canary_policy = _file_property("canary-policy")


# Every inventory format: nodeforge YAML, python-ironicclient bulk, Bifrost JSON (CSV below).
@pytest.mark.parametrize("name,kind,fmt", INVENTORIES)
@HOSTILE
@given(data=st.data())
def test_hostile_inventory(name, kind, fmt, data, workdir, no_cloud_env, fernet_key):
    d = workdir()
    blob = data.draw(mutate.mutated_file(_inventory_seed(name, fernet_key, d), kind), label="file")
    fmt_args, out_json, log_json = _formats(data.draw)
    (d / "inv").write_bytes(blob)
    run = run_cli(_cmd_inventory(d / "inv", fmt, fernet_key) + fmt_args, env=no_cloud_env)
    check(run, json_out=out_json, secrets=secret_forms(SECRETS.values()), note=f"(input {blob[:300]!r})")
    _check_log_lines(run, log_json)


@HOSTILE
@given(data=st.data())
def test_hostile_inventory_csv(data, workdir, no_cloud_env, fernet_key):
    d = workdir()
    blob = data.draw(mutate.mutated_csv((REPO / "docs/examples/inventory.csv").read_text()), label="file")
    fmt_args, out_json, log_json = _formats(data.draw)
    (d / "inv.csv").write_bytes(blob)
    run = run_cli(_cmd_inventory(d / "inv.csv", None, fernet_key) + fmt_args, env=no_cloud_env)
    check(run, json_out=out_json, secrets=secret_forms(SECRETS.values()), note=f"(input {blob[:300]!r})")
    _check_log_lines(run, log_json)


# ----------------------------------------------------------------------------- build directory

@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    """A valid build directory (manifest.json, verify.json, sums, a small image) to copy and mutate."""
    from tests.imagebuild.builddir_factory import make_build_dir

    return make_build_dir(tmp_path_factory.mktemp("hostile-build"), variants=("vm",), size=64 * 1024,
                          build_id="nf-hostile-1.36.0")


def _copy_build(src: Path, d: Path) -> Path:
    dst = d / src.name
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("name", ["manifest.json", "verify.json"])
def test_build_dir_seed_is_valid(name, build_dir, workdir, no_cloud_env):
    """``image publish`` reads the build's manifest and verify report before connecting to a cloud."""
    d = _copy_build(build_dir, workdir())
    run = run_cli(["image", "publish", d, "--dry-run"], env=no_cloud_env)
    check(run, codes=(2,))
    assert NO_CLOUD in run.err, run.err


@pytest.mark.parametrize("name", ["manifest.json", "verify.json"])
@HOSTILE
@given(data=st.data())
def test_hostile_build_dir(name, data, build_dir, workdir, no_cloud_env):
    """A mutated build manifest or verify report: ``image publish --dry-run`` exits 2, never a traceback."""
    blob = data.draw(mutate.mutated_file((build_dir / name).read_text(), "json"), label="file")
    fmt_args, out_json, log_json = _formats(data.draw)
    d = _copy_build(build_dir, workdir())
    (d / name).write_bytes(blob)
    run = run_cli(["image", "publish", d, "--dry-run"] + fmt_args, env=no_cloud_env)
    check(run, codes=(2,), json_out=out_json, secrets=secret_forms(SECRETS.values()), note=f"(input {blob[:300]!r})")
    _check_log_lines(run, log_json)


@st.composite
def _mutated_lines(draw, text: str):
    """A line-oriented file (SUMS, JSON lines) with lines replaced by hostile ones, then bytes mangled."""
    lines = text.splitlines()
    hostile = st.one_of(st.sampled_from([
        "", " ", "0" * 64 + "  ../../etc/hostname", "0" * 64 + "  /etc/hostname", "0" * 64 + "  .",
        "0" * 64 + "  a/b", "zz" * 32 + "  x", "0" * 63 + "  short", "0" * 64 + " *bin", "{}", "[]", "null",
        '{"path": 1, "type": "file"}', '{"path": "/a", "type": "file", "size": NaN}', "[" * 5000,
        '{"path": "/a", "type": "file", "size": 1e999}', "x" * 70_000, "\ud800", "\x00"]),
        st.text(max_size=80))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        if op == "delete" and lines:
            lines.pop(min(i, len(lines) - 1))
        elif op == "replace" and lines:
            lines[min(i, len(lines) - 1)] = draw(hostile)
        else:
            lines.insert(i, draw(hostile))
    body = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    return draw(mutate.byte_level(body))


@pytest.mark.parametrize("name", ["SHA256SUMS", "SHA512SUMS"])
@HOSTILE
@given(data=st.data())
def test_hostile_sums(name, data, build_dir, workdir, no_cloud_env):
    """A mutated SUMS file: ``image publish --dry-run`` exits 2 and reads nothing outside the build."""
    blob = data.draw(_mutated_lines((build_dir / name).read_text()), label="file")
    d = _copy_build(build_dir, workdir())
    (d / name).write_bytes(blob)
    run = run_cli(["image", "publish", d, "--dry-run"], env=no_cloud_env)
    check(run, codes=(2,), note=f"(input {blob[:300]!r})")


@HOSTILE
@given(data=st.data())
def test_hostile_files_manifest(data, workdir, tmp_path_factory):
    """A mutated per-file manifest (its digest recorded, so its content is judged): ``image diff``
    exits 0, 10 or 2, never a traceback."""
    import hashlib

    from tests.hostile.builds import build, set_manifest

    root = workdir()
    a, b = build(root, "a"), build(root, "b")
    blob = data.draw(_mutated_lines((b / "files.jsonl").read_text()), label="file")
    (b / "files.jsonl").write_bytes(blob)
    set_manifest(b, lambda m: m["files"].update(sha256=hashlib.sha256(blob).hexdigest()))
    run = run_cli(["image", "diff", a, b])
    check(run, codes=(0, 2, 10), note=f"(input {blob[:300]!r})")
