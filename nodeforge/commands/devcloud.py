"""``nodeforge devcloud``: the embedded local OpenStack cloud on loopback."""

from __future__ import annotations

import click

from nodeforge import options, output
from nodeforge.devcloud import install as install_mod
from nodeforge.devcloud.paths import Paths


@click.group()
def devcloud():
    """Run a real local OpenStack (Keystone, Glance, Nova API, Placement,
    Barbican, Ironic) plus Redfish and IPMI BMC emulators on 127.0.0.1."""


@devcloud.command()
@click.option("--force", is_flag=True, help="Reinstall even if up to date.")
@options.pass_app
def install(app, force):
    """Install the service virtualenvs from the committed constraints."""
    results = install_mod.install(Paths.default(), force=force)
    output.emit(results, app.output, columns=["venv", "action", "path"])
