"""What an answer means: one mapping of HTTP status and body to an :class:`ErrorKind`.

:func:`classify` reads the status, the body (each OpenStack service words
its errors its own way: Ironic's ``error_message``/``faultstring``, Nova's
``{"badRequest": {"message": ...}}``, Magnum's ``errors`` list, Glance's and
Keystone's ``message``) and the ``Retry-After`` header into a
:class:`Failure`; :func:`raise_for_response` raises the caller's error class
built from it. The detail and the body kept on a failure are scrubbed
(:func:`nodeforge.redact.scrub`: registered secrets, URL credentials), so no
error built from a failure carries a secret. This is the only module of
nodeforge that compares HTTP status codes (tests/test_layers.py).
"""

from __future__ import annotations

import dataclasses
import email.utils
import enum
import json
import time
from typing import Callable, Mapping

from nodeforge.errors import NodeforgeError
from nodeforge.redact import scrub


class ErrorKind(str, enum.Enum):
    """The kind of a refused call; the values are the ``error_kind`` strings reports show."""

    LOCKED = "locked"              # 409 with a "locked" body (Ironic NodeLocked): transient
    UNAVAILABLE = "unavailable"    # 503 (no free conductor, a restarting service): transient
    DUPLICATE = "duplicate"        # 409 "already exists": permanent
    CONFLICT = "conflict"          # any other 409 (an invalid state transition)
    NOT_FOUND = "not_found"        # 404
    GONE = "gone"                  # 410
    BAD_REQUEST = "invalid"        # 400
    AUTH = "auth"                  # 401, 403
    RATE_LIMITED = "rate_limited"  # 429: transient, Retry-After honoured
    SERVER = "server"              # any other 5xx
    NETWORK = "network"            # no answer: refused, reset, timed out
    OTHER = "other"                # any other status
    INVALID = "invalid"            # alias of BAD_REQUEST (Ironic's name)

    @property
    def retriable(self) -> bool:
        """Retried by the API policy (:data:`API_RETRIABLE`)."""
        return self in API_RETRIABLE


# The kinds the retry policies send again (nodeforge.transport.retry): an answer that refused the
# call for now, or none at all; downloads also retry any 5xx.
API_RETRIABLE = frozenset({ErrorKind.LOCKED, ErrorKind.UNAVAILABLE, ErrorKind.NETWORK, ErrorKind.RATE_LIMITED})
DOWNLOAD_RETRIABLE = API_RETRIABLE | {ErrorKind.SERVER}


# 409 bodies that say what the conflict is (lower case, searched in the detail).
DEFAULT_MARKERS: Mapping[ErrorKind, tuple[str, ...]] = {ErrorKind.DUPLICATE: ("already exists",)}


@dataclasses.dataclass(frozen=True)
class Failure:
    """A refused call: kind, HTTP status (None: no answer), the service's message
    (``detail``) and its whole body (``text``), both scrubbed; ``retry_after``
    seconds when the answer said so."""

    kind: ErrorKind
    status: int | None
    detail: str
    text: str = ""
    retry_after: float | None = None

    @property
    def key(self) -> str:
        """What a retry counter counts it as: the status ("409", "503") or the kind ("network")."""
        return str(self.status) if self.status else self.kind.value

    @property
    def forbidden(self) -> bool:
        """403: authenticated, but not allowed (AUTH covers 401 too)."""
        return self.status == 403

    def short(self, limit: int) -> str:
        """The detail on one line, at most ``limit`` characters."""
        return " ".join(self.detail.split())[:limit]


def detail_of(text: str) -> str:
    """The human message of an OpenStack error body (else the body itself)."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return text or ""
    if not isinstance(data, dict):
        return text
    if "error_message" in data:                      # Ironic: a JSON document as a string
        inner = data["error_message"]
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except ValueError:
                return inner or text
        if isinstance(inner, dict):
            return str(inner.get("faultstring") or text)
        return text
    if data.get("faultstring"):
        return str(data["faultstring"])
    errors = data.get("errors")
    if isinstance(errors, list) and errors:          # Magnum
        return "; ".join(str(e.get("detail") or e.get("title")) if isinstance(e, dict) else str(e) for e in errors)
    if isinstance(data.get("message"), str):         # Glance
        return data["message"]
    for value in data.values():                      # Nova, Keystone: {"itemNotFound": {"message": ...}}
        if isinstance(value, dict) and isinstance(value.get("message"), str):
            return value["message"]
    return text


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date)."""
    if not headers:
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def kind_of(status: int, detail: str = "", markers: Mapping[ErrorKind, tuple[str, ...]] | None = None) -> ErrorKind:
    """The kind of an answer with HTTP ``status`` and message ``detail``."""
    if status == 409:
        low = detail.lower()
        for kind, words in (markers if markers is not None else DEFAULT_MARKERS).items():
            if any(w in low for w in words):
                return kind
        return ErrorKind.CONFLICT
    if status == 503:
        return ErrorKind.UNAVAILABLE
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 410:
        return ErrorKind.GONE
    if status in (401, 403):
        return ErrorKind.AUTH
    if status == 400:
        return ErrorKind.BAD_REQUEST
    if status == 429:
        return ErrorKind.RATE_LIMITED
    if status >= 500:
        return ErrorKind.SERVER
    return ErrorKind.OTHER


def classify(status: int, body: str = "", headers: Mapping[str, str] | None = None, *,
             markers: Mapping[ErrorKind, tuple[str, ...]] | None = None) -> Failure:
    """The :class:`Failure` of an answer: kind from status and body, the service's message."""
    detail = detail_of(body or "")
    return Failure(kind_of(status, detail, markers), status, scrub(detail), scrub(body or ""), retry_after(headers))


def network(exc: BaseException) -> Failure:
    """The :class:`Failure` of a call that got no answer (only the exception's type is kept:
    its text may hold the URL)."""
    return Failure(ErrorKind.NETWORK, None, type(exc).__name__)


def is_success(status: int, expect: tuple[int, ...] | None = None) -> bool:
    return status in expect if expect else status < 400


def failure_of(resp, *, expect: tuple[int, ...] | None = None,
               markers: Mapping[ErrorKind, tuple[str, ...]] | None = None) -> Failure | None:
    """None for an answer that succeeded (a status below 400, or one of ``expect``), else its failure."""
    status = resp.status_code
    if is_success(status, expect):
        return None
    if status < 400:
        # Not the answer the call expects (Magnum: 201 for a create): not a success either.
        return Failure(ErrorKind.OTHER, status, scrub(resp.text or ""), scrub(resp.text or ""))
    return classify(status, resp.text or "", getattr(resp, "headers", None), markers=markers)


class ApiError(NodeforgeError):
    """The default error of a refused call; clients pass their own (``error=``)."""

    message = "{what} failed (HTTP {status}): {detail}"

    def __init__(self, failure: Failure, what: str):
        self.failure = failure
        self.kind = failure.kind
        self.status = failure.status
        super().__init__(what=what, status=failure.status or failure.kind.value, detail=failure.detail)


ErrorFactory = Callable[[Failure, str], BaseException]


def raise_for_response(resp, what: str, *, error: ErrorFactory = ApiError, expect: tuple[int, ...] | None = None,
                       markers: Mapping[ErrorKind, tuple[str, ...]] | None = None) -> None:
    """Raise ``error(failure, what)`` when ``resp`` did not succeed."""
    failure = failure_of(resp, expect=expect, markers=markers)
    if failure is not None:
        raise error(failure, what)
