"""The local cloud's own lifecycle: up / status / env / down, and its faults.

These run a *second* local cloud (a temporary state directory, ports shifted
by NODEFORGE_DEVCLOUD_PORT_OFFSET) so they never disturb the session's cloud.
The service virtualenvs are shared by symlink.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeforge.devcloud import credentials, openstack
from nodeforge.devcloud.cloud import DevCloud
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import PortInUseError, ServiceSpec, ServiceStartError, Supervisor, _start_time
from nodeforge.errors import MissingToolError

OFFSET = 20000
MAIN = Paths.default()


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def second_cloud(tmp_path, monkeypatch):
    root = tmp_path / "devcloud"
    (root).mkdir()
    (root / "venvs").symlink_to(MAIN.venvs.resolve())
    env = dict(os.environ, NODEFORGE_DEVCLOUD_DIR=str(root), NODEFORGE_DEVCLOUD_PORT_OFFSET=str(OFFSET))
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_DIR", str(root))
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_PORT_OFFSET", str(OFFSET))
    cloud = DevCloud(Paths(root))
    yield cloud, env
    cloud.down()


def nodeforge(*args, env, check=True):
    proc = subprocess.run([sys.executable, "-m", "nodeforge.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"nodeforge {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.devcloud
@pytest.mark.slow
def test_up_status_env_down(second_cloud, monkeypatch):
    cloud, env = second_cloud
    up = nodeforge("devcloud", "up", "--only", "identity", "--output", "json", env=env)
    assert [r["service"] for r in json.loads(up.stdout)] == ["keystone"]

    status = json.loads(nodeforge("devcloud", "status", "--output", "json", env=env).stdout)
    keystone = next(r for r in status if r["service"] == "keystone")
    assert keystone["running"] and keystone["healthy"], keystone
    assert keystone["ports"] == [openstack.PORTS["keystone"] + OFFSET]
    assert not next(r for r in status if r["service"] == "glance")["running"]

    exports = nodeforge("devcloud", "env", env=env).stdout
    assert f"OS_CLIENT_CONFIG_FILE={cloud.paths.clouds_yaml}" in exports

    # A real token from the second Keystone through clouds.yaml.
    import openstack as sdk

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(cloud.paths.clouds_yaml))
    conn = sdk.connect(cloud="nodeforge-dev-member")
    assert conn.auth_token
    assert conn.identity.get_project(conn.current_project_id).name == "nodeforge"

    # No credential of the local cloud on any process's command line or in
    # what the commands printed.
    secrets = [s.reveal() for s in credentials.load(cloud.paths.etc).values()]
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            try:
                cmdline = (proc_dir / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            assert not any(s in cmdline for s in secrets), f"secret on the command line of pid {proc_dir.name}"
    for text in (up.stdout, up.stderr, exports):
        assert not any(s in text for s in secrets)
    # ...nor in any service or set-up log (keystone-manage bootstrap gets the
    # admin password through its environment), nor in a pidfile.
    logs = [f for d in (cloud.paths.log, cloud.paths.run) for f in d.rglob("*") if f.is_file()]
    assert any(f.name == "keystone-setup.log" for f in logs)
    for f in logs:
        text = f.read_text(errors="replace")
        assert not any(s in text for s in secrets), f"a local-cloud secret is in {f}"

    pid = keystone["pid"]
    down = nodeforge("devcloud", "down", "--output", "json", env=env)
    assert json.loads(down.stdout) == [{"service": "keystone", "action": "stopped"}]
    assert _start_time(pid) is None  # gone (or a zombie awaiting its reaper)
    assert _free(openstack.PORTS["keystone"] + OFFSET)

    # down with nothing running: a no-op that says so.
    again = nodeforge("devcloud", "down", env=env)
    assert again.returncode == 0 and "nothing running" in again.stderr


@pytest.mark.devcloud
def test_port_taken_names_port_and_holder(second_cloud):
    cloud, env = second_cloud
    port = openstack.PORTS["keystone"] + OFFSET
    holder = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if not _free(port):
                break
            import time

            time.sleep(0.1)
        proc = nodeforge("devcloud", "up", "--only", "identity", env=env, check=False)
        assert proc.returncode == 1
        assert f"127.0.0.1:{port} is already in use" in proc.stderr
        assert f"pid {holder.pid}" in proc.stderr
        assert not cloud.supervisor.running_pid("keystone")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.devcloud
@pytest.mark.slow
def test_service_dying_during_up_is_reported_and_the_rest_stopped(second_cloud):
    cloud, _ = second_cloud

    class Broken(DevCloud):
        """The real cloud, except that Glance is replaced by a process that
        writes an error and exits, as a misconfigured service does."""

        def spec(self, name, ctx):
            real = super().spec(name, ctx)
            if name != "glance":
                return real
            code = "import sys; print('glance: ERROR cannot open store: no such backend'); sys.exit(3)"
            return ServiceSpec(name="glance", argv=[sys.executable, "-c", code], ports=real.ports,
                               health=real.health, group="image")

    broken = Broken(cloud.paths)
    with pytest.raises(ServiceStartError) as err:
        broken.up(["image"])
    message = str(err.value)
    assert "service 'glance' failed to start: process exited with code 3" in message
    assert "cannot open store: no such backend" in message  # the log tail
    for name in ("keystone", "barbican", "glance"):
        assert not cloud.supervisor.running_pid(name), f"{name} left running"
        assert _free(openstack.PORTS[name] + OFFSET), f"{name}'s port still bound"


def test_missing_tool_names_package_and_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError) as err:
        DevCloud(Paths(tmp_path)).up(["baremetal"])
    text = str(err.value)
    assert "'ss'" in text and "Debian package 'iproute2'" in text and "make setup" in text


def test_supervisor_stop_of_unknown_or_recycled_pid_is_a_noop(tmp_path):
    sup = Supervisor(tmp_path / "run", tmp_path / "log")
    assert sup.stop("nothing") is False
    # A pidfile naming a live process that we did not start (pid 1) is ignored.
    (tmp_path / "run").mkdir()
    sup.pidfile("ghost").write_text(json.dumps({"pid": 1, "start_time": 0}))
    assert sup.running_pid("ghost") is None
    assert sup.stop("ghost") is False
    assert Path("/proc/1").exists()


def test_supervisor_health_timeout_includes_log_tail(tmp_path):
    sup = Supervisor(tmp_path / "run", tmp_path / "log")
    spec = ServiceSpec(name="sleepy", argv=[sys.executable, "-c",
                                            "import time; print('still warming up', flush=True); time.sleep(60)"],
                       ports=[], health=lambda: "not listening", start_timeout=1.5)
    sup.start(spec)
    try:
        with pytest.raises(ServiceStartError) as err:
            sup.wait_healthy(spec)
        assert "not healthy after 2s (not listening)" in str(err.value)
        assert "still warming up" in str(err.value)
    finally:
        assert sup.stop("sleepy") is True
    assert sup.running_pid("sleepy") is None


def test_supervisor_stop_all_signals_every_group_and_kills_only_the_stubborn(tmp_path):
    """``stop_all`` (what ``down`` uses): every service gets SIGTERM at once; one
    that exits on it ends by SIGTERM, one that ignores it is SIGKILLed after its
    own stop timeout, with its child (the whole process group); pidfiles go."""
    sup = Supervisor(tmp_path / "run", tmp_path / "log")
    ready = tmp_path / "ready"
    stubborn = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); "
                f"open({str(ready)!r}, 'w').write(str(child.pid)); time.sleep(600)")
    specs = [ServiceSpec(name="polite", argv=[sys.executable, "-c", "import time; time.sleep(600)"], ports=[],
                         health=lambda: None),
             ServiceSpec(name="stubborn", argv=[sys.executable, "-c", stubborn], ports=[], health=lambda: None,
                         stop_timeout=1.0)]
    procs = {}
    for spec in specs:
        sup.start(spec)
        procs[spec.name] = sup._procs[spec.name]
    for _ in range(600):
        if ready.exists() and ready.read_text():
            break
        import time

        time.sleep(0.05)
    child = int(ready.read_text())
    assert sup.stop_all(["stubborn", "missing", "polite"]) == ["stubborn", "polite"]
    assert procs["polite"].returncode == -signal.SIGTERM
    assert procs["stubborn"].returncode == -signal.SIGKILL
    assert _start_time(child) is None, "the stubborn service's child outlived stop_all"
    assert not sup.pidfile("polite").exists() and not sup.pidfile("stubborn").exists()
    assert sup.stop_all(["polite", "stubborn"]) == []


def test_supervisor_gives_each_service_its_own_tmpdir_and_empties_it(tmp_path):
    """A service's temporary files stay inside the cloud's run directory: TMPDIR is its own,
    emptied at start (what a killed earlier run left) and removed at stop (Magnum's driver makes a
    new disk cache in tempfile.gettempdir() in every process: 267 of them had piled up in /tmp)."""
    sup = Supervisor(tmp_path / "run", tmp_path / "log")
    stale = sup.tmpdir("writer") / "left-by-a-killed-run"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    made = tmp_path / "made"
    code = ("import os, tempfile, time; d = tempfile.mkdtemp(prefix='diskcache-'); "
            f"open({str(made)!r}, 'w').write(d + '\\n' + os.environ['TMPDIR']); time.sleep(600)")
    spec = ServiceSpec(name="writer", argv=[sys.executable, "-c", code], ports=[], health=lambda: None)
    sup.start(spec)
    try:
        for _ in range(600):
            if made.exists() and made.read_text():
                break
            time.sleep(0.05)
        cache, tmpdir = made.read_text().splitlines()
        assert Path(tmpdir) == sup.tmpdir("writer")
        assert Path(cache).parent == sup.tmpdir("writer") and Path(cache).is_dir()
        assert not stale.exists()
        assert sup.tmpdir("writer").stat().st_mode & 0o777 == 0o700
    finally:
        assert sup.stop("writer") is True
    assert not sup.tmpdir("writer").exists() and not Path(cache).exists()


def test_port_holder_reports_pid(tmp_path):
    from nodeforge.devcloud.process import port_holder

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        holder = port_holder(port)
        assert holder is not None and f"pid {os.getpid()}" in holder
        sup = Supervisor(tmp_path / "run", tmp_path / "log")
        with pytest.raises(PortInUseError) as err:
            sup.start(ServiceSpec(name="x", argv=["true"], ports=[port], health=lambda: None))
        assert f"127.0.0.1:{port}" in str(err.value)
    assert port_holder(port) is None


@pytest.mark.devcloud
@pytest.mark.slow
def test_rabbitmq_down_stops_the_broker_and_its_own_epmd(second_cloud):
    from nodeforge.devcloud import rabbitmq
    from nodeforge.devcloud.process import _group_members

    cloud, _ = second_cloud
    results = cloud.up(["rabbitmq"])
    assert [r["service"] for r in results] == ["keystone", "rabbitmq"]
    pid = cloud.supervisor.running_pid("rabbitmq")
    members = _group_members(pid)
    names = {Path(f"/proc/{m}/comm").read_text().strip() for m in members}
    assert {"epmd", "beam.smp"} <= names, names
    assert not _free(rabbitmq.EPMD_PORT + OFFSET)
    cloud.down()
    assert all(_start_time(m) is None for m in members), "a broker process outlived 'down'"
    for port in rabbitmq.ports():
        assert _free(port), f"port {port} still bound after down"


_OWNER = """
import sys, time
from pathlib import Path
from nodeforge.devcloud.process import ServiceSpec, Supervisor
root = Path(sys.argv[1])
sup = Supervisor(root / "run", root / "log")
sup.tether()
stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)")
sup.start(ServiceSpec(name="polite", argv=[sys.executable, "-c", "import time; time.sleep(600)"], ports=[],
                      health=lambda: None))
