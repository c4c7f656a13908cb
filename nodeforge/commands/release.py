"""``nodeforge release``: watch upstream Kubernetes releases and move the lockfile."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.errors import ExitCode
from nodeforge.pins import lockfile, release as release_mod
from nodeforge.pins.cache import Cache, Downloader, DownloadSettings
from nodeforge.pins.sources import Sources


def _common(fn):
    """Options every release command takes (--output etc. come from options.add_common_options)."""
    fn = options.cache_dir("Download cache.  [default: $XDG_CACHE_HOME/nodeforge/artifacts]")(fn)
    fn = options.sources("Mirror settings.  [default: sources.yaml beside the lockfile]")(fn)
    fn = options.lockfile()(fn)
    return fn


def _package_options(fn):
    """Options of the commands that read the OS package lock (docs/os-packages.md)."""
    fn = click.option("--keyring", type=click.Path(dir_okay=False, path_type=Path), envvar="NODEFORGE_DEBIAN_KEYRING",
                      help="Keyring the archive's InRelease must be signed with.  "
                           "[default: /usr/share/keyrings/debian-archive-keyring.gpg]")(fn)
    fn = click.option("--package-lock", "package_lock", type=click.Path(dir_okay=False, path_type=Path),
                      envvar="NODEFORGE_PACKAGE_LOCK",
                      help="The OS package lock.  [default: os-packages.lock.yaml beside the lockfile]")(fn)
    return fn


def _package_lock(lockfile_path: Path, package_lock: Path | None, *, must_exist: bool):
    """The package lock to use, or None when the default one does not exist (and none was asked for)."""
    from nodeforge.oslock import lock as ol

    path = package_lock or release_mod.package_lock_path(lockfile_path)
    if not path.exists() and not package_lock and not must_exist:
        return None
    return ol.load(path)


def _archive_config(plock, keyring):
    from nodeforge.oslock import archive, watch

    return watch.config_for(plock, archive.host_mirrors(release=plock.release), keyring)


def _minors(ctx, param, value):
    """--minor values: each a Kubernetes minor like 1.36 (else exit 2 before any download)."""
    for minor in value:
        if not lockfile.is_minor(minor):
            raise click.BadParameter(f"{minor!r} is not a Kubernetes minor (expected like 1.36)", ctx=ctx, param=param)
    return value


def _setup(lockfile_path: Path, sources_file: Path | None, cache_dir: Path | None):
    lock = lockfile.load(lockfile_path)
    sources = Sources.load(sources_file or lockfile_path.parent / "sources.yaml")
    return lock, sources, Downloader(Cache(cache_dir), DownloadSettings.from_env())


@click.group()
def release():
    """Release watch: Kubernetes patch releases and Debian package updates; bump the locks, prefetch artifacts."""


@release.command()
@click.option("--no-packages", is_flag=True, help="Skip the OS package lock; only Kubernetes.")
@_package_options
@_common
@options.pass_app
def check(app, no_packages, package_lock, keyring, lockfile_path, sources_file, cache_dir):
    """Compare the lockfile with upstream's stable markers, and the OS package lock with the mirror.

    Exits 10 when a new patch release or minor exists upstream, a pinned
    minor left the three maintained ones, or the Debian mirror's verified
    indexes serve a newer version of a locked package (security updates
    marked); 0 when everything is current. The package part runs when the
    package lock exists (or --package-lock names one)."""
    from nodeforge.oslock import watch

    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    report = release_mod.check(lock, sources, dl)
    plock = None if no_packages else _package_lock(lockfile_path, package_lock, must_exist=bool(package_lock))
    pkgs = watch.check(plock, _archive_config(plock, keyring)) if plock else None
    doc = report.to_dict() | {"kubernetes_new_release": report.new_release,
                              "new_release": report.new_release or bool(pkgs and pkgs.new_release),
                              "packages": pkgs.to_dict() if pkgs else None}
    if app.output != "table":
        output.emit(doc, app.output)
    else:
        output.emit(report, app.output, rows=[m.to_dict() for m in report.minors],
                    columns=["minor", "pinned", "upstream", "status", "maintained", "ignored"],
                    title=f"latest stable: {report.latest or 'unknown'}")
        if report.left_maintained:
            click.echo(f"no longer maintained upstream: {', '.join(report.left_maintained)}", err=True)
        if pkgs is not None:
            title = (f"OS packages ({pkgs.lock}): {len(pkgs.updates)} of {pkgs.packages} have a newer version, "
                     f"{len(pkgs.security_updates)} from a security suite")
            if pkgs.updates:
                output.emit(pkgs, app.output, rows=[u.to_dict() for u in pkgs.updates],
                            columns=["name", "arch", "old_version", "new_version", "suite", "security"], title=title)
            else:
                click.echo(f"OS packages ({pkgs.lock}): all {pkgs.packages} current")
            if pkgs.gone:
                click.echo(f"no longer on the mirror: {', '.join(pkgs.gone[:10])}"
                           + (" ..." if len(pkgs.gone) > 10 else ""), err=True)
    if doc["new_release"]:
        click.get_current_context().exit(ExitCode.NEW_RELEASE)


@release.command()
@click.option("--minor", "minors", multiple=True, metavar="1.NN", callback=_minors,
              help="Only this minor (repeatable); a minor not pinned yet is added.  [default: every minor that moved]")
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Parallel downloads.")
@click.option("--packages", "packages", is_flag=True,
              help="Move the OS package lock instead: re-resolve it against the mirror's verified indexes.")
@_package_options
@options.dry_run
@_common
@options.pass_app
def bump(app, minors, jobs, packages, package_lock, keyring, dry_run, lockfile_path, sources_file, cache_dir):
    """Pin the newest stable patch releases, verified against upstream's checksums.

    Downloads every new artifact and checks it against the published sha256,
    then rewrites the lockfile atomically; on any mismatch nothing is written.
    Prints the change as Markdown for a pull-request body. With --packages,
    the OS package lock is moved instead (package, old -> new, suite)."""
    if packages:
        from nodeforge.oslock import watch

        if minors:
            raise click.UsageError("--minor and --packages cannot be combined")
        plock = _package_lock(lockfile_path, package_lock, must_exist=True)
        preport = watch.bump(plock, _archive_config(plock, keyring), dry_run=dry_run)
        if app.output == "table":
            click.echo(watch.markdown(preport), nl=False)
        else:
            output.emit(preport, app.output)
        return
    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    plan = release_mod.plan_bump(lock, sources, dl, minors=list(minors) or None)
    report = plan.report() if dry_run else release_mod.apply_bump(plan, sources, dl, jobs=jobs)
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
@options.dry_run
@_common
@options.pass_app
def prefetch(app, minors, arches, bundle, jobs, dry_run, lockfile_path, sources_file, cache_dir):
    """Download every pinned artifact into the cache, verified; optionally bundle them.

    --dry-run lists the artifacts, each 'cached' (a file under its sha256 is in
    the cache) or 'would download' (with its URL), and the bundle it would
    write; it downloads, re-hashes and writes nothing."""
    lock, sources, dl = _setup(lockfile_path, sources_file, cache_dir)
    plan = release_mod.plan_prefetch(lock, sources, dl.cache, minors=list(minors) or None,
                                     arches=list(arches) or None, bundle=bundle)
    columns = ["minor", "component", "version", "arch", "status", "size"]
    if dry_run:
        output.emit(plan, app.output, rows=[i.to_dict() for i in plan.items], columns=columns,
                    title=f"plan (dry run): {plan.cached} cached, {len(plan.items) - plan.cached} would download")
        if app.output == "table":
            click.echo(f"cache: {plan.cache_root}"
                       + (f"\nbundle: would write {plan.bundle}" if plan.bundle is not None else ""))
        return
    report = release_mod.apply_prefetch(plan, sources, dl, jobs=jobs)
    output.emit(report, app.output, rows=[i.to_dict() for i in report.items], columns=columns)
    if app.output == "table":
        mib = report.downloaded_bytes / (1 << 20)
        click.echo(f"{len(report.items)} artifacts in {dl.cache.root}; downloaded {mib:.1f} MiB "
                   f"in {report.seconds:.1f}s" + (f"; bundle: {report.bundle}" if report.bundle else ""), err=True)


@release.command("lock-packages")
@click.option("--arch", default="amd64", show_default=True, type=click.Choice(["amd64"]),
              help="Image architecture.")
@_package_options
@options.dry_run
@options.lockfile("The version lockfile (its base_os picks the Debian release).")
@options.pass_app
def lock_packages(app, arch, package_lock, keyring, dry_run, lockfile_path):
    """Write (or refresh) the OS package lock: every Debian package of the image, resolved.

    The set is resolved with apt in a throwaway root against the mirror's
    indexes, each verified through the signed InRelease (docs/os-packages.md);
    the file is replaced atomically. --dry-run prints the change only."""
    lock = lockfile.load(lockfile_path)
    path = package_lock or release_mod.package_lock_path(lockfile_path)
    from nodeforge.oslock import archive

    from nodeforge.imagebuild import package_lock

    report = package_lock.lock_packages(lock, path, archive.host_mirrors(release=package_lock.package_lock_template(
        lock, arch=arch).release), keyring=keyring, arch=arch,
                                       dry_run=dry_run)
    if app.output == "table":
        from nodeforge.oslock import watch

        click.echo(watch.markdown(report), nl=False)
        click.echo(f"{report.packages} packages; {path} " + ("written" if report.written else "not written"),
                   err=True)
    else:
        output.emit(report, app.output)
