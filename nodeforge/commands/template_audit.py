"""``nodeforge template check --live`` and ``nodeforge template upgrade-plan``:
what Magnum holds now, audited (nodeforge/magnum/audit.py) and the upgrade
path of every cluster (nodeforge/magnum/upgrade.py). Both read-only.

``template check --live`` (nodeforge/commands/template.py) calls
:func:`check_live`: with ``--live`` the command audits Magnum instead of the
template files; ``upgrade-plan`` is added to the ``template`` group there.
"""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.commands.flavor import baremetal_connection
from nodeforge.errors import ExitCode
from nodeforge.magnum import audit as A, upgrade as U
from nodeforge.magnum.live import LiveState, RequestCounter


def _minors(ctx, param, value):
    if not value:
        return None
    minors = [m.strip() for m in value.split(",") if m.strip()]
    bad = [m for m in minors if A.parse_version(m) is None or m.count(".") != 1]
    if bad or not minors:
        raise click.BadParameter(f"expected comma-separated Kubernetes minors such as 1.34,1.35,1.36, "
                                 f"not {', '.join(bad) or repr(value)}", ctx=ctx, param=param)
    return [A.minor_of(m) for m in minors]


def _lockfile_default():
    from nodeforge.pins import lockfile

    return lockfile.DEFAULT_PATH


def maintained_options(fn):
    """``--maintained`` and ``--lockfile``."""
    fn = options.lockfile("Version lockfile whose minors are the maintained ones (unless --maintained).",
                          default=_lockfile_default)(fn)
    return click.option("--maintained", metavar="1.A,1.B,1.C", callback=_minors,
                        help="The maintained Kubernetes minors.  [default: the minors the version lockfile pins "
                             "(newest three), else the three newest minors of approved images]")(fn)


def maintained_minors(option, lockfile_path: Path | None, images: list[dict]) -> A.Maintained:
    """``--maintained``, else the lockfile's minors (a missing default lockfile is skipped, a
    missing or invalid given one is an error), else the approved images' minors."""
    from nodeforge.pins import lockfile

    minors = None
    label = "lockfile"
    if not option and lockfile_path is not None:
        path = Path(lockfile_path)
        if path.exists() or path != lockfile.DEFAULT_PATH:
            minors = list(lockfile.load(path).minors)
            label = f"lockfile {path}"
    return A.maintained_minors(option, minors, images, lockfile_label=label)


def read_state(app, baremetal_cloud, *, nodegroups: bool = False) -> tuple[LiveState, RequestCounter]:
    conn = app.connect()
    bm = baremetal_connection(app, baremetal_cloud)
    counter = RequestCounter().attach(conn).attach(bm)
    return LiveState.read(conn, bm, nodegroups=nodegroups), counter


def check_live(app, names, baremetal_cloud, maintained_opt, lockfile_path, report_path=None) -> None:
    """The body of ``template check --live``."""
    state, counter = read_state(app, baremetal_cloud)
    data = A.report(state, maintained_minors(maintained_opt, lockfile_path, state.images))
    if names:
        wanted = set(names)
        data["findings"] = [f for f in data["findings"] if f["template"] in wanted]
        data["templates"] = [t for t in data["templates"] if t["template"] in wanted]
        data["ok"] = not data["findings"]
        data["counts"]["findings"] = len(data["findings"])
    data["api_calls"] = counter.to_dict()
    options.write_report(data, report_path)
    if app.output == "table":
        rows = data["findings"] or [{"kind": "", "template": "", "detail":
                                     f"no findings: {data['counts']['templates']} template(s), "
                                     f"{data['counts']['clusters']} cluster(s)"}]
        output.emit(data, app.output, rows=rows,
                    columns=["kind", "template", "template_id", "subject", "cluster", "detail"],
                    title="findings")
        clusters = [{"template": t["template"], "version": t["template_version"], "cluster": c["name"],
                     "status": c["status"], "kube_tag": c["kube_tag"], "image_approved": c["image_approved"]}
                    for t in data["templates"] for c in t["clusters"]]
        if clusters:
            output.emit(clusters, app.output, title="clusters per template",
                        columns=["template", "version", "cluster", "status", "kube_tag", "image_approved"])
        click.echo(f"maintained Kubernetes minors: {', '.join(data['maintained']['minors']) or 'unknown'} "
                   f"({data['maintained']['source']}); {counter.total} API calls")
    else:
        output.emit(data, app.output)
    click.get_current_context().exit(int(ExitCode.OK if data["ok"] else ExitCode.PARTIAL))




