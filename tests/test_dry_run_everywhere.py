"""Every command that writes has --dry-run (README: "Commands that write take --dry-run").

The command tree is walked as click sees it; a command without --dry-run must be listed in
READ_ONLY (it writes nothing: it reads, checks or prints) or in EXEMPT, each with its reason.
A new writing command therefore fails here until it has --dry-run (what its --dry-run prints
is tested beside each command)."""

from __future__ import annotations

import click

from nodeforge import cli

READ_ONLY = {
    "baremetal encrypt": "prints the encrypted reference on stdout",
    "baremetal preflight": "reads the BMCs and reports",
    "baremetal validate": "reads and checks the inventory",
    "devcloud check": "checks the running local cloud",
    "devcloud env": "prints environment variables",
    "devcloud status": "reads the pidfiles and health checks",
    "flavor capacity": "reads Nova, Placement and Ironic",
    "image diff": "compares two builds or two Glance images",
    "image list": "reads Glance",
    "image manifest": "prints an image's manifest from Glance",
    "image provenance": "checks an image's provenance in Glance",
    "image show": "reads Glance",
    "pipeline list": "reads the run records",
    "pipeline show": "reads a run record",
    "release check": "compares the locks with upstream and the mirror",
    "report serve": "serves a written report on loopback; writes nothing",
    "template check": "audits templates and clusters",
    "template render": "prints the template body and the equivalent commands",
    "template upgrade-plan": "prints the upgrade plan and its commands",
}
EXEMPT = {
    "devcloud install": "installs the local cloud's own virtualenvs (make setup); not a cloud or a user's file",
    "devcloud up": "starts the local cloud's own services in its state directory",
    "devcloud down": "stops the local cloud's own services",
}


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> dict[str, click.Command]:
    ctx = click.Context(group)
    out: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            out |= leaf_commands(cmd, prefix + (name,))
        else:
            out[" ".join(prefix + (name,))] = cmd
    return out


def has_dry_run(cmd: click.Command) -> bool:
    return any("--dry-run" in getattr(p, "opts", ()) for p in cmd.params)


def missing_dry_run(commands: dict[str, click.Command]) -> list[str]:
    return sorted(name for name, cmd in commands.items()
                  if not has_dry_run(cmd) and name not in READ_ONLY and name not in EXEMPT)


def test_every_writing_command_has_dry_run():
    commands = leaf_commands(cli.cli)
    assert len(commands) > 30, sorted(commands)
    missing = missing_dry_run(commands)
    assert not missing, f"writing commands without --dry-run (add it, or list the command with its reason): {missing}"
    # The lists name real commands, and a listed command does not also take --dry-run.
    listed = set(READ_ONLY) | set(EXEMPT)
    assert listed <= set(commands), sorted(listed - set(commands))
    assert not [n for n in listed if has_dry_run(commands[n])]


def test_the_rule_catches_a_writing_command_without_dry_run():
    @click.group()
    def top():
        pass

    @top.group()
    def thing():
        pass

    @thing.command()
    @click.option("--dry-run", is_flag=True)
    def create(dry_run):
        pass

    @thing.command()
    def delete():
        pass

    assert missing_dry_run(leaf_commands(top)) == ["thing delete"]
