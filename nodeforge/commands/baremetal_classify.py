"""``nodeforge baremetal classify``: hardware profiles -> resource class and
traits (nodeforge/ironic/profiles.py, classify.py). Attached to the
``baremetal`` group in nodeforge/commands/baremetal.py."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.ironic import classify as classify_mod
from nodeforge.ironic import profiles as profiles_mod


def profiles_option(fn):
    return click.option("--profiles", "profiles_path", type=click.Path(dir_okay=False, path_type=Path),
                        default=profiles_mod.DEFAULT_PATH, show_default=True, envvar="NODEFORGE_HARDWARE_PROFILES",
                        help="Hardware profiles file.")(fn)


def _preflight_facts(inv) -> dict:
    from nodeforge.ironic import preflight

    return {c.name: profiles_mod.facts_from_preflight(c.facts) for c in preflight.run(inv) if c.ok and c.facts}


@click.command()
@profiles_option
@click.option("--node", "nodes", multiple=True, metavar="NAME|GLOB|UUID",
              help="Only these nodes (repeatable; globs allowed).  [default: every node]")
@click.option("--inventory", "inventory_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also read facts from a Redfish pre-flight of this inventory, for nodes without inspection data; "
                   "its scope is then the default of --scope.")
@options.scope("Only nodes enrolled under this ownership scope (extra.nodeforge_scope).  "
               "[default: the --inventory's scope; every node without --inventory]")
@options.dry_run
@options.pass_app
def classify(app, profiles_path, nodes, inventory_path, scope, dry_run):
    """Match each node to one hardware profile; set its resource class and traits.

    The plan shows the profile each node matches and why each other one does
    not; nodes matching no profile or several, and profiles no node matches,
    are flagged before anything is written. Flagged nodes are never written.
    Ironic forbids changing the resource class of a deployed node: such nodes
    are reported as 'refused', not attempted. Exit 0: every node classified;
    3: some flagged."""
    from nodeforge.ironic.provisioner import SdkProvisioner

    profiles = profiles_mod.load(profiles_path)
    prov = SdkProvisioner(app.connect())
    preflight = None
    if inventory_path:
        from nodeforge.ironic import inventory as inv_mod

        inv = inv_mod.load(inventory_path)
        preflight = _preflight_facts(inv)
        scope = scope or inv.scope
    plan = classify_mod.plan(prov, profiles, nodes=list(nodes), preflight=preflight, scope=scope)
    rows = [{"node": n.name, "state": n.provision_state, "outcome": n.outcome.value, "profile": n.profile,
             "changes": "; ".join(f"{c.field}: {c.current} -> {c.desired}" for c in n.changes),
             "detail": n.detail or "", "why not": "; ".join(
                 f"{p}: {', '.join(r)}" for p, r in n.why_not().items()) if n.profile else ""}
            for n in plan.nodes]
    data = plan.to_dict()
    results = None
    if not dry_run:
        results = classify_mod.apply(plan, prov)
        data["results"] = [r.to_dict() for r in results]
        data["writes"] = prov.writes
    counts = ", ".join(f"{v} {k}" for k, v in plan.counts().items() if v) or "no nodes"
    title = f"{'plan (dry run)' if dry_run else 'classify'}: {counts}"
    output.emit(data, app.output, rows=rows,
                columns=["node", "state", "outcome", "profile", "changes", "detail", "why not"], title=title)
    if app.output == "table":
        for name in plan.unused_profiles():
            log.say(f"profile '{name}' matches none of the {len(plan.nodes)} nodes")
        for o in plan.overlaps():
            log.say(f"profiles {', '.join(o['profiles'])} overlap on {', '.join(o['nodes'])}")
    click.get_current_context().exit(int(classify_mod.exit_code(plan, results)))
