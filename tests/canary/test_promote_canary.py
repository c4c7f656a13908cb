"""Promote and the canary: against the session cloud's real Glance, a bare-metal image needs a
passing canary on each required class, shown by its verdict property AND by the digest-checked
canary report stored beside it; a VM image, or no required class, is not concerned."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from nodeforge.publish import catalog
from nodeforge.publish import glance_api as g

pytestmark = [pytest.mark.devcloud]


@pytest.fixture
def glance(devcloud):
    conn = devcloud.admin()
    made = []

    def image(props: dict, data: bytes | None = None) -> dict:
        img = g.create_image(conn, {"name": f"canary-promote-{uuid.uuid4().hex[:6]}", "disk_format": "raw",
                                    "container_format": "bare", "tags": [g.TAG], **props})
        made.append(img["id"])
        if data is not None:
            g.put_data(conn, img["id"], data, "test data")
        return g.get_image(conn, img["id"])

    yield conn, image
    for i in made:
        g.delete_image(conn, i)


def _attach(conn, image_fn, node: dict, report: dict) -> dict:
    data = json.dumps(report).encode()
    side = image_fn({"os_hidden": True}, data)
    g.patch_image(conn, node["id"], g.set_ops(node, {f"{g.P}canary_report": side["id"],
                                                     f"{g.P}canary_sha256": hashlib.sha256(data).hexdigest()}), "t")
    return g.get_image(conn, node["id"])


def test_promote_needs_a_passing_canary_report_for_this_image(glance):
    conn, image = glance
    rc = "baremetal-canary"
    prop = g.canary_property(rc)
    node = image({f"{g.P}variant": "baremetal"})
    with pytest.raises(catalog.PromoteRefused, match="no passing canary deploy on baremetal-canary"):
        catalog.check_canary(conn, node, [rc])
    catalog.check_canary(conn, node, [])                    # no policy: nothing asked
    vm = image({f"{g.P}variant": "vm"})
    catalog.check_canary(conn, vm, [rc])                    # VM images have no canary

    # A verdict property alone proves nothing.
    g.patch_image(conn, node["id"], g.set_ops(node, {prop: "passed 2026-12-03T00:00:00Z node=n1"}), "t")
    node = g.get_image(conn, node["id"])
    with pytest.raises(catalog.PromoteRefused, match="canary report cannot be trusted"):
        catalog.check_canary(conn, node, [rc])
    # Another image's report, or a failed result, is refused.
    node = _attach(conn, image, node, {"image_id": "someone-else", "results": [{"resource_class": rc, "passed": True}]})
    with pytest.raises(catalog.PromoteRefused, match="does not show a pass of this image on baremetal-canary"):
        catalog.check_canary(conn, node, [rc])
    node = _attach(conn, image, node, {"image_id": node["id"], "results": [{"resource_class": rc, "passed": False}]})
    with pytest.raises(catalog.PromoteRefused, match="does not show a pass"):
        catalog.check_canary(conn, node, [rc])
    # A report whose bytes changed after it was attached fails its digest.
    tampered = g.get_image(conn, node["id"])
    g.patch_image(conn, node["id"], g.set_ops(tampered, {f"{g.P}canary_sha256": "0" * 64}), "t")
    with pytest.raises(catalog.PromoteRefused, match="cannot be trusted"):
        catalog.check_canary(conn, g.get_image(conn, node["id"]), [rc])
    # This image's passing report: accepted.
    node = _attach(conn, image, g.get_image(conn, node["id"]),
                   {"image_id": node["id"], "results": [{"resource_class": rc, "passed": True}]})
    catalog.check_canary(conn, node, [rc])
    with pytest.raises(catalog.PromoteRefused, match="no passing canary deploy on other-class"):
        catalog.check_canary(conn, node, [rc, "other-class"])
