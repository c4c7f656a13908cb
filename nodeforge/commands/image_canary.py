"""``nodeforge image canary`` (added to the ``image`` group in image.py); docs/canary.md."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output, schema
from nodeforge.canary import policy as canary_policy
from nodeforge.canary import stage
from nodeforge.cloud import connect
from nodeforge.commands import options
from nodeforge.ironic.provisioner import SdkProvisioner
from nodeforge.publish import glance, retention


def policy_option(fn):
    return click.option("--canary-policy", "policy_path", type=click.Path(dir_okay=False, path_type=Path),
                        default=None, envvar="NODEFORGE_CANARY_POLICY",
                        help=f"Which resource classes need a passing canary.  [default: {canary_policy.DEFAULT_PATH} "
                             "if it exists, else no canary is asked for]")(fn)


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--image", "image_ref", metavar="ID|NAME",
              help="The published bare-metal image of BUILD_DIR.  [default: found by the build's id]")
@policy_option
@options.baremetal_cloud
@options.scope("Scope of the canary's allocations.  [default: the image's scope]")
@click.option("--listen", metavar="HOST:PORT",
              help=f"Where the node's report is received.  [default: ${stage.ENV_LISTEN}, else 127.0.0.1, a free port]")
@click.option("--advertise", metavar="URL",
              help=f"Base URL the node is told to send its report to (what it can reach).  "
                   f"[default: ${stage.ENV_ADVERTISE}, else the --listen address]")
@options.cache_dir("Artifact cache (the pinned archives' member digests for the image's own checks).")
@options.dry_run
@options.pass_app
def canary(app, build_dir, image_ref, policy_path, baremetal_cloud, scope, listen, advertise, cache_dir, dry_run):
    """Deploy a published bare-metal image onto one node of each resource class the canary policy
    names, through Ironic, and check it from the node itself before it may be promoted.

    Takes an available node with an allocation in nodeforge's name, deploys the image from Glance with
    a config drive, waits for the node's own report (verify's checks plus what only a deploy shows:
    booted from its disk, root grown, config drive, hostname, network), then undeploys and waits for
    cleaning to return the node to available. Records canary.json in BUILD_DIR and beside the image in
    Glance; promote refuses the image without a pass where the policy asks for one. --dry-run shows
    the nodes it would take."""
    pol = canary_policy.load(policy_path)
    conn = app.connect()
    prov = SdkProvisioner(connect(baremetal_cloud) if baremetal_cloud else conn)
    plan = stage.plan(conn, prov, build_dir, pol, image_ref=image_ref, scope=scope)
    if dry_run or not pol.asked:
        output.emit(plan.to_dict(), app.output, rows=plan.rows(),
                    columns=["resource_class", "required", "action", "node", "candidates", "problem"],
                    title=f"{'plan (dry run): ' if dry_run else ''}{plan.image.get('name')}: {pol.describe()}")
        return
    if plan.problems:
        raise stage.CanaryFailed(detail="; ".join(plan.problems))
    publisher = glance.Publisher(conn, retention.load(), scope=plan.scope)
    say = lambda line: log.say(line, level="info", prefix=False)  # noqa: E731
    try:
        report = stage.apply(prov, plan, publisher, listen=stage.listen_settings(listen, advertise),
                             cache_dir=cache_dir, say=say)
    except stage.CanaryFailed:
        _emit(app, build_dir)
        raise
    _emit(app, build_dir, report)


def _emit(app, build_dir: Path, report: dict | None = None) -> None:
    if report is None:
        path = build_dir / stage.REPORT
        report = schema.read_json(path) if path.exists() else {"results": []}
    rows = [{"resource_class": r["resource_class"], "node": r["node"], "passed": r["passed"],
             "seconds": ", ".join(f"{k} {v:.0f}" for k, v in (r.get("seconds") or {}).items()),
             "node_state": r.get("node_state"), "reason": r.get("reason")} for r in report.get("results", [])]
    output.emit(report, app.output, rows=rows,
                columns=["resource_class", "node", "passed", "seconds", "node_state", "reason"])


COMMANDS = (canary,)
