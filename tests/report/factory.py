"""Report documents as nodeforge's own writers make them: a pipeline run record
(:class:`RunRecord`), enrollment reports (:class:`Report`), catalog rows (``catalog.summary``), a
``template check --live`` document (``magnum.audit.report``) and a hardware audit
(``ironic.audit.Audit``); small ones for the tests, and batches and catalogs of any size for
``bench/bench_report.py``."""

from __future__ import annotations

import json
from pathlib import Path

from nodeforge.ironic.report import NodeReport, Report
from nodeforge.pipeline import runrecord as rr

SECRET = "report-secret-pw-6Hd3"
RUN_ID = "20261204T000000Z-abcd"
# The run's stages: (name, minor, status, seconds); started one after the other.
STAGES = (("check", None, rr.SUCCEEDED, 0.2), ("bump", None, rr.SUCCEEDED, 0.6),
          ("build", "1.36", rr.SUCCEEDED, 143.7), ("verify", "1.36", rr.FAILED, 301.4))


def run_record(run_dir: Path, *, sequential: bool = False) -> dict:
    """A failed run's record saved in ``run_dir`` (created); ``sequential``: each stage starts when
    the one before it ended (else all at the run's start)."""
    import datetime

    rec = rr.RunRecord(RUN_ID, run_dir, inputs={"minors": ["1.36"]})
    rec.root.mkdir(parents=True, exist_ok=True)
    rec.minors = ["1.36"]
    start = datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)
    offset = 0.0
    for name, minor, status, seconds in STAGES:
        s = rec.stage(name, minor)
        s.status, s.seconds, s.attempts = status, seconds, 1
        s.started = (start + datetime.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if sequential:
            offset += seconds
    rec.created = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    rec.stage("verify", "1.36").error = {"message": f"boot failed at https://admin:{SECRET}@10.0.0.9/x"}
    rec.status = rr.FAILED
    rec.save()
    return json.loads(rec.json_path.read_text())


def enroll_report(path: Path) -> dict:
    """A batch of four with a failure (its history in Ironic and its hint), one being inspected,
    one only enrolled, one available; written to ``path``."""
    history = [{"created_at": "2026-12-04T00:01:00+00:00", "severity": "ERROR", "event_type": "cleaning",
                "event": f"Failed to clean: BMC password {SECRET} refused"}]
    nodes = [NodeReport("rf-001", "u-1", "create", "available", "available", True, seconds=12.5, history=[]),
             NodeReport("rf-002", "u-2", "create", "clean", "clean failed", False, error_type="clean-failed",
                        error=f"cleaning failed, BMC password {SECRET} refused", history=history),
             NodeReport("rf-003", "u-3", "create", "inspect", "inspect wait", True),
             NodeReport("ipmi-01", None, "create", "enroll", "enroll", True)]
    doc = Report("enroll", nodes, seconds=40.0).to_dict()
    path.write_text(json.dumps(doc))
    return doc


# A big batch's nodes cycle through these: (stage, provision state, ok, error kind, error).
_CYCLE = (("available", "available", True, None, None),
          ("inspect", "inspect failed", False, "inspect-failed", "inspection failed: no LLDP data"),
          ("clean", "clean wait", True, None, None),
          ("available", "available", True, None, None),
          ("deploy", "active", True, None, None),
          ("manage", "manageable", True, None, None),
          ("clean", "clean failed", False, "clean-failed", "cleaning failed: erase_devices timed out"))


def big_batch(n: int, events: int = 20) -> dict:
    """An enrollment report of ``n`` nodes (states and failures mixed, ``events`` history events
    each, as Ironic's newest 20 are kept)."""
    nodes = []
    for i in range(n):
        stage, state, ok, kind, error = _CYCLE[i % len(_CYCLE)]
        history = [{"created_at": f"2026-12-04T00:{e // 60:02d}:{e % 60:02d}+00:00",
                    "severity": "ERROR" if (not ok and e == events - 1) else "INFO", "event_type": "provisioning",
                    "event": f"node moved to state {state} (step {e})"} for e in range(events)]
        nodes.append(NodeReport(f"rack{i // 40:02d}-node{i:04d}", f"00000000-0000-0000-0000-{i:012d}", "create",
                                stage, state, ok, error_type=kind, error=error, seconds=10.0 + i % 17,
                                history=history))
    return Report("enroll", nodes, seconds=600.0).to_dict()


def catalog_rows(n: int | None = None) -> list[dict]:
    """Rows as ``image list -o json`` prints them (``catalog.summary`` of Glance image records):
    the four of the catalog test, or ``n`` over several minors and states."""
    from nodeforge.publish import catalog, glance_api as g

    def image(i, minor, patch, variant, tags, used_by):
        record = {"id": f"00000000-0000-0000-0000-{i:012d}", "name": f"img-{i}", "kube_version": f"v{minor}.{patch}",
                  g.P + "variant": variant, "os_distro": "debian", "os_version": "12", "tags": [g.TAG, *tags],
                  "image_build_date": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}", g.SCOPE: "team-a",
                  g.P + "verify": "passed", "img_signature": "x", "visibility": "public", "status": "active"}
        return dict(catalog.summary(record), used_by=used_by)

    if n is None:
        return [image(1, "1.35", 4, "vm", [g.TAG_APPROVED], ["k8s-1.35-vm-v3"]),
                image(2, "1.36", 0, "baremetal", [g.TAG_APPROVED, g.TAG_SUPERSEDED], []),
                image(3, "1.36", 1, "baremetal", [g.TAG_APPROVED], ["k8s-1.36-baremetal-v1", "cluster c1"]),
                image(4, "1.36", 1, "vm", [g.TAG_CANDIDATE], [])]
    states = ([g.TAG_APPROVED], [g.TAG_APPROVED, g.TAG_SUPERSEDED], [g.TAG_CANDIDATE])
    return [image(i, f"1.{30 + i % 7}", i % 11, ("vm", "baremetal")[i % 2], states[i % 3],
                  [f"k8s-1.{30 + i % 7}-vm-v{i}"] if i % 3 == 0 else []) for i in range(n)]


