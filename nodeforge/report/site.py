"""The static site: one page per document (the run as a timeline, each enrollment batch as a
rack of tiles, the image catalog as a table per Kubernetes minor, each audit as its findings per
template and cluster or per node) and an index, rendered by
jinja2 with the CSS inline, plain SVG for the timeline and no script at all: a node's details
open with ``<details>`` (keyboard and screen readers included), states are written as text
beside their colour, and nothing is fetched from anywhere."""

from __future__ import annotations

import dataclasses
import datetime
import re
from pathlib import Path

import jinja2

from nodeforge.base.fs import atomic_write
from nodeforge.errors import ConfigError
from nodeforge.pipeline import runrecord
from nodeforge.redact import scrub
from nodeforge.report import audits, documents
from nodeforge.report.documents import Documents

TEMPLATES = Path(__file__).with_name("templates")
# A node's provision state (or its failure) as one of the rack's categories, each with a colour.
CATEGORIES = ("available", "enrolled", "inspecting", "cleaning", "deploying", "active", "failed", "maintenance",
              "other")
_STATE_CATEGORY = (
    (re.compile(r"fail|error"), "failed"),
    (re.compile(r"^(enroll|manageable|verifying)$"), "enrolled"),
    (re.compile(r"inspect"), "inspecting"),
    (re.compile(r"clean"), "cleaning"),
    (re.compile(r"deploy|wait call-back"), "deploying"),
    (re.compile(r"^active$"), "active"),
    (re.compile(r"^available$"), "available"),
)
TIMELINE_WIDTH = 900


@dataclasses.dataclass
class Page:
    name: str            # file name in the site
    title: str
    kind: str            # index | run | batch | catalog | audit | hardware
    source: str | None = None   # the document's file name in the run directory (a batch, an audit)


def category(node: dict) -> str:
    """The rack category of an enrollment report's node: failed when it failed, else by its state."""
    if not node.get("ok", True):
        return "failed"
    if node.get("maintenance"):
        return "maintenance"
    state = str(node.get("state") or "").lower()
    for pattern, name in _STATE_CATEGORY:
        if pattern.search(state):
            return name
    return "other"


def _parse_time(value) -> datetime.datetime | None:
    try:
        return runrecord.parse_iso(value) if isinstance(value, str) else None
    except ValueError:
        return None


def timeline(run: dict) -> dict:
    """One bar per recorded stage, placed at its start (from the run's creation) and as long as its
    recorded ``seconds`` (the bar's label and ``data-seconds`` are exactly the record's figure)."""
    created = _parse_time(run.get("created"))
    bars, cursor = [], 0.0
    for i, s in enumerate(run.get("stages") or []):
        if not isinstance(s, dict):
            continue
        seconds = s.get("seconds") if isinstance(s.get("seconds"), (int, float)) else None
        started = _parse_time(s.get("started"))
        start = (started - created).total_seconds() if started and created else cursor
        cursor = max(cursor, start + (seconds or 0))
        label = f"{s.get('name')}" + (f" [{s.get('minor')}]" if s.get("minor") else "")
        error = s.get("error")
        bars.append({"index": i, "label": label, "status": str(s.get("status")), "seconds": seconds,
                     "start": max(start, 0.0), "attempts": s.get("attempts"),
                     "error": (error.get("message") or str(error)) if isinstance(error, dict) else (error or "")})
    span = max([b["start"] + (b["seconds"] or 0) for b in bars] + [1.0])
    scale = (TIMELINE_WIDTH - 260) / span
    for row, b in enumerate(bars):
        b.update(y=row * 26 + 10, x=260 + b["start"] * scale, width=max((b["seconds"] or 0) * scale, 2))
    return {"bars": bars, "span": span, "height": len(bars) * 26 + 30, "width": TIMELINE_WIDTH}


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             # every string shown is masked once more (the documents were redacted already)
                             finalize=lambda v: scrub(v) if isinstance(v, str) else v)
    env.filters["seconds"] = lambda v: "" if v is None else f"{v:.1f} s"
    env.filters["show"] = audits.show
    return env


