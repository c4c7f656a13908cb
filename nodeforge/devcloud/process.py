"""Processes the local cloud starts: launch detached, pidfiles, health, stop.

A :class:`ServiceSpec` says how to run one service; :class:`Supervisor` starts
specs in order, waits for each health check, and stops only processes it
started (found by pidfile, checked against the recorded command line).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from nodeforge.base import runner
from nodeforge.errors import NodeforgeError
from nodeforge.redact import scrub

LOG = logging.getLogger(__name__)

# A health check returns None when healthy, or a short reason when not.
HealthCheck = Callable[[], "str | None"]


@dataclasses.dataclass
class ServiceSpec:
    name: str                      # e.g. "keystone"
    argv: Sequence[str]            # full command line (no secrets in it!)
    ports: Sequence[int]           # loopback TCP ports it binds (checked free before start)
    health: HealthCheck            # polled until None or timeout
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    cwd: Path | None = None
    group: str = "core"            # service group for `up --only` (image, baremetal, ...)
    depends: Sequence[str] = ()    # names of services that must be healthy first
    prepare: Callable[[], None] | None = None  # one-off set-up before launch (db sync, ...)
    start_timeout: float = 60.0
    url: str | None = None         # shown by `status`
    udp_ports: Sequence[int] = ()  # loopback UDP ports it binds
    # Seconds `stop` waits after SIGTERM before it SIGKILLs the process group
    # (recorded in the pidfile, so `down` honours it without the spec).
    stop_timeout: float = 15.0
    after_healthy: Callable[[], None] | None = None  # one-off seeding once healthy (by `DevCloud.up`)



class PortInUseError(NodeforgeError):
    message = "cannot start {service}: 127.0.0.1:{port} is already in use by {holder}"


class ServiceStartError(NodeforgeError):
    message = "service '{service}' failed to start: {reason}\n--- last lines of {log} ---\n{tail}"


log_tail = runner.log_tail   # the last lines of a service's log, secrets masked


def port_holder(port: int, proto: str = "tcp") -> str | None:
    """Describe what holds a loopback port, or None if it is free."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as sock:
        if proto == "tcp":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    flag = "-Hltnp" if proto == "tcp" else "-Hlunp"
    try:
        out = runner.run(["ss", flag, f"sport = :{port}"], merge=False, check=False, timeout=5).stdout
    except (OSError, runner.CommandTimeout):
        out = ""
    # users:(("python",pid=123,fd=3))
    m = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
    if m:
        return f"process '{m.group(1)}' (pid {m.group(2)})"
    return "another process (run 'ss -ltnup' to see which)"


