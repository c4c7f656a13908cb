"""Ownership scopes: the rule every scope name follows and the default a
declaration file without ``scope:`` gets. Shared by flavors, inventories,
the lockfile and images (a base module: it imports no feature package)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

SCOPE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
SCOPE_RULE = "1-63 characters of a-z 0-9 . _ -, starting with a letter or digit"


def scope_problem(value: object) -> str | None:
    """Why ``value`` is not a valid scope (None when it is one)."""
    if not isinstance(value, str) or not SCOPE_PATTERN.match(value):
        return f"must be {SCOPE_RULE} (got {value!r})"
    return None


def derive_scope(path: str | Path) -> str:
    """The default scope of a declaration file without ``scope:``:
    ``<stem>-<10 hex digits>``, the digits a SHA-256 of the file's path
    relative to the root of the git checkout it is in (the nearest parent
    holding ``.git``), else of its resolved absolute path.

    So the same file of the same repository derives the same scope on every
    machine and from every working directory. Caveats: two repositories that
    keep a file at the same relative path (``manifests/flavors.yaml``) derive
    the SAME scope; a file outside a checkout gets a per-machine scope, and
    moving or renaming a file changes it. Set ``scope:`` explicitly."""
    p = Path(path).resolve()
    root = next((d for d in p.parents if (d / ".git").exists()), None)
    key = f"git:{p.relative_to(root).as_posix()}" if root is not None else f"path:{p.as_posix()}"
    stem = re.sub(r"[^a-z0-9._-]+", "-", p.stem.lower()).strip("-._")[:40] or "file"
    return f"{stem}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:10]}"
