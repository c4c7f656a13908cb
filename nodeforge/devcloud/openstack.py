"""The local cloud's OpenStack services: configuration and launch specs.

Keystone, Glance, Nova API, Placement and Barbican run under uWSGI (the
``pyuwsgi`` wheel) as WSGI modules; Ironic runs as its all-in-one ``ironic``
process (API + conductor, required with SQLite). Every service uses SQLite in
the state directory, binds 127.0.0.1 and authenticates through Keystone.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import sqlite3
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

from nodeforge.base import runner
from nodeforge.devcloud import inifile, rabbitmq
from nodeforge.devcloud.bmc import machine
from nodeforge.devcloud.paths import Paths, port_offset
from nodeforge.devcloud.process import ServiceSpec
from nodeforge.errors import NodeforgeError
from nodeforge.redact import Secret

HOST = "127.0.0.1"
GUEST_HOST = machine.GUEST_HOST   # where a machine's guest reaches Ironic and its http_root (guestfwd)
IRONIC_HTTP = "ironic-http"
CANARY_PHONEHOME = "canary-phonehome"
REGION = "RegionOne"
VENV = "openstack"

# service name -> (port, catalog type, URL path suffix of the endpoint)
PORTS = {
    "keystone": 5000,
    "glance": 9292,
    "placement": 8778,
    "nova": 8774,
    "barbican": 9311,
    "ironic": 6385,
    "ironic-http": 8089,          # Ironic's [deploy] http_root (virtual media ISOs, agent images)
    CANARY_PHONEHOME: 8901,       # not a service: where 'image canary' listens for a machine's report
    "neutron": 9696,
    "magnum-api": 9511,
    "rabbitmq": rabbitmq.AMQP_PORT,
    "rabbitmq-dist": rabbitmq.DIST_PORT,
    "rabbitmq-epmd": rabbitmq.EPMD_PORT,
}

CATALOG = {
    # service: (catalog type, catalog name, endpoint path)
    "glance": ("image", "glance", ""),
    "placement": ("placement", "placement", ""),
    "nova": ("compute", "nova", "/v2.1"),
    "barbican": ("key-manager", "barbican", ""),
    "ironic": ("baremetal", "ironic", ""),
    "neutron": ("network", "neutron", ""),
    "magnum-api": ("container-infra", "magnum", "/v1"),
}

# Groups for `devcloud up --only`: each names the services it needs.
GROUPS = {
    "identity": ("keystone",),
    "image": ("keystone", "barbican", "glance"),
    "compute": ("keystone", "placement", "nova"),
    "key-manager": ("keystone", "barbican"),
    "baremetal": ("keystone", "ironic-http", "ironic", "redfish-bmc", "ipmi-bmc"),
    "network": ("keystone", "neutron"),
    # Magnum validates a template's image (Glance), flavors and key pair
    # (Nova) and networks (Neutron); its API and conductor talk over RabbitMQ.
    "container-infra": ("keystone", "glance", "placement", "nova", "neutron", "rabbitmq", "magnum-api",
                        "magnum-conductor"),
}


class PrepareError(NodeforgeError):
    message = "preparing {service} failed: {detail}"


def port(service: str) -> int:
    return PORTS[service] + port_offset()


def canary_settings() -> dict[str, str]:
    """Where ``image canary`` listens for a machine's report on this cloud, and the URL the
    machine reaches it by (its guestfwd on :data:`GUEST_HOST`): ``NODEFORGE_CANARY_LISTEN`` and
    ``NODEFORGE_CANARY_ADVERTISE`` for ``devcloud env``."""
    p = port(CANARY_PHONEHOME)
    return {"NODEFORGE_CANARY_LISTEN": f"{HOST}:{p}", "NODEFORGE_CANARY_ADVERTISE": f"http://{GUEST_HOST}:{p}"}


def url(service: str) -> str:
    return f"http://{HOST}:{port(service)}"


def keystone_url() -> str:
    return url("keystone") + "/v3"


def http_health(target: str, ok=(200, 300)) -> "callable":
    def check():
        req = urllib.request.Request(target, headers={"Connection": "close"})
        try:
            with urllib.request.urlopen(req, timeout=3) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (urllib.error.URLError, OSError) as exc:
            return f"GET {target}: {getattr(exc, 'reason', exc)}"
        return None if status in ok else f"GET {target}: HTTP {status}"

    return check


SQLITE_BUSY_TIMEOUT = 60      # seconds a write to a service's SQLite database waits for another's lock


@dataclasses.dataclass
class Context:
    paths: Paths
    creds: dict[str, Secret]
    venv: str = VENV               # the virtualenv the service runs from

    def admin_connection(self):
        """An openstacksdk connection as the cloud's admin (project ``admin``), for one-off seeding.

        Built from this cloud's own settings only: no ``clouds.yaml`` and no ``OS_*`` variable is
        read. Otherwise an exported ``OS_CLOUD`` (``eval "$(nodeforge devcloud env)"`` of another
        local cloud) wins over these arguments, and this cloud's Keystone would be seeded into
        that other cloud, leaving its own catalog without Glance, Nova and the rest."""
        import openstack as sdk

        return sdk.connect(
            load_yaml_config=False, load_envvars=False,
            auth_url=keystone_url(), username="admin", password=self.creds["admin_password"].reveal(),
            project_name="admin", user_domain_name="Default", project_domain_name="Default",
            region_name=REGION, identity_api_version="3", interface="public",
        )

    def using(self, venv: str) -> "Context":
        """The same context for a service in another virtualenv."""
        return dataclasses.replace(self, venv=venv)

    def venv_bin(self, exe: str) -> str:
        return str(self.paths.venv_bin(self.venv, exe))

    def site_packages(self) -> Path:
        lib = self.paths.venv(self.venv) / "lib"
        return next(lib.glob("python3*/site-packages"))

    def venv_etc(self, project: str) -> Path:
        return self.paths.venv(self.venv) / "etc" / project

    def conf_dir(self, service: str) -> Path:
        d = self.paths.etc / service
        d.mkdir(parents=True, exist_ok=True)
        return d

    def db(self, name: str) -> str:
        """The database URL of a service's SQLite database. A write waits up to
        :data:`SQLITE_BUSY_TIMEOUT` seconds for another's lock (pysqlite's default is
        5 s: Magnum's conductor, two cluster creates in two threads on a loaded
        machine, got "database is locked" writing CREATE_FAILED and left its
        cluster in CREATE_IN_PROGRESS for good)."""
        return f"sqlite:///{self.paths.data / (name + '.sqlite')}?timeout={SQLITE_BUSY_TIMEOUT}"

    def run(self, service: str, argv: list[str], env: dict | None = None) -> None:
        """Run a one-off set-up command (db sync, ...); log to the service log."""
        full_env = dict(os.environ)
        full_env.pop("VIRTUAL_ENV", None)
        full_env.update(env or {})
        runner.run(argv, log_file=self.paths.log / f"{service}-setup.log", env=full_env,
                   error=functools.partial(PrepareError, service=service))

    def once(self, marker: str, fn, databases: tuple[str, ...] = ()) -> None:
        """Run one-off set-up ``fn`` unless it already completed. The marker
        file is written only after success; a retry first removes the named
        databases, so no half-created schema is ever built upon."""
        done = self.paths.data / f"{marker}.done"
        if not done.exists():
            for name in databases:
                (self.paths.data / f"{name}.sqlite").unlink(missing_ok=True)
            fn()
            done.touch()
        for name in databases:
            self.wal(name)

    def wal(self, name: str) -> None:
        """Put a service's SQLite database in write-ahead-log mode (persistent,
        idempotent): readers no longer wait for a writer, so a GET while a
        background task writes (Glance's image import, say) is not answered
        500 "database is locked" on a loaded machine."""
        path = self.paths.data / f"{name}.sqlite"
        if not path.is_file():
            return
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise PrepareError(service=name, detail=f"{path}: SQLite refused WAL mode (journal_mode is {mode})")

    def authtoken(self, user: str) -> dict[str, object]:
        return {
            "www_authenticate_uri": url("keystone"),
            "auth_url": url("keystone"),
            "auth_type": "password",
            "project_domain_name": "Default",
            "user_domain_name": "Default",
            "project_name": "service",
            "username": user,
            "password": self.creds[f"{user}_password"],
            "service_token_roles_required": True,
            "region_name": REGION,
        }

    def service_auth(self, user: str) -> dict[str, object]:
        """A keystoneauth section for calls a service makes to another."""
        section = self.authtoken(user)
        for key in ("www_authenticate_uri", "service_token_roles_required"):
            section.pop(key)
        return section

    def uwsgi(self, service: str, wsgi_file: Path, env: dict[str, str], threads: int = 4) -> list[str]:
        return [
            self.venv_bin("uwsgi"),
            "--http-socket", f"{HOST}:{port(service)}",
            "--wsgi-file", str(wsgi_file),
            "--master", "--processes", "1", "--threads", str(threads),
            "--die-on-term", "--need-app", "--lazy-apps",
            "--buffer-size", "65535",
            "--http-chunked-input", "--http-auto-chunked",
            "--add-header", "Connection: close",
            "--disable-logging",
        ]


def wsgi_entry(name: str) -> Path:
    """One of the local cloud's own entries (``devcloud/wsgi/``), run in a service's virtualenv:
    a service's own entry with oslo.db's writer transactions taking SQLite's write lock first
    (``sqlite_writers.py``), or one that reads its configuration from where this cloud puts it."""
    return Path(str(resources.files("nodeforge.devcloud") / "wsgi" / name))


# --------------------------------------------------------------------------
# Keystone

def _fernet_repository(path: Path) -> None:
    """What ``keystone-manage fernet_setup`` writes (a staged key 0 and a
    primary key 1), without paying for another keystone-manage start-up."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    for index in ("0", "1"):
        key_file = path / index
        if not key_file.exists():
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())

