"""``nodeforge devcloud``: the embedded local OpenStack cloud on loopback."""

from __future__ import annotations

import shlex

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.devcloud import install as install_mod
from nodeforge.devcloud.paths import Paths


@click.group()
def devcloud():
    """Run a real local OpenStack (Keystone, Glance, Nova API, Placement,
    Barbican, Ironic, Neutron, Magnum with RabbitMQ) plus Redfish and IPMI BMC
    emulators on 127.0.0.1."""


@devcloud.command()
@click.option("--force", is_flag=True, help="Reinstall even if up to date.")
@options.pass_app
def install(app, force):
    """Install the service virtualenvs from the committed constraints."""
    results = install_mod.install(Paths.default(), force=force)
    output.emit(results, app.output, columns=["venv", "action", "path"])


def _cloud():
    from nodeforge.devcloud.cloud import DevCloud

    return DevCloud()


def _only(value):
    return [v for v in (value or "").split(",") if v.strip()] or None


@devcloud.command()
@click.option("--only", help="Comma-separated groups or services (image, compute, key-manager, baremetal, network, "
                             "container-infra, ...).")
@options.pass_app
def up(app, only):
    """Start the local cloud (or a subset) and wait until it is healthy."""
    cloud = _cloud()
    results = cloud.up(_only(only), progress=lambda msg: log.say(msg, level="info", prefix=False))
    output.emit(results, app.output, columns=["service", "action", "seconds"])
    if app.output == "table":
        log.say(f"clouds.yaml: {cloud.paths.clouds_yaml}  (eval \"$(nodeforge devcloud env)\")", level="info",
                prefix=False)


@devcloud.command()
@options.pass_app
def down(app):
    """Stop every local-cloud process this state directory started."""
    results = _cloud().down()
    if app.output == "table" and not results:
        log.say("nothing running", level="info", prefix=False)
        return
    output.emit(results, app.output, columns=["service", "action"])


@devcloud.command()
@options.pass_app
def status(app):
    """Each service with its port, PID and health."""
    rows = _cloud().status()
    output.emit(rows, app.output, columns=["service", "running", "healthy", "pid", "ports", "url", "detail"])


@devcloud.command()
@options.pass_app
def env(app):
    """Print shell exports that point OpenStack clients at the local cloud
    (for ``eval "$(nodeforge devcloud env)"``; values shell-quoted)."""
    values = _cloud().env()
    if app.output == "table":
        for key, value in values.items():
            click.echo(f"export {key}={shlex.quote(value)}")
    else:
        output.emit(values, app.output)


@devcloud.command()
@options.pass_app
def check(app):
    """One real, authenticated call per running service."""
    from nodeforge.devcloud import smoke
    from nodeforge.errors import NodeforgeError

    rows = smoke.run(_cloud())
    output.emit(rows, app.output, columns=["service", "check", "ok", "detail", "seconds"])
    failed = [r["service"] for r in rows if r["ok"] is False]
    if failed:
        raise NodeforgeError("check failed for: {services}", services=", ".join(failed))