def _start_time(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (``/proc/PID/stat``
    field 22), or None if it is gone or a zombie. With the pid, this names
    one process for good: processes rename themselves (uWSGI, setproctitle
    overwrites even the environment block), but never change this."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


class Supervisor:
    """Starts and stops the local cloud's processes, tracked by pidfile.

    A pidfile records the pid and the process's start time; a process is ours
    only if both still match, so a recycled pid is never killed.
    """

    def __init__(self, run_dir: Path, log_dir: Path):
        self.run_dir = run_dir
        self.log_dir = log_dir

    def pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def logfile(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def tmpdir(self, name: str) -> Path:
        """The service's own TMPDIR: emptied at each start and removed at its stop, so what a service
        leaves in its temporary directory (Magnum's cluster-api driver makes a fresh disk cache there in
        every process) goes with it instead of piling up in /tmp."""
        return self.run_dir / "tmp" / name

    def running_pid(self, name: str) -> int | None:
        try:
            record = json.loads(self.pidfile(name).read_text())
        except (OSError, ValueError):
            return None
        pid = int(record.get("pid", 0))
        if not pid or _start_time(pid) != record.get("start_time"):
            return None
        return pid

    def start(self, spec: ServiceSpec) -> int:
        if self.running_pid(spec.name):
            raise ServiceStartError(service=spec.name, reason="already running", log=self.logfile(spec.name),
                                    tail="")
        for port, proto in [(p, "tcp") for p in spec.ports] + [(p, "udp") for p in spec.udp_ports]:
            holder = port_holder(port, proto)
            if holder:
                raise PortInUseError(service=spec.name, port=port, holder=holder)
        if spec.prepare:
            spec.prepare()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmpdir(spec.name)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True, mode=0o700)
        logf = open(self.logfile(spec.name), "ab")
        env = dict(os.environ)
        for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(var, None)
        env["TMPDIR"] = str(tmp)
        env.update(spec.env)
        proc = subprocess.Popen(
            list(spec.argv), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=str(spec.cwd) if spec.cwd else None, env=env, start_new_session=True,
        )
        logf.close()
        self.pidfile(spec.name).write_text(json.dumps({
            "pid": proc.pid, "start_time": _start_time(proc.pid), "argv": list(spec.argv), "started": time.time(),
            "stop_timeout": spec.stop_timeout,
        }))
        self._procs = getattr(self, "_procs", {})
        self._procs[spec.name] = proc
        return proc.pid

    def wait_healthy(self, spec: ServiceSpec) -> float:
        """Poll the health check; raise with the log tail if the process dies
        or the timeout passes."""
        start = time.monotonic()
        reason = "not yet checked"
        delay = 0.2
        while time.monotonic() - start < spec.start_timeout:
            proc = getattr(self, "_procs", {}).get(spec.name)
            if proc is not None and proc.poll() is not None:
                raise ServiceStartError(service=spec.name, reason=f"process exited with code {proc.returncode}",
                                        log=self.logfile(spec.name), tail=log_tail(self.logfile(spec.name)))
            if proc is None and not self.running_pid(spec.name):
                raise ServiceStartError(service=spec.name, reason="process is not running",
                                        log=self.logfile(spec.name), tail=log_tail(self.logfile(spec.name)))
            try:
                reason = spec.health()
            except Exception as exc:  # noqa: BLE001 - any failure means not healthy yet
                reason = f"{type(exc).__name__}: {exc}"
            if reason is None:
                return time.monotonic() - start
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        raise ServiceStartError(service=spec.name,
                                reason=f"not healthy after {spec.start_timeout:.0f}s ({scrub(str(reason))})",
                                log=self.logfile(spec.name), tail=log_tail(self.logfile(spec.name)))

    def stop(self, name: str, timeout: float | None = None) -> bool:
        """Stop a service we started (its whole process group: uWSGI workers,
        Ironic's forked service): SIGTERM, then SIGKILL after ``timeout``
        seconds (default: the service's ``stop_timeout`` recorded at start,
        else 15). Returns False if it was not running."""
        return bool(self.stop_all([name], timeout=timeout))

    def stop_all(self, names: Sequence[str], timeout: float | None = None) -> list[str]:
        """Stop several services at once: SIGTERM to every group (in the order
        given), then wait for all of them together, each SIGKILLed when its
        own ``stop_timeout`` (or ``timeout``) has passed. Takes about as long
        as the slowest service, not the sum of all. Returns the names that
        were running (in the order given)."""
        groups: dict[str, tuple[int, float]] = {}
        for name in names:
            pid = self.running_pid(name)
            pidfile = self.pidfile(name)
            if pid is None:
                pidfile.unlink(missing_ok=True)
                continue
            wait = timeout
            if wait is None:
                try:
                    wait = float(json.loads(pidfile.read_text()).get("stop_timeout", 15.0))
                except (OSError, ValueError, TypeError):
                    wait = 15.0
            _signal_group(pid, signal.SIGTERM)
            groups[name] = (pid, time.monotonic() + wait)
        left = dict(groups)
        killed: dict[str, float] = {}
        while left:
            alive = _live_groups({pid for pid, _ in left.values()})
            now = time.monotonic()
            for name, (pid, deadline) in list(left.items()):
                self._reap(name)
                if pid not in alive:
                    del left[name]
                elif name not in killed and now >= deadline:
                    LOG.info("%s ignored SIGTERM; killing its process group", name)
                    _signal_group(pid, signal.SIGKILL)
                    killed[name] = now + 5
                elif name in killed and now >= killed[name]:
                    del left[name]        # unkillable (D state): give up waiting, as before
            if left:
                time.sleep(0.05)
        for name in groups:
            self._reap(name, wait=True)
            self.pidfile(name).unlink(missing_ok=True)
            shutil.rmtree(self.tmpdir(name), ignore_errors=True)
        return list(groups)

    def tether(self) -> Callable[[], None]:
        """Start the watcher (:mod:`nodeforge.devcloud.reaper`) that stops every service of this
        supervisor's pidfiles once the calling process is gone, by any means. Returns the release:
        call it after stopping the services yourself; the watcher then finds nothing and exits."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logfile("reaper"), "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "nodeforge.devcloud.reaper", str(self.run_dir),
                                     str(self.log_dir)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=str(Path(__file__).resolve().parents[2]))

        def release() -> None:
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass

        return release

    def _reap(self, name: str, wait: bool = False) -> None:
        proc = getattr(self, "_procs", {}).get(name)
        if proc is None:
            return
        if wait:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return
            self._procs.pop(name, None)
        else:
            proc.poll()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _live_processes() -> Iterator[tuple[int, int]]:
    """(pid, process group) of every live (non-zombie) process: one pass over /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields: state ppid pgrp ...
        if fields[0] != "Z":
            yield int(entry.name), int(fields[2])


def _live_groups(pgids: set[int]) -> set[int]:
    """Which of ``pgids`` still have a live (non-zombie) member."""
    return {pgrp for _, pgrp in _live_processes() if pgrp in pgids}


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group."""
    return [pid for pid, pgrp in _live_processes() if pgrp == pgid]
