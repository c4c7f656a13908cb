"""A scripted HTTP server on 127.0.0.1 (stdlib), for tests of the transport and its clients: it
answers what a test scripts, as an OpenStack service would, through a real socket (no mock of
keystoneauth or requests)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from keystoneauth1 import adapter, session


class Script(http.server.ThreadingHTTPServer):
    """Answers the scripted (status, body, headers) in order, then 200 with ``final``; records requests."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers: list[tuple[int, str, dict]] = []
        self.final = (200, "{}", {})
        self.pages: dict[str, dict] | None = None
        self.seen: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        srv: Script = self.server
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        srv.seen.append((self.command, self.path))
        if srv.pages is not None:
            status, body, headers = 200, json.dumps(srv.pages[self.path]), {}
        else:
            status, body, headers = srv.answers.pop(0) if srv.answers else srv.final
        data = body.encode()
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer


@pytest.fixture
def server():
    srv = Script()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def adapter_for(url: str, service_type: str | None = None) -> adapter.Adapter:
    """A keystoneauth adapter (no auth) whose endpoint is ``url``, as an openstacksdk proxy is."""
    return adapter.Adapter(session.Session(), endpoint_override=url, service_type=service_type)
