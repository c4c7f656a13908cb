"""The nodeforge CSV format: one node per row, the header names the columns."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from nodeforge.schema import Document, Problem
from nodeforge.ironic.inventory.model import InventoryError, Location
from nodeforge.ironic.inventory.declare import CSV_COLUMNS, CSV_PREFIXES, CsvRow
from nodeforge.ironic.inventory.entries import _Entry, _Reader


def _csv_document(path: Path, text: str) -> tuple[Document, list[tuple[int, list[str]]]]:
    """The CSV's records (comment and blank lines dropped) with their lines, and a Document
    whose key path ``(i, column)`` is record i's line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        while True:
            start = reader.line_num + 1
            record = next(reader, None)
            if record is None:
                break
            if record and any(c.strip() for c in record) and not record[0].lstrip().startswith("#"):
                rows.append((start, [c.strip() for c in record]))
    except csv.Error as exc:
        raise InventoryError(str(path), [Problem(str(path), reader.line_num, (), f"malformed CSV: {exc}")]) from None
    data = [r for _, r in rows]
    return Document(str(path), "csv", data, data, text, _csv_lines=[line for line, _ in rows]), rows


def _csv_scalar(cell: str) -> Any:
    low = cell.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if re.fullmatch(r"-?\d+", cell):
        return int(cell)
    return cell


def _csv_entries(reader: _Reader, rows: list[tuple[int, list[str]]]) -> list[_Entry] | None:
    if not rows:
        return []
    header = rows[0][1]
    seen: dict[str, int] = {}
    for h in header:
        seen[h] = seen.get(h, 0) + 1
    for h in sorted(h for h, n in seen.items() if n > 1):
        reader.problem((0, h), f"column {h!r} appears twice in the header")
    for h in header:
        if h not in CSV_COLUMNS and not h.startswith(CSV_PREFIXES):
            reader.problem((0, h), f"unknown column (columns: {', '.join(CsvRow.model_fields)}, "
                                   f"or {', '.join(p + 'KEY' for p in CSV_PREFIXES)})")
    if "name" not in header or "bmc_address" not in header:
        reader.problem((0,), "the header needs at least 'name' and 'bmc_address'")
        return None
    columns = {("bmc", c[4:]): c for c in header if c.startswith("bmc_")}
    entries = []
    for i, (line, record) in enumerate(rows[1:], start=1):
        if len(record) != len(header):
            reader.problem((i,), f"{len(record)} cells for {len(header)} columns")
            continue
        fields: dict[str, Any] = {}
        for h, cell in zip(header, record):
            if cell == "" or (h not in CSV_COLUMNS and not h.startswith(CSV_PREFIXES)):
                continue
            if h.startswith("bmc_"):
                fields.setdefault("bmc", {})[h[4:]] = _csv_scalar(cell) if h == "bmc_verify_ca" else cell
            elif h in ("macs", "traits"):
                fields[h] = [x for x in re.split(r"[;\s]+", cell) if x]
            elif h == "cleaning":
                fields["cleaning"] = cell
            elif h == "inspect":
                fields[h] = _csv_scalar(cell)
            elif h.startswith(CSV_PREFIXES):
                group, _, key = h.partition(".")
                fields.setdefault(group, {})[key] = _csv_scalar(cell)
            else:
                fields[h] = cell

        def remap(kp: tuple, i=i) -> tuple:
            if kp[:1] == ("bmc",):
                return (i, columns.get(kp[:2], f"bmc_{kp[1]}" if len(kp) > 1 else "bmc_address"))
            if len(kp) >= 2 and kp[0] in ("properties", "extra", "interfaces"):
                return (i, f"{kp[0]}.{kp[1]}")
            return (i, *kp[:1])
        entries.append(_Entry(fields, remap, Location(reader.document.path, line, i)))
    return entries


# --- BMC from Ironic's driver_info (python-ironicclient and Bifrost) ---------------------------

