"""The audit pages' content: the drift audit of Magnum (what ``template check --live -o json``
prints) per template and cluster, and a hardware audit (what ``baremetal audit -o json`` prints)
per node. Each finding gets a severity in text; a template, a cluster or a node gets a state in
text (never colour alone). Both documents are read loosely (``.get`` everywhere): a field a later
version adds is ignored, a field it drops is shown empty."""

from __future__ import annotations

# The audit's finding kinds (nodeforge/magnum/audit.py) by severity: "error" when Magnum cannot
# build a cluster from the template now (its image or flavor is gone, no driver serves it, no
# bare-metal node is free) or a cluster's template is gone; any other kind is a "warning" (it
# builds, but off the catalog's policy: an image retired, hidden or not approved, a version that
# does not match or is not maintained, a flavor's shape or root disk, a cluster on such an image).
ERROR_KINDS = frozenset({"image_missing", "image_deleted", "image_status", "flavor_missing", "driver", "capacity",
                         "cluster_template"})
SEVERITIES = ("error", "warning")

# A hardware audit node's status (nodeforge/ironic/audit.py STATUSES) as the page's state class.
_HARDWARE_CLASS = {"ok": "ok", "drift": "warning", "deferred": "warning", "problem": "error",
                   "unreadable": "error", "no-baseline": "other"}


def severity(kind) -> str:
    return "error" if kind in ERROR_KINDS else "warning"


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _state(findings: list[dict]) -> str:
    """A template's or cluster's state in words: ok, or the worst severity and how many findings."""
    if not findings:
        return "ok"
    worst = "error" if any(f["severity"] == "error" for f in findings) else "warning"
    return f"{worst}: {len(findings)} finding" + ("s" if len(findings) > 1 else "")


def template_audit(doc: dict) -> dict:
    """The page's view of a ``template check --live`` document: per template its findings (with
    severity), its clusters (each with its own findings) and its state; the findings about
    clusters whose template Magnum does not list; the counts by severity."""
    findings = [dict(f, severity=severity(f.get("kind"))) for f in _dicts(doc.get("findings"))]
    by_template: dict[str, list[dict]] = {}
    for f in findings:
        by_template.setdefault(str(f.get("template_id") or ""), []).append(f)
    templates = []
    for t in _dicts(doc.get("templates")):
        mine = by_template.pop(str(t.get("template_id") or ""), [])
        clusters = []
        for c in _dicts(t.get("clusters")):
            about = [f for f in mine if f.get("cluster") and f.get("cluster") in (c.get("name"), c.get("uuid"))]
            clusters.append(dict(c, findings=about, state=_state(about)))
        own = [f for f in mine if not f.get("cluster")]
        templates.append(dict(t, findings=own, clusters=clusters, state=_state(own)))
    orphans = [f for group in by_template.values() for f in group]   # no template row: the template is gone
    counts = doc.get("counts") if isinstance(doc.get("counts"), dict) else {}
    maintained = doc.get("maintained") if isinstance(doc.get("maintained"), dict) else {}
    return {"audit": doc, "templates": templates, "orphans": orphans, "counts": counts,
            "maintained": maintained, "severities": {s: sum(1 for f in findings if f["severity"] == s)
                                                     for s in SEVERITIES},
            "state": "ok" if not findings else _state(findings)}


def hardware_audit(doc: dict) -> dict:
    """The page's view of a hardware audit document: its nodes (status in text, drift items,
    problems, error), the outliers and the summary's counts as given."""
    nodes = []
    for n in _dicts(doc.get("nodes")):
        status = str(n.get("status") or "unknown")
        problems = n.get("problems") if isinstance(n.get("problems"), list) else []
        nodes.append(dict(n, status=status, css=_HARDWARE_CLASS.get(status, "other"), drift=_dicts(n.get("items")),
                          problem_texts=[str(p) for p in problems if p]))
    summary = doc.get("summary") if isinstance(doc.get("summary"), dict) else {}
    return {"audit": doc, "nodes": nodes, "outliers": _dicts(doc.get("outliers")),
            "summary": {k: v for k, v in summary.items() if isinstance(v, int) and v}}


def show(value) -> str:
    """A current or wanted value in a cell: None as "(none)", lists joined, the rest as text."""
    if value is None:
        return "(none)"
    if isinstance(value, (list, tuple)):
        return ", ".join(show(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={show(v)}" for k, v in value.items())
    return str(value)
