"""Loopback ports for services a test starts, stops and starts again on the same port.

A port taken with ``bind(('127.0.0.1', 0))`` lies in the kernel's ephemeral range: once the test
lets it go, any outgoing connection on the machine (another pytest worker's HTTP client, say) may
take it as its source port, and the second start finds it held by no listener at all. So these
ports come from below that range, from a block of its own for each xdist worker."""

from __future__ import annotations

import os
import random
import socket

_BASE, _BLOCK = 21000, 1500          # gw0: 21000-22499, gw1: 22500-23999, ... (below 32768)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_tcp_port() -> int:
    """A loopback TCP port free now and outside the ephemeral range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = _BASE + (index % 7) * _BLOCK
    high = min(low + _BLOCK, _ephemeral_low())
    candidates = list(range(low, high))
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {low}-{high - 1}")
