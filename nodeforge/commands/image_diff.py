"""``nodeforge image diff A B`` (added to the ``image`` group in image.py): two builds or two Glance images.

Thin: :mod:`nodeforge.publish.diff` does the work (docs/image-build.md, "Comparing images").
"""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.errors import UsageError
from nodeforge.publish import diff as imgdiff


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--limit", type=click.IntRange(min=0), default=200, show_default=True,
              help="Table rows of changed files shown (JSON/YAML always list every path).")
@options.pass_app
def diff(app, a, b, limit):
    """Compare two builds (build directories) or two node images in Glance (ID or unique name).

    Lists OS packages and artifacts added, removed and changed (old -> new
    version), files added, removed and changed (from the builds' per-file
    manifests, files.jsonl), the build inputs that differ and, for Glance
    images, the properties that differ. The build id, time and Glance IDs are
    shown but never count as a difference, nor do the image files' digests
    (disks are not byte-identical; the content is compared).

    Exits 0 when A and B have the same content, 10 when they differ (like
    'release check' when it finds something new), 1 on an error, 2 when A or
    B is neither a build directory nor an image."""
    pa, pb = Path(a), Path(b)
    if pa.is_dir() and pb.is_dir():
        result = imgdiff.diff_builds(pa, pb)
    elif pa.is_dir() or pb.is_dir():
        raise UsageError(detail=f"compare two build directories or two Glance images; "
                                f"{a if pa.is_dir() else b} is a directory and "
                                f"{b if pa.is_dir() else a} is not")
    else:
        result = imgdiff.diff_images(app.connect(), a, b)
    doc = result.to_dict()
    if app.output != "table":
        output.emit(doc, app.output)
    else:
        s = result.summary()
        title = (f"{result.a} -> {result.b}: " + ("same content" if result.identical else "differ") +
                 f" (packages {s['packages']}, artifacts {s['artifacts']}, files {s['files']}, "
                 f"inputs {s['inputs']}, properties {s['properties']})")
        rows = result.rows(file_limit=limit)
        if rows:
            output.emit(doc, app.output, rows=rows, columns=["kind", "what", "change", "a", "b"], title=title)
        else:
            click.echo(title)
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
    if not result.identical:
        click.get_current_context().exit(imgdiff.EXIT_DIFFERENT)


COMMANDS = (diff,)
