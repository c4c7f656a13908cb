"""``nodeforge image render`` and ``nodeforge image build`` (added to the ``image`` group in image.py)."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.imagebuild import build as build_mod, render as render_mod
from nodeforge.pins import lockfile
from nodeforge.pins.lockfile import Arch


_lockfile_option = options.lockfile()


def _out_dir(ctx, param, value):
    """--out as a Path; an empty value is a usage error (Path("") would mean the current directory)."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("must name a directory, not an empty string", ctx=ctx, param=param)
    return Path(value)


@click.command()
@click.option("--k8s", "minor", required=True, metavar="1.NN", help="Kubernetes minor, as pinned in the lockfile.")
@click.option("--out", type=click.Path(file_okay=False), callback=_out_dir, required=True,
              help="Directory for the rendered tree (replaced if it is a previous render).")
@click.option("--arch", type=click.Choice([a.value for a in Arch]), default=Arch.AMD64.value, show_default=True)
@_lockfile_option
@options.dry_run
@options.pass_app
def render(app, minor, out, arch, lockfile_path, dry_run):
    """Render elements/ with the pinned versions, checksums and hardening profile.

    The output (elements/, nodeforge.env, pins.json) is deterministic: rendering
    twice gives byte-identical trees. --dry-run renders in memory and prints what
    --out would hold (its files, the element tree digest), leaving --out as it is."""
    lock = lockfile.load(lockfile_path)
    if dry_run:
        plan = render_mod.plan(lock, minor, out, arch=Arch(arch))
        doc = {**plan.to_dict(), "dry_run": True}
        existing = f" (now {doc['existing']})" if doc["existing"] else ""
        output.emit(doc, app.output, rows=doc["files"], columns=["path", "type", "mode", "bytes"],
                    title=f"plan (dry run): {plan.action} {doc['root']}{existing}: Kubernetes "
                          f"{doc['kubernetes_version']} {doc['arch']}, element tree {doc['element_tree_digest']}, "
                          f"{len(doc['files'])} files")
        return
    result = render_mod.render(lock, minor, out, arch=Arch(arch))
    output.emit(result.to_dict(), app.output, columns=["root", "kubernetes_version", "arch", "element_tree_digest"])


@click.command()
@click.option("--k8s", "minor", required=True, metavar="1.NN", help="Kubernetes minor, as pinned in the lockfile.")
@options.variant_list()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Build directory to create (must not exist).  [default: build/images/k8s-<version>-<time>]")
@options.cache_dir()
@click.option("--dib-cache", type=click.Path(file_okay=False, path_type=Path), envvar=build_mod.ENV_DIB_CACHE,
              help="debootstrap tarball and apt archive cache.  [default: $XDG_CACHE_HOME/nodeforge/dib]")
@options.work_dir()
@options.sources()
@click.option("--offline", is_flag=True, help="Never download: every pinned artifact must be in the cache.")
@click.option("--keep-work", is_flag=True, help="Keep the scratch directory (for debugging).")
@click.option("--rebuild-package-base", is_flag=True,
              help="Build the package base (base OS + element packages) afresh even if it is cached.")
@click.option("--rendered", type=click.Path(file_okay=False, exists=True, path_type=Path), metavar="DIR",
              help="Build from this element tree ('image render --out DIR' for the same lockfile, minor and "
                   "architecture; refused if either moved since).  [default: render into the work directory]")
@_lockfile_option
@options.dry_run
@options.pass_app
def build(app, minor, variants, out, cache_dir, dib_cache, work_dir, sources_file, offline, keep_work,
          rebuild_package_base, rendered, lockfile_path, dry_run):
    """Build the VM (qcow2) and bare-metal (raw, UEFI) images from one root filesystem.

    Fails before the long build on an unknown minor, a missing or corrupt
    artifact, a missing host tool or too little disk. Writes images,
    SHA256SUMS, SHA512SUMS, manifest.json, sbom.cdx.json and build.log into one
    new directory, atomically. The base OS with every element package is cached
    as a package base (under --dib-cache, keyed by its inputs) and reused while
    they are unchanged, e.g. across Kubernetes patch bumps.

    --dry-run runs every preflight check and prints the plan, writing nothing:
    the directories, each artifact cached or to download, the package base key
    (cached or to build), the images; exit 0 when the build would start."""
    req = build_mod.BuildRequest(
        minor=minor, lockfile_path=lockfile_path, sources_file=sources_file, variants=variants, out=out,
        cache_dir=cache_dir, dib_cache=dib_cache, work_dir=work_dir, offline=offline, keep_work=keep_work,
        rebuild_package_base=rebuild_package_base, rendered=rendered, stream=(lambda line: log.say(line, level="info", prefix=False)))
    if dry_run:
        bp = build_mod.plan(req)
        doc = {**bp.to_dict(build_mod.package_base_plan(bp)), "dry_run": True}
        downloads = sum(not a["cached"] for a in doc["artifacts"])
        output.emit(doc, app.output, rows=_build_plan_rows(doc), columns=["what", "action", "where"],
                    title=f"plan (dry run): image build, Kubernetes {doc['kubernetes']} {doc['arch']}: "
                          f"{len(doc['artifacts']) - downloads} artifact(s) cached, {downloads} to download; "
                          f"package base {doc['package_base']['action']}")
        return
    result = build_mod.build(req)
    output.emit(result.to_dict(), app.output, columns=["out", "kubernetes", "images", "packages", "package_base", "seconds"])


def _build_plan_rows(doc: dict) -> list[dict]:
    """The build plan as table rows: what, what the build would do with it, where."""
    base = doc["package_base"]
    return [
        {"what": "output directory", "action": "create", "where": doc["out"]},
        {"what": "work directory", "action": "scratch" + ("" if doc["keep_work"] else ", removed afterwards"),
         "where": doc["work_dir"]},
        {"what": "diskimage-builder cache", "action": "use", "where": doc["dib_cache"]},
        {"what": "element tree", "action": "use" if doc["rendered"] else "render into the work directory",
         "where": doc["rendered"] or ""},
        *({"what": f"artifact {a['name']}", "action": a["action"], "where": a["url"] or a["path"]}
          for a in doc["artifacts"]),
        {"what": f"package base {base['key'][:16]}", "action": base["action"], "where": base["path"]},
        *({"what": f"image {variant}", "action": "write", "where": name} for variant, name in doc["images"].items()),
    ]


COMMANDS = (render, build)
