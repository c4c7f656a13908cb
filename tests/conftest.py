"""Shared fixtures. The local cloud is started once per test session (or an
already running one is reused) and only what this session started is stopped.
"""

from __future__ import annotations

import os

import pytest

from nodeforge.devcloud.cloud import ADMIN_CLOUD, MEMBER_CLOUD, SYSTEM_CLOUD, DevCloud


class RunningCloud:
    def __init__(self, cloud: DevCloud):
        self.cloud = cloud
        self.paths = cloud.paths

    def connect(self, name: str = ADMIN_CLOUD):
        import openstack

        return openstack.connect(cloud=name)

    def admin(self):
        return self.connect(ADMIN_CLOUD)

    def member(self):
        return self.connect(MEMBER_CLOUD)

    def system(self):
        """System-scoped admin: what Ironic's secure RBAC wants for
        drivers and nodes without an owner."""
        return self.connect(SYSTEM_CLOUD)


@pytest.fixture(scope="session")
def devcloud():
    cloud = DevCloud()
    results = cloud.up()
    started = [r["service"] for r in results if r["action"] == "started"]
    old = os.environ.get("OS_CLIENT_CONFIG_FILE")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(cloud.paths.clouds_yaml)
    os.environ.pop("OS_CLOUD", None)
    try:
        yield RunningCloud(cloud)
    finally:
        if old is None:
            os.environ.pop("OS_CLIENT_CONFIG_FILE", None)
        else:
            os.environ["OS_CLIENT_CONFIG_FILE"] = old
        for name in reversed(started):
            cloud.supervisor.stop(name)