def template_audit() -> dict:
    """What ``template check --live -o json`` prints for a cloud with a clean template and its
    cluster, a template on a hidden (retired) image with a cluster on it, a bare-metal template
    whose flavor has no free node, and a cluster whose template is gone."""
    from nodeforge.magnum import audit as A
    from tests.magnum import state_factory as S

    parts = S.healthy()
    old = S.image("1.36.1", os_hidden=True)
    retired = S.template(old, parts["flavor"], name="k8s-1.36-old")
    empty = S.bm_flavor("bm.storage", rc="CUSTOM_BAREMETAL_STORAGE")
    nocap = S.template(parts["img"], empty, name="k8s-1.36-storage")
    parts["images"].append(old)
    parts["flavors"].append(empty)
    parts["templates"] += [retired, nocap]
    parts["clusters"] += [S.cluster(retired, name="legacy"),
                          S.cluster({"uuid": "ct-gone", "labels": {}}, name="orphan")]
    doc = A.report(S.state_of(parts), A.Maintained(("1.34", "1.35", "1.36"), "option"))
    doc["api_calls"] = {"total": 7}
    return json.loads(json.dumps(doc))


def hardware_audit() -> dict:
    """What ``baremetal audit -o json`` prints: a node at its baseline, one drifted (a BIOS
    setting), one whose BMC could not be read, and an outlier (memory)."""
    from nodeforge.ironic import audit as H
    from nodeforge.ironic import baseline as bl

    def view(name, **kw):
        return H.NodeView(name, f"uuid-{name}", "available", "CUSTOM_STORAGE", **kw)

    audit = H.Audit(
        nodes=[H.NodeAudit(view("st-01"), "storage", H.OK),
               H.NodeAudit(view("st-02", source="bmc"), "storage", H.DRIFTED,
                           items=[bl.Item("bios.ProcTurboMode", "Disabled", "Enabled",
                                          (("bios", "apply_configuration"),))]),
               H.NodeAudit(view("st-03", error="BMC https://10.0.0.3 refused the credentials"), "storage",
                           H.UNREADABLE)],
        outliers=[H.Outlier("CUSTOM_STORAGE", "memory_gib", "st-02", 256, 512)],
        profiles_path="manifests/hardware-profiles.yaml")
    return json.loads(json.dumps(audit.to_dict()))


def run_dir(root: Path) -> dict:
    """A run directory with one document of every kind; the documents by kind."""
    run = run_record(root, sequential=True)
    batch = enroll_report(root / "enroll-report.json")
    rows = catalog_rows()
    (root / "catalog.json").write_text(json.dumps(rows))
    audit = template_audit()
    (root / "template-audit.json").write_text(json.dumps(audit))
    hardware = hardware_audit()
    (root / "hardware-audit.json").write_text(json.dumps(hardware))
    return {"run": run, "batch": batch, "catalog": rows, "audit": audit, "hardware": hardware}
