"""``nodeforge image agent-ramdisk`` (added to the ``image`` group in image.py); docs/agent-ramdisk.md."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.imagebuild import ramdisk
from nodeforge.publish import agent_images


@click.command("agent-ramdisk")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Copy ironic-agent.kernel, ironic-agent.initramfs, SHA256SUMS and ramdisk.json here.  "
                   "[default: leave them in the cache only]")
@options.work_dir("Scratch space for diskimage-builder (about 2 GiB).  [default: $TMPDIR]")
@click.option("--publish", is_flag=True,
              help="Upload the kernel and initramfs to Glance (public images, once per ramdisk) and print "
                   "their IDs: the nodes' deploy_kernel and deploy_ramdisk.")
@options.scope("Ownership scope of the Glance images.  [default: agent-ramdisk]")
@options.dry_run
@options.pass_app
def agent_ramdisk(app, output_dir, work_dir, publish, scope, dry_run):
    """Build Ironic's deploy ramdisk (ironic-python-agent on Debian) from pinned inputs.

    IPA and every Python dependency come from manifests/agent-ramdisk.lock.txt
    (versions and sha256 hashes), installed offline in the chroot; the result
    is cached by a digest of every input, so a second call costs a copy.
    --publish uploads it to Glance (once: found again by the digest).
    --dry-run says whether it would build or reuse (and upload), and the digest."""
    p = ramdisk.plan(output_dir)
    scope = scope or ramdisk.SCOPE
    if dry_run:
        doc = p.to_dict()
        if publish:
            doc["glance"] = ("would look up" if not p.cached else
                             [i.to_dict() for i in agent_images.plan(app.connect(), ramdisk.record(p),
                                                                     ramdisk.glance_files(p), scope)])
        output.emit(doc, app.output, rows=[p.to_dict()], columns=["action", "digest", "ipa_version", "cache"],
                    title="plan (dry run)")
        return
    record = ramdisk.build(p, work_dir=work_dir, log=lambda line: log.say(line, level="info", prefix=False))
    if publish:
        conn = app.connect()
        items = agent_images.apply(conn, record, agent_images.plan(conn, record, ramdisk.glance_files(p), scope),
                                   scope)
        output.emit({**record, "cache": str(p.cache), "glance": [i.to_dict() for i in items],
                     "driver_info": agent_images.driver_info(items)}, app.output,
                    rows=[i.to_dict() for i in items], columns=["driver_info", "image_id", "action", "name", "sha256"])
        return
    rows = [{"file": name, "bytes": f["bytes"], "sha256": f["sha256"], "where": str(output_dir or p.cache)}
            for name, f in sorted(record["files"].items())]
    output.emit({**record, "cache": str(p.cache), "out": str(output_dir) if output_dir else None}, app.output,
                rows=rows, columns=["file", "bytes", "sha256", "where"])


COMMANDS = (agent_ramdisk,)
