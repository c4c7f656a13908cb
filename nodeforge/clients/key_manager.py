"""Barbican (the key manager): secrets stored, their metadata and their payload read, over
:mod:`nodeforge.transport` (its retry policy and status mapping). A refused call raises
:class:`KeyManagerError`, or the caller's own error class (``error=``: the signing stage names
what it was doing with the secret)."""

from __future__ import annotations

from typing import Callable

from nodeforge import transport
from nodeforge.errors import NodeforgeError

ErrorFactory = Callable[[transport.Failure, str], Exception]


class KeyManagerError(NodeforgeError):
    message = "Barbican refused {what} (HTTP {status}): {detail}"


def _error(failure: transport.Failure, what: str) -> KeyManagerError:
    return KeyManagerError(what=what, status=failure.status or "no answer", detail=failure.short(300))


def store_secret(conn, body: dict, what: str, *, error: ErrorFactory = _error) -> str:
    """Store a secret (Barbican's ``POST /secrets`` body); returns its id."""
    resp = transport.request(conn.key_manager, "POST", "/secrets", what=what, error=error, json=body)
    return resp.json()["secret_ref"].rsplit("/", 1)[1]


def secret_metadata(conn, secret_id: str, *, error: ErrorFactory = _error) -> dict | None:
    """A secret's metadata (None: no such secret)."""
    meta = transport.request(conn.key_manager, "GET", f"/secrets/{secret_id}", what=f"reading secret {secret_id}",
                             error=error, missing_ok=True)
    return None if meta is None else (transport.json_of(meta) or {})


def secret_payload(conn, secret_id: str, *, error: ErrorFactory = _error) -> bytes:
    """A secret's payload as bytes (``application/octet-stream``)."""
    resp = transport.request(conn.key_manager, "GET", f"/secrets/{secret_id}/payload", what=f"reading {secret_id}",
                             error=error, expect=(200,), headers={"Accept": "application/octet-stream"})
    return resp.content
