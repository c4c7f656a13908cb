"""End-to-end checks that the running local cloud works: one authenticated
call per service, through the same clients nodeforge uses (openstacksdk,
sushy, ipmitool). ``nodeforge devcloud check`` and ``make demo`` show them."""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

from nodeforge.devcloud import bmc
from nodeforge.devcloud.cloud import ADMIN_CLOUD, MEMBER_CLOUD, SYSTEM_CLOUD, DevCloud
from nodeforge.redact import scrub


def _checks(cloud: DevCloud) -> list[tuple[str, str, Callable[[], str]]]:
    """Each service's check, in the order they run: (service, what is checked, the check)."""
    config_file = str(cloud.paths.clouds_yaml)
    admin = _connection(config_file, ADMIN_CLOUD)
    member = _connection(config_file, MEMBER_CLOUD)
    return [
        ("keystone", "identity", partial(_token, admin)),
        ("glance", "image", partial(_images, member)),
        ("nova", "compute", partial(_flavors, admin)),
        ("placement", "placement", partial(_placement, admin)),
        ("barbican", "key-manager", partial(_secrets, admin)),
        ("neutron", "network", partial(_network, admin)),
        ("rabbitmq", "amqp", partial(_broker, cloud)),
        ("magnum-api", "container-infra", partial(_container_infra, admin)),
        ("magnum-conductor", "container-infra", partial(_conductor, admin)),
        ("ironic-http", "http", partial(_http_root, cloud)),
        ("ironic", "baremetal", partial(_baremetal, config_file)),
        ("redfish-bmc", "redfish", partial(_redfish, cloud)),
        ("ipmi-bmc", "ipmi", partial(_ipmi, cloud)),
    ]


def _connection(config_file: str, name: str):
    """An openstacksdk connection to the cloud ``name`` of the local cloud's clouds.yaml only."""
    import openstack
    from openstack import config as os_config

    # load_envvars=False: OS_CLIENT_CONFIG_FILE or OS_* must not redirect the check
    # to another cloud (openstacksdk puts that file before config_files).
    region = os_config.OpenStackConfig(config_files=[config_file], load_envvars=False).get_one(cloud=name)
    return openstack.connection.Connection(config=region)


def _token(admin) -> str:
    return f"token for project {admin.current_project.name!r}"


def _images(member) -> str:
    return f"{len(list(member.image.images()))} images visible to the member"


def _flavors(admin) -> str:
    return f"{len(list(admin.compute.flavors()))} flavors"


def _placement(admin) -> str:
    return f"{len(list(admin.placement.resource_providers()))} resource providers"


def _secrets(admin) -> str:
    return f"{len(list(admin.key_manager.secrets()))} secrets"


def _baremetal(config_file: str) -> str:
    system = _connection(config_file, SYSTEM_CLOUD)
    drivers = sorted(d.name for d in system.baremetal.drivers())
    nodes = len(list(system.baremetal.nodes()))
    return f"drivers {', '.join(drivers)}; {nodes} nodes"


def _redfish(cloud: DevCloud) -> str:
    import sushy
    from sushy import auth

    cred = bmc.credentials(cloud.paths).redfish
    root = sushy.Sushy(bmc.redfish_endpoint() + "/redfish/v1",
                       auth=auth.BasicAuth(cred.username, cred.password.reveal()),
                       verify=str(bmc.ca_bundle(cloud.paths)))
    systems = root.get_system_collection().get_members()
    return f"{len(systems)} systems over HTTPS with basic auth"


def _network(admin) -> str:
    nets = {n.name: n for n in admin.network.networks()}
    external = sorted(name for name, n in nets.items() if n.is_router_external)
    return f"{len(nets)} networks; external: {', '.join(external) or 'none'}"


def _broker(cloud: DevCloud) -> str:
    from nodeforge.devcloud import credentials, rabbitmq

    creds = credentials.load(cloud.paths.etc)
    return rabbitmq.login(rabbitmq.amqp_port(), rabbitmq.USER, creds["rabbitmq_password"])


def _container_infra(admin) -> str:
    cim = admin.container_infrastructure_management
    templates = len(list(cim.cluster_templates()))
    return f"{templates} cluster templates"


def _conductor(admin) -> str:
    states = [f"{s.binary} {s.state}" for s in admin.container_infrastructure_management.services()]
    if not any(s == "magnum-conductor up" for s in states):
        raise RuntimeError(f"no conductor up ({', '.join(states) or 'none registered'})")
    return ", ".join(states)


def _ipmi(cloud: DevCloud) -> str:
    endpoints = bmc.ipmi_endpoints(cloud.paths)
    out = bmc.ipmitool(endpoints[0], "power", "status")
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or f"ipmitool exited {out.returncode}")
    return f"{endpoints[0].address}: {out.stdout.strip()}"


def _http_root(cloud: DevCloud) -> str:
    import os
    import secrets as token_bytes
    import urllib.request

    from nodeforge.devcloud import openstack as dc_openstack

    body = token_bytes.token_hex(16).encode()
    probe = dc_openstack.ironic_http_root(cloud.paths) / f".nodeforge-check-{os.getpid()}"
    probe.write_bytes(body)
    try:
        req = urllib.request.Request(f"{dc_openstack.url(dc_openstack.IRONIC_HTTP)}/{probe.name}",
                                     headers={"Range": "bytes=4-11", "Connection": "close"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, got = resp.status, resp.read()
    finally:
        probe.unlink(missing_ok=True)
    if (status, got) != (206, body[4:12]):
        raise RuntimeError(f"a file of the http_root: HTTP {status}, {len(got)} bytes (expected 206, 8 bytes)")
    return "a file of Ironic's http_root, one byte range (206)"


def run(cloud: DevCloud | None = None) -> list[dict]:
    cloud = cloud or DevCloud()
    running = {row["service"] for row in cloud.status() if row["running"]}
    results = []
    for service, kind, check in _checks(cloud):
        if service not in running:
            results.append({"service": service, "check": kind, "ok": None, "detail": "not running", "seconds": 0})
            continue
        t0 = time.monotonic()
        try:
            detail, ok = check(), True
        except Exception as exc:  # noqa: BLE001 - every failure is reported per check
            detail, ok = f"{type(exc).__name__}: {scrub(str(exc))}", False
        results.append({"service": service, "check": kind, "ok": ok, "detail": detail,
                        "seconds": round(time.monotonic() - t0, 2)})
    return results
