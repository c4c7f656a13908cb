"""``nodeforge baremetal baseline apply``: bring nodes to their hardware profile's baseline through
Ironic's manual cleaning (nodeforge/ironic/baseline_apply.py). Attached to the ``baremetal``
group in nodeforge/commands/baremetal.py."""

from __future__ import annotations


import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.commands.baremetal_audit import node_selection, selection_inputs
from nodeforge.ironic import audit as audit_mod
from nodeforge.ironic import baseline_apply as apply_mod

COLUMNS = ["node", "state", "action", "changes", "pending", "result", "detail"]


def _fetch_image(url: str, sha256: str) -> None:
    """A firmware image pinned by the baseline, fetched into the artifact cache and checked."""
    from nodeforge.pins.cache import Downloader

    Downloader().fetch(url, sha256, artifact="firmware image", expected_from="the baseline")


@click.group()
def baseline():
    """The hardware baseline of each node's profile (docs/baseline.md)."""


@baseline.command()
@node_selection("Plan from the Redfish BMCs of the nodes this inventory names (not Ironic's cached view); its "
                "scope is then the default of --scope.")
@click.option("--timeout", type=click.FloatRange(min=1), default=1800.0, show_default=True,
              help="Seconds to wait for the nodes' cleaning; a node still cleaning then is picked up by the next run.")
@click.option("--concurrency", type=click.IntRange(1, 500), default=apply_mod.DEFAULT_CONCURRENCY, show_default=True,
              help="Most nodes between their first write and the end of their cleaning at once (Ironic refuses "
                   "cleanings beyond its [conductor] max_concurrent_clean, 50 by default; a refusal for now "
                   "is sent again).")
@options.dry_run
@options.pass_app
def apply(app, profiles_path, nodes, inventory_path, scope, timeout, concurrency, dry_run):
    """Apply each drifted node's baseline through manual cleaning.

    BIOS settings out of band (bios.apply_configuration); on nodes that boot
    the agent also the RAID layout and firmware (each image fetched and
    checked against its sha256 first); root device hints as a node property.
    An available node is moved to manageable, cleaned and given back; a
    manageable one is cleaned. Active nodes are deferred, never touched.
    Resumable: an interrupted run is picked up by the next one. A node at
    its baseline costs no write. Exit 0: every node at or brought to its
    baseline; 3: some failed or could not be planned; 1: all failed."""
    profiles, prov, inventory, scope = selection_inputs(app, profiles_path, inventory_path, scope)
    plans = apply_mod.plan_from_ironic(prov, profiles, nodes=list(nodes), scope=scope, inventory=inventory)
    if not dry_run:
        apply_mod.run(plans, prov, timeout=timeout, concurrency=concurrency, fetch_image=_fetch_image)
    rows = [{"node": p.name, "state": p.state, "action": p.action,
             "changes": "; ".join(f"{i.item}: {audit_mod.show(i.current)} -> {audit_mod.show(i.wanted)}"
                                  for i in p.items),
             "pending": ", ".join(i.item for i in p.pending),
             "result": "" if p.ok is None else "ok" if p.ok else "failed", "detail": p.error or p.detail or ""}
            for p in plans]
    data = {"dry_run": dry_run, "scope": scope, "nodes": [p.to_dict() for p in plans], "writes": prov.writes}
    counts = {}
    for p in plans:
        counts[p.action] = counts.get(p.action, 0) + 1
    title = f"{'baseline plan (dry run)' if dry_run else 'baseline apply'}: " + \
        (", ".join(f"{v} {k}" for k, v in counts.items()) or "no nodes")
    output.emit(data, app.output, rows=rows, columns=COLUMNS, title=title)
    click.get_current_context().exit(apply_mod.exit_code(plans, dry_run))
