"""``nodeforge report html``: pages made from the documents nodeforge's own writers produce (a
pipeline run record saved by :class:`RunRecord`, an enrollment report of :class:`Report`), read
back through the HTML parser: one bar per stage carrying the record's seconds, one tile per node
with its state as text, details a keyboard opens (``<details>``), no script and nothing fetched,
no secret; ``--dry-run`` writes nothing; what is not a document is named, not raised."""

from __future__ import annotations

import html.parser
import json

import pytest

from nodeforge.cli import main
from nodeforge.redact import register as register_secret
from tests.report import factory
from tests.report.factory import SECRET


class Page(html.parser.HTMLParser):
    """The elements of one page: tag, attributes, and the text inside each ``data-*`` element."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag, **attrs) -> list[dict]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _run_record(root) -> dict:
    return factory.run_record(root / "runs" / "r1")


def _enroll_report(path) -> dict:
    return factory.enroll_report(path)


@pytest.fixture
def site(tmp_path, capsys):
    register_secret(SECRET)
    run = _run_record(tmp_path)
    batch = _enroll_report(tmp_path / "runs" / "r1" / "enroll-report.json")
    for name, doc in (("catalog.json", factory.catalog_rows()), ("template-audit.json", factory.template_audit()),
                      ("hardware-audit.json", factory.hardware_audit())):
        (tmp_path / "runs" / "r1" / name).write_text(json.dumps(doc))
    dest = tmp_path / "site"
    capsys.readouterr()
    assert main(["-o", "json", "report", "html", str(tmp_path / "runs" / "r1"), "--dest", str(dest)]) == 0
    out = json.loads(capsys.readouterr().out)
    return {"run": run, "batch": batch, "dest": dest, "out": out}


def test_the_run_is_a_timeline_with_one_bar_per_stage_as_long_as_recorded(site):
    page = Page((site["dest"] / "run.html").read_text())
    bars = page.all("g", **{"class": "stage"})
    assert [(b["data-stage"], b["data-status"], float(b["data-seconds"])) for b in bars] == [
        ("check", "succeeded", 0.2), ("bump", "succeeded", 0.6), ("build [1.36]", "succeeded", 143.7),
        ("verify [1.36]", "failed", 301.4)]
    assert [float(b["data-seconds"]) for b in bars] == [s["seconds"] for s in site["run"]["stages"]]
    rects = page.all("rect")
    assert len(rects) == 4 and float(rects[3]["width"]) > float(rects[2]["width"]) > float(rects[0]["width"])
    text = " ".join(page.text)
    assert "verify [1.36]: failed, 301.4 s" in text and "failed" in text      # the state as text, not colour only


def test_the_batch_is_a_rack_with_one_tile_per_node_and_its_state_in_text(site):
    [name] = [p["page"] for p in site["out"]["pages"] if p["kind"] == "batch"]
    page = Page(open(name).read())
    tiles = [a for t, a in page.elements if t == "li" and "data-node" in a]
    states = {a["data-node"]: a["data-state"] for a in tiles}
    assert states == {"rf-001": "available", "rf-002": "failed", "rf-003": "inspecting", "ipmi-01": "enrolled"}
    assert len(page.all("details")) == len(site["batch"]["nodes"]) == 4
    text = "".join(page.text)
    assert "rf-002: failed" in text and "rf-001: available" in text      # the state as text, not colour only
    assert "cleaning failed" in text and "parked in maintenance" in text     # the last error and its hint
    # A node opens to its history in Ironic: events in order, severity as text; none read: no section.
    assert [e["data-severity"] for e in page.all("li") if "data-severity" in e] == ["ERROR"]
    assert "Failed to clean: BMC password" in text and "No events recorded." in text
    assert text.count("History in Ironic") == 2            # rf-001 (none recorded) and rf-002; not the others


def test_pages_are_self_contained_and_hold_no_secret(site):
    assert sorted(p["kind"] for p in site["out"]["pages"]) == ["audit", "batch", "catalog", "hardware", "index", "run"]
    for path in site["dest"].iterdir():
        text = path.read_text()
        page = Page(text)
        assert not page.all("script") and not page.all("link") and "@import" not in text, path
        assert "url(" not in text, path               # no image, font or anything else from CSS
        for tag, attrs in page.elements:
            for key in ("src", "href"):
                value = attrs.get(key) or ""
                assert not value.startswith(("http:", "https:", "//")), f"{path}: {tag} {key}={value}"
        assert SECRET not in text, path


def test_dry_run_writes_nothing_and_bad_directories_are_named(tmp_path, capsys):
    _run_record(tmp_path)
    dest = tmp_path / "site"
    assert main(["report", "html", str(tmp_path / "runs" / "r1"), "--dest", str(dest), "--dry-run"]) == 0
    assert "run.html" in capsys.readouterr().out and not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "other.json").write_text('{"a": NaN}')
    assert main(["report", "html", str(empty), "--dest", str(dest)]) == 2
    err = capsys.readouterr().err
    assert f"{empty}: holds no run record" in err and "Traceback" not in err
    assert main(["report", "html", str(tmp_path / "missing"), "--dest", str(dest)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_document_that_cannot_be_read_is_listed_not_raised(tmp_path, capsys):
    _run_record(tmp_path)
    root = tmp_path / "runs" / "r1"
    (root / "broken.json").write_text("[" * 200 + "]" * 200)
    dest = tmp_path / "site"
    assert main(["-o", "json", "report", "html", str(root), "--dest", str(dest)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s for s in out["skipped"] if s.startswith("broken.json: ") and "nested more than" in s]
    assert "broken.json" in (dest / "index.html").read_text()


def test_the_site_is_served_on_loopback_and_nothing_outside_it(site):
    import threading
    import urllib.error
    import urllib.request

    from nodeforge.report import site as site_mod

    (site["dest"].parent / "outside.txt").write_text("not served")
    httpd = site_mod.server(site["dest"], 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        assert "Run 20261204T000000Z-abcd" in urllib.request.urlopen(f"{base}/run.html", timeout=10).read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}/../outside.txt", timeout=10)
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(Exception, match="listens on loopback only"):
        site_mod.server(site["dest"], 0, host="0.0.0.0")


@pytest.mark.parametrize("shape", ["snapshot", "image list rows"])
def test_the_catalog_is_a_table_per_minor_with_each_images_state_in_text(tmp_path, capsys, shape):
    from nodeforge.publish.catalog import CATALOG_SCHEMA

    rows = factory.catalog_rows()
    root = tmp_path / "run"
    root.mkdir()
    doc = ({"schema": CATALOG_SCHEMA, "cloud": "prod", "scope": None, "taken_at": "2026-12-04T10:00:00Z",
            "images": rows} if shape == "snapshot" else rows)
    (root / "catalog.json").write_text(json.dumps(doc))
    dest = tmp_path / "site"
    assert main(["-o", "json", "report", "html", str(root), "--dest", str(dest)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["kind"] for p in out["pages"]] == ["index", "catalog"] and not out["skipped"]
    page = Page((dest / "catalog.html").read_text())
    assert [s["data-minor"] for s in page.all("section")] == ["1.36", "1.35"]
    shown = {a["data-image"]: a["data-state"] for t, a in page.elements if t == "tr" and "data-image" in a}
    assert shown == {r["id"]: r["state"] for r in rows}
    assert {r["state"] for r in rows} >= {"approved", "superseded", "candidate"}
    text = " ".join(page.text)
    assert "k8s-1.36-baremetal-v1, cluster c1" in text and "3 images, 1 approved, 1 in use by Magnum" in text
    assert ("from cloud" in text) == (shape == "snapshot")
    assert "catalog.html" in (dest / "index.html").read_text()


def _site_of(tmp_path, capsys, docs: dict[str, object]) -> tuple[dict, "Page", str]:
    """Write ``docs`` (file name -> document) into a run directory, make the site; the command's
    JSON, and the page of the one non-index document (parsed, and as text)."""
    root = tmp_path / "run"
    root.mkdir()
    for name, doc in docs.items():
        (root / name).write_text(json.dumps(doc))
    dest = tmp_path / "site"
    capsys.readouterr()
    assert main(["-o", "json", "report", "html", str(root), "--dest", str(dest)]) == 0
    out = json.loads(capsys.readouterr().out)
    [page] = [p["page"] for p in out["pages"] if p["kind"] != "index"]
    text = open(page).read()
    assert page.split("/")[-1] in (dest / "index.html").read_text()
    return out, Page(text), text


def test_the_template_audit_is_a_page_of_findings_with_severity_and_a_state_per_template_and_cluster(tmp_path,
                                                                                                     capsys):
    doc = factory.template_audit()
    out, page, html_text = _site_of(tmp_path, capsys, {"template-audit.json": doc})
    assert [(p["kind"], p["page"].split("/")[-1]) for p in out["pages"]] == [
        ("index", "index.html"), ("audit", "audit-template-audit.html")]
    templates = {a["data-template"]: a["data-state"] for a in page.all("section") if "data-template" in a}
    assert templates == {"k8s-1.36-baremetal": "ok", "k8s-1.36-old": "warning: 1 finding",
                         "k8s-1.36-storage": "error: 2 findings"}
    clusters = {a["data-cluster"]: a["data-state"] for t, a in page.elements if t == "tr" and "data-state" in a
                and "data-cluster" in a}
    assert clusters == {"prod": "ok", "legacy": "warning: 1 finding"}
    # Every finding of the document is on the page once, with its severity; the gone template's cluster too.
    shown = sorted((a["data-kind"], a["data-severity"]) for t, a in page.elements if "data-kind" in a)
    assert shown == sorted([("image_hidden", "warning"), ("cluster_image", "warning"), ("capacity", "error"),
                            ("capacity", "error"), ("cluster_template", "error")])
    assert len(shown) == doc["counts"]["findings"] == len(doc["findings"])
    assert [a for t, a in page.elements if a.get("data-cluster") == "orphan" and a.get("data-kind")]
    text = "".join(page.text)
    assert "k8s-1.36-old: warning: 1 finding" in text and "k8s-1.36-storage: error: 2 findings" in text
    assert "5 findings (3 error, 2 warning)" in text and "1.34, 1.35, 1.36 (option)" in text
    assert "cluster_image (warning): cluster legacy" in text


def test_the_hardware_audit_is_a_page_with_each_nodes_status_drift_and_the_outliers(tmp_path, capsys):
    register_secret(SECRET)
    doc = factory.hardware_audit()
    doc["nodes"][2]["error"] = f"BMC refused the password {SECRET}"
    out, page, html_text = _site_of(tmp_path, capsys, {"audit.json": doc})
    assert [p["kind"] for p in out["pages"]] == ["index", "hardware"]
    rows = {a["data-node"]: a["data-status"] for t, a in page.elements if t == "tr" and "data-status" in a}
    assert rows == {"st-01": "ok", "st-02": "drift", "st-03": "unreadable"}
    text = " ".join(page.text)
    assert "bios.ProcTurboMode: Disabled (wanted Enabled); step bios.apply_configuration" in text
    assert "unreadable: BMC refused the password" in text and SECRET not in html_text
    assert [(a["data-node"], a["data-fact"]) for t, a in page.elements if "data-fact" in a] == [("st-02", "memory_gib")]
    assert "ok 1, drift 1, unreadable 1, outliers 1" in text


def test_documents_are_told_apart_by_shape(tmp_path):
    from nodeforge.report.documents import kind_of

    assert kind_of(factory.template_audit()) == "audit"
    assert kind_of(factory.hardware_audit()) == "hardware"
    assert kind_of(factory.enroll_report(tmp_path / "e.json")) == "batch"
    assert kind_of(factory.run_record(tmp_path / "r")) == "run"
    assert kind_of(factory.catalog_rows()) == "catalog"
    # A failed command's document, or a hardware audit's nodes without a status, is none of them.
    assert kind_of({"error": "no cloud", "hint": "set OS_CLOUD", "exit_code": 2}) is None
    assert kind_of({"summary": {}, "nodes": [{"name": "n1"}]}) is None
    assert kind_of({"findings": [], "templates": "x", "counts": {}}) is None


def _succeeded_run(root, verify_json) -> None:
    """The failed record of the factory made a succeeded one with what the pipeline's stages record:
    the build's seconds, verify's report (``verify_json``), a canary class."""
    from nodeforge.pipeline import runrecord as rr

    factory.run_record(root, sequential=True)
    rec = rr.RunRecord.load(root.parent, root.name)
    rec.stage("build", "1.36").outputs = {"build_seconds": {"rootfs": 27.5, "disk_vm": 9.4, "total": 52.8}}
    verify = rec.stage("verify", "1.36")
    verify.status, verify.error, verify.outputs = rr.SUCCEEDED, None, {"verify_json": str(verify_json)}
    rec.stage("canary", "1.36").outputs = {"asked": True, "classes": {"baremetal-canary": {
        "passed": True, "node": "rf-vm-01", "seconds": {"allocate": 1.0, "deploy": 80.5, "first_boot": 60.6,
                                                       "checks": 0.0, "clean": 95.5}}}}
    rec.status = rr.SUCCEEDED
    rec.save()


def test_the_run_shows_each_boot_by_part_the_canary_and_the_build_from_the_run_s_own_reports(tmp_path, capsys):
    root = tmp_path / "runs" / "r1"
    build = root / "builds" / "k8s-1.36.1"
    build.mkdir(parents=True)
    marks = {"baremetal": {"firmware": 0.0, "bootloader": 4.0, "kernel": 8.5, "userspace": 12.0, "checks": 47.6,
                           "report": 48.6},
             "vm": {"firmware": 0.0, "bootloader": 0.5, "kernel": 8.0, "userspace": 13.0, "checks": 49.0,
                    "report": 50.0}}
    (build / "verify.json").write_text(json.dumps({"schema": 3, "variants": {
        v: {"passed": True, "accel": "tcg", "accel_reason": "auto: KVM probe failed", "fallback": None,
            "seconds": {"boot_to_verdict": m["report"]}, "timeline": m} for v, m in marks.items()}}))
    _succeeded_run(root, build / "verify.json")
    dest = tmp_path / "site"
    assert main(["report", "html", str(root), "--dest", str(dest)]) == 0
    page = Page((dest / "run.html").read_text())
    boots = page.all("g", **{"class": "boot"})
    assert [(b["data-boot"], float(b["data-seconds"])) for b in boots] == [("1.36 baremetal", 48.6), ("1.36 vm", 50.0)]
    parts = [(r["data-part"], float(r["data-seconds"])) for r in page.all("rect") if "data-part" in r]
    order = ("firmware", "bootloader", "kernel", "userspace", "checks", "report")
    want = [(label, round(m[b] - m[a], 1)) for m in marks.values() for label, (a, b) in
            zip(("firmware", "boot loader", "kernel", "userspace", "checks"), zip(order, order[1:]))]
    assert parts == want                                  # each part as long as its console markers say
    text = " ".join(page.text)
    assert "baremetal-canary" in text and "rf-vm-01" in text and "80.5 s" in text and "95.5 s" in text
    assert "rootfs" in text and "27.5 s" in text
    # A verify report outside the run directory is not read: named on the index, no boots shown.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "verify.json").write_text((build / "verify.json").read_text())
    other = tmp_path / "runs" / "r2"
    _succeeded_run(other, outside / "verify.json")
    capsys.readouterr()
    assert main(["report", "html", str(other), "--dest", str(tmp_path / "site2")]) == 0
    assert not Page((tmp_path / "site2" / "run.html").read_text()).all("g", **{"class": "boot"})
    assert "not in this run directory" in (tmp_path / "site2" / "index.html").read_text()
