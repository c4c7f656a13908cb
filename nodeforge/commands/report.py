"""``nodeforge report html``: a static, self-contained HTML site from the JSON documents of a run
directory (nodeforge/report/, docs/reports.md)."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options


@click.group()
def report():
    """Reports to look at: HTML pages made from the JSON documents nodeforge writes."""


@report.command("html")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--dest", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Directory the site is written into (created; its pages replaced).")
@click.option("--cloud", "cloud_name", metavar="NAME",
              help="Take a fresh snapshot of the image catalog from this cloud (clouds.yaml name) for the "
                   "catalog page, in place of a saved catalog.json (read only; nothing is written there).")
@options.dry_run
@options.pass_app
def html(app, run_dir, dest, cloud_name, dry_run):
    """Write a static site (HTML and inline CSS, no script, nothing fetched) for the documents in
    RUN_DIR: the pipeline's run record (run.json) as a timeline with one bar per stage, each
    enrollment report (baremetal enroll --report FILE.json) as a rack with one tile per node, and
    the image catalog (catalog.json, or image list -o json saved to a file) as a table per
    Kubernetes minor. Pages say only what the documents say; prints the pages written (--dry-run:
    would write)."""
    from nodeforge.report import documents, site

    catalog = None
    if cloud_name:
        from nodeforge import cloud
        from nodeforge.publish import catalog as catalog_mod

        catalog = catalog_mod.snapshot(cloud.connect(cloud_name), cloud=cloud_name)
    docs = documents.find(run_dir, catalog)
    pages = site.plan(docs)
    if not dry_run:
        site.write(docs, dest)
    rows = [{"page": str(dest / p.name), "kind": p.kind, "title": p.title} for p in pages]
    output.emit({"dry_run": dry_run, "dest": str(dest), "pages": rows, "skipped": docs.skipped}, app.output,
                rows=rows, columns=["page", "kind", "title"],
                title=f"report pages {'to write (dry run)' if dry_run else 'written'} in {dest}")


@report.command("serve")
@click.argument("site_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port on 127.0.0.1.")
def serve(site_dir, port):
    """Serve a written report (SITE_DIR, the --dest of report html) on 127.0.0.1 for a quick look;
    Ctrl-C stops it."""
    from nodeforge import log
    from nodeforge.report import site

    httpd = site.server(site_dir, port)
    log.say(f"serving {site_dir} on http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)", level="info")
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
