"""``nodeforge --help`` lists the command groups from their summaries in nodeforge/cli.py without
importing any of them (start-up: the CLI's own imports only), and the listing is the one click
makes from the groups themselves."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from click.testing import CliRunner

from nodeforge import cli


def test_help_imports_no_command_group():
    code = ("import json, sys\nfrom nodeforge import cli\n"
            "try:\n    cli.cli.main(['--help'], prog_name='nodeforge', standalone_mode=False)\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('nodeforge.commands.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    assert loaded == ["nodeforge.commands.options"], loaded
    assert "Commands:" in out and "baremetal" in out


def test_summaries_are_the_groups_own_first_paragraphs_and_list_the_same():
    lazy = CliRunner().invoke(cli.cli, ["--help"]).output
    for name, module in cli.GROUPS.items():
        group = getattr(importlib.import_module(module), name)
        assert " ".join(group.help.split("\n\n")[0].split()) == cli.SUMMARIES[name], name
    loaded = cli.LazyGroup(name="nodeforge", lazy={}, summaries={})
    for name, module in cli.GROUPS.items():
        loaded.add_command(getattr(importlib.import_module(module), name), name)
    listing = CliRunner().invoke(loaded, ["--help"]).output
    assert lazy.split("Commands:")[1] == listing.split("Commands:")[1]
    assert set(cli.SUMMARIES) == set(cli.GROUPS)
