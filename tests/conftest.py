"""Shared fixtures.

The local cloud: by default a test session starts **its own** local cloud (a
state directory of its own under the session's temporary directory, every
port shifted by a free offset, the service virtualenvs shared by symlink with
the checkout's ``.devcloud/venvs``), and stops all of it at the end. It never
reads or changes a cloud it did not start, so ``make demo`` then ``make test``
in one checkout leave the demo's cloud as it was. The cloud settings of the
shell the tests run in (every ``OS_*`` variable, ``NODEFORGE_DEVCLOUD_DIR``, ...:
``tests/support/userenv.py``) are cleared first, so an exported ``nodeforge
devcloud env`` of the demo's cloud never reaches the session's connections,
its cloud's start-up or its subprocesses; their names are noted on stderr.
``NODEFORGE_TEST_CLOUD_ONLY=image,...`` starts only those service groups (a
nested session in a test that needs a few services).

``NODEFORGE_TEST_CLOUD=reuse`` opts in to running against the checkout's
default local cloud (``nodeforge devcloud up``; started if it is down, and
only what the session started is stopped). Still safe: every test names what
it creates from a per-run prefix, claims BMC systems through
:func:`bmc_pool`, and nodeforge's own reconcilers act only on their own scope.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import uuid
from pathlib import Path

import pytest

from nodeforge.devcloud import bmc, openstack as dc_openstack, rabbitmq
from nodeforge.devcloud.bmc import fleet
from nodeforge.devcloud.cloud import ADMIN_CLOUD, MEMBER_CLOUD, SYSTEM_CLOUD, DevCloud
from nodeforge.devcloud.paths import Paths
from tests.prereq import require
# The test run's one real build and boot, made by the release pipeline (session fixtures).
from tests.release_fixture import built_image, release_run, verified_build  # noqa: F401
from tests.support import userenv

# The cloud settings of the user's shell (an exported `nodeforge devcloud env`, OS_AUTH_URL, ...,
# NODEFORGE_DEVCLOUD_DIR) are cleared when this module loads, before anything of the session runs:
# fixtures, the local cloud's start-up and seeding, subprocesses, and the xdist workers (they
# inherit this environment and load this module too). The session's own cloud settings are set by
# the `devcloud` fixture; test-session knobs (NODEFORGE_TEST_CLOUD, ...) are kept.
CLEARED_SETTINGS = userenv.clear()
# The verifier key the session's verify reports are signed with, and the trust set: the session's
# own (in the checkout's .cache, shared by the xdist workers), never the user's key or trust set.
userenv.use_test_verifier(Path(__file__).resolve().parents[1] / ".cache" / "test-verifier" / "verifier.key")

# CLI fixtures (run, no_cloud) for the tests that drive the CLI in-process.
pytest_plugins = ["tests.support.cli"]

MODE_ENV = "NODEFORGE_TEST_CLOUD"          # "own" (default) or "reuse"
# Comma-separated service groups (`nodeforge devcloud up --only`) for a session that needs only
# some of the cloud (a nested session in a test); default: every service.
ONLY_ENV = "NODEFORGE_TEST_CLOUD_ONLY"
# Offsets tried for the session's own cloud, first free one wins. Chosen so
# that no port of one overlaps a port of another, of the default cloud
# (offset 0), or of the second clouds some tests start (20000, 23000), and
# stay below the kernel's ephemeral range (32768-).
OFFSETS = (10000, 11100, 12200, 13300, 14400, 15500)
RUN_ID = uuid.uuid4().hex[:6]


# Two workers (``make test``: pytest-xdist, ``--dist loadscope`` with the work units below), each a
# session with its own local cloud. A work unit is one module, so module fixtures are made once; the
# modules whose tests read the run's one release-pipeline build (``built_image``, ``verified_build``,
# ``release_run``) are one unit, so that build and its boots are made once; and the three long
# units are handed out first: the release pipeline's to one worker and the security update's (a
# build and boots of its own) to the other, then the machine canary's, which deploys the release
# build: queued behind the security unit (xdist gives a worker its next unit when two of its tests
# are left), it starts when that build is made instead of waiting for it, so the rest of the suite
# runs beside them. (Units come from module paths because the
# scheduler sees only node ids; pytest 9 ignores xdist's loadgroup suffix on node ids.)
RELEASE_FIXTURES = frozenset({"built_image", "verified_build", "release_run"})
RELEASE_GROUP, SECURITY_GROUP = "release-pipeline", "security-update"
RELEASE_MODULES = frozenset({
    "tests/imagebuild/test_boottest.py", "tests/imagebuild/test_build_package_base.py",
    "tests/imagebuild/test_image_build.py", "tests/imagebuild/test_provenance_devcloud.py",
    "tests/imagebuild/test_publish_built.py", "tests/pipeline/test_pipeline_e2e.py",
    "tests/imageverify/test_accel_fallback.py",
})
SECURITY_MODULE = "tests/pipeline/test_pipeline_security_e2e.py"
CANARY_MODULE = "tests/canary/test_canary_machine.py"     # the machine's agent and two canary deploys
FIRST_UNITS = (RELEASE_GROUP, SECURITY_GROUP, CANARY_MODULE)


def pytest_configure(config):
    if CLEARED_SETTINGS and not hasattr(config, "workerinput"):      # once: the controller, not each worker
        sys.stderr.write(f"tests: cleared from the environment (the session sets its own cloud settings): "
                         f"{', '.join(CLEARED_SETTINGS)}\n")


def work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if module in RELEASE_MODULES:
        return RELEASE_GROUP
    return SECURITY_GROUP if module == SECURITY_MODULE else module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


def pytest_collection_modifyitems(config, items):
    stray = sorted({item.nodeid.split("::", 1)[0] for item in items
                    if RELEASE_FIXTURES & set(getattr(item, "fixturenames", ()))} - RELEASE_MODULES)
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)}: reads the release-pipeline build; add it to RELEASE_MODULES "
                                f"in tests/conftest.py (one work unit, so that build and its boots are made once)")
    if hasattr(config, "workerinput"):            # an xdist worker: the scheduler takes the units in this order
        rank = {unit: i for i, unit in enumerate(FIRST_UNITS)}
        items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))   # stable


TIMELINE_ENV = "NODEFORGE_TEST_TIMELINE"     # a file: one JSON line per test phase (worker, start, end)


def pytest_runtest_logreport(report):
    """With ``NODEFORGE_TEST_TIMELINE`` set, where a run's time went on each worker (for ordering
    the work units, docs/ci.md); one appended line per phase, safe across workers."""
    path = os.environ.get(TIMELINE_ENV)
    if not path or hasattr(report, "node"):      # a worker's report relayed to xdist's controller: once
        return
    import json
    line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": report.nodeid,
                       "phase": report.when, "start": round(report.start, 1), "stop": round(report.stop, 1),
                       "outcome": report.outcome})
    with open(path, "a") as fh:
        fh.write(line + "\n")


def cloud_ports(offset: int) -> set[int]:
    """Every TCP/UDP port a local cloud at ``offset`` listens on."""
    ports = {p + offset for p in dc_openstack.PORTS.values()}
    ports.update(p + offset for p in rabbitmq.CLI_PORTS)  # while a rabbitmqctl runs
    ports.add(bmc.REDFISH_PORT + offset)
    ports.update(range(bmc.IPMI_BASE_PORT + offset, bmc.IPMI_BASE_PORT + offset + fleet.DEFAULT_IPMI_COUNT))
    return ports


def _port_free(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


@contextlib.contextmanager
def claim_offset():
    """A port offset whose ports are all free, held (flock) for the session so
    two concurrent test sessions never pick the same one."""
    lockdir = Path("/tmp/nodeforge-test-clouds")
    lockdir.mkdir(exist_ok=True)
    reserved = cloud_ports(0) | cloud_ports(20000) | cloud_ports(23000)
    for offset in OFFSETS:
        ports = cloud_ports(offset)
        assert not ports & reserved, f"offset {offset} overlaps a reserved cloud's ports"
        fh = open(lockdir / f"{offset}.lock", "w")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        if all(_port_free(p) for p in ports):
            try:
                yield offset
            finally:
                fh.close()
            return
        fh.close()
    pytest.fail(f"no free port offset for the test session's local cloud among {OFFSETS}")


class RunningCloud:
    def __init__(self, cloud: DevCloud, own: bool):
        self.cloud = cloud
        self.paths = cloud.paths
        self.own = own
        self.run_id = RUN_ID

    def connect(self, name: str = ADMIN_CLOUD):
        import openstack

        return openstack.connect(cloud=name)

    def admin(self):
        return self.connect(ADMIN_CLOUD)

    def member(self):
        return self.connect(MEMBER_CLOUD)

    def magnum(self):
        """openstacksdk's Magnum proxy as the admin (``container_infrastructure_management``)."""
        return self.admin().container_infrastructure_management

    def purge_clusters(self, *names_or_uuids: str) -> list[str]:
        """Remove clusters from this cloud's Magnum database (a CREATE_FAILED
        cluster cannot be deleted through the API here)."""
        from nodeforge.devcloud import magnum

        return magnum.purge_clusters(self.paths, names_or_uuids)

    def system(self):
        """System-scoped admin: what Ironic's secure RBAC wants for
        drivers and nodes without an owner."""
        return self.connect(SYSTEM_CLOUD)


