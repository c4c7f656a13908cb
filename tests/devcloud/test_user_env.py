"""The test suite ignores the cloud settings of the shell it runs in.

A user who ran ``make demo`` and then ``eval "$(nodeforge devcloud env)"``
has ``OS_CLIENT_CONFIG_FILE`` and ``OS_CLOUD`` pointing at the demo's cloud.
``make test`` in that shell must still run every test against the session's
own cloud and leave the other cloud as it was. Here the session's cloud
(``devcloud``) stands in for the demo's: its ``devcloud env`` is exported
into a nested pytest run of two tests that use the image service, which
starts a cloud of its own (the next free port offset, see ``claim_offset``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nodeforge.devcloud import openstack as dc_openstack
from nodeforge.devcloud.cloud import DevCloud
from nodeforge.devcloud.paths import Paths
from nodeforge.redact import Secret
from tests.support import userenv

ROOT = Path(__file__).resolve().parents[2]
# Quick tests that need the image service (Keystone's catalog, Glance) of the session's cloud.
SLICE = (
    "tests/devcloud/test_services.py::test_sdk_authenticates_through_keystone_and_lists_images",
    "tests/devcloud/test_image_import.py::test_glance_direct_stage_then_import",
)


def _snapshot(devcloud) -> dict[str, object]:
    """What a leaked seed or test would change in a cloud: its catalog, users,
    projects, images, flavors and networks."""
    admin = devcloud.admin()
    ident = admin.identity
    return {
        "endpoints": sorted((e.service_id, e.interface, e.url) for e in ident.endpoints()),
        "users": sorted(u.id for u in ident.users()),
        "projects": sorted(p.id for p in ident.projects()),
        "images": sorted((i.id, i.name, i.status) for i in admin.image.images()),
        "flavors": sorted((f.id, f.name) for f in admin.compute.flavors(is_public=None)),
        "networks": sorted((n.id, n.name) for n in admin.network.networks()),
    }


def test_clear_removes_cloud_settings_and_keeps_the_rest():
    environ = {"OS_CLOUD": "nodeforge-dev", "OS_CLIENT_CONFIG_FILE": "/x/clouds.yaml", "OS_AUTH_URL": "http://a",
               "OS_PASSWORD": "pw", "NODEFORGE_DEVCLOUD_DIR": "/x", "NODEFORGE_DEVCLOUD_PORT_OFFSET": "7",
               "NODEFORGE_BAREMETAL_CLOUD": "c", "NODEFORGE_TEST_CLOUD": "reuse", "NODEFORGE_VERIFY_ACCEL": "tcg",
               "NODEFORGE_CACHE_DIR": "/c", "PATH": "/bin", "HOME": "/root", "XOS_CLOUD": "kept"}
    cleared = userenv.clear(environ)
    assert cleared == ["NODEFORGE_BAREMETAL_CLOUD", "NODEFORGE_DEVCLOUD_DIR", "NODEFORGE_DEVCLOUD_PORT_OFFSET",
                       "OS_AUTH_URL", "OS_CLIENT_CONFIG_FILE", "OS_CLOUD", "OS_PASSWORD"]
    assert environ == {"NODEFORGE_TEST_CLOUD": "reuse", "NODEFORGE_VERIFY_ACCEL": "tcg", "NODEFORGE_CACHE_DIR": "/c",
                       "PATH": "/bin", "HOME": "/root", "XOS_CLOUD": "kept"}


def test_every_cloud_selecting_variable_of_nodeforge_is_cleared():
    names = {m for f in (ROOT / "nodeforge").rglob("*.py")
             for m in re.findall(r"NODEFORGE_\w*CLOUD\w*", f.read_text())}
    assert names and names <= userenv.NODEFORGE_CLOUD_SETTINGS, names - userenv.NODEFORGE_CLOUD_SETTINGS


def test_seeding_connection_ignores_an_exported_cloud(monkeypatch, tmp_path):
    """The connection that seeds a local cloud is its own, whatever OS_CLOUD and
    OS_CLIENT_CONFIG_FILE name (an openstacksdk OS_CLOUD wins over connect()'s arguments)."""
    other = tmp_path / "clouds.yaml"
    other.write_text("clouds:\n  nodeforge-dev:\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n"
                     "      username: someone\n      password: theirs\n      project_name: p\n"
                     "    region_name: Elsewhere\n")
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(other))
    monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")
    monkeypatch.setenv("OS_AUTH_URL", "http://127.0.0.1:2/v3")
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_PORT_OFFSET", "12345")
    ours = f"seed-{uuid.uuid4().hex}"
    ctx = dc_openstack.Context(Paths(tmp_path / "cloud"), {"admin_password": Secret(ours)})
    config = ctx.admin_connection().config      # no request is made
    assert config.config["auth"]["auth_url"] == dc_openstack.keystone_url() == "http://127.0.0.1:17345/v3"
    assert config.config["auth"]["username"] == "admin"
    assert config.config["auth"]["password"] == ours
    assert config.region_name == dc_openstack.REGION


@pytest.mark.devcloud
@pytest.mark.slow   # a nested session: its own cloud (Keystone, Barbican, Glance) up and down, two tests: 23-32 s
def test_suite_ignores_an_exported_devcloud_env(devcloud, tmp_path):
    other = DevCloud(devcloud.paths).env()          # what `nodeforge devcloud env` exports
    assert set(other) == {"OS_CLIENT_CONFIG_FILE", "OS_CLOUD", "NODEFORGE_CANARY_LISTEN", "NODEFORGE_CANARY_ADVERTISE"}
    before = _snapshot(devcloud)

    # The nested session's cloud: its own (next free port offset), only what the two tests use.
    env = dict(os.environ, **other, NODEFORGE_TEST_CLOUD="own", NODEFORGE_TEST_CLOUD_ONLY="image")
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
                "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS"):
        env.pop(var, None)
    # The outer session's own local-cloud settings (NODEFORGE_DEVCLOUD_DIR, _PORT_OFFSET) are
    # in its environment too, and go along: another setting that points at the other cloud.
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *SLICE, "-p", "no:cacheprovider", "-n", "0", "-q",
         f"--basetemp={tmp_path / 'inner'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1200)
    took = time.monotonic() - start
    print(f"nested session with another cloud's devcloud env exported: {took:.1f} s")
    report = f"nested run ({took:.0f} s) exited {proc.returncode}:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, report
    assert f"{len(SLICE)} passed" in proc.stdout, report

    # Said once which settings it cleared, names only.
    notes = [line for line in proc.stderr.splitlines() if "cleared from the environment" in line]
    assert len(notes) == 1, report
    assert all(name in notes[0] for name in other), notes
    assert not any(value in notes[0] for value in other.values()), notes
    assert other["OS_CLIENT_CONFIG_FILE"] not in proc.stdout + proc.stderr, report

    assert _snapshot(devcloud) == before, "the nested run changed the other cloud"
