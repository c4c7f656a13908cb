"""Kill `nodeforge baremetal enroll` (SIGKILL) midway on the local cloud's
real Ironic, run it again, and check the batch ends as if never interrupted.

The batch: fake-hardware nodes (half of them inspected, so the checkpoint
``extra.nodeforge_stage = inspected`` matters), two emulated Redfish BMCs
listed without MACs (their ports come from the BMC) and one Redfish node
with a wrong password. The kill comes when Ironic shows nodes created and
the lifecycle midway: inspected nodes waiting in ``manageable`` for their
provide (one provide at a time, ``--concurrency 1``) (the checkpoint is what tells the next run
not to inspect it again) and nodes not yet ``available``. Every node the
test creates is deleted at the end (unique name prefix).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

from nodeforge.devcloud import bmc
from nodeforge.ironic import constants as C
from tests.ironic.devcloud_inventory import delete_nodes, fake_node, redfish_node, write_inventory

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

SYSTEM = "nodeforge-dev-system"
FAKE_NODES = 12


def _ours(conn, prefix: str) -> list:
    return [n for n in conn.baremetal.nodes(details=True) if (n.name or "").startswith(prefix)]


def _tcp_table() -> list[tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of every IPv4/IPv6 TCP socket on this host."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                f = line.split()
                rows.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), f[3], int(f[9])))
    return rows


def _client_ports(pid: int, server_port: int) -> set[int]:
    """The local ports of ``pid``'s open connections to ``server_port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return {local for local, remote, _, inode in _tcp_table() if inode in inodes and remote == server_port}


def _wait_until_server_closed(server_port: int, peers: set[int], deadline: float) -> None:
    """Until the server side of each connection from ``peers`` is closed (no longer
    ESTABLISHED or CLOSE_WAIT): the server has answered whatever was in flight on it."""
    open_states = {"01", "08"}
    while True:
        left = {remote for local, remote, st, _ in _tcp_table()
                if local == server_port and remote in peers and st in open_states}
        if not left:
            return
        assert time.monotonic() < deadline, f"Ironic still holds the killed run's connections from ports {left}"
        time.sleep(0.05)


def test_killed_midway_then_rerun_finishes_without_duplicates(devcloud, bmc_pool, tmp_path):
    conn = devcloud.system()
    prefix = f"kill{uuid.uuid4().hex[:5]}-"
    paths = devcloud.paths
    systems = bmc_pool.redfish(3)
    rf = [redfish_node(paths, tmp_path, s.index, prefix=prefix) for s in systems]
    for node in rf:
        del node["macs"]                      # ports from the MACs the BMC reports
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("wrong-" + uuid.uuid4().hex)
    os.chmod(wrong, 0o600)
    bad = {**rf.pop(), "name": f"{prefix}bad-password"}
    bad["bmc"] = {**bad["bmc"], "password": f"file:{wrong}"}
    fakes = [fake_node(i, prefix=prefix, inspect=i % 2 == 0) for i in range(FAKE_NODES)]
    inv = write_inventory(tmp_path / "inventory.yaml", rf + [bad] + fakes)
    good = [n["name"] for n in rf + fakes]
    secrets = [bmc.credentials(paths).redfish.password.reveal(), wrong.read_text()]
    argv = [sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM, "-v", "baremetal", "enroll", str(inv),
            "-o", "json", "--concurrency", "1"]       # (keep --concurrency 1 last: the re-run drops it)
    ironic_port = urllib.parse.urlsplit(conn.baremetal.get_endpoint()).port
    try:
        first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 600
        snapshot: list = []
        while time.monotonic() < deadline:
            assert first.poll() is None, f"enroll finished before it could be killed: {first.stderr.read()[-2000:]}"
            # Frozen while Ironic is read: a slow listing (a loaded host) cannot
            # let the batch run past the kill point between two looks at it.
            first.send_signal(signal.SIGSTOP)
            nodes = _ours(conn, prefix)
            waiting = [n for n in nodes if n.provision_state == "manageable"
                       and (n.extra or {}).get(C.EXTRA_CHECKPOINT) == "inspected"]
            available = [n for n in nodes if n.provision_state == "available"]
            # One provide at a time (--concurrency 1): with two inspected nodes
            # waiting, at least one is still waiting when the kill lands.
            if len(nodes) == len(good) + 1 and len(waiting) >= 2 and len(available) < len(good) - 2:
                # Still frozen (it sends nothing more): its connections to Ironic noted, then killed.
                peers = _client_ports(first.pid, ironic_port)
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)
                # A request the killed run had in flight is handled before the snapshot:
                # Ironic has closed every connection the killed run had open.
                _wait_until_server_closed(ironic_port, peers, deadline=time.monotonic() + 120)
                snapshot = _ours(conn, prefix)
                break
            first.send_signal(signal.SIGCONT)
            time.sleep(0.2)     # runs this long between two looks (the condition above is what is waited for)
        assert snapshot, "the batch never reached the kill point"
        out, err = first.communicate()
        assert first.returncode == -signal.SIGKILL and not out   # killed before any report
        states = {n.name: n.provision_state for n in snapshot}
        inspected = {n.name for n in snapshot if (n.extra or {}).get(C.EXTRA_CHECKPOINT) == "inspected"
                     and n.provision_state == "manageable"}
        assert inspected and sum(s != "available" for s in states.values()) > 2, states

        # The re-run at the default concurrency: one stage at a time only made
        # the kill point reliable; the resumed batch must end the same either way.
        second = subprocess.run(argv[:-2], capture_output=True, text=True, timeout=900)
        data = json.loads(second.stdout)
        by = {n["name"]: n for n in data["nodes"]}
        assert second.returncode == 3, second.stderr[-3000:]          # only the bad password fails
        assert by[f"{prefix}bad-password"]["error_type"] == "power-credentials"
        for name in good:
            assert by[name]["ok"] and by[name]["state"] == "available", by[name]
            assert by[name]["action"] != "create", by[name]          # every node was created before the kill
        # The checkpoint was used: no node inspected before the kill is inspected again.
        for name in inspected:
            assert f"{name}: inspect\n" not in second.stderr, name

        nodes = _ours(conn, prefix)
        names = [n.name for n in nodes]
        assert sorted(names) == sorted(good + [f"{prefix}bad-password"])   # no duplicate node
        ports = [p for p in conn.baremetal.ports(details=True) if p.node_id in {n.id for n in nodes}]
        addresses = [p.address for p in ports]
        assert len(addresses) == len(set(addresses))                       # no duplicate port
        by_node = {n.name: sorted(p.address for p in ports if p.node_id == n.id) for n in nodes}
        for s, node in zip(systems, rf):
            assert by_node[node["name"]] == sorted(s.macs)                 # from the BMC, once
        for f in fakes:
            assert by_node[f["name"]] == f["macs"]
        for n in nodes:
            if n.name in good and n.name.startswith(f"{prefix}fake-"):
                i = int(n.name.rsplit("-", 1)[1])
                assert (n.extra or {}).get(C.EXTRA_CHECKPOINT) == ("inspected" if i % 2 == 0 else None)
        for text in (out, err, second.stdout, second.stderr):
            assert not any(s in text for s in secrets)
    finally:
        if "first" in locals() and first.poll() is None:
            first.kill()
            first.wait()
        delete_nodes(conn, prefix)
