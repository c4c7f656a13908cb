"""The documents a report is made of, found in a run directory by their shape and read by the one
bounded reader: a pipeline run record (``run.json``, schema ``nodeforge-pipeline-run/1``),
enrollment reports (``baremetal enroll --report FILE.json``: ``command`` and ``nodes``), a
snapshot of the image catalog (``catalog.json``, schema ``nodeforge-catalog/1``, or what
``image list -o json`` prints: a list of image rows), the drift audit of Magnum (what
``template check --live -o json`` prints: ``findings``, ``templates`` and ``counts``) and hardware
audits (what ``baremetal audit -o json`` prints: ``summary`` and ``nodes``, each node with a
``status``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodeforge import schema
from nodeforge.schema import loader
from nodeforge.errors import ConfigError
from nodeforge.pipeline.runrecord import SCHEMA as RUN_SCHEMA
from nodeforge.publish.catalog import CATALOG_SCHEMA
from nodeforge.redact import scrub_obj

LIMITS = schema.Limits(max_bytes=32 << 20, max_values=2_000_000)
MAX_FILES = 200


@dataclasses.dataclass
class Documents:
    root: Path
    run: dict | None = None                  # the pipeline run record
    batches: dict[str, dict] = dataclasses.field(default_factory=dict)   # file name -> enrollment report
    catalog: dict | None = None              # the image catalog snapshot (images: image list rows)
    audits: dict[str, dict] = dataclasses.field(default_factory=dict)     # file name -> template check --live
    hardware: dict[str, dict] = dataclasses.field(default_factory=dict)   # file name -> hardware audit
    verify: dict[str, dict] = dataclasses.field(default_factory=dict)     # minor -> the run's verify report
    skipped: list[str] = dataclasses.field(default_factory=list)        # JSON files that are neither

    def __bool__(self) -> bool:
        return self.run is not None or bool(self.batches) or self.catalog is not None or bool(self.audits) \
            or bool(self.hardware)


_ROW_KEYS = {"id", "k8s", "variant", "state"}


def gc_paused():
    """The cyclic garbage collector paused while a report's documents are read and its pages
    rendered (:func:`nodeforge.schema.loader.collector_paused`): they are large trees of new,
    acyclic objects, and each collection walks all of them again, so the time grew faster than the
    data (a 500-node batch took 12x the time of a 50-node one; 9x paused, bench/bench_report.py).
    Reference counting still frees everything; the documents are bounded (:data:`LIMITS`,
    :data:`MAX_FILES`)."""
    return loader.collector_paused()


def kind_of(doc) -> str | None:
    """``run``, ``batch``, ``catalog``, ``audit`` (template check --live), ``hardware`` (a hardware
    audit) or None (not a document a report is made of)."""
    if isinstance(doc, list):       # image list -o json: rows of the catalog
        ok = bool(doc) and all(isinstance(r, dict) and _ROW_KEYS <= r.keys() for r in doc)
        return "catalog" if ok else None
    if not isinstance(doc, dict):
        return None
    if doc.get("schema") == CATALOG_SCHEMA and isinstance(doc.get("images"), list):
        return "catalog"
    if doc.get("schema") == RUN_SCHEMA and isinstance(doc.get("stages"), list):
        return "run"
    if isinstance(doc.get("command"), str) and isinstance(doc.get("nodes"), list):
        return "batch"
    if all(isinstance(doc.get(k), list) for k in ("findings", "templates")) and isinstance(doc.get("counts"), dict):
        return "audit"
    nodes = doc.get("nodes")
    if isinstance(doc.get("summary"), dict) and isinstance(nodes, list) and \
            all(isinstance(n, dict) and "name" in n and "status" in n for n in nodes):
        return "hardware"
    return None


def find(root: Path | str, catalog: dict | None = None) -> Documents:
    """Every report document directly in ``root`` (a run directory, or one holding enroll reports);
    each is re-scrubbed (the writers scrubbed them: a second mask costs nothing). ``catalog``: a
    fresh snapshot (``report html --cloud``), in place of a saved one."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(path=str(root), detail="not a directory (give a pipeline run directory, or one "
                                                  "holding 'baremetal enroll --report FILE.json' reports)")
    docs = Documents(root)
    files = sorted(p for p in root.iterdir() if p.suffix == ".json" and p.is_file())
    if len(files) > MAX_FILES:
        raise ConfigError(path=str(root), detail=f"{len(files)} JSON files; a report reads at most {MAX_FILES}")
    with gc_paused():
        for path in files:
            _read_one(docs, path)
        if docs.run is not None:
            _read_verify_reports(docs)
    if catalog is not None:
        docs.catalog = scrub_obj(as_catalog(catalog, "the cloud, now"))
    if not docs:
        raise ConfigError(path=str(root), detail="holds no run record (run.json), no enrollment report "
                                                 "(baremetal enroll --report FILE.json), no catalog "
                                                 "(catalog.json) and no audit (template check --live -o json, "
                                                 "baremetal audit -o json)")
    return docs


def _read_one(docs: Documents, path: Path) -> None:
    """One JSON file into ``docs`` by its kind (or into ``skipped``, with why)."""
    try:
        doc = schema.read_json(path, LIMITS)
    except ConfigError as exc:
        docs.skipped.append(f"{path.name}: {exc}")
        return
    kind = kind_of(doc)
    if kind == "run":
        docs.run = scrub_obj(doc)
    elif kind == "batch":
        docs.batches[path.name] = scrub_obj(doc)
    elif kind == "catalog":
        docs.catalog = scrub_obj(as_catalog(doc, path.name))
    elif kind == "audit":
        docs.audits[path.name] = scrub_obj(doc)
    elif kind == "hardware":
        docs.hardware[path.name] = scrub_obj(doc)
    else:
        docs.skipped.append(f"{path.name}: not a run record, an enrollment report, a catalog or an audit")


def _read_verify_reports(docs: Documents) -> None:
    """The verify reports the run record names (each verify stage's ``verify_json``: the build's
    ``verify.json``, with every boot's timeline), read when they lie inside the run directory, as the
    pipeline writes them; one elsewhere is listed as not read (the report reads nothing outside)."""
    root = docs.root.resolve()
    for stage in docs.run.get("stages") or []:
        outputs = stage.get("outputs") if isinstance(stage, dict) and stage.get("name") == "verify" else None
        path = outputs.get("verify_json") if isinstance(outputs, dict) else None
        if not isinstance(path, str):
            continue
        real = Path(path).resolve()
        if not real.is_relative_to(root) or not real.is_file():
            docs.skipped.append(f"{Path(path).name} of verify [{stage.get('minor')}]: not in this run directory, "
                                "not read (no boot timelines)")
            continue
        try:
            doc = schema.read_json(real, LIMITS)
        except ConfigError as exc:
            docs.skipped.append(f"{real.relative_to(root)}: {exc}")
            continue
        if isinstance(doc, dict) and isinstance(doc.get("variants"), dict):
            docs.verify[str(stage.get("minor") or "")] = scrub_obj(doc)


def as_catalog(doc, source: str) -> dict:
    """A catalog document from either shape (the snapshot, or image list rows)."""
    if isinstance(doc, list):
        return {"schema": CATALOG_SCHEMA, "cloud": None, "scope": None, "taken_at": None, "images": doc,
                "source": source}
    return dict(doc, source=source)
