"""RabbitMQ for the local cloud: Magnum's API and conductor talk over it.

Debian's ``rabbitmq-server`` package does not start itself here (no systemd),
and its ``/usr/sbin`` wrappers switch to the ``rabbitmq`` user and read
``/etc/rabbitmq``. The local cloud runs ``/usr/lib/rabbitmq/bin/rabbitmq-server``
directly instead, as the calling user, with everything in the state
directory: ``HOME`` (the Erlang cookie), mnesia, logs, ``rabbitmq.conf`` and
an empty plugin list. Every listener is on 127.0.0.1 and every port is shifted
by ``NODEFORGE_DEVCLOUD_PORT_OFFSET``, so two clouds coexist:

* AMQP on 5672, Erlang distribution on 5673, the CLI tools' distribution
  ports 5674-5679 (while a ``rabbitmqctl`` runs) and ``epmd`` on 4369.

The broker's only user is ``nodeforge`` with a random password in
``etc/credentials.json``, vhost ``nodeforge``. They are ``default_user`` /
``default_pass`` / ``default_vhost`` in ``rabbitmq.conf`` (0600), which the
broker creates on first boot *instead of* ``guest``: the password never
appears on a command line (``rabbitmqctl add_user`` of 3.10 takes it only as
an argument) nor in a log.

``rabbitmqctl stop`` leaves ``epmd`` running, and ``erl`` starts epmd as a
daemon outside any process group we could stop. So the launcher starts the
cloud's own epmd first, in the foreground of the service's process group, on
the cloud's own port, and only then ``exec``\\ s the broker: stopping the
service (SIGTERM to the group) stops both, and never any other epmd.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from nodeforge.base import runner
from nodeforge.devcloud.paths import Paths, port_offset
from nodeforge.devcloud.process import ServiceSpec
from nodeforge.errors import MissingToolError
from nodeforge.redact import Secret

HOST = "127.0.0.1"
USER = "nodeforge"
VHOST = "nodeforge"
NODE = "nodeforge@localhost"
SBIN = Path("/usr/lib/rabbitmq/bin")
# Unshifted ports (see nodeforge.devcloud.openstack.PORTS for the others).
AMQP_PORT = 5672
DIST_PORT = 5673
CLI_PORTS = range(5674, 5680)
EPMD_PORT = 4369

# Start epmd (ours, on our port, in this process group), wait until it
# answers, then become the broker. No secret is in this script.
LAUNCHER = """\
"$NODEFORGE_EPMD" -address 127.0.0.1 -port "$ERL_EPMD_PORT" &
i=0
until "$NODEFORGE_EPMD" -port "$ERL_EPMD_PORT" -names >/dev/null 2>&1; do
  i=$((i+1)); [ "$i" -lt 100 ] || { echo "epmd did not start on port $ERL_EPMD_PORT" >&2; exit 1; }
  sleep 0.1
done
exec "$NODEFORGE_RABBITMQ_SERVER"
"""


def amqp_port() -> int:
    return AMQP_PORT + port_offset()


def ports() -> list[int]:
    """Every TCP port this cloud's broker listens on while running."""
    off = port_offset()
    return [AMQP_PORT + off, DIST_PORT + off, EPMD_PORT + off]


def transport_url(creds: dict[str, Secret]) -> Secret:
    """oslo.messaging's ``transport_url`` (holds the password: a Secret)."""
    return Secret(f"rabbit://{USER}:{creds['rabbitmq_password'].reveal()}@{HOST}:{amqp_port()}/{VHOST}")


def _dirs(paths: Paths) -> dict[str, Path]:
    base = paths.data / "rabbitmq"
    return {"home": base / "home", "mnesia": base / "mnesia", "log": paths.log / "rabbitmq",
            "etc": paths.etc / "rabbitmq"}


def _erl_args() -> str:
    return "-kernel inet_dist_use_interface {127,0,0,1}"


