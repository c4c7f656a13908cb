"""Magnum (API + conductor) for the local cloud, in its own virtualenv
(``.devcloud/venvs/magnum``: Magnum 23 with the Cluster API drivers
``magnum-cluster-api`` and ``magnum-capi-helm``).

What runs: ``magnum/wsgi/api.py`` under uWSGI (Magnum reads no config-dir
environment variable: ``--pyargv "--config-file ..."``) and
``magnum-conductor`` (one worker) over the local RabbitMQ. Templates and
clusters are real Magnum records validated against the real Glance, Nova and
Neutron. There is no Cluster API management cluster: the drivers find a
placeholder kubeconfig that points at nothing, so a cluster create goes
CREATE_IN_PROGRESS then CREATE_FAILED, and such a cluster cannot be deleted
through the API either (the driver takes a Kubernetes lease first).
:func:`purge_clusters` removes them from this cloud's own database.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import shutil
import sqlite3
from pathlib import Path

from nodeforge.base import fs
from nodeforge.devcloud import inifile, rabbitmq
from nodeforge.devcloud.openstack import HOST, REGION, Context, http_health, port, url, wsgi_entry
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import ServiceSpec
from nodeforge.errors import NodeforgeError

VENV = "magnum"
DB = "magnum"
TRUSTEE_DOMAIN = "magnum"
TRUSTEE_ADMIN = "magnum_domain_admin"
# How long the conductor may go without reporting before status says unhealthy
# (Magnum's own [DEFAULT] service_down_time).
SERVICE_DOWN_TIME = 180

# A kubeconfig for the Cluster API drivers, which refuse to load without one.
# It names a management cluster on a port nothing listens on (1/tcp, which
# only root could bind), so every call fails at once: connection refused.
PLACEHOLDER_KUBECONFIG = """\
# nodeforge local cloud: there is no Cluster API management cluster here.
apiVersion: v1
kind: Config
clusters:
- name: none
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: none
  context:
    cluster: none
    user: none
current-context: none
users:
- name: none
  user:
    token: placeholder-not-a-secret
