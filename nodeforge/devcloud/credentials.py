"""Passwords and keys of the local cloud, generated once per state directory
and kept 0600 in ``etc/credentials.json``. Values are wrapped in
:class:`~nodeforge.redact.Secret` so they never print by accident."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

from nodeforge import fsutil
from nodeforge.redact import Secret

USERS = ("admin", "member", "glance", "nova", "placement", "barbican", "ironic")


def _generate() -> dict[str, str]:
    data = {f"{u}_password": secrets.token_urlsafe(18) for u in USERS}
    data["barbican_kek"] = base64.b64encode(secrets.token_bytes(32)).decode()
    return data


def load(etc: Path) -> dict[str, Secret]:
    path = etc / "credentials.json"
    with fsutil.locked(etc / ".credentials.lock"):
        if path.exists():
            raw = json.loads(path.read_text())
        else:
            raw = _generate()
            fsutil.atomic_write(path, json.dumps(raw), 0o600)
    return {k: Secret(v) for k, v in raw.items()}
