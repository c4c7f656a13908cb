"""Secrets in URLs: a mirror URL with credentials (``user:pass@``, ``?token=``)
is never printed: not in retry log lines, errors, hints or ``--output json``.

Mirror URLs with credentials are refused (the error names the setting, shows
the URL redacted and says to use ~/.netrc); the downloader itself logs and
raises only redacted URLs (defence in depth for any URL it is handed). The
mirror here is a tiny local ``http.server`` answering 503 / 404 (it stands in
for an internet server, not for an OpenStack service)."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nodeforge.errors import ConfigError
from nodeforge.pins import sources as S
from nodeforge.pins.cache import Cache, Downloader, DownloadError, NotFoundError, DownloadSettings

REPO = Path(__file__).resolve().parents[2]
LOCKFILE = REPO / "manifests" / "versions.yaml"
USER = "nfmirroruser"
PASSWORD = "S3cretPassw0rd-13"
TOKEN = "T0kenValue-13-abcdef"
SECRETS = (USER, PASSWORD, TOKEN)


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 503
    seen_auth: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization")
        type(self).seen_auth.append(auth)
        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.path.startswith("/auth/"):
            code = 200 if auth == want else 401
        else:
            code = self.status
        body = b"ok\n" if code == 200 else b"no\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


def _server(status: int):
    handler = type(f"H{status}", (_Handler,), {"status": status, "seen_auth": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, handler


@pytest.fixture
def mirror503():
    srv, handler = _server(503)
    yield f"127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def mirror404():
    srv, handler = _server(404)
    yield f"127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def _nodeforge(tmp_path, *args, env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEFORGE_MIRROR_")}
    env.update({"NODEFORGE_DOWNLOAD_RETRIES": "2", "NODEFORGE_DOWNLOAD_BACKOFF": "0.01",
                "HOME": str(tmp_path), "NODEFORGE_CACHE_DIR": str(tmp_path / "cache"), **env_extra})
    return subprocess.run([sys.executable, "-m", "nodeforge.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} printed:\n{text}"


def _sources_file(tmp_path, body: str = "mirrors: {}\n") -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(body)
    return path


@pytest.mark.parametrize("command", [["release", "check", "--no-packages"], ["release", "prefetch", "--minor", "1.36"]])
@pytest.mark.parametrize("fmt", [[], ["--output", "json"], ["--log-format", "json"]])
def test_mirror_url_with_credentials_in_the_environment_is_refused_and_never_printed(tmp_path, mirror503, command,
                                                                                      fmt):
    host, handler = mirror503
    url = f"http://{USER}:{PASSWORD}@{host}/k8s"
    proc = _nodeforge(tmp_path, *command, "-v", *fmt, "--lockfile", LOCKFILE, "--sources", _sources_file(tmp_path),
                      env_extra={"NODEFORGE_MIRROR_KUBERNETES": url})
    _assert_no_secret(proc.stdout, proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "NODEFORGE_MIRROR_KUBERNETES" in proc.stdout + proc.stderr
    assert "netrc" in proc.stdout + proc.stderr
    assert handler.seen_auth == []          # refused before any request
    if fmt == ["--output", "json"]:
        doc = json.loads(proc.stdout)
        assert doc["exit_code"] == 2 and "holds credentials" in doc["error"]


@pytest.mark.parametrize("query", [f"token={TOKEN}", f"a=1&access_token={TOKEN}", f"X-Amz-Signature={TOKEN}"])
def test_mirror_url_with_a_token_query_is_refused_without_echoing_it(tmp_path, mirror404, query):
    host, handler = mirror404
    proc = _nodeforge(tmp_path, "release", "check", "--no-packages", "--lockfile", LOCKFILE,
                      "--sources", _sources_file(tmp_path),
                      env_extra={"NODEFORGE_MIRROR_KUBERNETES": f"http://{host}/k8s?{query}"})
    _assert_no_secret(proc.stdout, proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "NODEFORGE_MIRROR_KUBERNETES" in proc.stderr and "***" in proc.stderr
    assert handler.seen_auth == []


def test_mirror_url_with_credentials_in_sources_yaml_names_file_line_and_key(tmp_path, mirror404):
    host, _ = mirror404
    cfg = _sources_file(tmp_path, f"mirrors:\n  kubernetes:\n  runc: https://{USER}:{PASSWORD}@{host}/runc\n")
    proc = _nodeforge(tmp_path, "release", "prefetch", "--minor", "1.36", "-v", "--output", "json",
                      "--lockfile", LOCKFILE, "--sources", cfg, env_extra={})
    _assert_no_secret(proc.stdout, proc.stderr)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["problems"] == [{"file": str(cfg), "line": 3, "key": "mirrors.runc", "keypath": ["mirrors", "runc"],
                                "detail": doc["problems"][0]["detail"]}]
    assert "holds credentials" in doc["problems"][0]["detail"] and "netrc" in doc["problems"][0]["detail"]
    assert f"{cfg}:3: mirrors.runc: " in proc.stderr


def test_sources_load_refuses_credentials_by_field_and_keeps_plain_urls():
    with pytest.raises(ConfigError) as info:
        S.Sources.load(None, env={"NODEFORGE_MIRROR_RUNC": f"https://{USER}:{PASSWORD}@m.invalid/runc"})
    _assert_no_secret(str(info.value), str(info.value.hint))
    assert "https://***@m.invalid/runc" in str(info.value)
    ok = S.Sources.load(None, env={"NODEFORGE_MIRROR_RUNC": "https://m.invalid:8443/runc/"})
    assert ok.base(S.SourceName.RUNC) == "https://m.invalid:8443/runc"


def test_downloader_logs_and_raises_only_redacted_urls(tmp_path, mirror503, mirror404, caplog):
    """Whatever URL the downloader is handed, its retry log lines and errors never show credentials."""
    dl = Downloader(Cache(tmp_path / "c"), DownloadSettings(attempts=3, initial=0.01, maximum=0.02))
    caplog.set_level(logging.INFO, logger="nodeforge.pins.cache")
    for host, expected in ((mirror503[0], DownloadError), (mirror404[0], NotFoundError)):
        url = f"http://{USER}:{PASSWORD}@{host}/k8s/release/stable.txt?token={TOKEN}"
        with pytest.raises(expected) as info:
            dl.get_text(url, hint=f"mirror {url}")
        text = str(info.value)
        _assert_no_secret(text)
        assert f"http://***@{host}/k8s/release/stable.txt?token=***" in text
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying ")]
    assert len(retries) == 2                     # 3 attempts against the 503 mirror
    _assert_no_secret(*retries, caplog.text)


def test_a_mirror_login_comes_from_netrc(tmp_path, mirror503, monkeypatch):
    """What the refusal recommends works: requests reads the login from ~/.netrc."""
    host, handler = mirror503
    netrc = tmp_path / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    dl = Downloader(Cache(tmp_path / "c"), DownloadSettings(attempts=1))
    assert dl.get_text(f"http://{host}/auth/stable.txt") == "ok\n"
    assert handler.seen_auth[-1] is not None
