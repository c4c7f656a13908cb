"""Ironic's ``[deploy] http_root`` served over HTTP: the local cloud's ``ironic-http`` service.

Standalone (standard library only, never importing nodeforge), run by the ``openstack``
virtualenv's Python as ``python http_root.py --root DIR --port N``; it binds 127.0.0.1 only.

Without Swift, Ironic stages what a machine fetches under ``http_root``: the virtual-media ISOs
it builds (``redfish/boot-<node>.iso``, fetched by the BMC emulator from ``[deploy]
external_http_url``) and, with ``[agent] image_download_source = http``, the instance images
the agent downloads (from ``[deploy] http_url``, through the machine's guestfwd). Ironic has no
HTTP server of its own.

What it does, and nothing more:

* ``GET``/``HEAD`` of regular files under the root (a path that leaves the root, a symlink
  included, is 404; directories are 403: no listings), except symlinks into a directory named
  with ``--follow`` (Ironic links ``agent_images/<node>`` to its image cache, elsewhere);
* a request target in absolute form (``http://host:port/path``, as a proxy is sent: Ironic's
  conductor checks the guests' URL of an image through this server) is served by its path;
* one byte range per request (``Range: bytes=a-b``, ``a-``, ``-n``: 206 with Content-Range; an
  unsatisfiable range 416; several ranges are answered with the whole file, 200, as RFC 9110
  allows); ``Accept-Ranges: bytes``, ``Last-Modified``, ``Content-Length`` always;
* files streamed with ``sendfile`` (no file is read into memory), HTTP/1.1 keep-alive, one
  thread per connection;
* an access log line per request on stderr (the service log): client, request line, status,
  bytes, range, User-Agent.
"""

from __future__ import annotations

import argparse
import email.utils
import http.server
import os
import posixpath
import re
import signal
import sys
import urllib.parse

IDLE_TIMEOUT = 120          # seconds a kept-alive connection may idle before it is closed
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nodeforge-http-root/1"
    sys_version = ""
    timeout = IDLE_TIMEOUT
    root = "/nonexistent"
    follow: tuple[str, ...] = ()

    def version_string(self):
        return self.server_version

    def do_GET(self):
        self._serve(body=True)

    def do_HEAD(self):
        self._serve(body=False)

    # -- helpers ---------------------------------------------------------------------------------

    def _resolve(self) -> str | None:
        """The real path of the requested file, or None if it is not under the root."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        path = posixpath.normpath(path)
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        full = os.path.realpath(os.path.join(self.root, *parts))
        if any(full == d or full.startswith(d + os.sep) for d in (self.root,) + self.follow):
            return full
        return None

    def _error(self, code: int, body: bool, extra: dict | None = None) -> None:
        text = f"{code} {http.HTTPStatus(code).phrase}\n".encode()
        self.send_response(code)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body:
            self.wfile.write(text)
        self._logged(code, len(text) if body else 0)

    def _serve(self, body: bool) -> None:
        self._range_text = "-"
        full = self._resolve()
        if full is None or not os.path.exists(full):
            return self._error(404, body)
        if os.path.isdir(full):
            return self._error(403, body)
        try:
            fh = open(full, "rb")
        except OSError:
            return self._error(403, body)
        with fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            start, end, code, partial = 0, size - 1, 200, False
            header = self.headers.get("Range")
            if header:
                m = _RANGE.match(header.strip().replace(" ", ""))
                if m and (m.group(1) or m.group(2)):
                    a, b = m.group(1), m.group(2)
                    if a:
                        start, end = int(a), min(int(b), size - 1) if b else size - 1
                    else:                              # suffix: the last n bytes
                        n = int(b)
                        start, end = max(0, size - n), size - 1
                        if n == 0:
                            start = size
                    if start >= size or start > end:
                        self._range_text = header
                        return self._error(416, body, {"Content-Range": f"bytes */{size}"})
                    code, partial = 206, True
                    self._range_text = f"{start}-{end}"
                # anything else (several ranges, other units): the whole file, 200
            length = max(0, end - start + 1)
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            if partial:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            sent = 0
            if body and length:
                self.wfile.flush()
                sent = self._sendfile(fh, start, length)
            self._logged(code, sent)

    def _sendfile(self, fh, offset: int, length: int) -> int:
        """The byte range to the client with sendfile(2); socket.sendfile waits for a full socket
        buffer itself (the connection has a timeout, so its descriptor is non-blocking)."""
        sent = 0
        try:
            sent = self.connection.sendfile(fh, offset, length)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        if sent < length:
            self.close_connection = True             # a short body must not be followed by another answer
        return sent

    def _logged(self, code: int, sent: int) -> None:
        agent = self.headers.get("User-Agent", "-") if self.headers else "-"
        sys.stderr.write(f'{self.address_string()} [{self.log_date_time_string()}] "{self.requestline}" '
                         f'{code} {sent} range={self._range_text} agent="{agent}"\n')
        sys.stderr.flush()

    def log_request(self, code="-", size="-"):      # every answer is logged once, by _logged
        pass

    def log_error(self, fmt, *args):
        sys.stderr.write(f"{self.address_string()} [{self.log_date_time_string()}] error: {fmt % args}\n")
        sys.stderr.flush()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def serve(root: str, port: int, host: str = "127.0.0.1", follow: tuple[str, ...] = ()) -> Server:
    handler = type("RootHandler", (Handler,), {"root": os.path.realpath(root),
                                               "follow": tuple(os.path.realpath(d) for d in follow)})
    return Server((host, port), handler)


def _stop(signum, frame):
    raise SystemExit(0)                              # out of serve_forever, through server_close


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the directory served (Ironic's [deploy] http_root)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--follow", action="append", default=[],
                        help="a directory that symlinks under the root may lead into (repeatable)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        sys.stderr.write(f"--root {args.root}: not a directory\n")
        return 2
    server = serve(args.root, args.port, follow=tuple(args.follow))
    signal.signal(signal.SIGTERM, _stop)
    sys.stderr.write(f"serving {os.path.realpath(args.root)} on http://127.0.0.1:{server.server_address[1]}\n")
    sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.5)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
