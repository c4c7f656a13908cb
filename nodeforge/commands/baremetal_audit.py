"""``nodeforge baremetal audit``: every node against its hardware profile's baseline, and the
nodes of each resource class against each other (nodeforge/ironic/audit.py). Attached to the
``baremetal`` group in nodeforge/commands/baremetal.py."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.commands.baremetal_classify import profiles_option
from nodeforge.ironic import audit as audit_mod
from nodeforge.ironic import profiles as profiles_mod


def node_selection(inventory_help: str):
    """The options that choose the nodes and their view, shared by ``audit`` and ``baseline
    apply``: ``--profiles``, ``--node``, ``--inventory`` (read the BMCs directly), ``--scope``."""
    def decorate(fn):
        for option in reversed((
                profiles_option,
                click.option("--node", "nodes", multiple=True, metavar="NAME|GLOB|UUID",
                             help="Only these nodes (repeatable; globs allowed).  [default: every node]"),
                click.option("--inventory", "inventory_path",
                             type=click.Path(exists=True, dir_okay=False, path_type=Path), help=inventory_help),
                options.scope("Only nodes enrolled under this ownership scope (extra.nodeforge_scope).  "
                              "[default: the --inventory's scope; every node without --inventory]"))):
            fn = option(fn)
        return fn
    return decorate


def selection_inputs(app, profiles_path, inventory_path, scope):
    """What :func:`node_selection`'s options name: (the profiles, a provisioner on the cloud, the
    inventory or None, the scope: the option's, else the inventory's)."""
    from nodeforge.ironic.provisioner import SdkProvisioner

    inventory = None
    if inventory_path:
        from nodeforge.ironic import inventory as inv_mod

        inventory = inv_mod.load(inventory_path)
        scope = scope or inventory.scope
    return profiles_mod.load(profiles_path), SdkProvisioner(app.connect()), inventory, scope


@click.command()
@node_selection("Read the Redfish BMCs of the nodes this inventory names directly (what changed behind "
                "Ironic's back shows); its scope is then the default of --scope.  [default: Ironic's view]")
@options.dry_run
@options.report_file
@options.pass_app
def audit(app, profiles_path, nodes, inventory_path, scope, dry_run, report_path):
    """Report each node's drift from its profile's baseline, and outliers within each resource class.

    Drift: a BIOS setting, the RAID layout or a firmware version that differs
    from the baseline, per node and item; on an active node it is reported as
    deferred (the audit never changes anything). Outliers: a node whose
    inspected CPU, memory, disks or NICs differ from the rest of its class.
    --dry-run lists the nodes, their profile and where their view would come
    from, reading no node's data and logging into no BMC. Exit 0: nothing
    found; 11: drift, problems or outliers; 3: some nodes could not be read;
    1: none could. --report FILE also writes the result as JSON (the HTML
    report's hardware page)."""
    profiles, prov, inventory, scope = selection_inputs(app, profiles_path, inventory_path, scope)
    if dry_run:
        _plan(app, prov, profiles, nodes, scope, inventory)
        return
    result = audit_mod.run(prov, profiles, nodes=list(nodes), scope=scope, inventory=inventory)
    options.write_report(result.to_dict(), report_path)
    counts = ", ".join(f"{v} {k}" for k, v in result.counts().items() if v) or "no nodes"
    output.emit(result.to_dict(), app.output, rows=result.rows(), columns=audit_mod.COLUMNS,
                title=f"audit: {counts}")
    click.get_current_context().exit(result.exit_code())


def _plan(app, prov, profiles, nodes, scope, inventory) -> None:
    from nodeforge.ironic import classify as cl

    selected, skipped = cl.in_scope(cl.select(prov.list_nodes(), list(nodes)), scope)
    by_rc = profiles.by_resource_class()
    named = {s.name for s in inventory.nodes if s.bmc.is_redfish} if inventory is not None else set()
    rows = []
    for n in selected:
        profile = by_rc.get(n.get("resource_class"))
        rows.append({"node": n.get("name") or n["uuid"], "state": n.get("provision_state"),
                     "resource_class": n.get("resource_class"), "profile": profile.name if profile else None,
                     "baseline": bool(profile and profile.baseline),
                     "source": "bmc" if n.get("name") in named and profile and profile.baseline else "ironic"})
    output.emit({"dry_run": True, "scope": scope, "skipped": skipped, "nodes": rows}, app.output, rows=rows,
                columns=["node", "state", "resource_class", "profile", "baseline", "source"],
                title=f"audit plan (dry run): {len(rows)} nodes")
