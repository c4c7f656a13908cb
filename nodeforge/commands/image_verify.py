"""``nodeforge image verify`` (added to the ``image`` group in image.py); docs/boot-verification.md."""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import log, output
from nodeforge.commands import options
from nodeforge.imageverify import builddir
from nodeforge.imageverify import boottest


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@options.variants()
@click.option("--timeout", type=click.FloatRange(min=10), default=boottest.DEFAULT_TIMEOUT, show_default=True,
              help="Seconds a boot may take until the guest reports; then QEMU is stopped and the variant fails.")
@click.option("--accel", type=click.Choice(["auto", "kvm", "tcg"]), default=None,
              help="auto: KVM once a probe guest has run under it on this host (cached per host boot), else "
                   "TCG; a KVM boot that stalls is booted again under TCG. kvm or tcg force one.  "
                   f"[default: ${boottest.ENV_ACCEL}, else auto]")
@options.cache_dir("Artifact cache (for the pinned crictl/containerd archives' file digests).  "
                   "[default: $XDG_CACHE_HOME/nodeforge/artifacts]")
@options.work_dir("Scratch space for overlays and seeds.  [default: $TMPDIR]")
@click.option("--keep-work", is_flag=True, help="Keep the scratch directory (overlay, seed) for debugging.")
@click.option("--parallel/--sequential", default=True, show_default=True,
              help="Boot the variants at the same time, the CPUs shared out (one vCPU each on 2 CPUs), or "
                   "one after the other with two vCPUs each. Both variants took 84-85 s side by side "
                   "against 110-112 s one after the other under TCG on 2 CPUs. One CPU: one after the other.")
@options.dry_run
@options.pass_app
def verify(app, build_dir, variants, timeout, accel, cache_dir, work_dir, keep_work, parallel, dry_run):
    """Boot each image of a build under QEMU and check it against its manifest and the hardening profile.

    Refuses a build whose SHA256SUMS/SHA512SUMS do not match. Boots a
    throwaway overlay (the image is never written), talks only over serial
    ports, writes verify.json and verify-<variant>-console.log into BUILD_DIR,
    and exits non-zero if any check fails: 'image promote' refuses builds that
    did not pass. --dry-run checks the same and prints the variants it would
    boot, the accelerator and the checks; it boots and writes nothing."""
    req = boottest.VerifyRequest(build_dir=build_dir, variants=tuple(variants), timeout=timeout, accel=accel,
                                 cache_dir=cache_dir, work_dir=work_dir, keep_work=keep_work,
                                 parallel=parallel,
                                 stream=lambda line: log.say(line, level="info", prefix=False))
    if dry_run:
        _emit_plan(app, boottest.plan(req))
        return
    try:
        results = boottest.verify(req)
    except boottest.BootError:
        _emit(app, build_dir, variants)
        raise
    _emit(app, build_dir, [r.variant for r in results])
    failed = [f"{r.variant}: {', '.join(c['id'] for c in r.checks if not c['passed'])}"
              for r in results if not r.passed]
    if failed:
        raise boottest.VerifyFailed(detail="; ".join(failed),
                                    hint=f"details in {build_dir / builddir.VERIFY} and the console logs beside it")


def _emit_plan(app, plan: boottest.VerifyPlan) -> None:
    checks = len(plan.checks) if plan.controls is not None else f"{len(plan.checks) - 1} + the image's controls"
    rows = [v.to_dict() | {"image": v.image.name, "accel": plan.accel, "vcpus": plan.smp,
                           "timeout": f"{plan.req.timeout:.0f} s", "checks": checks} for v in plan.variants]
    output.emit(plan, app.output, rows=rows,
                columns=["variant", "image", "firmware", "seed", "accel", "vcpus", "timeout", "checks"],
                title=f"plan (dry run): {plan.build.build_id}, {'in parallel' if plan.parallel else 'one at a time'}")
    if app.output != "table":
        return
    lines = [f"accel: {plan.accel} ({plan.accel_note})", f"checks: {', '.join(plan.checks)}",
             f"controls: {plan.controls_source}"]
    lines += [_archive_line(component, a) for component, a in plan.archives.items()]
    lines.append(f"would write: {plan.report}, " + ", ".join(f"{v.console_log.name}, {v.guest_report.name}"
                                                             for v in plan.variants))
    click.echo("\n".join(lines))


def _archive_line(component: str, a: dict) -> str:
    """Where the expected digest of a pinned archive's member comes from (boottest.archives_in_cache)."""
    head = f"{component}: {a['member']} in the pinned archive {a['sha256'][:16]}...: "
    if a["source"] == "manifest":
        return head + f"expected sha256 {a['member_sha256'][:16]}... {a['note']}"
    if a["in_cache"]:
        return head + f"read from the archive in the cache ({a['note']})"
    return head + (f"the archive is not in the cache: artifact-{component} would fail ({a['note']}); run "
                   "'nodeforge release prefetch' or pass --cache-dir")


def _emit(app, build_dir: Path, variants) -> None:
    try:
        doc = boottest.read_report(build_dir)
    except FileNotFoundError:
        return
    if variants:
        doc["variants"] = {k: v for k, v in doc["variants"].items() if k in variants}
    rows = []
    for variant, section in doc["variants"].items():
        for c in section.get("checks", []):
            bad = [i for i in c["items"] if not i["passed"]]
            shown = bad or c["items"][:1]
            rows.append({"variant": variant, "check": c["id"], "result": "pass" if c["passed"] else "FAIL",
                         "expected": "; ".join(_short(i["what"], i["expected"]) for i in shown),
                         "observed": "; ".join(_short(i["what"], i["observed"]) for i in shown),
                         "title": c["title"]})
    output.emit(doc, app.output, rows=rows, columns=["variant", "check", "result", "title", "expected", "observed"])


def _short(what: str, value) -> str:
    text = value if isinstance(value, str) else output.dumps(value, "json").replace("\n", "").replace("  ", "")
    text = f"{what}: {text}" if len(what) < 48 else text
    return text if len(text) <= 90 else text[:87] + "..."


COMMANDS = (verify,)
