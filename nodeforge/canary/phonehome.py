"""The phone-home channel: where a deployed canary node POSTs its collector's report.

A real cloud has this channel too (the node reaches a URL given in its user-data), unlike a
serial port read off a QEMU process. The listener serves ``POST /nodeforge/canary/<token>`` on
the address it is given (loopback in the local cloud, where the guest's 10.0.2.2:<port> is
forwarded to it), keeps the first well-formed report per expected token and refuses the rest:

* an unknown token (a forged or stale report): 404, counted, never stored;
* a body over :data:`MAX_BODY` (a report is about 100 KiB) or a damaged frame: 400, counted;
* a second report for a token already answered: 409.

The token is the run's capability: it is in the node's user-data and nowhere in logs, reports
or errors (:meth:`Listener.url` is what goes into the user-data; :meth:`Listener.public_url`, with
the token masked, is what is shown).
"""

from __future__ import annotations

import dataclasses
import http.server
import secrets
import threading
import time

from nodeforge.imageverify import boottest
from nodeforge.redact import MASK

MAX_BODY = 4 * 1024 * 1024
PATH = "/nodeforge/canary/"


@dataclasses.dataclass
class Refused:
    reason: str
    status: int


class Listener:
    """A threaded HTTP server for canary reports; a context manager (stopped on exit)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, advertise: str | None = None):
        self._reports: dict[str, dict] = {}
        self._expected: set[str] = set()
        self.refused: list[Refused] = []
        self._cond = threading.Condition()
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = "nodeforge-canary"

            def log_message(self, *args):       # the path holds the token: nothing is logged
                pass

            def do_POST(self):  # noqa: N802 (http.server's name)
                status = listener._receive(self)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):  # noqa: N802
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        # What the node is told: where it reaches this listener (10.0.2.2:<forwarded port> from a
        # QEMU guest, a routable address in a real cloud). Default: the address listened on.
        self.advertise = (advertise or f"http://{self.host}:{self.port}").rstrip("/")
        self._thread = threading.Thread(target=self._server.serve_forever, name="canary-phone-home", daemon=True)

    def __enter__(self) -> "Listener":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- tokens
    def expect(self, token: str | None = None) -> str:
        """A new token (or ``token``, when a resumed run brings its own) whose report is awaited."""
        token = token or secrets.token_urlsafe(24)
        with self._cond:
            self._expected.add(token)
        return token

    def url(self, token: str) -> str:
        return f"{self.advertise}{PATH}{token}"

    def public_url(self) -> str:
        return f"{self.advertise}{PATH}{MASK}"

    def wait(self, token: str, timeout: float, *, poll: float = 1.0, alive=None) -> dict | None:
        """The report for ``token``, or None after ``timeout`` seconds (or as soon as ``alive()``
        says the node can no longer send one)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while token not in self._reports:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(poll, left))
                if alive is not None and token not in self._reports:
                    self._cond.release()
                    try:
                        still = alive()
                    finally:
                        self._cond.acquire()
                    if not still:
                        return self._reports.get(token)
            return self._reports[token]

    # -- the handler's side
    def _refuse(self, reason: str, status: int) -> int:
        with self._cond:
            self.refused.append(Refused(reason, status))
        return status

    def _receive(self, request: http.server.BaseHTTPRequestHandler) -> int:
        if not request.path.startswith(PATH):
            return self._refuse("unknown path", 404)
        token = request.path[len(PATH):]
        with self._cond:
            known, answered = token in self._expected, token in self._reports
        if not known:
            return self._refuse("unknown token", 404)
        if answered:
            return self._refuse("a second report for one token", 409)
        try:
            length = int(request.headers.get("Content-Length", ""))
        except ValueError:
            return self._refuse("no Content-Length", 411)
        if length < 0 or length > MAX_BODY:
            return self._refuse(f"body of {length} bytes (at most {MAX_BODY})", 413)
        body = request.rfile.read(length)
        try:
            report = boottest.parse_report(body.decode("utf-8", "replace"))
        except (boottest.ReportError, ValueError, RecursionError) as exc:
            return self._refuse(f"damaged report ({str(exc)[:120]})", 400)
        if not isinstance(report, dict):
            return self._refuse("no complete report in the body", 400)
        with self._cond:
            if token in self._reports:
                return self._refuse("a second report for one token", 409)
            self._reports[token] = report
            self._cond.notify_all()
        return 200