def keystone(ctx: Context) -> ServiceSpec:
    conf_dir = ctx.conf_dir("keystone")
    fernet = ctx.paths.data / "keystone" / "fernet-keys"
    receipts = ctx.paths.data / "keystone" / "receipt-keys"
    credential = ctx.paths.data / "keystone" / "credential-keys"
    inifile.write(conf_dir / "keystone.conf", {
        "DEFAULT": {"log_file": str(ctx.paths.log / "keystone-app.log")},
        "database": {"connection": ctx.db("keystone")},
        "token": {"provider": "fernet"},
        "fernet_tokens": {"key_repository": str(fernet)},
        "fernet_receipts": {"key_repository": str(receipts)},
        "credential": {"key_repository": str(credential)},
        "cache": {"enabled": True, "backend": "oslo_cache.dict"},
        # Few bcrypt rounds: this cloud is disposable, and tokens get 10x faster.
        "identity": {"password_hash_rounds": 4},
    })
    env = {"OS_KEYSTONE_CONFIG_DIR": str(conf_dir)}

    def prepare():
        ctx.once("keystone-bootstrap", bootstrap, ("keystone",))

    def bootstrap():
        for repo in (fernet, receipts, credential):
            _fernet_repository(repo)
        manage = [ctx.venv_bin("keystone-manage"), "--config-dir", str(conf_dir)]
        ctx.run("keystone", manage + ["db_sync"], env)
        # The admin password goes through the environment, never argv.
        ctx.run("keystone", manage + [
            "bootstrap", "--bootstrap-username", "admin", "--bootstrap-project-name", "admin",
            "--bootstrap-role-name", "admin", "--bootstrap-region-id", REGION,
            "--bootstrap-admin-url", url("keystone"), "--bootstrap-public-url", url("keystone"),
            "--bootstrap-internal-url", url("keystone"),
        ], {**env, "OS_BOOTSTRAP_PASSWORD": ctx.creds["admin_password"].reveal()})

    return ServiceSpec(
        name="keystone",
        argv=ctx.uwsgi("keystone", ctx.site_packages() / "keystone" / "wsgi" / "api.py", env),
        ports=[port("keystone")], env=env, prepare=prepare,
        health=http_health(keystone_url(), ok=(200,)), url=url("keystone"),
    )


