"""Publish as plan/apply: ``Publisher.plan`` reads Glance and the build directory
and writes nothing; ``apply`` makes the writes the plan names; ``publish`` is apply of
plan. The four side images (manifest, verify report, provenance, per-file manifest) have one
writer, ``Publisher.side_image``: for a new upload and for attaching what an image already in
Glance lacks.

Against the in-memory Glance (``fake_glance.py``); the same paths against the local Glance are
``test_glance.py``'s, ``test_provenance_devcloud.py``'s and ``test_image_diff_glance.py``'s.
"""

from __future__ import annotations

import hashlib
import threading

import pytest

from nodeforge import plan as PL
from nodeforge.imageverify import builddir
from nodeforge.publish import diff as imgdiff, glance as g, provenance as pv
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild import fake_glance
from tests.imagebuild.fake_glance import FakeConn
from tests.imagebuild.test_image_diff import _pair

ROLES = ["files", "image", "manifest", "provenance", "verify-report"]


def _build(tmp_path):
    """A verified build with a per-file manifest (so all four side images apply)."""
    a, _ = _pair(tmp_path, verify="passed", variants=("vm",))
    return builddir.load(a)


def _writes(conn) -> list[tuple[str, str]]:
    return [c for c in conn.image.calls if c[0] != "GET"]


def _roles(conn) -> list[str]:
    return sorted(i.get("nodeforge_role") for i in conn.image.images.values())


def test_plan_writes_nothing_and_apply_makes_what_it_planned(tmp_path):
    conn, b = FakeConn(), _build(tmp_path)
    pub = g.Publisher(conn, RetentionPolicy())
    plan = pub.plan(b)
    assert _writes(conn) == [] and conn.image.images == {}
    [entry] = plan.entries
    assert entry.kind is PL.Kind.CREATE and [r.action for r in plan.results] == ["would-upload"]
    changes = plan.changes()
    assert [c.kind for c in changes] == [PL.Kind.CREATE] * 5
    assert [c.target.rsplit(".", 1)[-1] if c.target != entry.name else "image" for c in changes] == \
        ["json", "json", "json", "jsonl", "image"]      # manifest.json, verify.json, provenance.dsse.json, files.jsonl
    assert plan.counts() == {"create": 1, "no-op": 0}
    [r] = pub.apply(plan)
    assert r.action == "uploaded" and _roles(conn) == ROLES
    img = g.get_image(conn, r.image_id)
    for link, digest in ((g.MANIFEST.link, g.MANIFEST.digest), (g.VERIFY_REPORT.link, g.VERIFY_REPORT.digest),
                         (pv.PROP_IMAGE, pv.PROP_SHA256), (imgdiff.FILES_IMAGE, imgdiff.FILES_SHA256)):
        side = g.get_image(conn, img[link])
        assert side["os_hidden"] is True and "nodeforge_uploader" not in side and side["status"] == "active"
        assert hashlib.sha256(conn.image.data[side["id"]]).hexdigest() == img[digest] == side[digest]
    # Planned again: nothing to do, and the plan says so.
    again = pub.plan(b)
    assert again.entries[0].kind is PL.Kind.NOOP and again.results[0].action == "exists"
    assert [c.kind for c in again.changes()] == [PL.Kind.NOOP]


def test_a_plan_made_before_another_run_published_uploads_nothing(tmp_path):
    conn, b = FakeConn(), _build(tmp_path)
    stale = g.Publisher(conn, RetentionPolicy()).plan(b)
    [first] = g.Publisher(conn, RetentionPolicy()).publish(b)       # another run, in between
    before = dict(conn.image.images)
    [r] = g.Publisher(conn, RetentionPolicy()).apply(stale)
    assert r.action == "exists" and r.image_id == first.image_id and conn.image.images.keys() == before.keys()


def test_what_an_image_in_glance_lacks_is_planned_then_attached_by_the_one_writer(tmp_path):
    conn, b = FakeConn(), _build(tmp_path)
    [r] = g.Publisher(conn, RetentionPolicy()).publish(b)
    img = conn.image.images[r.image_id]
    # Published before provenance and per-file manifests, and its report image lost.
    for link, digest in ((pv.PROP_IMAGE, pv.PROP_SHA256), (imgdiff.FILES_IMAGE, imgdiff.FILES_SHA256),
                         (g.VERIFY_REPORT.link, None)):
        conn.image.images.pop(img[link])
        img.pop(link)
        if digest:
            img.pop(digest)
    # And an interrupted run left an in-flight provenance image (its uploader is gone).
    stale = g.create_image(conn, {"name": "left", "disk_format": "raw", "container_format": "bare",
                                  "nodeforge_role": "provenance", "nodeforge_build_id": b.build_id,
                                  "nodeforge_variant": "vm", "nodeforge_uploader": "no-such-host:1:1"})["id"]
    calls = len(conn.image.calls)
    pub = g.Publisher(conn, RetentionPolicy())
    plan = pub.plan(b)
    assert [c for c in conn.image.calls[calls:] if c[0] != "GET"] == []
    [entry] = plan.entries
    assert entry.kind is PL.Kind.UPDATE and entry.cleanup == [stale]
    assert [s.role for s in entry.attach] == ["verify-report", "provenance", "files"]
    assert plan.results[0].action == "exists" and plan.results[0].cleaned == [stale]
    assert plan.results[0].verify_report_id is None and plan.results[0].provenance_image_id is None
    changes = plan.changes()
    assert [c.kind for c in changes] == [PL.Kind.DELETE, PL.Kind.CREATE, PL.Kind.CREATE, PL.Kind.CREATE,
                                         PL.Kind.UPDATE]
    assert {f.field for f in changes[-1].fields} == {g.VERIFY_REPORT.link, pv.PROP_IMAGE, imgdiff.FILES_IMAGE}
    assert stale in conn.image.images                     # planned, not deleted
    [done] = pub.apply(plan)
    assert done.action == "exists" and done.cleaned == [stale] and stale not in conn.image.images
    img = g.get_image(conn, r.image_id)
    assert done.verify_report_id == img[g.VERIFY_REPORT.link] and done.provenance_image_id == img[pv.PROP_IMAGE]
    assert _roles(conn) == ROLES                          # one of each again, none left over
    for link in (g.VERIFY_REPORT.link, pv.PROP_IMAGE, imgdiff.FILES_IMAGE):
        side = g.get_image(conn, img[link])
        assert side["os_hidden"] is True and "nodeforge_uploader" not in side
    assert g.download_verify_report(conn, img) == b.verify_attestation
    assert pub.plan(b).entries[0].kind is PL.Kind.NOOP


