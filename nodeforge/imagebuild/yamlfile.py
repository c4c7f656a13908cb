"""Round-trip YAML files: load with line numbers, dump unchanged, write atomically.

A thin re-export of the one safe loader, :mod:`nodeforge.schema.loader`
(kept so existing importers work): :func:`load` returns the ruamel.yaml
round-trip tree (comments, key order and quoting survive a rewrite, every
node knows its line), read within the loader's limits (file size, nesting
depth :data:`MAX_DEPTH`, YAML alias expansion), non-UTF-8 or binary text
refused with its line: bad input is a :class:`ConfigError` (exit 2), never a
traceback.
"""

from __future__ import annotations

from pathlib import Path

from nodeforge.schema.loader import (DEFAULT_LIMITS, MAX_DEPTH, Limits, atomic_write, decode, dumps,  # noqa: F401
                                     line_of, load_yaml_tree, read_text as _read_text, tree_line)


def read_text(path: Path, limits: Limits = DEFAULT_LIMITS) -> str:
    """The text of a file a person wrote (size-limited, UTF-8; see :func:`decode`)."""
    return _read_text(path, limits)


def load(path: Path, text: str | None = None, limits: Limits = DEFAULT_LIMITS):
    """Parse ``path`` (or ``text`` labelled as ``path``) into a round-trip tree;
    syntax errors and refused input name file:line."""
    return load_yaml_tree(path, text, limits)