@contextlib.contextmanager
def _env(**values: str | None):
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def devcloud(tmp_path_factory):
    mode = os.environ.get(MODE_ENV, "own")
    if mode not in ("own", "reuse"):
        pytest.fail(f"{MODE_ENV}={mode!r}: use 'own' (default) or 'reuse'")
    main = Paths.default()
    if not (main.venvs / dc_openstack.VENV / "bin" / "uwsgi").exists():
        require(False, f"the local cloud's virtualenvs ({main.venvs}) are not installed: run 'make setup'")
    if mode == "reuse":
        yield from _session_cloud(DevCloud(main), own=False, env={})
        return
    root = tmp_path_factory.mktemp(f"devcloud-{RUN_ID}")
    (root / "venvs").symlink_to(main.venvs.resolve())
    with claim_offset() as offset:
        print(f"\ntest session's own local cloud: {root} (port offset {offset})")
        yield from _session_cloud(DevCloud(Paths(root)), own=True,
                                  env={"NODEFORGE_DEVCLOUD_DIR": str(root),
                                       "NODEFORGE_DEVCLOUD_PORT_OFFSET": str(offset)})


def _session_cloud(cloud: DevCloud, *, own: bool, env: dict[str, str]):
    with _env(**env):
        started: list[str] = []
        # An owned cloud is stopped even if this session is killed before its teardown ends.
        release = cloud.supervisor.tether() if own else (lambda: None)
        try:
            only = [g.strip() for g in os.environ.get(ONLY_ENV, "").split(",") if g.strip()]
            results = cloud.up(only or None)
            started = [r["service"] for r in results if r["action"] == "started"]
            with _env(OS_CLIENT_CONFIG_FILE=str(cloud.paths.clouds_yaml), OS_CLOUD=None):
                yield RunningCloud(cloud, own)
        finally:
            if own:
                cloud.down()
                release()
                left = [r["service"] for r in cloud.status() if r["running"]]
                assert not left, f"the test session's local cloud did not stop: {left} still running"
            else:
                for name in reversed(started):
                    cloud.supervisor.stop(name)


