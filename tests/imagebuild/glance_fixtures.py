"""Fixtures for the publish tests: admin/member connections and clean-up of
every Glance image and Barbican secret a test creates (found by the build ids
the test registers, so nothing else in the shared local cloud is touched)."""

from __future__ import annotations

import pytest

from nodeforge.publish import glance as g
from nodeforge.publish.retention import RetentionPolicy


@pytest.fixture
def admin(devcloud):
    return devcloud.admin()


@pytest.fixture
def member(devcloud):
    return devcloud.member()


@pytest.fixture
def policy() -> RetentionPolicy:
    return RetentionPolicy()


class Tracker:
    def __init__(self, admin):
        self.admin = admin
        self.build_ids: set[str] = set()
        self.secrets: list = []

    def build(self, build_dir):
        self.build_ids.add(build_dir.name)
        return build_dir

    def images(self, build_id: str) -> list[dict]:
        return g.list_images(self.admin, **{"nodeforge_build_id": build_id})

    def cleanup(self) -> None:
        for build_id in self.build_ids:
            for img in self.images(build_id):
                if img.get("protected"):
                    g.patch_image(self.admin, img["id"], [{"op": "replace", "path": "/protected", "value": False}], "x")
                g.delete_image(self.admin, img["id"])
        for secret in self.secrets:
            self.admin.key_manager.delete_secret(secret, ignore_missing=True)


@pytest.fixture
def tracker(admin):
    t = Tracker(admin)
    yield t
    t.cleanup()
    for build_id in t.build_ids:
        assert not t.images(build_id), f"images of {build_id} left behind"