# --------------------------------------------------------------------------
# Glance

def glance(ctx: Context) -> ServiceSpec:
    conf_dir = ctx.conf_dir("glance")
    store = ctx.paths.data / "glance" / "images"
    staging = ctx.paths.data / "glance" / "staging"
    tasks = ctx.paths.data / "glance" / "tasks"
    shutil.copy(ctx.venv_etc("glance") / "glance-api-paste.ini", conf_dir / "glance-api-paste.ini")
    inifile.write(conf_dir / "glance-api.conf", {
        "DEFAULT": {
            "log_file": str(ctx.paths.log / "glance-app.log"),
            "enabled_backends": "file:file",
            "enabled_import_methods": "[glance-direct,web-download]",
            "image_size_cap": 64 * 1024**3,
            "public_endpoint": url("glance"),
            "worker_self_reference_url": url("glance"),
        },
        "database": {"connection": ctx.db("glance")},
        "glance_store": {"default_backend": "file"},
        "file": {"filesystem_store_datadir": str(store)},
        "os_glance_staging_store": {"filesystem_store_datadir": str(staging)},
        "os_glance_tasks_store": {"filesystem_store_datadir": str(tasks)},
        "paste_deploy": {"flavor": "keystone", "config_file": str(conf_dir / "glance-api-paste.ini")},
        "keystone_authtoken": ctx.authtoken("glance"),
        # web-download from loopback (the local mirror) must be allowed by
        # name: Glance refuses loopback and link-local addresses otherwise.
        "import_filtering_opts": {
            "allowed_schemes": "[http,https]", "allowed_hosts": "[127.0.0.1,localhost]", "allowed_ports": "[]",
        },
        # Signature verification: certificates live in Barbican.
        "key_manager": {"backend": "barbican"},
        "barbican": {"auth_endpoint": keystone_url(), "barbican_endpoint_type": "public"},
        "oslo_concurrency": {"lock_path": str(ctx.paths.data / "glance" / "locks")},
        "taskflow_executor": {"engine_mode": "serial"},
    })
    inifile.write(conf_dir / "glance-image-import.conf", {
        "image_import_opts": {"image_import_plugins": "[]"},
    })
    env = {"OS_GLANCE_CONFIG_DIR": str(conf_dir)}
    entry = wsgi_entry("glance_api.py")     # Glance's own, its writers taking SQLite's write lock first

    def prepare():
        for d in (store, staging, tasks):
            d.mkdir(parents=True, exist_ok=True)
        ctx.once("glance-db", lambda: ctx.run(
            "glance", [ctx.venv_bin("glance-manage"), "--config-dir", str(conf_dir), "db_sync"], env), ("glance",))

    return ServiceSpec(
        name="glance", group="image",
        argv=[*ctx.uwsgi("glance", entry, env), "--pythonpath", str(entry.parent)],
        ports=[port("glance")], env=env, prepare=prepare, depends=("keystone",),
        health=http_health(url("glance") + "/versions", ok=(200, 300)), url=url("glance"),
    )