"""

# Create the schema from the models (``magnum-db-manage upgrade`` fails on
# SQLite at migration 3b6c4c42adb4), then stamp it as head.
CREATE_SCHEMA = """\
import sys
import sqlalchemy
from magnum.db.sqlalchemy import models
engine = sqlalchemy.create_engine(sys.argv[1])
models.Base.metadata.create_all(engine)
engine.dispose()
"""


class PurgeError(NodeforgeError):
    message = "cannot purge Magnum clusters: {detail}"


def _ctx(ctx: Context) -> Context:
    return ctx.using(VENV)


def _home(ctx: Context) -> Path:
    return ctx.paths.data / "magnum" / "home"


def db_path(paths: Paths) -> Path:
    return paths.data / f"{DB}.sqlite"


def _write_config(ctx: Context) -> tuple[Path, Path, Path]:
    conf_dir = ctx.conf_dir("magnum")
    state = ctx.paths.data / "magnum"
    for d in (state / "locks", _home(ctx) / ".kube"):
        d.mkdir(parents=True, exist_ok=True)
    kubeconfig = _home(ctx) / ".kube" / "config"
    fs.atomic_write(kubeconfig, PLACEHOLDER_KUBECONFIG, 0o600)
    shutil.copy(ctx.venv_etc("magnum") / "api-paste.ini", conf_dir / "api-paste.ini")
    client = {"region_name": REGION, "endpoint_type": "publicURL"}
    inifile.write(conf_dir / "magnum.conf", {
        "DEFAULT": {
            "transport_url": rabbitmq.transport_url(ctx.creds),
            "host": "nodeforge-devcloud",
            "state_path": str(state),
            "service_down_time": SERVICE_DOWN_TIME,
        },
        "api": {"host": HOST, "port": port("magnum-api"), "api_paste_config": str(conf_dir / "api-paste.ini")},
        "database": {"connection": ctx.db(DB)},
        "keystone_authtoken": ctx.authtoken("magnum"),
        "keystone_auth": ctx.service_auth("magnum"),
        "trust": {
            "trustee_domain_name": TRUSTEE_DOMAIN,
            "trustee_domain_admin_name": TRUSTEE_ADMIN,
            "trustee_domain_admin_domain_name": TRUSTEE_DOMAIN,
            "trustee_domain_admin_password": ctx.creds[f"{TRUSTEE_ADMIN}_password"],
            "trustee_keystone_interface": "public",
            "cluster_user_trust": False,
        },
        "certificates": {"cert_manager_type": "x509keypair"},
        "conductor": {"workers": 1},
        "capi_helm": {"kubeconfig_file": str(kubeconfig)},
        "cinder_client": {"region_name": REGION},
        "glance_client": dict(client),
        "nova_client": dict(client),
        "neutron_client": dict(client),
        "heat_client": dict(client),
        "octavia_client": dict(client),
        "magnum_client": {"region_name": REGION},
        "oslo_concurrency": {"lock_path": str(state / "locks")},
        "oslo_messaging_notifications": {"driver": "noop"},
        "oslo_messaging_rabbit": {"heartbeat_timeout_threshold": 0},
    })
    inifile.write(conf_dir / "magnum-api.conf", {"DEFAULT": {"log_file": str(ctx.paths.log / "magnum-api-app.log")}})
    inifile.write(conf_dir / "magnum-conductor.conf",
                  {"DEFAULT": {"log_file": str(ctx.paths.log / "magnum-conductor-app.log")}})
    return conf_dir / "magnum.conf", conf_dir / "magnum-api.conf", conf_dir / "magnum-conductor.conf"


def _env(ctx: Context) -> dict[str, str]:
    home = _home(ctx)
    return {"HOME": str(home), "KUBECONFIG": str(home / ".kube" / "config")}


def _prepare(ctx: Context, conf: Path) -> None:
    env = _env(ctx)

    def schema():
        ctx.run("magnum", [ctx.venv_bin("python"), "-c", CREATE_SCHEMA, ctx.db(DB)], env)
        ctx.run("magnum", [ctx.venv_bin("magnum-db-manage"), "--config-file", str(conf), "stamp", "head"], env)

    ctx.once("magnum-db", schema, (DB,))


def api(ctx: Context) -> ServiceSpec:
    ctx = _ctx(ctx)
    conf, api_conf, _ = _write_config(ctx)
    env = _env(ctx)
    wsgi = wsgi_entry("magnum_api.py")
    argv = ctx.uwsgi("magnum-api", wsgi, env)
    argv += ["--pythonpath", str(wsgi.parent), "--pyargv", f"--config-file {conf} --config-file {api_conf}"]
    return ServiceSpec(
        name="magnum-api", group="container-infra", argv=argv,
        ports=[port("magnum-api")], env=env, prepare=lambda: _prepare(ctx, conf),
        depends=("keystone", "rabbitmq"), cwd=_home(ctx),
        health=http_health(url("magnum-api") + "/v1", ok=(200,)), url=url("magnum-api") + "/v1",
        start_timeout=120,
    )


def conductor_health(paths: Paths, pidfile: Path):
    """Healthy once the running conductor has reported itself in Magnum's
    ``magnum_service`` table (it does on start, then periodically)."""

    def check():
        try:
            started = json.loads(pidfile.read_text())["started"]
        except (OSError, ValueError, KeyError):
            return "not started by this cloud"
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db_path(paths)}?mode=ro", uri=True, timeout=5)) as db:
                row = db.execute("SELECT last_seen_up, updated_at FROM magnum_service "
                                 "WHERE binary = 'magnum-conductor' ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.Error as exc:
            return f"{db_path(paths)}: {exc}"
        if not row:
            return "magnum-conductor has not reported yet"
        seen = max(v for v in row if v) if any(row) else None
        if not seen:
            return "magnum-conductor has not reported yet"
        when = datetime.datetime.fromisoformat(str(seen)).replace(tzinfo=datetime.timezone.utc).timestamp()
        now = datetime.datetime.now(datetime.timezone.utc).timestamp()
        if when < started - 2:
            return "magnum-conductor has not reported since it started"
        if when < now - SERVICE_DOWN_TIME:
            return f"magnum-conductor last reported {int(now - when)} s ago"
        return None

    return check


def conductor(ctx: Context) -> ServiceSpec:
    ctx = _ctx(ctx)
    conf, _, cond_conf = _write_config(ctx)
    from nodeforge.devcloud.process import Supervisor

    pidfile = Supervisor(ctx.paths.run, ctx.paths.log).pidfile("magnum-conductor")
    return ServiceSpec(
        name="magnum-conductor", group="container-infra",
        argv=[ctx.venv_bin("python"), str(wsgi_entry("magnum_conductor.py")),
              "--config-file", str(conf), "--config-file", str(cond_conf)],
        ports=[], env=_env(ctx), prepare=lambda: _prepare(ctx, conf), cwd=_home(ctx),
        depends=("keystone", "rabbitmq"), health=conductor_health(ctx.paths, pidfile),
        start_timeout=120,
        # It ignores SIGTERM in practice (oslo.service waits on its worker).
        stop_timeout=5,
    )


def purge_clusters(paths: Paths, names_or_uuids) -> list[str]:
    """Remove clusters (by name or UUID) from the local cloud's own Magnum
    database, with their node groups and certificates: a CREATE_FAILED
    cluster cannot be deleted through the API here. Local cloud only: the
    database must be the one this state directory's ``magnum.conf`` names.
    Returns the UUIDs removed (unknown names are ignored)."""
    wanted = [str(n) for n in names_or_uuids]
    db = db_path(paths).resolve()
    conf = paths.etc / "magnum" / "magnum.conf"
    try:
        conf_text = conf.read_text()
    except OSError:
        raise PurgeError(detail=f"{conf} not found: {paths.root} is not a local cloud's state directory") from None
    if f"sqlite:///{db}" not in conf_text and f"sqlite:///{db_path(paths)}" not in conf_text:
        raise PurgeError(detail=f"{conf} does not use {db}: refusing to change another database")
    if not db.is_file():
        raise PurgeError(detail=f"{db} does not exist")
    if not wanted:
        return []
    marks = ",".join("?" * len(wanted))
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        rows = conn.execute(f"SELECT uuid, ca_cert_ref, magnum_cert_ref, etcd_ca_cert_ref, front_proxy_ca_cert_ref "
                            f"FROM cluster WHERE uuid IN ({marks}) OR name IN ({marks})", wanted + wanted).fetchall()
        uuids = [r[0] for r in rows]
        refs = [ref for r in rows for ref in r[1:] if ref]
        if uuids:
            umarks = ",".join("?" * len(uuids))
            conn.execute(f"DELETE FROM nodegroup WHERE cluster_id IN ({umarks})", uuids)
            conn.execute(f"DELETE FROM cluster WHERE uuid IN ({umarks})", uuids)
        if refs:
            rmarks = ",".join("?" * len(refs))
            conn.execute(f"DELETE FROM x509keypair WHERE uuid IN ({rmarks})", refs)
    return uuids
