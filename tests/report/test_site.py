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
from nodeforge.ironic.report import NodeReport, Report
from nodeforge.pipeline import runrecord as rr
from nodeforge.redact import register as register_secret

SECRET = "report-secret-pw-6Hd3"


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
    rec = rr.RunRecord("20261204T000000Z-abcd", root / "runs" / "r1", inputs={"minors": ["1.36"]})
    rec.root.mkdir(parents=True)
    rec.minors = ["1.36"]
    for name, minor, status, seconds in (("check", None, rr.SUCCEEDED, 0.2), ("bump", None, rr.SUCCEEDED, 0.6),
                                         ("build", "1.36", rr.SUCCEEDED, 143.7), ("verify", "1.36", rr.FAILED, 301.4)):
        s = rec.stage(name, minor)
        s.status, s.seconds, s.attempts = status, seconds, 1
        s.started = "2026-12-04T00:00:00Z"
    rec.stage("verify", "1.36").error = {"message": f"boot failed at https://admin:{SECRET}@10.0.0.9/x"}
    rec.status = rr.FAILED
    rec.save()
    return json.loads(rec.json_path.read_text())


def _enroll_report(path) -> dict:
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


@pytest.fixture
def site(tmp_path, capsys):
    register_secret(SECRET)
    run = _run_record(tmp_path)
    batch = _enroll_report(tmp_path / "runs" / "r1" / "enroll-report.json")
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
    for path in site["dest"].iterdir():
        text = path.read_text()
        page = Page(text)
        assert not page.all("script") and not page.all("link") and "@import" not in text, path
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


def _catalog_rows() -> list[dict]:
    """Rows as ``image list -o json`` prints them (catalog.summary of Glance image records)."""
    from nodeforge.publish import catalog, glance_api as g

    def image(i, minor, patch, variant, tags, used_by):
        record = {"id": f"00000000-0000-0000-0000-00000000000{i}", "name": f"img-{i}",
                  "kube_version": f"v{minor}.{patch}",
                  g.P + "variant": variant, "os_distro": "debian", "os_version": "12", "tags": [g.TAG, *tags],
                  "image_build_date": f"2026-12-0{i}", g.SCOPE: "team-a", g.P + "verify": "passed",
                  "img_signature": "x", "visibility": "public", "status": "active"}
        return dict(catalog.summary(record), used_by=used_by)

    return [image(1, "1.35", 4, "vm", [g.TAG_APPROVED], ["k8s-1.35-vm-v3"]),
            image(2, "1.36", 0, "baremetal", [g.TAG_APPROVED, g.TAG_SUPERSEDED], []),
            image(3, "1.36", 1, "baremetal", [g.TAG_APPROVED], ["k8s-1.36-baremetal-v1", "cluster c1"]),
            image(4, "1.36", 1, "vm", [g.TAG_CANDIDATE], [])]


@pytest.mark.parametrize("shape", ["snapshot", "image list rows"])
def test_the_catalog_is_a_table_per_minor_with_each_images_state_in_text(tmp_path, capsys, shape):
    from nodeforge.publish.catalog import CATALOG_SCHEMA

    rows = _catalog_rows()
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