sup.start(ServiceSpec(name="stubborn", argv=[sys.executable, "-c", stubborn], ports=[], health=lambda: None,
                      stop_timeout=1.0))
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_tethered_cloud_is_stopped_when_its_owner_dies_without_teardown(tmp_path, how):
    """What an interrupted test session leaves: its owner (a pytest worker) killed before or during
    its teardown. The watcher ``Supervisor.tether`` starts stops every service of the cloud, the one that
    ignores SIGTERM too, and touches nothing else (a service of another cloud keeps running)."""
    other = Supervisor(tmp_path / "other" / "run", tmp_path / "other" / "log")
    other.start(ServiceSpec(name="bystander", argv=[sys.executable, "-c", "import time; time.sleep(600)"],
                            ports=[], health=lambda: None))
    # As in a terminal: SIGINT does what it does by default (a session started in the background,
    # as CI's may be, inherits it ignored).
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(tmp_path / "cloud")], stdout=subprocess.PIPE,
                             text=True, cwd=str(Path(__file__).parents[2]), start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert owner.stdout.readline().strip() == "up"
        sup = Supervisor(tmp_path / "cloud" / "run", tmp_path / "cloud" / "log")
        pids = [sup.running_pid("polite"), sup.running_pid("stubborn")]
        assert all(pids)
        os.killpg(owner.pid, how)          # the owner's group only: services live in sessions of their own
        owner.wait(timeout=30)
        log = tmp_path / "cloud" / "log" / "reaper.log"
        for _ in range(600):               # a bound, not a timing: SIGTERM, 1 s grace, SIGKILL
            if "stopped" in log.read_text():
                break
            time.sleep(0.05)
        assert log.read_text() == "owner gone; stopped polite, stubborn\n"
        assert [_start_time(pid) for pid in pids] == [None, None]
        assert not list((tmp_path / "cloud" / "run").glob("*.pid"))
        assert other.running_pid("bystander"), "the watcher stopped a service of another cloud"
    finally:
        owner.kill()
        other.stop_all(["bystander"])
        Supervisor(tmp_path / "cloud" / "run", tmp_path / "cloud" / "log").stop_all(["polite", "stubborn"])