def plan(docs: Documents) -> list[Page]:
    """The pages ``docs`` make (what ``--dry-run`` shows)."""
    pages = [Page("index.html", "nodeforge report", "index")]
    if docs.run is not None:
        pages.append(Page("run.html", f"Run {docs.run.get('run_id')}", "run"))
    for name in docs.batches:
        pages.append(Page(f"batch-{Path(name).stem}.html", f"Batch {name}", "batch", source=name))
    if docs.catalog is not None:
        cloud = docs.catalog.get("cloud")
        pages.append(Page("catalog.html", "Image catalog" + (f" of {cloud}" if cloud else ""), "catalog",
                          source=docs.catalog.get("source")))
    for name in docs.audits:
        pages.append(Page(f"audit-{Path(name).stem}.html", f"Template audit {name}", "audit", source=name))
    for name in docs.hardware:
        pages.append(Page(f"hardware-{Path(name).stem}.html", f"Hardware audit {name}", "hardware", source=name))
    return pages


def catalog_groups(catalog: dict) -> list[dict]:
    """The catalog's images by Kubernetes minor (newest first), each group's rows newest first,
    with the counts of approved and in-use images."""
    groups: dict[str, list[dict]] = {}
    for row in catalog.get("images") or []:
        if isinstance(row, dict):
            k8s = str(row.get("k8s") or "")
            groups.setdefault(".".join(k8s.lstrip("v").split(".")[:2]) or "unknown", []).append(row)

    def minor_key(minor: str):
        return tuple(int(p) if p.isdigit() else -1 for p in minor.split("."))

    out = []
    for minor in sorted(groups, key=minor_key, reverse=True):
        rows = sorted(groups[minor], key=lambda r: (str(r.get("build_date") or ""), str(r.get("variant") or "")),
                      reverse=True)
        used = [r for r in rows if isinstance(r.get("used_by"), list) and r["used_by"]]
        out.append({"minor": minor, "rows": rows, "approved": sum(1 for r in rows if r.get("state") == "approved"),
                    "in_use": len(used)})
    return out


# A boot's parts, between the markers of the verify report's ``timeline`` (seconds from the start).
BOOT_PARTS = (("firmware", "firmware", "bootloader"), ("boot loader", "bootloader", "kernel"),
              ("kernel", "kernel", "userspace"), ("userspace", "userspace", "checks"), ("checks", "checks", "report"))


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def boots(verify: dict[str, dict]) -> dict:
    """Every verify boot of the run (minor, variant): its result, accelerator and why, time to the
    verdict, and one segment per part of the boot (:data:`BOOT_PARTS`), laid out as a bar each."""
    rows = []
    for minor, report in sorted(verify.items()):
        for variant, v in sorted((report.get("variants") or {}).items()):
            if not isinstance(v, dict):
                continue
            marks = v.get("timeline") if isinstance(v.get("timeline"), dict) else {}
            parts = []
            for label, a, b in BOOT_PARTS:
                start, end = _number(marks.get(a)), _number(marks.get(b))
                if start is not None and end is not None:
                    parts.append({"label": label, "start": start, "seconds": max(end - start, 0.0)})
            seconds = v.get("seconds") if isinstance(v.get("seconds"), dict) else {}
            rows.append({"minor": minor, "variant": variant, "passed": v.get("passed") is True,
                         "accel": v.get("accel"), "why": v.get("accel_reason"), "fallback": v.get("fallback"),
                         "seconds": _number(seconds.get("boot_to_verdict")), "parts": parts,
                         "by_part": {p["label"]: p["seconds"] for p in parts}})
    span = max([r["seconds"] or 0 for r in rows] + [p["start"] + p["seconds"] for r in rows for p in r["parts"]]
               + [1.0])
    scale = (TIMELINE_WIDTH - 260) / span
    for i, r in enumerate(rows):
        r["y"] = i * 26 + 10
        for p in r["parts"]:
            p.update(x=260 + p["start"] * scale, width=max(p["seconds"] * scale, 1))
    return {"rows": rows, "parts": [label for label, _, _ in BOOT_PARTS], "height": len(rows) * 26 + 30,
            "width": TIMELINE_WIDTH}


