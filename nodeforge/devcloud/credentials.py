"""Passwords and keys of the local cloud, generated once per state directory
and kept 0600 in ``etc/credentials.json``. Values are wrapped in
:class:`~nodeforge.redact.Secret` so they never print by accident."""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

from nodeforge.redact import Secret

USERS = ("admin", "member", "glance", "nova", "placement", "barbican", "ironic")


def _generate() -> dict[str, str]:
    data = {f"{u}_password": secrets.token_urlsafe(18) for u in USERS}
    data["barbican_kek"] = base64.b64encode(secrets.token_bytes(32)).decode()
    return data


def load(etc: Path) -> dict[str, Secret]:
    path = etc / "credentials.json"
    if path.exists():
        raw = json.loads(path.read_text())
    else:
        etc.mkdir(parents=True, exist_ok=True)
        raw = _generate()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(raw, fh)
    return {k: Secret(v) for k, v in raw.items()}