def _hold_node_uploads(service, hold) -> None:
    """Route the node images' uploads (role ``image``) of the in-memory ``service`` through
    ``hold(put, url, data, headers, image)``; the side images' pass at once."""
    put = service.put

    def held_put(url, data=None, headers=None):
        img = service.images.get(url.strip("/").split("/")[1]) or {}
        if img.get("nodeforge_role") != "image":
            return put(url, data=data, headers=headers)
        return hold(put, url, data, headers, img)
    service.put = held_put


class _HeldUploads(FakeConn):
    """Glance whose node-image uploads wait at a barrier of two: the uploads of one build only
    pass when both are in flight at once (one after the other, the first waits out the timeout).
    ``fail``: the variant whose node-image upload is then refused (HTTP 500)."""

    def __init__(self, fail: str | None = None):
        super().__init__()
        self.barrier, self.fail = threading.Barrier(2, timeout=20), fail

        def hold(put, url, data, headers, img):
            self.barrier.wait()
            if img.get("nodeforge_variant") == self.fail:
                self.image.calls.append(("PUT", url))
                return fake_glance.Response(500, {"message": "stand-in refusal"})
            return put(url, data=data, headers=headers)
        _hold_node_uploads(self.image, hold)


def test_the_variants_of_a_build_are_uploaded_side_by_side(tmp_path):
    a, _ = _pair(tmp_path, verify="passed")
    conn = _HeldUploads()
    results = g.Publisher(conn, RetentionPolicy()).publish(builddir.load(a))
    assert sorted((r.variant, r.action) for r in results) == [("baremetal", "uploaded"), ("vm", "uploaded")]
    assert not conn.barrier.broken
    assert {g.get_image(conn, r.image_id)["status"] for r in results} == {"active"}


def test_a_refused_variant_fails_the_publish_after_the_other_finished_and_leaves_nothing(tmp_path):
    a, _ = _pair(tmp_path, verify="passed")
    b = builddir.load(a)
    conn = _HeldUploads(fail="vm")
    with pytest.raises(g.GlanceError) as err:
        g.Publisher(conn, RetentionPolicy()).publish(b)
    assert "vm" in str(err.value) and "baremetal" not in str(err.value)
    images = {i["nodeforge_variant"]: i for i in conn.image.images.values() if i.get("nodeforge_role") == "image"}
    assert list(images) == ["baremetal"] and images["baremetal"]["status"] == "active"   # the vm's was deleted
    # The next run uploads what is missing and leaves the finished variant alone.
    conn.fail, conn.barrier = None, threading.Barrier(1)
    again = g.Publisher(conn, RetentionPolicy()).publish(b)
    assert sorted((r.variant, r.action) for r in again) == [("baremetal", "exists"), ("vm", "uploaded")]


def test_an_interrupt_stops_both_uploads_in_flight_and_removes_their_images(tmp_path, monkeypatch):
    """Ctrl-C while both node images are mid-upload: each upload stops at its next chunk (it does
    not run to its end first), its image is deleted, and the interrupt goes on; the next run
    publishes both."""
    a, _ = _pair(tmp_path, verify="passed")
    b = builddir.load(a)
    conn = FakeConn()
    put, midway, release = conn.image.put, threading.Barrier(3, timeout=20), threading.Event()

    def hold(put, url, data, headers, img):
        data.read(1 << 20)             # the first chunk is on its way
        midway.wait()
        assert release.wait(20)
        return put(url, data=data, headers=headers)    # reads on: stopped by now
    _hold_node_uploads(conn.image, hold)
    real_wait, calls = g.wait_futures, []

    def interrupted_wait(futures):
        calls.append(len(futures))
        if len(calls) == 1:
            midway.wait()               # both uploads mid-stream
            raise KeyboardInterrupt
        release.set()
        return real_wait(futures)
    monkeypatch.setattr(g, "wait_futures", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        g.Publisher(conn, RetentionPolicy()).publish(b)
    assert calls == [2, 2]
    assert [i for i in conn.image.images.values() if i.get("nodeforge_role") == "image"] == []
    monkeypatch.setattr(g, "wait_futures", real_wait)
    conn.image.put = put
    again = g.Publisher(conn, RetentionPolicy()).publish(b)
    assert sorted((r.variant, r.action) for r in again) == [("baremetal", "uploaded"), ("vm", "uploaded")]
