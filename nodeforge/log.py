"""Logging set-up shared by the CLI and the library: text or JSON lines on
stderr, with every registered secret masked (see :mod:`nodeforge.redact`)."""

from __future__ import annotations

import json
import logging
import sys
import time

from nodeforge.redact import ScrubFilter, scrub

# The stderr format chosen by the last setup() (--log-format).
_format = "text"


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


def say(message: str, *, level: str = "warning", prefix: bool = True, stream=None) -> None:
    """A line for the person running the command, on stderr: ``warning: ...``
    (or the bare ``message`` without ``prefix``), or with ``--log-format json``
    one JSON line shaped like the log records; registered secrets masked."""
    text = scrub(message)
    stream = stream or sys.stderr
    if _format == "json":
        line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level,
                           "logger": "nodeforge", "message": text})
    else:
        line = f"{level}: {text}" if prefix else text
    stream.write(line + "\n")
    stream.flush()


def setup(verbose: int = 0, fmt: str = "text", stream=None) -> None:
    global _format
    _format = fmt
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
    # Library chatter (keystoneauth, urllib3): errors only; warnings at -v, everything at -vv.
    for noisy in ("keystoneauth", "urllib3", "stevedore", "openstack"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING if verbose else logging.ERROR)
