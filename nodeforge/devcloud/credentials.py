"""Passwords and keys of the local cloud, generated once per state directory
and kept 0600 in ``etc/credentials.json``. Values are wrapped in
:class:`~nodeforge.redact.Secret` so they never print by accident."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

from nodeforge.base import fs
from nodeforge.redact import Secret

USERS = ("admin", "member", "glance", "nova", "placement", "barbican", "ironic", "magnum", "neutron",
         "magnum_domain_admin", "rabbitmq")


def _generate() -> dict[str, str]:
    data = {f"{u}_password": secrets.token_urlsafe(18) for u in USERS}
    data["barbican_kek"] = base64.b64encode(secrets.token_bytes(32)).decode()
    return data


def load(etc: Path) -> dict[str, Secret]:
    path = etc / "credentials.json"
    with fs.locked(etc / ".credentials.lock"):
        raw = json.loads(path.read_text()) if path.exists() else {}
        # A state directory made before a service was added gets that
        # service's secret now; existing values are never changed.
        missing = {k: v for k, v in _generate().items() if k not in raw}
        if missing:
            raw.update(missing)
            fs.atomic_write(path, json.dumps(raw), 0o600)
    return {k: Secret(v) for k, v in raw.items()}
