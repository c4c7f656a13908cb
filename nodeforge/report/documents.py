"""The documents a report is made of, found in a run directory by their shape and read by the one
bounded reader: a pipeline run record (``run.json``, schema ``nodeforge-pipeline-run/1``) and
enrollment reports (``baremetal enroll --report FILE.json``: ``command`` and ``nodes``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodeforge import schema
from nodeforge.errors import ConfigError
from nodeforge.pipeline.runrecord import SCHEMA as RUN_SCHEMA
from nodeforge.redact import scrub_obj

LIMITS = schema.Limits(max_bytes=32 << 20, max_values=2_000_000)
MAX_FILES = 200


@dataclasses.dataclass
class Documents:
    root: Path
    run: dict | None = None                  # the pipeline run record
    batches: dict[str, dict] = dataclasses.field(default_factory=dict)   # file name -> enrollment report
    skipped: list[str] = dataclasses.field(default_factory=list)        # JSON files that are neither

    def __bool__(self) -> bool:
        return self.run is not None or bool(self.batches)


def kind_of(doc) -> str | None:
    """``run``, ``batch`` or None (not a document a report is made of)."""
    if not isinstance(doc, dict):
        return None
    if doc.get("schema") == RUN_SCHEMA and isinstance(doc.get("stages"), list):
        return "run"
    if isinstance(doc.get("command"), str) and isinstance(doc.get("nodes"), list):
        return "batch"
    return None


def find(root: Path | str) -> Documents:
    """Every report document directly in ``root`` (a run directory, or one holding enroll reports);
    each is re-scrubbed (the writers scrubbed them: a second mask costs nothing)."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(path=str(root), detail="not a directory (give a pipeline run directory, or one "
                                                  "holding 'baremetal enroll --report FILE.json' reports)")
    docs = Documents(root)
    files = sorted(p for p in root.iterdir() if p.suffix == ".json" and p.is_file())
    if len(files) > MAX_FILES:
        raise ConfigError(path=str(root), detail=f"{len(files)} JSON files; a report reads at most {MAX_FILES}")
    for path in files:
        try:
            doc = schema.read_json(path, LIMITS)
        except ConfigError as exc:
            docs.skipped.append(f"{path.name}: {exc}")
            continue
        kind = kind_of(doc)
        if kind == "run":
            docs.run = scrub_obj(doc)
        elif kind == "batch":
            docs.batches[path.name] = scrub_obj(doc)
        else:
            docs.skipped.append(f"{path.name}: not a run record or an enrollment report")
    if not docs:
        raise ConfigError(path=str(root), detail="holds no run record (run.json) and no enrollment report "
                                                 "(baremetal enroll --report FILE.json)")
    return docs
