"""The local cloud as a whole: bring services up in order, seed Keystone,
write clouds.yaml, report status, and stop what was started."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Iterable

import yaml

from nodeforge.base import fs, runner
from nodeforge.devcloud import credentials, openstack
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import ServiceSpec, Supervisor
from nodeforge.errors import NodeforgeError, UsageError

LOG = logging.getLogger(__name__)

ADMIN_CLOUD = "nodeforge-dev"
MEMBER_CLOUD = "nodeforge-dev-member"
# Ironic's secure-RBAC defaults (scope is always enforced by oslo.policy)
# reserve drivers, conductors and un-owned nodes for system-scoped tokens,
# which Glance and Nova do not accept: bare-metal administration uses this.
SYSTEM_CLOUD = "nodeforge-dev-system"
MEMBER_PROJECT = "nodeforge"

# Start order; a service appears after everything it depends on.
ORDER = ("keystone", "barbican", "glance", "placement", "nova", "neutron", "rabbitmq", "magnum-api",
         "magnum-conductor", "redfish-bmc", "ipmi-bmc", "ironic-http", "ironic")
# Services that run from a virtualenv other than "openstack".
SERVICE_VENVS = {"neutron": "neutron", "magnum-api": "magnum", "magnum-conductor": "magnum"}


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
                return bmc.redfish_service(self.paths)
            return bmc.ipmi_service(self.paths)
        if name in SERVICE_VENVS:
            venv = self.paths.venv(SERVICE_VENVS[name])
            if not (venv / "bin" / "python").exists():
                raise NotInstalledError(path=venv)
        if name == "rabbitmq":
            from nodeforge.devcloud import rabbitmq

            return rabbitmq.service(self.paths, ctx.creds)
        if name in ("magnum-api", "magnum-conductor"):
            from nodeforge.devcloud import magnum

            return magnum.api(ctx) if name == "magnum-api" else magnum.conductor(ctx)
        if name == "neutron":
            from nodeforge.devcloud import neutron

            return neutron.service(ctx)
        if name == openstack.IRONIC_HTTP:
            return openstack.ironic_http(ctx)
        return getattr(openstack, name)(ctx)

    # -- lifecycle ---------------------------------------------------------
    def up(self, only: Iterable[str] | None = None, progress=None) -> list[dict]:
        """Start the selected services and wait until each is healthy.

        Keystone comes first (everything authenticates through it and it is
        seeded before use); the rest are launched together and then waited
        for, which roughly halves a cold start on two cores. If anything
        fails, every process started by this call is stopped again.
        """
        names = select(only)
        tools = ["ss"] + (["ipmitool"] if {"ironic", "ipmi-bmc"} & set(names) else [])
        runner.require(*tools)
        ctx = self._context()
        started: list[str] = []
        results: dict[str, dict] = {}
        say = progress or (lambda msg: None)

        def launch(spec: ServiceSpec) -> bool:
            if self.supervisor.running_pid(spec.name):
                if spec.health() is None:
                    results[spec.name] = {"service": spec.name, "action": "already running"}
                    return False
                self.supervisor.stop(spec.name)
            say(f"starting {spec.name}")
            self.supervisor.start(spec)
            started.append(spec.name)
            return True

        try:
            waves = [[n for n in names if n == "keystone"], [n for n in names if n != "keystone"]]
            for wave in waves:
                t0 = time.monotonic()
                specs = [self.spec(name, ctx) for name in wave]
                launched = [spec for spec in specs if launch(spec)]
                for spec in launched:
                    self.supervisor.wait_healthy(spec)
                    if spec.after_healthy:
                        spec.after_healthy()
                    results[spec.name] = {"service": spec.name, "action": "started",
                                          "seconds": round(time.monotonic() - t0, 1)}
                    say(f"{spec.name} healthy")
                if "keystone" in wave:
                    from nodeforge.devcloud import seed

                    seed.keystone(self.paths, ctx)
                    self.write_clouds_yaml(ctx)
        except BaseException:
            self.supervisor.stop_all(list(reversed(started)))
            raise
        self.write_clouds_yaml(ctx)
        return [results[name] for name in names if name in results]

    def down(self) -> list[dict]:
        """Stop every service of this cloud: all signalled at once (in reverse
        start order), then waited for together, so ``down`` takes about as
        long as the slowest service's shutdown rather than the sum."""
        stopped = self.supervisor.stop_all(list(reversed(ORDER)))
        return [{"service": name, "action": "stopped"} for name in stopped]

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
        def cloud(user: str, project: str | None, password_key: str) -> dict:
            auth = {
                "auth_url": openstack.keystone_url(),
                "username": user,
                "password": ctx.creds[password_key].reveal(),
                "user_domain_name": "Default",
            }
            if project:
                auth.update(project_name=project, project_domain_name="Default")
            else:
                auth["system_scope"] = "all"
            return {
                "auth": auth,
                "region_name": openstack.REGION,
                "interface": "public",
                "identity_api_version": 3,
                "baremetal_api_version": "1",
            }

        data = {"clouds": {
            ADMIN_CLOUD: cloud("admin", "admin", "admin_password"),
            MEMBER_CLOUD: cloud("nodeforge-member", MEMBER_PROJECT, "member_password"),
            SYSTEM_CLOUD: cloud("admin", None, "admin_password"),
        }}
        return fs.atomic_write(self.paths.clouds_yaml, yaml.safe_dump(data, sort_keys=False), 0o600)

    def env(self) -> dict[str, str]:
        return {"OS_CLIENT_CONFIG_FILE": str(self.paths.clouds_yaml), "OS_CLOUD": ADMIN_CLOUD,
                **openstack.canary_settings()}
