"""Keep secrets out of every log line, error, report and exception.

Two mechanisms work together:

* :class:`Secret` wraps a sensitive value; its ``str``/``repr`` are masked, so
  a secret that slips into an f-string or a traceback prints as ``***``.
* :func:`register` records the raw value of every secret nodeforge reads; the
  logging filter and :func:`scrub` replace any registered value found in text.
"""

from __future__ import annotations

import logging
import threading

MASK = "***"
_lock = threading.Lock()
_known: set[str] = set()


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value
        register(value)

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return MASK

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self):  # never pickle the value by accident
        raise TypeError("Secret values cannot be pickled")


def register(value: str | None) -> None:
    # Very short values would mask unrelated text; they are still wrapped in
    # Secret, so they never print through nodeforge's own formatting.
    if value and len(value) >= 4:
        with _lock:
            _known.add(value)


def scrub(text: str) -> str:
    if not text:
        return text
    with _lock:
        values = sorted(_known, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_obj(obj):
    """Return a copy of a JSON-like structure with secrets masked."""
    if isinstance(obj, Secret):
        return MASK
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v) for v in obj]
    return obj


class ScrubFilter(logging.Filter):
    """Logging filter that masks registered secrets in the final message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must still log
            message = str(record.msg)
        record.msg = scrub(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        return True
