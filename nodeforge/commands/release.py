"""``nodeforge release``: watch upstream Kubernetes releases and move the lockfile."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import options, output
from nodeforge.errors import ExitCode
from nodeforge.imagebuild import lockfile, release as release_mod
from nodeforge.imagebuild.cache import Cache, Downloader, RetryPolicy
from nodeforge.imagebuild.sources import Sources


def _common(fn):
    """Options every release command takes (--output etc. come from options.add_common_options)."""
    fn = click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="NODEFORGE_CACHE_DIR",
                      help="Download cache.  [default: $XDG_CACHE_HOME/nodeforge/artifacts]")(fn)
    fn = click.option("--sources", "sources_file", type=click.Path(dir_okay=False, path_type=Path),
                      envvar="NODEFORGE_SOURCES",
                      help="Mirror settings.  [default: sources.yaml beside the lockfile]")(fn)
    fn = click.option("--lockfile", "lockfile_path", type=click.Path(dir_okay=False, path_type=Path),
                      envvar="NODEFORGE_LOCKFILE", default=lockfile.DEFAULT_PATH, show_default="manifests/versions.yaml",
                      help="The version lockfile.")(fn)
    return fn


def _minors(ctx, param, value):
    """--minor values: each a Kubernetes minor like 1.36 (else exit 2 before any download)."""
    for minor in value:
        if not lockfile.is_minor(minor):
            raise click.BadParameter(f"{minor!r} is not a Kubernetes minor (expected like 1.36)", ctx=ctx, param=param)
    return value


def _setup(lockfile_path: Path, sources_file: Path | None, cache_dir: Path | None):
    lock = lockfile.load(lockfile_path)
    sources = Sources.load(sources_file or lockfile_path.parent / "sources.yaml")
    return lock, sources, Downloader(Cache(cache_dir), RetryPolicy.from_env())


@click.group()
def release():
    """Kubernetes patch-release watch: check upstream, bump the lockfile, prefetch artifacts."""


@release.command()
@_common
@options.pass_app
def check(app, lockfile_path, sources_file, cache_dir):
    """Compare the lockfile with upstream's stable markers.

    Exits 10 when a new patch release or minor exists upstream, or a pinned
    minor left the three maintained ones; 0 when the lockfile is current."""
    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    report = release_mod.check(lock, sources, dl)
    output.emit(report, app.output, rows=[m.to_dict() for m in report.minors],
                columns=["minor", "pinned", "upstream", "status", "maintained", "ignored"],
                title=f"latest stable: {report.latest or 'unknown'}")
    if app.output == "table" and report.left_maintained:
        click.echo(f"no longer maintained upstream: {', '.join(report.left_maintained)}", err=True)
    if report.new_release:
        click.get_current_context().exit(ExitCode.NEW_RELEASE)


@release.command()
@click.option("--minor", "minors", multiple=True, metavar="1.NN", callback=_minors,
              help="Only this minor (repeatable); a minor not pinned yet is added.  [default: every minor that moved]")
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Parallel downloads.")
@options.dry_run
@_common
@options.pass_app
def bump(app, minors, jobs, dry_run, lockfile_path, sources_file, cache_dir):
    """Pin the newest stable patch releases, verified against upstream's checksums.

    Downloads every new artifact and checks it against the published sha256,
    then rewrites the lockfile atomically; on any mismatch nothing is written.
    Prints the change as Markdown for a pull-request body."""
    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    report = release_mod.bump(lock, sources, dl, minors=list(minors) or None, dry_run=dry_run, jobs=jobs)
    if app.output == "table":
        click.echo(release_mod.diff_markdown(report), nl=False)
    else:
        output.emit(report, app.output)


@release.command()
@click.option("--minor", "minors", multiple=True, metavar="1.NN", callback=_minors,
              help="Only this minor (repeatable).  [default: all]")
@click.option("--arch", "arches", multiple=True, type=click.Choice([a.value for a in lockfile.Arch]),
              help="Only this architecture (repeatable).  [default: all in the lockfile]")
@click.option("--bundle", type=click.Path(path_type=Path),
              help="Also write an air-gap bundle: a directory, or a .tar/.tar.gz/.tgz file.")
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Parallel downloads.")
@_common
@options.pass_app
def prefetch(app, minors, arches, bundle, jobs, lockfile_path, sources_file, cache_dir):
    """Download every pinned artifact into the cache, verified; optionally bundle them."""
    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    report = release_mod.prefetch(lock, sources, dl, minors=list(minors) or None, arches=list(arches) or None,
                                  bundle=bundle, jobs=jobs)
    output.emit(report, app.output, rows=[i.to_dict() for i in report.items],
                columns=["minor", "component", "version", "arch", "status", "size"])
    if app.output == "table":
        mib = report.downloaded_bytes / (1 << 20)
        click.echo(f"{len(report.items)} artifacts in {dl.cache.root}; downloaded {mib:.1f} MiB "
                   f"in {report.seconds:.1f}s" + (f"; bundle: {report.bundle}" if report.bundle else ""), err=True)
