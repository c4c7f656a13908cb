"""``nodeforge pipeline run|show|list``: the release pipeline (nodeforge/pipeline, docs/pipeline.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from nodeforge import cloud as cloud_mod, log, output
from nodeforge.commands import image_canary, options
from nodeforge.imageverify import boottest
from nodeforge.publish import retention
from nodeforge.pipeline import runrecord as rr
from nodeforge.pipeline.run import DEFAULT_RUNS_DIR, Pipeline
from nodeforge.pipeline.stages import PipelineConfig

STAGE_COLUMNS = ["stage", "minor", "status", "seconds", "attempts", "result"]


def _runs_dir_option(fn):
    return click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_RUNS_DIR,
                        show_default=True, envvar="NODEFORGE_RUNS_DIR", help="Where run records are kept.")(fn)


def _stage_rows(doc: dict) -> list[dict]:
    rows = []
    for s in doc["stages"]:
        result = (s.get("error") or {}).get("message") or (s.get("outputs") or {}).get("summary", "")
        rows.append({"stage": s["name"], "minor": s.get("minor") or "", "status": s["status"],
                     "seconds": s.get("seconds"), "attempts": s.get("attempts"), "result": result})
    return rows


def write_report(run_dir: Path, conn=None, cloud: str | None = None) -> Path | None:
    """The run's HTML report in RUN_DIR/report (docs/reports.md), its path said on stderr; with a
    connection, the image catalog as the run left it is saved first (RUN_DIR/catalog.json, the
    catalog page's document). A report or snapshot that cannot be made is a warning, never the
    run's failure."""
    from nodeforge.base.fs import atomic_write
    from nodeforge.errors import NodeforgeError
    from nodeforge.publish import catalog
    from nodeforge.report import documents, site

    if conn is not None:
        try:
            doc = catalog.snapshot(conn, cloud=cloud)
            atomic_write(run_dir / "catalog.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
        except (NodeforgeError, OSError) as exc:
            log.say(f"no catalog snapshot for {run_dir}: {exc}")
    try:
        site.write(documents.find(run_dir), run_dir / "report")
    except (NodeforgeError, OSError) as exc:
        log.say(f"no HTML report for {run_dir}: {exc}")
        return None
    index = run_dir / "report" / "index.html"
    log.say(f"report: {index}", level="info")
    return index


def _connection_or_none(app):
    """The run's cloud for the catalog snapshot, or None (said) when it cannot be reached now."""
    from nodeforge.errors import NodeforgeError

    try:
        return app.connect()
    except NodeforgeError as exc:
        log.say(f"no catalog snapshot: {exc}")
        return None


def _cloud_in_use(app, *, say: bool) -> str:
    """The cloud the run uses and where its name came from (option, $OS_CLOUD, the only cloud in
    clouds.yaml), said on stderr (``say``) and recorded in the run's inputs."""
    from_option = click.get_current_context().find_root().get_parameter_source("os_cloud") is \
        click.core.ParameterSource.COMMANDLINE
    name, source = cloud_mod.cloud_named(["--os-cloud", app.os_cloud] if from_option else [], os.environ)
    if say:
        log.say(f"cloud '{name}' ({source})", level="info")
    return f"{name} ({source})"


def emit_run(app, doc: dict) -> None:
    output.emit(doc, app.output, rows=_stage_rows(doc), columns=STAGE_COLUMNS,
                title=f"pipeline run {doc['run_id']}: {doc['status']}")
    if app.output != "table":
        return
    if doc.get("message"):
        log.say(doc["message"], level="info", prefix=False)
    for minor, variants in (doc.get("approved") or {}).items():
        for variant, image_id in variants.items():
            click.echo(f"approved: Kubernetes {minor} {variant}: {image_id}")
    emit_packages(doc.get("packages") or [], title="OS package changes (package lock moved)")
    for minor, lat in (doc.get("latency") or {}).items():
        pk = lat.get("packages") or {}
        if lat.get("latency_seconds") is not None:
            click.echo(f"patch latency {lat.get('version') or minor}: {lat['latency_seconds']:.0f}s "
                       f"(release on the mirror {lat['published_at']} -> approved {lat['approved_at']})")
        elif not pk:
            click.echo(f"run time {lat.get('version') or minor}: {lat['run_seconds']:.0f}s to the approved image "
                       "(release time unknown)")
        if pk.get("latency_seconds") is not None:
            click.echo(f"package-update latency {lat.get('version') or minor}: {pk['latency_seconds']:.0f}s "
                       f"({pk['updates']} package update(s), {pk['security']} security; on the mirror "
                       f"{pk['published_at']} -> approved {lat['approved_at']})")
        elif pk:
            click.echo(f"run time {lat.get('version') or minor}: {lat['run_seconds']:.0f}s to the approved image "
                       "(package update time unknown)")
    click.echo(f"report: {doc['summary']}  (record: {doc['record']})")


PACKAGE_COLUMNS = ["name", "arch", "old_version", "new_version", "suite", "security"]


def emit_packages(changes: list[dict], *, title: str) -> None:
    """The OS package changes as a table (table output only; JSON carries them in the document)."""
    if changes:
        output.emit(changes, "table", rows=changes, columns=PACKAGE_COLUMNS, title=title)


def _emit_plan(app, plan) -> None:
    """A dry run's plan: its stages per minor, and (as a table) the OS package changes the bump would make."""
    output.emit(plan.to_dict(), app.output, rows=plan.stages, columns=["stage", "minor", "action"],
                title=f"plan (dry run): {', '.join(plan.minors) or 'nothing new upstream'}")
    if app.output == "table":
        emit_packages(plan.packages, title="OS package changes the bump would make (lock not written)")


def _run_settings(fn):
    """--dib-cache, --retention, --verify-timeout, --no-packages and --fixture-label (the run's build,
    verify and promote settings; passed as ``dib_cache``, ``retention_path``, ``verify_timeout``,
    ``no_packages``, ``fixture_label``)."""
    fn = click.option("--fixture-label", metavar="TEXT", envvar="NODEFORGE_FIXTURE_LABEL",
                      help="The artifacts come from a fixture mirror: label every image with this (refused with "
                           "the production lockfile).")(fn)
    fn = click.option("--no-packages", is_flag=True,
                      help="Ignore the OS package lock (os-packages.lock.yaml beside the lockfile): only a "
                           "Kubernetes patch release triggers a run, and the lock is not moved.")(fn)
    fn = click.option("--verify-timeout", type=click.FloatRange(min=10), default=boottest.DEFAULT_TIMEOUT,
                      show_default=True, help="Seconds each boot may take.")(fn)
    fn = click.option("--retention", "retention_path", type=click.Path(dir_okay=False, path_type=Path),
                      default=retention.DEFAULT_PATH, show_default=True, envvar="NODEFORGE_IMAGE_RETENTION",
                      help="Retention policy for promote.")(fn)
    return click.option("--dib-cache", type=click.Path(file_okay=False, path_type=Path), envvar="NODEFORGE_DIB_CACHE",
                        help="debootstrap/apt cache for builds.")(fn)


@click.group()
def pipeline():
    """The release pipeline: a new Kubernetes patch release or Debian package update to approved images, recorded."""


@pipeline.command()
@click.option("--minor", "minors", multiple=True, metavar="1.NN",
              help="Only this minor (repeatable), even without a new patch.  [default: every minor with one]")
@click.option("--resume", "resume_id", metavar="RUN_ID",
              help="Resume a failed run from its failed stage (its recorded inputs are used).")
@_runs_dir_option
@options.lockfile("The version lockfile (bump rewrites it).")
@options.sources("Mirror settings.  [default: sources.yaml beside the lockfile]")
@options.cache_dir()
@options.work_dir("Scratch space for build and verify.  [default: $TMPDIR]")
@_run_settings
@options.scope("Ownership scope the images are published and promoted under (promote retires only this "
               "scope's older images).  [default: the lockfile's scope: its scope: key, else derived from its path]")
@options.signing
@image_canary.policy_option
@options.baremetal_cloud
@options.dry_run
@options.pass_app
def run(app, minors, resume_id, runs_dir, lockfile_path, sources_file, cache_dir, work_dir, dib_cache,
        retention_path, verify_timeout, no_packages, fixture_label, scope, sign_key, passphrase_ref, sign_cert_id,
        policy_path, baremetal_cloud, dry_run):
    """Check upstream and the Debian mirror; for each minor with a new patch
    (every minor, or the named ones, when a locked OS package has a newer
    version, e.g. a security update): bump the lockfile and the OS package
    lock, prefetch, render, build, verify, publish, canary (the bare-metal
    image deployed on a node of each class the canary policy names, when
    there is a policy), and -- when all of that succeeded -- promote.

    Writes RUNS_DIR/RUN_ID/run.json, summary.md and pr-body.md. A failed run
    resumes from the failed stage with --resume RUN_ID. Exit 0: images
    approved, or nothing new upstream (says so); 1 (or the failed stage's
    code): failed, nothing promoted."""
    if resume_id and (minors or dry_run or scope or no_packages or sign_key):
        raise click.UsageError("--resume takes the run's recorded inputs; it goes without "
                               "--minor/--dry-run/--scope/--no-packages/--sign-key")
    options.check_signing(sign_key, passphrase_ref, sign_cert_id)
    cloud_source = _cloud_in_use(app, say=not dry_run and not resume_id)
    config = PipelineConfig(lockfile=lockfile_path, sources_file=sources_file, cache_dir=cache_dir,
                            os_cloud=app.os_cloud, retention=retention_path, work_dir=work_dir,
                            dib_cache=dib_cache, verify_timeout=verify_timeout, fixture=fixture_label, scope=scope,
                            packages=not no_packages, sign_key=sign_key, sign_key_passphrase=passphrase_ref,
                            sign_cert_id=sign_cert_id, canary_policy=policy_path, baremetal_cloud=baremetal_cloud,
                            cloud_source=cloud_source)
    pipe = Pipeline(config, runs_dir=runs_dir, say=lambda line: log.say(line, level="info", prefix=False))
    if dry_run:
        _emit_plan(app, pipe.plan(list(minors)))
        return
    record = pipe.resume(resume_id) if resume_id else pipe.run(list(minors))
    # The catalog as the run left it (a run that found nothing new touched no image: no snapshot).
    conn = _connection_or_none(app) if record.status != "nothing-to-do" else None
    write_report(record.root, conn, cloud_source.split(" (", 1)[0])
    emit_run(app, record.to_dict())


@pipeline.command()
@click.argument("run_id")
@_runs_dir_option
@options.pass_app
def show(app, run_id, runs_dir):
    """One run's record: stages, timings, outputs, image IDs, errors."""
    emit_run(app, rr.RunRecord.load(runs_dir, run_id).to_dict())


@pipeline.command("list")
@_runs_dir_option
@options.pass_app
def list_cmd(app, runs_dir):
    """Recorded runs, newest first."""
    output.emit(rr.list_runs(runs_dir), app.output,
                columns=["run_id", "status", "created", "minors", "failed_stage", "approved"])
