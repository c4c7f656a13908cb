"""Click options defined once and shared by every command (pip-tools style)."""

from __future__ import annotations

import dataclasses
import os

import click

from nodeforge.output import FORMATS


@dataclasses.dataclass
class AppContext:
    os_cloud: str | None = None
    output: str = "table"
    verbose: int = 0
    log_format: str = "text"

    def connect(self):
        """An openstacksdk connection for ``--os-cloud`` (clouds.yaml rules)."""
        from nodeforge.cloud import connect

        return connect(self.os_cloud)


pass_app = click.make_pass_decorator(AppContext, ensure=True)

os_cloud = click.option(
    "--os-cloud",
    default=lambda: os.environ.get("OS_CLOUD"),
    show_default="$OS_CLOUD",
    help="Cloud name in clouds.yaml (as openstacksdk resolves it).",
)
output = click.option(
    "--output", "-o", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Human table, or JSON/YAML for scripts.",
)
verbose = click.option("-v", "--verbose", count=True, help="More logging (-vv for library debug).")
log_format = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Log line format on stderr.",
)
dry_run = click.option("--dry-run", is_flag=True, help="Show the plan; write nothing.")
