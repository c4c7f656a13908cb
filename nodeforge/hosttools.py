"""Host tools nodeforge runs, and the Debian package that provides each.

The table is ``manifests/host-packages.txt`` (``make setup`` installs every
package in it), so an error for a missing tool names the package to install.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from nodeforge.errors import MissingToolError

_MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "host-packages.txt"


@functools.lru_cache(maxsize=1)
def packages() -> dict[str, str]:
    """tool -> Debian package."""
    table: dict[str, str] = {}
    try:
        text = _MANIFEST.read_text()
    except OSError:
        return table
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            for tool in fields[1:]:
                table[tool] = fields[0]
    return table


def require(*tools: str, path: str | None = None) -> dict[str, str]:
    """Resolve each tool on PATH (or ``path``); raise naming the package and
    the make target that installs it for the first one missing."""
    found = {}
    for tool in tools:
        where = shutil.which(tool, path=path)
        if where is None:
            raise MissingToolError(tool=tool, package=packages().get(tool, tool))
        found[tool] = where
    return found
