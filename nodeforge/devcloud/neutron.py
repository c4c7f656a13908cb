"""Neutron (API server only: ML2, no agents) for the local cloud, in its own
virtualenv (``.devcloud/venvs/neutron``), so networks and subnets are real
records Magnum validates templates against.

Neutron 29 has no ``neutron-server`` command: ``neutron/wsgi/api.py`` runs
under uWSGI with ``OS_NEUTRON_CONFIG_DIR`` (``neutron.conf`` and
``plugins/ml2/ml2_conf.ini``) and the venv's ``api-paste.ini``. One uWSGI
thread: with more, SQLite answers "database is locked". No message bus
(``fake:``), notifications off, no mechanism drivers: nothing is ever wired,
only recorded. The schema is created from the models (``create_all``) and
stamped ``heads``.

Seeded once in the ``admin`` project: the external flat network ``public``
with ``public-subnet``, and the tenant network ``private`` with
``private-subnet`` (cluster templates name them).
"""

from __future__ import annotations

import logging
import shutil

from nodeforge.devcloud import inifile
from nodeforge.devcloud.openstack import Context, http_health, port, url
from nodeforge.devcloud.process import ServiceSpec

LOG = logging.getLogger(__name__)

VENV = "neutron"
DB = "neutron"
PUBLIC_NETWORK = "public"
PUBLIC_SUBNET = "public-subnet"
PUBLIC_CIDR = "172.24.4.0/24"
PRIVATE_NETWORK = "private"
PRIVATE_SUBNET = "private-subnet"
PRIVATE_CIDR = "10.0.0.0/24"

CREATE_SCHEMA = """\
import sys
import sqlalchemy
from neutron.db.migration.models import head
engine = sqlalchemy.create_engine(sys.argv[1])
head.get_metadata().create_all(engine)
engine.dispose()
"""


def _write_config(ctx: Context):
    conf_dir = ctx.conf_dir("neutron")
    state = ctx.paths.data / "neutron"
    (state / "locks").mkdir(parents=True, exist_ok=True)
    (conf_dir / "plugins" / "ml2").mkdir(parents=True, exist_ok=True)
    shutil.copy(ctx.venv_etc("neutron") / "api-paste.ini", conf_dir / "api-paste.ini")
    inifile.write(conf_dir / "neutron.conf", {
        "DEFAULT": {
            "log_file": str(ctx.paths.log / "neutron-app.log"),
            "state_path": str(state),
            "host": "nodeforge-devcloud",
            "auth_strategy": "keystone",
            "core_plugin": "ml2",
            "service_plugins": "router",
            "transport_url": "fake:/",
            "api_paste_config": str(conf_dir / "api-paste.ini"),
            "notify_nova_on_port_status_changes": False,
            "notify_nova_on_port_data_changes": False,
            "dhcp_agent_notification": False,
            "allow_overlapping_ips": True,
            "rpc_workers": 0,
            "rpc_state_report_workers": 0,
        },
        "database": {"connection": ctx.db(DB)},
        "keystone_authtoken": ctx.authtoken("neutron"),
        "nova": ctx.service_auth("neutron"),
        "oslo_concurrency": {"lock_path": str(state / "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
    })
    inifile.write(conf_dir / "plugins" / "ml2" / "ml2_conf.ini", {
        "ml2": {
            "type_drivers": "flat,vlan,vxlan",
            "tenant_network_types": "vxlan",
            "mechanism_drivers": "",
            "extension_drivers": "port_security",
        },
        "ml2_type_flat": {"flat_networks": "*"},
        "ml2_type_vlan": {"network_vlan_ranges": "physnet1:100:199"},
        "ml2_type_vxlan": {"vni_ranges": "1:1000"},
    })
    return conf_dir


def service(ctx: Context) -> ServiceSpec:
    ctx = ctx.using(VENV)
    conf_dir = _write_config(ctx)
    env = {"OS_NEUTRON_CONFIG_DIR": str(conf_dir)}
    confs = ["--config-file", str(conf_dir / "neutron.conf"),
             "--config-file", str(conf_dir / "plugins" / "ml2" / "ml2_conf.ini")]

    def schema():
        ctx.run("neutron", [ctx.venv_bin("python"), "-c", CREATE_SCHEMA, ctx.db(DB)], env)
        ctx.run("neutron", [ctx.venv_bin("neutron-db-manage"), *confs, "stamp", "heads"], env)

    return ServiceSpec(
        name="neutron", group="network",
        argv=ctx.uwsgi("neutron", ctx.site_packages() / "neutron" / "wsgi" / "api.py", env, threads=1),
        ports=[port("neutron")], env=env, prepare=lambda: ctx.once("neutron-db", schema, (DB,)),
        depends=("keystone",), health=http_health(url("neutron") + "/", ok=(200,)), url=url("neutron"),
        start_timeout=120, after_healthy=lambda: seed(ctx),
    )


def seed(ctx: Context) -> None:
    """The admin project's ``public`` (external, flat) and ``private``
    networks with their subnets; idempotent, once per state directory."""
    marker = ctx.paths.data / "neutron-seed.done"
    if marker.exists():
        return
    conn = ctx.admin_connection()
    net = conn.network
    public = net.find_network(PUBLIC_NETWORK) or net.create_network(
        name=PUBLIC_NETWORK, is_router_external=True, is_shared=False,
        provider_network_type="flat", provider_physical_network="public")
    if not net.find_subnet(PUBLIC_SUBNET, network_id=public.id):
        net.create_subnet(name=PUBLIC_SUBNET, network_id=public.id, ip_version=4, cidr=PUBLIC_CIDR,
                          gateway_ip="172.24.4.1", is_dhcp_enabled=False,
                          allocation_pools=[{"start": "172.24.4.10", "end": "172.24.4.250"}])
    private = net.find_network(PRIVATE_NETWORK) or net.create_network(name=PRIVATE_NETWORK)
    if not net.find_subnet(PRIVATE_SUBNET, network_id=private.id):
        net.create_subnet(name=PRIVATE_SUBNET, network_id=private.id, ip_version=4, cidr=PRIVATE_CIDR,
                          is_dhcp_enabled=False)
    marker.touch()
    LOG.info("neutron seeded: networks %s and %s", PUBLIC_NETWORK, PRIVATE_NETWORK)
