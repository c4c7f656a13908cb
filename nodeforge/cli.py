"""The ``nodeforge`` command: global options and the command groups.

This module only wires things together. Each group lives in
``nodeforge/commands/<area>.py`` and calls the library; no logic here.
"""

from __future__ import annotations

import sys

import click

from nodeforge import __version__, log, options
from nodeforge.commands import baremetal as baremetal_cmds
from nodeforge.commands import devcloud as devcloud_cmds
from nodeforge.commands import flavor as flavor_cmds
from nodeforge.commands import image as image_cmds
from nodeforge.commands import pipeline as pipeline_cmds
from nodeforge.commands import release as release_cmds
from nodeforge.commands import template as template_cmds
from nodeforge.errors import ExitCode, NodeforgeError
from nodeforge.redact import scrub


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@options.os_cloud
@options.output
@options.verbose
@options.log_format
@click.version_option(__version__, prog_name="nodeforge")
@click.pass_context
def cli(ctx: click.Context, os_cloud, output, verbose, log_format):
    """Kubernetes node images and bare-metal pools for OpenStack."""
    ctx.obj = options.AppContext(os_cloud=os_cloud, output=output, verbose=verbose, log_format=log_format)
    log.setup(verbose, log_format)


cli.add_command(devcloud_cmds.devcloud)
cli.add_command(release_cmds.release)
cli.add_command(image_cmds.image)
cli.add_command(baremetal_cmds.baremetal)
cli.add_command(flavor_cmds.flavor)
cli.add_command(template_cmds.template)
cli.add_command(pipeline_cmds.pipeline)


def main(argv: list[str] | None = None) -> int:
    options.add_common_options(cli)
    try:
        rv = cli.main(args=argv, prog_name="nodeforge", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return ExitCode.FAILURE
    except click.ClickException as exc:
        exc.show()
        return ExitCode.USAGE
    except NodeforgeError as exc:
        click.echo(f"error: {scrub(str(exc))}", err=True)
        if exc.hint:
            click.echo(f"hint: {scrub(exc.hint)}", err=True)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    # With standalone_mode=False click returns ctx.exit(code) as the value.
    return rv if isinstance(rv, int) else ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
