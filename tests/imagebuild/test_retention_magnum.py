"""Retention respects Magnum: an image a cluster template or cluster uses is never
deactivated or deleted by promote's retire step (pure plans here; the real Magnum in
test_retention_magnum_devcloud.py)."""

from __future__ import annotations

import logging

import pytest

from nodeforge.publish import catalog
from nodeforge.publish.retention import Expire, RetentionPolicy, magnum_hold
from nodeforge.magnum import live
from tests.imagebuild.test_catalog import _img


@pytest.mark.parametrize("expire", [Expire.DEACTIVATE, Expire.DELETE])
def test_image_used_by_magnum_is_only_hidden(expire):
    approved = [_img(i) for i in range(1, 5)]          # newest first: id-4 .. id-1
    users = {"id-1": ["template k8s-old (ct-1)", "cluster prod (CREATE_COMPLETE)"]}
    steps = catalog.plan_promote(_img(9, approved=False), approved, RetentionPolicy(1, 2, expire), users=users)
    got = {s.image_id: (s.action.value, s.reason) for s in steps[1:]}
    assert got["id-1"] == ("hide", "beyond keep=2 but used by Magnum: template k8s-old (ct-1), "
                                   "cluster prod (CREATE_COMPLETE)")
    assert got["id-2"][0] == expire.value                  # not used: retired as before
    assert got["id-4"][0] == "hide" and got["id-3"][0] == expire.value


def test_no_magnum_means_retention_as_before():
    approved = [_img(i) for i in range(1, 5)]
    before = catalog.plan_promote(_img(9, approved=False), approved, RetentionPolicy(1, 2))
    after = catalog.plan_promote(_img(9, approved=False), approved, RetentionPolicy(1, 2), users=None)
    assert before == after and {s.action.value for s in after} == {"approve", "hide", "deactivate"}


def test_magnum_hold_names_at_most_five_users():
    users = {"x": [f"template t{i} (ct-{i})" for i in range(8)]}
    assert magnum_hold("x", users) == ("used by Magnum: template t0 (ct-0), template t1 (ct-1), template t2 (ct-2), "
                                       "template t3 (ct-3), template t4 (ct-4) and 3 more")
    assert magnum_hold("y", users) is None and magnum_hold("x", None) is None


class _NoMagnumConn:
    def endpoint_for(self, service_type):
        return None


def test_image_users_without_container_infra_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="nodeforge.clients.container_infra"):
        assert live.image_users(_NoMagnumConn()) is None
    assert "no container-infra (Magnum) endpoint" in caplog.text and "proceeds without" in caplog.text
