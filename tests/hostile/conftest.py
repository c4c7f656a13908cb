"""Hostile-input property tests: the hypothesis profile, the in-process CLI
runner with its checks, planted secrets, and the local marker mirror.

The profile is deterministic (``derandomize``, no example database), so CI
runs the same examples every time; ``NODEFORGE_HOSTILE_EXAMPLES`` raises the
example count for a longer local hunt.
"""

from __future__ import annotations

import base64
import dataclasses
import http.server
import json
import logging
import os
import resource
import shutil
import sys
import threading
import traceback
import urllib.parse
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from nodeforge import cli

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"

settings.register_profile(
    "nodeforge-hostile",
    max_examples=int(os.environ.get("NODEFORGE_HOSTILE_EXAMPLES", "40")),
    derandomize=True,
    database=None,
    # ms per example: a hostile file is refused in well under a second; the margin is for a
    # machine under load (a hang, or a parse quadratic in the input, still fails).
    deadline=10000,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.large_base_example],
)
HOSTILE = settings.get_profile("nodeforge-hostile")

# Distinctive secret values planted wherever a file or the environment holds a
# secret; none may appear (raw, base64 or URL-encoded) in anything a command prints or writes.
SECRETS = {
    "bmc_env": "NFhostile-bmc-env-pw-7Qz9",
    "bmc_file": "NFhostile-bmc-file-pw-4Lk2",
    "fernet_plain": "NFhostile-fernet-pw-K3x8",
    "mirror_pw": "NFhostile-mirror-pw-W5v2",
}

# Extra address space one example may take (RLIMIT_AS above what the process has mapped).
MEMORY_MARGIN = 768 * 1024 * 1024


def secret_forms(values) -> dict[str, str]:
    out = {}
    for v in values:
        out[v] = v
        out[base64.b64encode(v.encode()).decode().rstrip("=")] = v
        out[base64.urlsafe_b64encode(v.encode()).decode().rstrip("=")] = v
        out[urllib.parse.quote(v, safe="")] = v
    return out


@dataclasses.dataclass
class Run:
    args: list
    code: int | None
    out: str
    err: str
    error: str | None = None          # a traceback, if the command raised


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_cli(args, *, env: dict | None = None, stdin: str | bytes | None = None) -> Run:
    """``nodeforge ARGS`` in process through ``cli.main`` (the real exit-code
    and error plumbing), stdout/stderr captured by click's runner, the
    address space bounded by :data:`MEMORY_MARGIN`."""
    args = [str(a) for a in args]
    runner = CliRunner()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    error = None
    code = None
    with runner.isolation(input=stdin, env=env) as (out, err, _):
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + MEMORY_MARGIN, hard))
        try:
            code = cli.main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - a traceback is the finding
            error = traceback.format_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            root = logging.getLogger()
            for h in list(root.handlers):
                if getattr(h, "_nodeforge", False):
                    root.removeHandler(h)
        stdout, stderr = out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")
    return Run(args, code, stdout, stderr, error)


def check(run: Run, *, codes=(0, 2), json_out: bool = False, secrets: dict[str, str] | None = None,
          written: Path | None = None, note: str = "") -> None:
    """The invariants every hostile input must keep."""
    where = f"nodeforge {' '.join(a if len(a) < 200 else a[:200] + '...' for a in run.args)} {note}"
    assert run.error is None, f"{where}: raised\n{run.error}"
    assert "Traceback" not in run.out + run.err, f"{where}: traceback printed\n{run.err[-3000:]}"
    assert run.code in codes, f"{where}: exit {run.code}, expected one of {codes}\n{run.err[-3000:]}"
    if json_out:
        try:
            doc = json.loads(run.out)
        except ValueError:
            raise AssertionError(f"{where}: stdout is not one JSON document:\n{run.out[:3000]}") from None
        if run.code:
            assert isinstance(doc, dict) and doc.get("exit_code") == run.code, f"{where}: error document {doc}"
    for form, value in (secrets or {}).items():
        assert form not in run.out, f"{where}: secret {value!r} (as {form!r}) on stdout"
        assert form not in run.err, f"{where}: secret {value!r} (as {form!r}) on stderr"
    if written is not None and secrets:
        for path in written.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                for form, value in secrets.items():
                    assert form.encode() not in data, f"{where}: secret {value!r} written to {path}"


@pytest.fixture(scope="session")
def no_cloud_env(tmp_path_factory) -> dict:
    """An environment without any cloud (so commands stop at connecting, exit 2) and with
    the planted secrets where references point."""
    home = tmp_path_factory.mktemp("hostile-home")
    env = {var: None for var in os.environ if var.startswith(("OS_", "NODEFORGE_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               NODEFORGE_DOWNLOAD_RETRIES="1", NODEFORGE_DOWNLOAD_BACKOFF="0",
               BMC_PASSWORD=SECRETS["bmc_env"], NF_TEST_BMC_PASSWORD=SECRETS["bmc_env"])
    return env


class _Markers(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        for prefix, data in self.files.items():
            if path.endswith(prefix):
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def marker_mirror():
    """A local HTTP server with the stable markers of the pinned minors of
    manifests/versions.yaml (so ``release check`` is offline and up to date)."""
    lock = yaml.safe_load((REPO / "manifests/versions.yaml").read_text())
    versions = {m: str(e["version"]) for m, e in lock["kubernetes"].items()}
    files = {f"/release/stable-{m}.txt": f"v{v}\n".encode() for m, v in versions.items()}
    newest = max(versions, key=lambda m: tuple(int(x) for x in m.split(".")))
    files["/release/stable.txt"] = f"v{versions[newest]}\n".encode()
    handler = type("Markers", (_Markers,), {"files": files})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def fernet_key(tmp_path_factory):
    """A Fernet key file and a token of the planted fernet password."""
    from cryptography.fernet import Fernet

    key = Fernet.generate_key()
    path = tmp_path_factory.mktemp("hostile-key") / "inventory.key"
    path.write_bytes(key)
    path.chmod(0o600)
    token = Fernet(key).encrypt(SECRETS["fernet_plain"].encode()).decode()
    return path, token, key.decode()


@pytest.fixture
def workdir(tmp_path):
    """A fresh directory per hypothesis example (``workdir()``)."""
    counter = iter(range(10 ** 9))

    def make() -> Path:
        d = tmp_path / f"ex{next(counter)}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        return d

    return make
