"""Options shared by several commands are defined once, in nodeforge/commands/options.py:
no command module spells out its own --cache-dir, --work-dir, --lockfile, --sources or --variant."""

from __future__ import annotations

import re
from pathlib import Path

import click

from nodeforge import cli

COMMANDS = Path(__file__).resolve().parents[1] / "nodeforge" / "commands"
OPTIONS = COMMANDS / "options.py"          # where they are defined
SHARED = ("--cache-dir", "--work-dir", "--lockfile", "--sources", "--variant")
# click.option("--name", ...) / click.Option(["--name", ...]) with any of the shared names.
DEFINED = re.compile(r"click\.(?:option|Option)\(\s*\[?\s*(?:\"[^\"]*\"\s*,\s*)*\"(" +
                     "|".join(re.escape(n) for n in SHARED) + r")\"")


def test_no_command_module_defines_a_shared_option():
    found = [f"{p.relative_to(COMMANDS.parents[1])}: {m.group(1)}"
             for p in sorted(COMMANDS.rglob("*.py")) if p != OPTIONS for m in DEFINED.finditer(p.read_text())]
    assert found == []
    assert DEFINED.search(OPTIONS.read_text()), "the shared options are no longer defined in commands/options.py"


def test_the_pattern_finds_a_definition():
    """The check above can fail: the pattern sees both spellings of a definition."""
    assert DEFINED.search('@click.option("--work-dir", type=click.Path())')
    assert DEFINED.search('click.Option(["-l", "--lockfile"], default=None)')
    assert not DEFINED.search('@click.option("--work-directory")')


def _params(command: click.Command, path=()):
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from _params(command.get_command(ctx, name), (*path, name))
        return
    for p in command.params:
        yield " ".join(path), p


def test_shared_options_keep_their_names_and_envvars():
    """Every command with one of them has the shared definition's envvar (and --lockfile its default)."""
    from nodeforge.commands import options
    from nodeforge.pins import lockfile

    env = {"--cache-dir": options.CACHE_DIR_ENV, "--work-dir": options.WORK_DIR_ENV,
           "--lockfile": options.LOCKFILE_ENV, "--sources": options.SOURCES_ENV}
    seen = set()
    for where, p in _params(cli.cli):
        for opt in set(getattr(p, "opts", ())) & set(env):
            seen.add((where, opt))
            assert p.envvar == env[opt], (where, opt)
            if opt == "--lockfile" and where == "pipeline run":
                assert Path(p.default) == lockfile.DEFAULT_PATH, where
    assert {("pipeline run", o) for o in env} <= seen
