"""End to end, against the local cloud and a local upstream mirror, nothing
mocked: a new patch release appears on the mirror; the pipeline notices it,
bumps the (fixture) lockfile, prefetches, renders, really builds both
variants, boots them under QEMU, publishes and promotes; the previously
approved image of that minor is hidden; a second run finds nothing new and
says so. The patch latency (the release's Last-Modified on the mirror -> the
approved image) is in the run record and printed.

The scenario is the test run's one real build and boot
(``tests/release_fixture.py``), shared with the image, boot and publish
tests; what the cloud said at each step was recorded by the fixture right
then, and is checked here.
"""

from __future__ import annotations

import json

import pytest

from nodeforge.pins import lockfile as lf
from nodeforge.publish import catalog
from nodeforge.pipeline import runrecord as rr
from nodeforge.pipeline.stages import FIXTURE_PROPERTY

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]


def test_nothing_new_before_the_release(release_run):
    quiet = release_run.quiet
    assert quiet.status == "nothing-to-do" and [s.name for s in quiet.stages] == ["check"]


def test_new_patch_release_to_approved_image(release_run):
    r, minor = release_run, release_run.minor
    run = r.run
    assert run.status == rr.SUCCEEDED, run.message
    assert [s.name for s in run.stages] == ["check", "bump", "prefetch", "render", "build", "verify", "publish",
                                            "canary", "promote"]
    # No canary policy here (none in the repository): the stage says so and passes.
    assert [s.outputs.get("asked") for s in run.stages if s.name == "canary"] == [False]
    assert lf.load(r.lockfile).minor(minor).version == lf.Version.parse(r.version)
    # A real build, unless a developer's image cache handed the stage an identical build directory.
    assert run.find("build", minor).outputs["reused"] is r.seeded
    # Booted for real, and the images were only read.
    assert run.find("verify", minor).outputs["variants"] == {"vm": "passed", "baremetal": "passed"}
    assert r.image_stat and r.image_stat == r.image_stat_after

    # Approved: both variants of the new patch, labelled as fixture builds.
    assert set(r.approved) == {"vm", "baremetal"}
    for variant, img in r.approved.items():
        assert catalog.state(img) == "approved" and img["kube_version"] == f"v{r.version}", variant
        assert img[FIXTURE_PROPERTY] == "true" and img["nodeforge_verify"] == "passed"
        assert img["nodeforge_scope"] == r.scope     # the lockfile's scope: the declaration that made it
        assert img["visibility"] == "public" and not img.get("os_hidden")
        # Signed by the pipeline (the local cloud's publishing key): Glance accepted the signature,
        # and the provenance verifies against the certificate in Barbican.
        assert img.get("img_signature") and img.get("img_signature_certificate_uuid"), variant
        assert r.provenance[variant]["valid"] is True, r.provenance[variant]
    # The previous approved images are hidden (superseded), still there by ID.
    assert len(r.prev_after) == len(r.prev_ids) == 2
    for img in r.prev_after:
        assert img["os_hidden"] and catalog.state(img) == "superseded" and img["nodeforge_scope"] == r.scope
    assert r.listed_after == {img["id"] for img in r.approved.values()}

    # Patch latency, recorded and printed (the goal is bench/'s business, not a test's).
    lat = run.latency[minor]
    assert lat["version"] == r.version and lat["latency_seconds"] is not None
    pub = rr.parse_iso(lat["published_at"]).timestamp()
    assert abs(pub - r.released) < 2.5
    assert lat["latency_seconds"] > 0
    doc = json.loads(run.json_path.read_text())
    assert doc["latency"][minor]["latency_seconds"] == lat["latency_seconds"]
    print(f"\nPATCH LATENCY {r.version}: {lat['latency_seconds']:.0f}s; stages: "
          + json.dumps(lat["stage_seconds"]), flush=True)
    assert r.production_lockfile_unchanged


def test_rerun_with_nothing_new_does_nothing(release_run):
    again = release_run.again
    assert again.status == "nothing-to-do" and [s.name for s in again.stages] == ["check"]
    assert any("nothing new upstream" in line for line in release_run.again_lines)
    assert release_run.listed_after_rerun == release_run.listed_after
