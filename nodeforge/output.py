"""Render command results as a human table, JSON or YAML.

Commands return plain data (dicts and lists); only this module decides how it
looks. JSON/YAML output is what scripts and CI consume, so it is complete and
stable; tables show the chosen columns. Secrets are masked on every path, by
field (:func:`nodeforge.redact.scrub_obj`).

Within a CLI run (:func:`collect`), JSON/YAML documents are held until the
command ends, so that stdout is always one valid document: the command's
result, or, when it fails, the error with the result inside it
(``nodeforge.cli.report_error``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Iterable, Sequence

import yaml
from rich.console import Console
from rich.table import Table

from nodeforge.redact import scrub_obj

FORMATS = ("table", "json", "yaml")


def _default(obj: Any):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "value"):  # enums
        return obj.value
    return str(obj)


def plain(data: Any) -> Any:
    """``data`` as plain JSON types with secrets masked by field."""
    return scrub_obj(json.loads(json.dumps(data, default=_default)))


def _format(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False)
    raise ValueError(f"not a data format: {fmt}")


def dumps(data: Any, fmt: str) -> str:
    return _format(plain(data), fmt)


_collected: list[tuple[Any, str]] | None = None


@contextlib.contextmanager
def collect():
    """Hold the JSON/YAML documents emitted to stdout until :func:`flush`
    (the CLI wraps every command in this)."""
    global _collected
    previous, _collected = _collected, []
    try:
        yield _collected
    finally:
        _collected = previous


def flush(documents: list[tuple[Any, str]], stream=None) -> None:
    """Write the held documents, and forget them."""
    stream = stream or sys.stdout
    for data, fmt in documents:
        stream.write(_format(data, fmt).rstrip("\n") + "\n")
    documents.clear()


def emit(
    data: Any,
    fmt: str,
    *,
    columns: Sequence[str] | None = None,
    rows: Iterable[dict] | None = None,
    title: str | None = None,
    stream=None,
) -> None:
    """Print ``data`` in ``fmt``. For tables, ``rows`` (default: ``data`` when
    it is a list) are shown with ``columns`` (default: keys of the first row)."""
    if fmt in ("json", "yaml"):
        if stream is None and _collected is not None:
            _collected.append((plain(data), fmt))
        else:
            (stream or sys.stdout).write(dumps(data, fmt).rstrip("\n") + "\n")
        return
    stream = stream or sys.stdout
    if rows is None:
        rows = data if isinstance(data, list) else [data]
    rows = [scrub_obj(json.loads(json.dumps(r, default=_default))) for r in rows]
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(row.get(col)) for col in columns))
    Console(file=stream, width=200 if not stream.isatty() else None).print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)
