"""``nodeforge flavor sync|capacity``: bare-metal Nova flavors per resource
class (nodeforge/compute/flavors.py, docs/flavors-and-templates.md)."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.cloud import connect
from nodeforge.compute import flavors as flavors_mod


def flavors_option(fn):
    return click.option("--flavors", "flavors_path", type=click.Path(dir_okay=False, path_type=Path),
                        default=flavors_mod.DEFAULT_PATH, show_default=True, envvar="NODEFORGE_FLAVORS",
                        help="Flavors file.")(fn)


def baremetal_connection(app, baremetal_cloud):
    return connect(baremetal_cloud) if baremetal_cloud else app.connect()


@click.group()
def flavor():
    """Bare-metal Nova flavors: one per Ironic resource class."""


@flavor.command()
@flavors_option
@click.option("--profiles", "profiles_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Hardware profiles file.  [default: 'profiles:' in the flavors file]")
@click.option("--replace", is_flag=True, help="Re-create flavors whose immutable fields drifted (same ID).")
@click.option("--prune", is_flag=True,
              help="Delete flavors of this file's scope that the file no longer lists.")
@click.option("--adopt-legacy", is_flag=True,
              help="Count legacy flavors (nodeforge:managed=true, no nodeforge:scope) that the file does not "
                   "list as this scope's: reported as unlisted, deleted with --prune.")
@options.dry_run
@options.pass_app
def sync(app, flavors_path, profiles_path, replace, prune, adopt_legacy, dry_run):
    """Create missing flavors, fix description/extra specs/access in place.

    Only flavors of the file's scope ('scope:' in the file, else derived
    from its path) are this file's: others are never reported as unlisted
    nor deleted. A listed flavor that exists under another scope is refused
    (exit 1, nothing written). Drift in an immutable field (vcpus, ram, disk,
    ephemeral, swap, public) is reported; the flavor is re-created only with
    --replace. Nothing is deleted without --prune. A second run changes
    nothing. Exit 0: in sync; 3: drift or unlisted flavors left as they are,
    or a write failed; 1: a scope conflict."""
    spec = flavors_mod.load(flavors_path, profiles_path)
    if spec.scope_source == "derived":
        log.say(f"{flavors_path} has no 'scope:'; using the scope derived from its path, "
                f"'{spec.scope}' (set 'scope:' explicitly, see docs/flavors-and-templates.md)")
    conn = app.connect()
    plan = flavors_mod.plan(conn, spec, replace=replace, prune=prune, adopt_legacy=adopt_legacy)
    rows = [{"flavor": p.name, "action": p.action.value, "id": p.flavor_id,
             "changes": "; ".join(f"{c.field}: {c.current} -> {c.desired}" for c in p.changes
                                  if c.field != "flavor"), "note": p.note or ""} for p in plan.flavors]
    data = plan.to_dict()
    counts = ", ".join(f"{v} {k}" for k, v in plan.counts().items() if v) or "nothing"
    results = None
    if (refused := plan.refusal()) is not None:
        # Refused as a whole, before any write (dry run or not): show the plan, then fail.
        output.emit(data, app.output, rows=rows, columns=["flavor", "action", "id", "changes", "note"],
                    title=f"flavor sync (scope {plan.scope}): refused, {counts}")
        raise refused
    if not dry_run:
        results = flavors_mod.apply(conn, plan)
        data["results"] = [r.to_dict() for r in results]
        for row, r in zip(rows, results):
            row["id"] = r.id
            if not r.ok and r.error:
                row["note"] = r.error
    output.emit(data, app.output, rows=rows, columns=["flavor", "action", "id", "changes", "note"],
                title=f"{'plan (dry run)' if dry_run else 'flavor sync'} (scope {plan.scope}): {counts}")
    click.get_current_context().exit(int(flavors_mod.exit_code(plan, results)))


@flavor.command()
@options.baremetal_cloud
@options.pass_app
def capacity(app, baremetal_cloud):
    """Per bare-metal flavor: nodes with its resource class and traits that are
    'available' and not in maintenance (what Nova can schedule now)."""
    from nodeforge.ironic.provisioner import SdkProvisioner

    flavors = flavors_mod.list_flavors(app.connect())
    nodes = SdkProvisioner(baremetal_connection(app, baremetal_cloud)).list_nodes()
    rows = flavors_mod.capacity(flavors, nodes)
    output.emit(rows, app.output, columns=["flavor", "resource_class", "required_traits", "available", "active",
                                           "maintenance", "total", "problems"])
