"""Processes the local cloud starts: launch detached, pidfiles, health, stop.

A :class:`ServiceSpec` says how to run one service; :class:`Supervisor` starts
specs in order, waits for each health check, and stops only processes it
started (found by pidfile, checked against the recorded command line).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Sequence

# A health check returns None when healthy, or a short reason when not.
HealthCheck = Callable[[], "str | None"]


@dataclasses.dataclass
class ServiceSpec:
    name: str                      # e.g. "keystone"
    argv: Sequence[str]            # full command line (no secrets in it!)
    ports: Sequence[int]           # loopback ports it binds (checked free before start)
    health: HealthCheck            # polled until None or timeout
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    cwd: Path | None = None
    group: str = "core"            # service group for `up --only` (image, baremetal, ...)
    depends: Sequence[str] = ()    # names of services that must be healthy first
    prepare: Callable[[], None] | None = None  # one-off set-up before launch (db sync, ...)
    start_timeout: float = 60.0
    url: str | None = None         # shown by `status`