def environment(paths: Paths) -> dict[str, str]:
    """The environment the broker and its CLI tools run in (no secrets)."""
    d = _dirs(paths)
    off = port_offset()
    return {
        "HOME": str(d["home"]),
        "RABBITMQ_NODENAME": NODE,
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(AMQP_PORT + off),
        "RABBITMQ_DIST_PORT": str(DIST_PORT + off),
        "RABBITMQ_CTL_DIST_PORT_MIN": str(CLI_PORTS.start + off),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(CLI_PORTS.stop - 1 + off),
        "ERL_EPMD_ADDRESS": HOST,
        "ERL_EPMD_PORT": str(EPMD_PORT + off),
        "RABBITMQ_MNESIA_BASE": str(d["mnesia"]),
        "RABBITMQ_LOG_BASE": str(d["log"]),
        "RABBITMQ_CONFIG_FILE": str(d["etc"] / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(d["etc"] / "enabled_plugins"),
        # Never read /etc/rabbitmq/rabbitmq-env.conf.
        "RABBITMQ_CONF_ENV_FILE": str(d["etc"] / "rabbitmq-env.conf"),
        "RABBITMQ_PID_FILE": str(d["home"] / "rabbitmq.pid"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": _erl_args(),
        "RABBITMQ_CTL_ERL_ARGS": _erl_args(),
    }


def _require() -> dict[str, str]:
    server = SBIN / "rabbitmq-server"
    if not server.exists():
        raise MissingToolError(tool="rabbitmq-server", package="rabbitmq-server")
    tools = runner.require("epmd")
    return {"server": str(server), "epmd": tools["epmd"]}


def write_config(paths: Paths, creds: dict[str, Secret]) -> None:
    d = _dirs(paths)
    for key in ("home", "mnesia", "log", "etc"):
        d[key].mkdir(parents=True, exist_ok=True, mode=0o700)
    # rabbitmq.conf is sysctl-style "key = value" (not INI); the password is
    # written once here, 0600, like every other service's configuration.
    lines = {
        "listeners.tcp.default": f"{HOST}:{amqp_port()}",
        "default_vhost": VHOST,
        "default_user": USER,
        "default_pass": creds["rabbitmq_password"],
        "default_user_tags.administrator": "true",
        "default_permissions.configure": ".*",
        "default_permissions.read": ".*",
        "default_permissions.write": ".*",
        "log.file.level": "info",
        "log.console": "false",
    }
    text = "".join(f"{k} = {v.reveal() if isinstance(v, Secret) else v}\n" for k, v in lines.items())
    from nodeforge.base import fs

    fs.atomic_write(d["etc"] / "rabbitmq.conf", text, 0o600)
    fs.atomic_write(d["etc"] / "enabled_plugins", "[].\n", 0o600)
    fs.atomic_write(d["etc"] / "rabbitmq-env.conf", "# nodeforge: everything is in the environment\n", 0o600)


def amqp_health(port: int):
    """Healthy once the AMQP listener answers a protocol header with a
    Connection.Start frame (the listener opens when the broker has booted)."""

    def check():
        try:
            with socket.create_connection((HOST, port), timeout=3) as sock:
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                frame = sock.recv(7)
        except OSError as exc:
            return f"AMQP {HOST}:{port}: {exc}"
        # method frame (type 1) on channel 0
        if len(frame) >= 3 and frame[0] == 1 and frame[1:3] == b"\x00\x00":
            return None
        return f"AMQP {HOST}:{port}: unexpected reply {frame[:8]!r}"

    return check


def service(paths: Paths, creds: dict[str, Secret]) -> ServiceSpec:
    tools = _require()
    write_config(paths, creds)
    env = environment(paths)
    env.update(NODEFORGE_EPMD=tools["epmd"], NODEFORGE_RABBITMQ_SERVER=tools["server"])
    return ServiceSpec(
        name="rabbitmq", group="container-infra",
        argv=["/bin/sh", "-c", LAUNCHER],
        ports=ports(), env=env, cwd=_dirs(paths)["home"],
        health=amqp_health(amqp_port()), url=f"amqp://{HOST}:{amqp_port()}/{VHOST}",
        start_timeout=90,
    )


def ctl(paths: Paths, *args: str, timeout: float = 60) -> runner.CompletedProcess:
    """Run ``rabbitmqctl`` against this cloud's broker (no secrets in args!)."""
    env = dict(os.environ)
    env.update(environment(paths))
    return runner.run([str(SBIN / "rabbitmqctl"), "-q", *args], env=env, merge=False, check=False, timeout=timeout)


class AmqpLoginError(Exception):
    pass


def _frame(sock: socket.socket) -> tuple[int, bytes]:
    def read(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            try:
                chunk = sock.recv(n - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise AmqpLoginError("the broker closed the connection")
            buf += chunk
        return buf

    head = read(7)
    size = int.from_bytes(head[3:7], "big")
    payload = read(size + 1)[:-1]
    return head[0], payload


def _method(class_id: int, method_id: int, args: bytes) -> bytes:
    payload = class_id.to_bytes(2, "big") + method_id.to_bytes(2, "big") + args
    return b"\x01\x00\x00" + len(payload).to_bytes(4, "big") + payload + b"\xce"


def _short(s: str) -> bytes:
    raw = s.encode()
    return bytes([len(raw)]) + raw


def login(port: int, user: str, password: Secret, vhost: str = VHOST, timeout: float = 10) -> str:
    """Log in over AMQP 0-9-1 (PLAIN) and open ``vhost``, then close: a
    real authenticated call, with no client library. Raises AmqpLoginError
    (never naming the password) if the broker refuses."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        kind, payload = _frame(sock)
        if kind != 1 or payload[:4] != b"\x00\x0a\x00\x0a":
            raise AmqpLoginError("no Connection.Start from the broker")
        response = b"\x00" + user.encode() + b"\x00" + password.reveal().encode()
        sock.sendall(_method(10, 11, b"\x00\x00\x00\x00" + _short("PLAIN")
                             + len(response).to_bytes(4, "big") + response + _short("en_US")))
        try:
            kind, payload = _frame(sock)
        except AmqpLoginError:
            raise AmqpLoginError(f"login as {user!r} refused (connection closed)") from None
        if payload[:4] == b"\x00\x0a\x00\x32":     # Connection.Close
            code = int.from_bytes(payload[4:6], "big")
            raise AmqpLoginError(f"login as {user!r} refused ({code})")
        if payload[:4] != b"\x00\x0a\x00\x1e":     # Connection.Tune
            raise AmqpLoginError(f"unexpected reply to login: {payload[:4].hex()}")
        channel_max, frame_max = payload[4:6], payload[6:10]
        sock.sendall(_method(10, 31, channel_max + frame_max + b"\x00\x00"))
        sock.sendall(_method(10, 40, _short(vhost) + _short("") + b"\x00"))
        kind, payload = _frame(sock)
        if payload[:4] != b"\x00\x0a\x00\x29":     # Connection.OpenOk
            raise AmqpLoginError(f"{user!r} may not open vhost {vhost!r}")
        sock.sendall(_method(10, 50, b"\x00\xc8" + _short("bye") + b"\x00\x00\x00\x00"))
        try:
            _frame(sock)
        except (AmqpLoginError, OSError):
            pass
    return f"logged in as {user!r}, vhost {vhost!r} open"
