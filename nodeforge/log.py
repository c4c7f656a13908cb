"""Logging set-up shared by the CLI and the library: text or JSON lines on
stderr, with every registered secret masked (see :mod:`nodeforge.redact`)."""

from __future__ import annotations

import json
import logging
import sys
import time

from nodeforge.redact import ScrubFilter


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            data["exception"] = record.exc_text
        return json.dumps(data)


def error_line(message: str, *, hint: str | None = None, exit_code: int | None = None) -> str:
    """A failed command's error as one JSON line (``--log-format json``),
    shaped like the log records (the caller has masked the text)."""
    data = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "error", "logger": "nodeforge",
            "message": message, "hint": hint, "exit_code": exit_code}
    return json.dumps(data)


def setup(verbose: int = 0, fmt: str = "text", stream=None) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ScrubFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_nodeforge", False):
            root.removeHandler(old)
    handler._nodeforge = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    # Library chatter (keystoneauth, urllib3) only at -vv.
    for noisy in ("keystoneauth", "urllib3", "stevedore", "openstack"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