def stage_outputs(run: dict, name: str) -> list[tuple[str, dict]]:
    """(minor, outputs) of every stage ``name`` of the run that recorded outputs."""
    return [(str(s.get("minor") or ""), s["outputs"]) for s in run.get("stages") or []
            if isinstance(s, dict) and s.get("name") == name and isinstance(s.get("outputs"), dict)]


CANARY_TIMES = ("allocate", "deploy", "first_boot", "checks", "clean")


def canaries(run: dict) -> list[dict]:
    """One row per canary class of the run's canary stages: result, node and its times."""
    rows = []
    for minor, out in stage_outputs(run, "canary"):
        for rc, v in sorted((out.get("classes") or {}).items()):
            if isinstance(v, dict):
                seconds = v.get("seconds") if isinstance(v.get("seconds"), dict) else {}
                rows.append({"minor": minor, "resource_class": rc, "passed": v.get("passed") is True,
                             "node": v.get("node"), "seconds": {k: _number(seconds.get(k)) for k in CANARY_TIMES}})
    return rows


def _run_context(docs: Documents, page: Page) -> dict:
    approved = docs.run.get("approved") if isinstance(docs.run.get("approved"), dict) else {}
    rows = [(minor, variant, image) for minor, variants in approved.items() if isinstance(variants, dict)
            for variant, image in variants.items()]
    builds = [(minor, {k: _number(v) for k, v in out["build_seconds"].items()})
              for minor, out in stage_outputs(docs.run, "build") if isinstance(out.get("build_seconds"), dict)]
    return {"run": docs.run, "timeline": timeline(docs.run), "approved": rows, "boots": boots(docs.verify),
            "canaries": canaries(docs.run), "canary_times": CANARY_TIMES, "builds": builds}


def _batch_context(docs: Documents, page: Page) -> dict:
    batch = docs.batches[page.source]
    nodes = [dict(n, category=category(n)) for n in batch.get("nodes") or [] if isinstance(n, dict)]
    counts = {c: sum(1 for n in nodes if n["category"] == c) for c in CATEGORIES}
    return {"batch": batch, "nodes": nodes, "counts": {c: n for c, n in counts.items() if n}, "categories": CATEGORIES}


_CONTEXTS = {
    "index": lambda docs, page: {},
    "run": _run_context,
    "batch": _batch_context,
    "catalog": lambda docs, page: {"catalog": docs.catalog, "groups": catalog_groups(docs.catalog)},
    "audit": lambda docs, page: audits.template_audit(docs.audits[page.source]),
    "hardware": lambda docs, page: audits.hardware_audit(docs.hardware[page.source]),
}


def render(docs: Documents) -> dict[str, str]:
    """``{file name: HTML}`` of the site."""
    env = _environment()
    pages = plan(docs)
    out = {}
    with documents.gc_paused():
        for page in pages:
            context = {"page": page, "pages": pages, "source": str(docs.root), "skipped": docs.skipped}
            context |= _CONTEXTS[page.kind](docs, page)
            out[page.name] = env.get_template(f"{page.kind}.html.j2").render(**context)
    return out


def write(docs: Documents, dest: Path | str) -> list[Path]:
    """Write the site into ``dest`` (created; each page replaced atomically); the paths written."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, html in render(docs).items():
        written.append(atomic_write(dest / name, html))
    return written


def server(site_dir: Path | str, port: int = 8000, host: str = "127.0.0.1"):
    """An HTTP server for a written site, on loopback only (``report serve``): the caller runs
    ``serve_forever`` and closes it. Only files inside ``site_dir`` are served (the standard library's
    static handler, which refuses paths leading out)."""
    import functools
    import http.server

    site_dir = Path(site_dir)
    if not (site_dir / "index.html").is_file():
        raise ConfigError(path=str(site_dir), detail="no index.html: write the site first (report html RUN_DIR "
                                                     "--dest DIR)")
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise ConfigError(path=host, detail="report serve listens on loopback only")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):      # requests are not logged (a report is local and read-only)
            pass

    handler = functools.partial(Quiet, directory=str(site_dir))
    return http.server.ThreadingHTTPServer((host, port), handler)