class BmcPool:
    """Hands out emulated BMCs, each to one test at most per session, and
    never one that an Ironic node of the cloud already uses (a reused cloud
    may hold the demo's nodes)."""

    def __init__(self, cloud: RunningCloud):
        self.cloud = cloud
        self.claimed_systems: set[str] = set()
        self.claimed_ipmi: set[int] = set()

    def _used(self):
        conn = self.cloud.system()
        systems, ports = set(), set()
        self.holders = {}
        for node in conn.baremetal.nodes(details=True):
            info = node.driver_info or {}
            if info.get("redfish_system_id"):
                systems.add(info["redfish_system_id"].rstrip("/").rsplit("/", 1)[-1])
            if info.get("ipmi_port") and info.get("ipmi_address") == bmc.HOST:
                ports.add(int(info["ipmi_port"]))
                self.holders[int(info["ipmi_port"])] = node.name
        macs = {p.address.lower() for p in conn.baremetal.ports(details=True)}
        return systems, ports, macs

    def redfish(self, count: int = 1, *, shape: str | None = None, index_from: int = 1):
        systems, _, macs = self._used()
        free = [s for s in bmc.redfish_systems() if s.index >= index_from
                and (shape is None or s.shape == shape) and s.uuid not in systems
                and s.uuid not in self.claimed_systems and not macs & {m.lower() for m in s.macs}]
        if len(free) < count:
            pytest.fail(f"the emulated fleet has {len(free)} free Redfish systems"
                        f"{f' of shape {shape}' if shape else ''}, this test needs {count} "
                        f"(claimed this session: {len(self.claimed_systems)})")
        got = free[:count]
        self.claimed_systems.update(s.uuid for s in got)
        return got

    def ipmi(self, count: int = 1):
        _, ports, _ = self._used()
        free = [e for e in bmc.ipmi_endpoints(self.cloud.paths)
                if e.port not in ports and e.port not in self.claimed_ipmi]
        if len(free) < count:
            pytest.fail(f"{len(free)} free IPMI BMCs, this test needs {count} (held by Ironic nodes: "
                        f"{self.holders or 'none'}; claimed this session: {sorted(self.claimed_ipmi)})")
        got = free[:count]
        self.claimed_ipmi.update(e.port for e in got)
        return got


@pytest.fixture(scope="session")
def bmc_pool(devcloud) -> BmcPool:
    return BmcPool(devcloud)


@pytest.fixture
def run_prefix() -> str:
    """A name prefix unique to this test in this run (nodes, flavors, ...)."""
    return f"nf{RUN_ID}{uuid.uuid4().hex[:4]}-"
