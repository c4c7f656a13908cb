"""``nodeforge template render|check|apply``: Magnum cluster templates from
declarations (nodeforge/magnum/templates.py, nodeforge/magnum/apply.py,
docs/flavors-and-templates.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.magnum import templates as tpl
from nodeforge.commands import template_audit
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
    """Magnum cluster templates: approved image + bare-metal flavors + capacity + driver."""


@template.command()
@click.argument("name")
@templates_option
@options.baremetal_cloud
@options.pass_app
def render(app, name, templates_dir, baremetal_cloud):
    """Resolve NAME to the current approved image, flavors, networks and the
    Magnum driver it targets; print the cluster-template body that driver
    accepts (server_type vm, driver, kube_tag, labels) and the equivalent
    'openstack coe' command(s). 'template apply' adds the version name and
    nodeforge's marks.

    Fails (exit 1, every broken link listed) when 'template check' would."""
    [t] = tpl.select(tpl.load_all(templates_dir), [name])
    data = tpl.render(tpl.resolve(t, _state(app, baremetal_cloud)))
    if app.output == "table":
        data = output.plain(data)      # masked as the json/yaml output is (a label may hold a proxy URL)
        click.echo(f"# driver {data['driver']} ({data['driver_package']}), cluster type "
                   f"({data['cluster_type']['server_type']}, {data['cluster_type']['os_distro']}, "
                   f"{data['cluster_type']['coe']})")
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
@click.option("--live", is_flag=True, help="Audit every cluster template and cluster in Magnum (not the files).")
@template_audit.maintained_options
@options.report_file
@options.pass_app
def check(app, names, templates_dir, baremetal_cloud, live, maintained, lockfile_path, report_path):
    """Report every broken link of the templates (all, or NAMES): image missing,
    not approved, hidden or of another Kubernetes minor; flavor missing, not
    bare-metal-shaped, or with fewer available nodes than the template needs.
    Exit 0: all good; 1: something is broken.

    --live: audit every cluster template in Magnum (hand-made ones too) and
    every cluster: image missing, deleted, retired, hidden or not approved;
    kube_tag not the image's or outside the maintained minors; flavor missing,
    not bare-metal-shaped or without an available node; no driver serving the
    template; zero-disk flavor without boot_volume_size; clusters per
    template. NAMES then filter by Magnum template name. Exit 0: clean; 3:
    findings (docs/flavors-and-templates.md). --report FILE also writes the
    result as JSON."""
    if live:
        return template_audit.check_live(app, names, baremetal_cloud, maintained, lockfile_path, report_path)
    templates = tpl.select(tpl.load_all(templates_dir), list(names))
    state = _state(app, baremetal_cloud)
    results = [tpl.resolve(t, state) for t in templates]
    rows = []
    for r in results:
        rows += [{"template": r.template.name, "ok": False, "kind": i.kind, "subject": i.subject,
                  "where": " ".join(x for x in (i.location, i.field) if x) if i.input else "",
                  "detail": i.detail} for i in r.issues] or [
            {"template": r.template.name, "ok": True, "kind": "", "subject": "", "where": "",
             "detail": "all links resolve"}]
    data = {"ok": all(r.ok for r in results), "templates": [r.to_dict() for r in results]}
    options.write_report(data, report_path)
    output.emit(data, app.output,
                rows=rows, columns=["template", "ok", "kind", "subject", "where", "detail"])
    click.get_current_context().exit(int(ExitCode.OK if all(r.ok for r in results) else ExitCode.FAILURE))


@template.command()
@click.argument("names", nargs=-1)
@templates_option
@options.baremetal_cloud
@options.dry_run
@options.pass_app
def apply(app, names, templates_dir, baremetal_cloud, dry_run):
    """Write the templates (all, or NAMES) to Magnum as versions: plan, field by
    field against the current version, then apply.

    A template NAME becomes NAME-v1, NAME-v2, ...: a new version when its
    content (approved image, a flavor, a label, the driver, ...) changed, the
    older versions then hidden (never deleted, never otherwise changed). A
    re-run with nothing changed makes no write. Only templates marked with the
    file's scope are touched. Bad input in any file (unknown driver, missing
    flavor or network, a node group the driver cannot serve) refuses the whole
    run before any write (exit 2). Exit 0: applied (or nothing to do); 3: some
    templates broken (no approved image, ...) or a write failed."""
    from nodeforge.clients import container_infra as mc
    from nodeforge.magnum import apply as ap

    templates = tpl.select(tpl.load_all(templates_dir), list(names))
    state = _state(app, baremetal_cloud)
    conn = app.connect()
    resolutions = [tpl.resolve(t, state) for t in templates]
    ap.check_input(resolutions)      # before reading Magnum: bad input is the file's, whatever Magnum holds
    plan = ap.plan(resolutions, mc.read_templates(conn), mc.read_clusters(conn))
    data = plan.to_dict()
    results = None
    rows = [{"template": p.name, "scope": p.scope, "action": p.action.value, "version": p.magnum_name,
             "changes": "; ".join(map(str, p.changes)) if p.action is not ap.Action.BROKEN else "; ".join(p.issues),
             "hide": ", ".join(h.get("name") or "" for h in p.hide),
             "in use": ", ".join(f"{v['name']}: {len(v['clusters'])}" for v in p.versions if v["clusters"])}
            for p in plan.templates]
    if not dry_run:
        results = ap.apply(conn, plan)
        data["results"] = [r.to_dict() for r in results]
        data["writes"] = sum(r.writes for r in results)
        for row, r in zip(rows, results):
            row["uuid"] = r.uuid
            if r.error and r.action is not ap.Action.BROKEN:
                row["changes"] = r.error
    counts = ", ".join(f"{v} {k}" for k, v in plan.counts().items() if v) or "nothing"
    output.emit(data, app.output, rows=rows,
                columns=["template", "scope", "action", "version", *([] if dry_run else ["uuid"]), "changes",
                         "hide", "in use"],
                title=f"{'plan (dry run)' if dry_run else 'template apply'}: {counts}; "
                      f"{data['writes']} write(s){' planned' if dry_run else ''}")
    click.get_current_context().exit(int(ap.exit_code(plan, results)))


template.add_command(template_audit.upgrade_plan)
