"""The local cloud as a whole: bring services up in order, seed Keystone,
write clouds.yaml, report status, and stop what was started."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Iterable

import yaml

from nodeforge.devcloud import credentials, openstack
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import ServiceSpec, Supervisor
from nodeforge.errors import NodeforgeError, UsageError

LOG = logging.getLogger(__name__)

ADMIN_CLOUD = "nodeforge-dev"
MEMBER_CLOUD = "nodeforge-dev-member"
MEMBER_PROJECT = "nodeforge"

# Start order; a service appears after everything it depends on.
ORDER = ("keystone", "barbican", "glance", "placement", "nova", "redfish-bmc", "ipmi-bmc", "ironic")


class NotInstalledError(NodeforgeError):
    message = "the local cloud's virtualenvs are not installed ({path} missing)"
    hint = "run 'make setup' (or 'nodeforge devcloud install')"


def select(only: Iterable[str] | None) -> list[str]:
    """Service names for ``--only`` groups or service names, in start order."""
    if not only:
        return list(ORDER)
    wanted: set[str] = set()
    for item in only:
        item = item.strip()
        if item in openstack.GROUPS:
            wanted.update(openstack.GROUPS[item])
        elif item in ORDER:
            wanted.add(item)
            wanted.add("keystone")
        else:
            choices = ", ".join(sorted(openstack.GROUPS) + list(ORDER))
            raise UsageError(detail=f"--only: unknown group or service '{item}' (choose from {choices})")
    return [name for name in ORDER if name in wanted]


class DevCloud:
    def __init__(self, paths: Paths | None = None):
        self.paths = paths or Paths.default()
        self.supervisor = Supervisor(self.paths.run, self.paths.log)

    # -- specs -------------------------------------------------------------
    def _context(self) -> openstack.Context:
        venv = self.paths.venv(openstack.VENV)
        if not (venv / "bin" / "uwsgi").exists():
            raise NotInstalledError(path=venv)
        self.paths.ensure()
        return openstack.Context(self.paths, credentials.load(self.paths.etc))

    def spec(self, name: str, ctx: openstack.Context) -> ServiceSpec:
        if name in ("redfish-bmc", "ipmi-bmc"):
            from nodeforge.devcloud import bmc

            if name == "redfish-bmc":
                return bmc.redfish_service(self.paths, bmc.REDFISH_PORT)
            return bmc.ipmi_service(self.paths, bmc.IPMI_BASE_PORT)
        return getattr(openstack, name)(ctx)

    # -- lifecycle ---------------------------------------------------------
    def up(self, only: Iterable[str] | None = None, progress=None) -> list[dict]:
        names = select(only)
        ctx = self._context()
        started: list[str] = []
        results = []
        try:
            for name in names:
                spec = self.spec(name, ctx)
                if self.supervisor.running_pid(name):
                    reason = spec.health()
                    if reason is None:
                        results.append({"service": name, "action": "already running"})
                        continue
                    self.supervisor.stop(name)
                t0 = time.monotonic()
                if progress:
                    progress(f"starting {name}")
                self.supervisor.start(spec)
                started.append(name)
                self.supervisor.wait_healthy(spec)
                if name == "keystone":
                    from nodeforge.devcloud import seed

                    seed.keystone(self.paths, ctx)
                    self.write_clouds_yaml(ctx)
                results.append({"service": name, "action": "started",
                                "seconds": round(time.monotonic() - t0, 1)})
        except BaseException:
            for name in reversed(started):
                self.supervisor.stop(name)
            raise
        self.write_clouds_yaml(ctx)
        return results

    def down(self) -> list[dict]:
        results = []
        for name in reversed(ORDER):
            stopped = self.supervisor.stop(name)
            if stopped:
                results.append({"service": name, "action": "stopped"})
        return results

    def status(self) -> list[dict]:
        ctx = None
        rows = []
        for name in ORDER:
            pid = self.supervisor.running_pid(name)
            row = {"service": name, "pid": pid, "running": bool(pid), "healthy": False, "url": None,
                   "ports": [], "detail": ""}
            try:
                ctx = ctx or self._context()
                spec = self.spec(name, ctx) if pid else None
            except NodeforgeError as exc:
                row["detail"] = str(exc)
                rows.append(row)
                continue
            if spec is not None:
                row["ports"] = list(spec.ports) + [f"{p}/udp" for p in spec.udp_ports]
                row["url"] = spec.url
                reason = spec.health()
                row["healthy"] = reason is None
                row["detail"] = reason or "ok"
            else:
                row["detail"] = "not running"
            rows.append(row)
        return rows

    # -- client configuration --------------------------------------------
    def write_clouds_yaml(self, ctx: openstack.Context) -> Path:
        def cloud(user: str, project: str, password_key: str) -> dict:
            return {
                "auth": {
                    "auth_url": openstack.keystone_url(),
                    "username": user,
                    "password": ctx.creds[password_key].reveal(),
                    "project_name": project,
                    "user_domain_name": "Default",
                    "project_domain_name": "Default",
                },
                "region_name": openstack.REGION,
                "interface": "public",
                "identity_api_version": 3,
                "baremetal_api_version": "1",
            }

        data = {"clouds": {
            ADMIN_CLOUD: cloud("admin", "admin", "admin_password"),
            MEMBER_CLOUD: cloud("nodeforge-member", MEMBER_PROJECT, "member_password"),
        }}
        path = self.paths.clouds_yaml
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(data, fh, sort_keys=False)
        os.replace(tmp, path)
        return path

    def env(self) -> dict[str, str]:
        return {"OS_CLIENT_CONFIG_FILE": str(self.paths.clouds_yaml), "OS_CLOUD": ADMIN_CLOUD}
