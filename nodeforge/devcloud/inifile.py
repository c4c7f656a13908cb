"""Write oslo.config-style INI files from nested dicts (values may be Secret)."""

from __future__ import annotations

import os
from pathlib import Path

from nodeforge.redact import Secret


def render(sections: dict[str, dict[str, object]]) -> str:
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if isinstance(value, Secret):
                value = value.reveal()
            elif isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


def write(path: Path, sections: dict[str, dict[str, object]]) -> Path:
    """Write atomically with mode 0600 (config files hold service passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(render(sections))
    os.replace(tmp, path)
    return path
