"""Write oslo.config-style INI files from nested dicts (values may be Secret)."""

from __future__ import annotations

from pathlib import Path

from nodeforge.base import fs

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
    return fs.atomic_write(path, render(sections), 0o600)