@click.command("upgrade-plan")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@options.baremetal_cloud
@maintained_options
@click.option("--nodegroups/--no-nodegroups", default=True, show_default=True,
              help="Read each cluster's node groups (one call per cluster) so that non-default groups are "
                   "kept within the kubelet skew.")
@options.pass_app
def upgrade_plan(app, names, baremetal_cloud, nodegroups, maintained, lockfile_path):
    """For every cluster template and cluster (or those NAMEd: clusters and
    templates by name or ID, templates also by their nodeforge name): a
    template whose image was superseded by a same-version rebuild gets a
    refresh step ('nodeforge template apply NAME' makes the next version),
    a cluster its refresh first, then the next templates along the
    Kubernetes version-skew policy: the newest approved patch of its minor,
    then one minor at a time; non-default node groups kept within three
    minors of the control plane. Clusters on minors outside the maintained
    ones are urgent. Prints the commands; read-only (exit 0)."""
    state, counter = read_state(app, baremetal_cloud, nodegroups=nodegroups)
    data = U.report(state, maintained_minors(maintained, lockfile_path, state.images))
    if names:
        wanted = set(names)
        data["clusters"] = [c for c in data["clusters"] if c["cluster"] in wanted or c["cluster_id"] in wanted]
        used = {c["template_id"] for c in data["clusters"]}
        data["templates"] = [t for t in data["templates"] if wanted & {t["template"], t["template_id"], t["managed"]}
                             or t["template_id"] in used]
    data["api_calls"] = counter.to_dict()
    if app.output == "table":
        _plan_tables(data)
    else:
        output.emit(data, app.output)


def _plan_tables(data: dict) -> None:
    """The templates' plan, the clusters' plan, then the commands in the order to run them."""
    rows = [{"template": t["template"], "kind": s["kind"], "from": s["from_version"], "to": s["to_version"],
             "image": f"{s['from_image']} -> {s['to_image']}", "new_template": s["new_template"],
             "note": s["manual"] or s["reason"]} for t in data["templates"] for s in t["steps"]]
    if rows:
        output.emit(rows, "table", title="template plan",
                    columns=["template", "kind", "from", "to", "image", "new_template", "note"])
    rows = []
    for c in data["clusters"]:
        for s in c["steps"]:
            rows.append({"cluster": c["cluster"], "urgent": c["urgent"], "kind": s["kind"],
                         "from": s["from_version"], "to": s["to_version"], "template": s["template"],
                         "nodegroup": s["nodegroup"] or "", "note": s["manual"] or s["reason"]})
        if not c["steps"] or c["notes"]:
            rows.append({"cluster": c["cluster"], "urgent": c["urgent"], "kind": "", "from": c["kube_tag"],
                         "to": "", "template": c["template"], "nodegroup": "", "note": "; ".join(c["notes"])})
    output.emit(rows, "table", title="upgrade plan",
                columns=["cluster", "urgent", "kind", "from", "to", "template", "nodegroup", "note"])
    for cmd in [*(c for t in data["templates"] for c in t["commands"]),
                *(c for cl in data["clusters"] for c in cl["commands"])]:
        click.echo(cmd)
    counts = data["counts"]
    click.echo(f"# {counts['templates_with_steps']} of {counts['templates']} template(s) and "
               f"{counts['with_steps']} of {counts['clusters']} cluster(s) with steps")
