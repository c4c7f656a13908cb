"""``nodeforge template render|check``: Magnum cluster templates from
declarations (nodeforge/templates.py, docs/flavors-and-templates.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nodeforge import options, output
from nodeforge import templates as tpl
from nodeforge.commands.flavor import baremetal_connection
from nodeforge.errors import ExitCode


def templates_option(fn):
    return click.option("--templates", "templates_dir", type=click.Path(file_okay=False, path_type=Path),
                        default=tpl.DEFAULT_DIR, show_default=True, envvar="NODEFORGE_TEMPLATES",
                        help="Directory of template files.")(fn)


def _state(app, baremetal_cloud) -> tpl.CloudState:
    return tpl.CloudState.fetch(app.connect(), baremetal_connection(app, baremetal_cloud))


@click.group()
def template():
    """Magnum cluster templates: approved image + bare-metal flavors + capacity."""


@template.command()
@click.argument("name")
@templates_option
@options.baremetal_cloud
@options.pass_app
def render(app, name, templates_dir, baremetal_cloud):
    """Resolve NAME to the current approved image and flavors; print the Magnum
    cluster-template body and the equivalent 'openstack coe' command(s).

    Fails (exit 1, every broken link listed) when 'template check' would."""
    [t] = tpl.select(tpl.load_all(templates_dir), [name])
    data = tpl.render(tpl.resolve(t, _state(app, baremetal_cloud)))
    if app.output == "table":
        click.echo(json.dumps(data["cluster_template"], indent=2))
        click.echo()
        for cmd in data["commands"]:
            click.echo(cmd)
    else:
        output.emit(data, app.output)


@template.command()
@click.argument("names", nargs=-1)
@templates_option
@options.baremetal_cloud
@options.pass_app
def check(app, names, templates_dir, baremetal_cloud):
    """Report every broken link of the templates (all, or NAMES): image missing,
    not approved, hidden or of another Kubernetes minor; flavor missing, not
    bare-metal-shaped, or with fewer available nodes than the template needs.
    Exit 0: all good; 1: something is broken."""
    templates = tpl.select(tpl.load_all(templates_dir), list(names))
    state = _state(app, baremetal_cloud)
    results = [tpl.resolve(t, state) for t in templates]
    rows = []
    for r in results:
        rows += [{"template": r.template.name, "ok": False, "kind": i.kind, "subject": i.subject,
                  "detail": i.detail} for i in r.issues] or [
            {"template": r.template.name, "ok": True, "kind": "", "subject": "", "detail": "all links resolve"}]
    output.emit({"ok": all(r.ok for r in results), "templates": [r.to_dict() for r in results]}, app.output,
                rows=rows, columns=["template", "ok", "kind", "subject", "detail"])
    click.get_current_context().exit(int(ExitCode.OK if all(r.ok for r in results) else ExitCode.FAILURE))


from nodeforge.commands import template_audit  # noqa: E402,F401 - registers check --live and upgrade-plan