# --------------------------------------------------------------------------
# Placement

def placement(ctx: Context) -> ServiceSpec:
    conf_dir = ctx.conf_dir("placement")
    inifile.write(conf_dir / "placement.conf", {
        "DEFAULT": {"log_file": str(ctx.paths.log / "placement-app.log")},
        "placement_database": {"connection": ctx.db("placement")},
        "api": {"auth_strategy": "keystone"},
        "keystone_authtoken": ctx.authtoken("placement"),
    })
    env = {"OS_PLACEMENT_CONFIG_DIR": str(conf_dir)}

    def prepare():
        ctx.once("placement-db", lambda: ctx.run(
            "placement", [ctx.venv_bin("placement-manage"), "--config-dir", str(conf_dir), "db", "sync"], env),
            ("placement",))

    return ServiceSpec(
        name="placement", group="compute",
        argv=ctx.uwsgi("placement", ctx.site_packages() / "placement" / "wsgi" / "api.py", env),
        ports=[port("placement")], env=env, prepare=prepare, depends=("keystone",),
        health=http_health(url("placement") + "/", ok=(200,)), url=url("placement"),
    )


# --------------------------------------------------------------------------
# Nova API (flavors and extra specs; no compute service)

def nova(ctx: Context) -> ServiceSpec:
    conf_dir = ctx.conf_dir("nova")
    shutil.copy(ctx.venv_etc("nova") / "api-paste.ini", conf_dir / "api-paste.ini")
    inifile.write(conf_dir / "nova.conf", {
        "DEFAULT": {
            "log_file": str(ctx.paths.log / "nova-app.log"),
            "transport_url": "fake:/",
            "state_path": str(ctx.paths.data / "nova"),
        },
        "api": {"auth_strategy": "keystone"},
        "wsgi": {"api_paste_config": str(conf_dir / "api-paste.ini")},
        "api_database": {"connection": ctx.db("nova_api")},
        "database": {"connection": ctx.db("nova")},
        "keystone_authtoken": ctx.authtoken("nova"),
        "placement": ctx.service_auth("nova"),
        "oslo_concurrency": {"lock_path": str(ctx.paths.data / "nova" / "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
    })
    env = {"OS_NOVA_CONFIG_DIR": str(conf_dir)}

    def prepare():
        (ctx.paths.data / "nova" / "locks").mkdir(parents=True, exist_ok=True)
        ctx.once("nova-db", sync, ("nova_api", "nova_cell0", "nova"))

    def sync():
        manage = [ctx.venv_bin("nova-manage"), "--config-dir", str(conf_dir)]
        ctx.run("nova", manage + ["api_db", "sync"], env)
        ctx.run("nova", manage + ["cell_v2", "map_cell0", "--database_connection", ctx.db("nova_cell0")], env)
        ctx.run("nova", manage + ["db", "sync"], env)

    return ServiceSpec(
        name="nova", group="compute",
        argv=ctx.uwsgi("nova", ctx.site_packages() / "nova" / "wsgi" / "osapi_compute.py", env),
        ports=[port("nova")], env=env, prepare=prepare, depends=("keystone", "placement"),
        health=http_health(url("nova") + "/", ok=(200,)), url=url("nova"),
        after_healthy=lambda: seed_vm_flavors(ctx),
    )


# The general-purpose VM flavors every cloud has (devstack's m1.* sizes), for
# templates whose node groups run on VMs (manifests/templates/k8s-1.36-vm.yaml).
# They carry no nodeforge mark: like any flavor the operators made, nodeforge
# reads them and never changes or prunes them.
VM_FLAVORS = (
    # name, vcpus, ram MiB, root disk GB
    ("m1.small", 1, 2048, 20),
    ("m1.medium", 2, 4096, 40),
    ("m1.large", 4, 8192, 80),
)


def seed_vm_flavors(ctx: Context) -> None:
    """Public VM flavors ``m1.small``/``m1.medium``/``m1.large``; idempotent,
    once per state directory."""
    marker = ctx.paths.data / "nova-flavors-seed.done"
    if marker.exists():
        return
    conn = ctx.admin_connection()
    have = {f.name for f in conn.compute.flavors(is_public=None)}
    for name, vcpus, ram, disk in VM_FLAVORS:
        if name not in have:
            conn.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, is_public=True)
    marker.touch()


# --------------------------------------------------------------------------
# Barbican (simple crypto plugin)

def barbican(ctx: Context) -> ServiceSpec:
    # Barbican reads its config from ~/.barbican/ (oslo.config's search path)
    # and its paste file from a fixed /etc path; give it a config home and a
    # WSGI entry of our own instead of touching /etc.
    home = ctx.conf_dir("barbican")
    conf_dir = home / ".barbican"
    conf_dir.mkdir(exist_ok=True)
    shutil.copy(ctx.venv_etc("barbican") / "barbican-api-paste.ini", conf_dir / "barbican-api-paste.ini")
    inifile.write(conf_dir / "barbican.conf", {
        "DEFAULT": {
            "log_file": str(ctx.paths.log / "barbican-app.log"),
            "sql_connection": ctx.db("barbican"),
            "db_auto_create": False,
            "host_href": url("barbican"),
            "transport_url": "fake:/",
        },
        "database": {"connection": ctx.db("barbican")},
        "secretstore": {"enabled_secretstore_plugins": "store_crypto"},
        "crypto": {"enabled_crypto_plugins": "simple_crypto"},
        "simple_crypto_plugin": {"kek": ctx.creds["barbican_kek"]},
        "keystone_authtoken": ctx.authtoken("barbican"),
        "oslo_messaging_notifications": {"driver": "noop"},
        "queue": {"enable": False},
    })
    wsgi = wsgi_entry("barbican_api.py")
    env = {"HOME": str(home), "NODEFORGE_BARBICAN_PASTE": str(conf_dir / "barbican-api-paste.ini")}

    def prepare():
        ctx.once("barbican-db", lambda: ctx.run("barbican", [ctx.venv_bin("barbican-manage"), "db", "upgrade"], env),
                 ("barbican",))

    return ServiceSpec(
        name="barbican", group="key-manager",
        argv=ctx.uwsgi("barbican", wsgi, env),
        ports=[port("barbican")], env=env, prepare=prepare, depends=("keystone",),
        health=http_health(url("barbican") + "/", ok=(200, 300)), url=url("barbican"),
    )


# --------------------------------------------------------------------------
# Ironic (all-in-one process: API + conductor)

IRONIC_INTERFACES = {
    "hardware_types": "fake-hardware,ipmi,redfish",
    "bios_interfaces": "no-bios,fake,redfish",
    "boot_interfaces": "fake,ipxe,pxe,redfish-virtual-media",
    "console_interfaces": "no-console,fake",
    "deploy_interfaces": "fake,direct,ramdisk",
    "firmware_interfaces": "no-firmware,fake,redfish",
    "inspect_interfaces": "no-inspect,fake,redfish,agent",
    "management_interfaces": "fake,ipmitool,redfish",
    "network_interfaces": "noop",
    "power_interfaces": "fake,ipmitool,redfish",
    "raid_interfaces": "no-raid,fake,redfish",
    "rescue_interfaces": "no-rescue,fake",
    "storage_interfaces": "noop",
    "vendor_interfaces": "no-vendor,fake,ipmitool,redfish",
}


# sushy's per-request (tries, seconds between) in Ironic (wsgi/ironic_launch.py):
# sushy's default (10, 3) makes a BMC that refuses connections cost 27 s per
# Ironic connection attempt, ~83 s before verification fails. Three tries a
# second apart still ride out a busy emulator.
SUSHY_RETRIES = (3, 1)

RAMDISK_HEARTBEAT_TIMEOUT = 60    # [api] ramdisk_heartbeat_timeout and [deploy] fast_track_timeout


# The kernel parameters Ironic adds to the agent's command line on the virtual-media ISOs it builds
# ([redfish] kernel_append_params; Ironic's default is "nofb vga=normal"): the machines have a serial
# console only, so the kernel's and the agent's output go there (console.log).
IRONIC_KERNEL_APPEND = "nofb vga=normal console=ttyS0,115200n8"


def ironic_http_root(paths: Paths) -> Path:
    """Ironic's ``[deploy] http_root``, served by the ``ironic-http`` service."""
    return paths.data / "ironic" / "httpboot"


def ironic_instance_images(paths: Paths) -> Path:
    """Ironic's per-node instance images (``[pxe] images_path``, ``<node>/disk``, hard links into
    its master cache): what it symlinks under ``http_root/agent_images`` for the agent."""
    return paths.data / "ironic" / "images"


def ironic_image_cache(paths: Paths) -> Path:
    """Ironic's master image cache (``[pxe] instance_master_path``): each Glance image the conductor
    downloaded for a deploy, kept for the next one (hard-linked per node under :func:`ironic_instance_images`)."""
    return paths.data / "ironic" / "master_images"


def ironic_files_dir(paths: Paths) -> Path:
    """Where ``file://`` images for Ironic may be (``[conductor] file_url_allowed_paths``, with the
    ESP image's directory): deploy kernels and ramdisks of local machines, say."""
    return paths.data / "ironic" / "files"


def ironic_http(ctx: Context) -> ServiceSpec:
    """The HTTP server of Ironic's http_root (``nodeforge/devcloud/http_root.py``): loopback only."""
    root = ironic_http_root(ctx.paths)
    script = Path(str(resources.files("nodeforge.devcloud") / "http_root.py"))
    base = f"http://{HOST}:{port(IRONIC_HTTP)}"

    def prepare():
        root.mkdir(parents=True, exist_ok=True)
        ironic_instance_images(ctx.paths).mkdir(parents=True, exist_ok=True)

    return ServiceSpec(
        name=IRONIC_HTTP, group="baremetal",
        argv=[ctx.venv_bin("python"), "-I", str(script), "--root", str(root), "--port", str(port(IRONIC_HTTP)),
              "--follow", str(ironic_instance_images(ctx.paths))],
        ports=[port(IRONIC_HTTP)], env={"PYTHONUNBUFFERED": "1"}, prepare=prepare,
        # "/" is a directory: 403 (no listings) is this server's healthy answer.
        health=http_health(base + "/", ok=(403,)), url=base, start_timeout=20, stop_timeout=5,
    )


def ironic(ctx: Context) -> ServiceSpec:
    conf_dir = ctx.conf_dir("ironic")
    state = ctx.paths.data / "ironic"
    conf = conf_dir / "ironic.conf"
    from nodeforge.devcloud import esp, pki

    ca_bundle = pki.ca_bundle(ctx.paths)
    esp_image = esp.image_path(ctx.paths)
    http_port = port(IRONIC_HTTP)
    inifile.write(conf, _ironic_conf(ctx, state, ca_bundle, esp_image, http_port))
    args = ["--config-file", str(conf)]

    def prepare():
        for d in (ironic_http_root(ctx.paths), ironic_files_dir(ctx.paths), state / "tftpboot", state / "locks"):
            d.mkdir(parents=True, exist_ok=True)
        esp.ensure(ctx.paths)
        # `upgrade` fails on a fresh SQLite database; create the schema.
        ctx.once("ironic-db", lambda: ctx.run("ironic", [ctx.venv_bin("ironic-dbsync")] + args + ["create_schema"]),
                 ("ironic",))

    env = _ironic_env(http_port)
    launcher = wsgi_entry("ironic_launch.py")
    return ServiceSpec(
        name="ironic", group="baremetal",
        argv=[ctx.venv_bin("python"), str(launcher)] + args,
        ports=[port("ironic")], env=env, prepare=prepare, depends=("keystone",),
        health=http_health(url("ironic") + "/", ok=(200,)), url=url("ironic"),
        start_timeout=90,
    )


def _ironic_conf(ctx: Context, state: Path, ca_bundle: Path, esp_image: Path, http_port: int) -> dict:
    """ironic.conf: every path under the cloud's own state, no Swift, no DHCP, no message bus."""
    from nodeforge.devcloud import esp

    return {
        "DEFAULT": {
            "log_file": str(ctx.paths.log / "ironic-app.log"),
            "auth_strategy": "keystone",
            "rpc_transport": "none",
            "host": "nodeforge-devcloud",
            "state_path": str(state),
            "default_network_interface": "noop",
            **{f"enabled_{k}": v for k, v in IRONIC_INTERFACES.items()},
            # Where Ironic writes its grub.cfg on the UEFI ISOs; the ESP's GRUB looks there (esp.py).
            "grub_config_path": esp.GRUB_CONFIG_PATH,
        },
        "conductor": {
            "automated_clean": True,
            "heartbeat_interval": 5,
            "sync_power_state_interval": 60,
            "check_provision_state_interval": 5,
            # The EFI system partition on the UEFI virtual-media ISOs Ironic builds (esp.py).
            "bootloader": esp_image.as_uri(),
            "file_url_allowed_paths": f"{esp_image.parent},{ironic_files_dir(ctx.paths)}",
        },
        "database": {"connection": ctx.db("ironic")},
        "deploy": _ironic_deploy(ctx, state, http_port),
        # The agent heartbeats every 0.3-0.6 of this (the default 300 s makes steps that wait on a
        # heartbeat, and fast-track's freshness, minutes slow).
        "api": {"host_ip": HOST, "port": port("ironic"), "public_endpoint": url("ironic"),
                "ramdisk_heartbeat_timeout": RAMDISK_HEARTBEAT_TIMEOUT},
        "agent": {"image_download_source": "http", "certificates_path": str(state / "certificates")},
        # Every path Ironic writes is under the cloud's own state (the defaults are /var/lib/ironic,
        # shared by every cloud on the host).
        "pxe": {"tftp_root": str(state / "tftpboot"), "tftp_master_path": str(state / "tftpboot" / "master_images"),
                "images_path": str(ironic_instance_images(ctx.paths)), "instance_master_path": str(ironic_image_cache(ctx.paths))},
        # Power operations take ~3 s instead of ~15 s. A refused IPMI login
        # (wrong password) is retried until command_retry_timeout runs out.
        "ipmi": {"min_command_interval": 1, "command_retry_timeout": 6},
        # Each attempt is sushy's own retries (SUSHY_RETRIES above). Firmware updates and BIOS
        # applies: the emulated BMC finishes its tasks at once, so their status is polled every
        # 5 s (Ironic's default: 60) and one answer after a firmware reboot shows it stable
        # (default: three, 30 s apart).
        "redfish": {"connection_attempts": 3, "connection_retry_interval": 1,
                    "use_swift": False, "kernel_append_params": IRONIC_KERNEL_APPEND,
                    "firmware_update_status_interval": 5, "firmware_update_fail_interval": 5,
                    "firmware_update_required_successes": 1, "firmware_update_validation_interval": 1},
        "dhcp": {"dhcp_provider": "none"},
        "keystone_authtoken": ctx.authtoken("ironic"),
        "service_catalog": ctx.service_auth("ironic"),
        "glance": ctx.service_auth("ironic"),
        "oslo_concurrency": {"lock_path": str(state / "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
        "webserver": {"webserver_verify_ca": str(ca_bundle)},
    }


def _ironic_deploy(ctx: Context, state: Path, http_port: int) -> dict:
    """ironic.conf's [deploy]: images and ISOs over http_root, UEFI, fast-track, the erase settings."""
    # No Swift: Ironic stages ISOs and images under http_root, which the ironic-http service
    # serves on loopback. The BMC emulator fetches ISOs from external_http_url (loopback); a
    # machine's guest reaches the same server, and Ironic's API, at GUEST_HOST (guestfwd).
    return {
        "http_root": str(ironic_http_root(ctx.paths)),
        "http_url": f"http://{GUEST_HOST}:{http_port}",
        "external_http_url": f"http://{HOST}:{http_port}",
        "external_callback_url": f"http://{GUEST_HOST}:{port('ironic')}",
        "default_boot_mode": "uefi",
        "iso_master_path": str(state / "master_iso_images"),
        # Fast-track: the agent that cleaned a machine stays up and deploys it without a second
        # ramdisk boot (~2 min under TCG), if it heartbeated within fast_track_timeout.
        "fast_track": True,
        "fast_track_timeout": RAMDISK_HEARTBEAT_TIMEOUT,
        # Automated cleaning erases metadata (partition tables, signatures); a full-disk erase
        # is a hardware team's choice per node (the inventory's cleaning: {erase: full}: a manual
        # erase_devices at enrollment). Its shred writes zeros once, no random pass first (an
        # emulated disk under TCG; a real site keeps Ironic's default of one random pass).
        "erase_devices_priority": 0,
        "shred_random_overwrite_iterations": 0,
        "shred_final_overwrite_with_zeros": True,
    }


def _ironic_env(http_port: int) -> dict[str, str]:
    """The Ironic service's environment."""
    # ipmitool must be on PATH: the ipmitool power interface refuses to load.
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "NODEFORGE_SUSHY_RETRIES": str(SUSHY_RETRIES[0]), "NODEFORGE_SUSHY_RETRY_DELAY": str(SUSHY_RETRIES[1]),
            # The conductor checks the instance image URL it hands the agent (a HEAD of http_url/...)
            # from where it runs; that URL names the guests' view (GUEST_HOST), which only a machine
            # reaches. The conductor's own requests go to the http_root server as their proxy (it
            # takes absolute-form targets); everything on loopback goes direct.
            "http_proxy": f"http://{HOST}:{http_port}", "no_proxy": f"{HOST},localhost",
            "HTTP_PROXY": f"http://{HOST}:{http_port}", "NO_PROXY": f"{HOST},localhost"}
