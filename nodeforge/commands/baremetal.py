"""``nodeforge baremetal``: validate, pre-flight and enroll server batches into Ironic."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.errors import ExitCode, UsageError
from nodeforge.ironic import batch
from nodeforge.ironic import enroll as enroll_mod
from nodeforge.ironic import inventory as inv_mod
from nodeforge.base import secrets as secrets_mod


def _inventory_options(fn):
    fn = click.option("--secrets-dir", type=click.Path(file_okay=False, path_type=Path),
                      envvar=secrets_mod.SECRETS_DIR_ENV,
                      help="A directory file: credentials may point into besides the inventory's own "
                           "(symlinks resolved).  [env var: NODEFORGE_SECRETS_DIR]")(fn)
    fn = click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path),
                      help="Fernet key for fernet: credentials: a regular file of at most 4 KiB (a pipe or "
                           "FIFO is refused; set $NODEFORGE_INVENTORY_KEY instead).  "
                           "[default: $NODEFORGE_INVENTORY_KEY(_FILE)]")(fn)
    fn = click.option("--allow-plaintext-secrets", is_flag=True,
                      help="Accept passwords written in the inventory itself (refused by default).")(fn)
    fn = click.option("--format", "fmt", type=click.Choice([f.value for f in inv_mod.Format]),
                      help="Inventory format.  [default: detected]")(fn)
    fn = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))(fn)
    return fn


def _load(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir):
    # An invalid inventory raises InventoryError; with --output json|yaml the
    # CLI's error document carries its issues (valid: false, file, issues).
    return inv_mod.load(file, fmt=fmt, allow_plaintext=allow_plaintext_secrets, key_file=key_file,
                        secrets_dir=secrets_dir)


@click.group()
def baremetal():
    """Bare-metal enrollment into Ironic (system-scoped credentials: --os-cloud nodeforge-dev-system)."""


@baremetal.command()
@_inventory_options
@options.pass_app
def validate(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir):
    """Validate a whole inventory (every problem with file, line/row and field); writes nothing."""
    inv = _load(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir)
    rows = [{"name": n.name, "driver": n.driver, "bmc": n.bmc.address, "macs": " ".join(n.macs),
             "resource_class": n.resource_class, "cleaning": n.cleaning.mode.value, "inspect": n.inspect}
            for n in inv.nodes]
    output.emit({"valid": True, "file": str(file), "format": inv.format.value,
                 "nodes": [n.to_dict() for n in inv.nodes]}, app.output, rows=rows,
                title=f"{file}: {len(rows)} nodes ({inv.format.value})")


@baremetal.command()
@_inventory_options
@click.option("--jobs", type=click.IntRange(1, 128), default=16, show_default=True, help="BMCs checked at once.")
@options.pass_app
def preflight(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir, jobs):
    """Check every BMC in parallel (reachable, credentials, TLS, system id, power state)."""
    inv = _load(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir)
    checks, rep = batch.preflight(inv, jobs=jobs)
    output.emit({**rep.to_dict(), "checks": [c.to_dict() for c in checks]}, app.output,
                rows=[c.to_dict() for c in checks], columns=["name", "bmc", "ok", "failure", "power_state", "detail"])
    click.get_current_context().exit(rep.exit_code())


@baremetal.command()
@_inventory_options
@options.dry_run
@click.option("--jobs", type=click.IntRange(1, 64), default=enroll_mod.DEFAULT_JOBS, show_default=True,
              help="Most create/update calls at once; fewer while Ironic answers slowly or with 409/503 "
                   "(adaptive pacing).")
@click.option("--no-lifecycle", is_flag=True, help="Only create/update nodes; leave them in their state.")
@click.option("--concurrency", type=click.IntRange(1, 500), default=100, show_default=True,
              help="Most nodes at once in each of inspect, clean and provide (manage: 100).")
@click.option("--max-recoveries", type=click.IntRange(0, 10), default=1, show_default=True,
              help="Retries of a node in 'clean failed'/'inspect failed' before it is parked in maintenance.")
@click.option("--macs-from-bmc/--no-macs-from-bmc", default=True, show_default=True,
              help="Redfish nodes listed without MACs get ports for the MACs their BMC reports.")
@click.option("--timeout", type=float, default=3600, show_default=True, help="Whole-run timeout, seconds.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report: .json, or .xml for JUnit.")
@options.pass_app
def enroll(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir, dry_run, jobs, no_lifecycle, concurrency,
           max_recoveries, macs_from_bmc, timeout, report_path):
    """Create missing nodes, update drifted ones, then manage -> (inspect) -> clean -> provide.

    A second run of the same file makes no write call. Exit: 0 all nodes good,
    3 some failed, 1 none succeeded."""
    inv = _load(app, file, fmt, allow_plaintext_secrets, key_file, secrets_dir)
    settings = batch.Settings(jobs=jobs, lifecycle=not no_lifecycle, concurrency=concurrency,
                              max_recoveries=max_recoveries, timeout=timeout, macs_from_bmc=macs_from_bmc)
    prov = batch.provisioner(app.connect(), settings)
    start = time.monotonic()
    plan = batch.plan(inv, prov, settings)
    if dry_run:
        output.emit(plan.to_dict(), app.output, rows=batch.plan_rows(plan), title=f"plan: {plan.counts()}")
        return
    with _progress(app) as progress:
        report = batch.apply(plan, inv, prov, settings, progress=progress, started=start)
    if report_path:
        report.write(report_path)
    output.emit(report.to_dict(), app.output, rows=report.rows(), title=batch.title(report))
    click.get_current_context().exit(report.exit_code())


def _progress(app):
    """Nodes per state on standard error while enroll runs (in place on a terminal, plain lines otherwise)."""
    from nodeforge.ironic.progress import Progress

    return Progress()


@baremetal.command("keygen")
@click.argument("key_file", type=click.Path(dir_okay=False, path_type=Path))
@options.dry_run
@options.pass_app
def keygen(app, key_file, dry_run):
    """Write a new Fernet key (mode 0600) for fernet: credentials; keep it out of the inventory.

    --dry-run checks that KEY_FILE can be written (absent, its directory there) and writes nothing."""
    if key_file.exists():
        raise UsageError(detail=f"{key_file} exists; not overwriting a key")
    if dry_run:
        if not key_file.parent.is_dir():
            raise UsageError(detail=f"cannot write {key_file}: directory {key_file.parent} does not exist")
        if not os.access(key_file.parent, os.W_OK):
            raise UsageError(detail=f"cannot write {key_file}: {os.strerror(13)}")
        click.echo(f"would write {key_file} (mode 0600)", err=True)
        if app.output != "table":
            output.emit({"key_file": str(key_file), "mode": "0600", "dry_run": True}, app.output)
        return
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileNotFoundError:
        raise UsageError(detail=f"cannot write {key_file}: directory {key_file.parent} does not exist") from None
    except OSError as exc:
        raise UsageError(detail=f"cannot write {key_file}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets_mod.generate_key() + b"\n")
    click.echo(f"wrote {key_file}", err=True)
    if app.output != "table":
        output.emit({"key_file": str(key_file), "mode": "0600"}, app.output)


@baremetal.command("encrypt")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path))
@options.pass_app
def encrypt(app, key_file):
    """Read a password on stdin, print it as fernet:TOKEN for the inventory.

    The password is the whole of standard input less one trailing newline
    (LF or CRLF); a password of several lines, or of more than 4 KiB (standard
    input is read no further), is refused."""
    key = secrets_mod.load_key(key_file)
    if key is None:
        raise UsageError(detail=f"no key: pass --key-file or set ${secrets_mod.KEY_ENV}")
    try:
        raw = secrets_mod.read_stream(sys.stdin.buffer, what="the password on stdin")
    except secrets_mod.SecretRefError as exc:
        raise UsageError(detail=str(exc)) from None
    try:
        value = secrets_mod.strip_newline(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(detail="the password on stdin is not UTF-8 text") from None
    if not value:
        raise UsageError(detail="empty password on stdin")
    if "\n" in value or "\r" in value:
        raise UsageError(detail="the password on stdin has several lines; a BMC password is one line "
                                "(only one trailing newline is dropped)")
    token = secrets_mod.encrypt(value, key)
    if app.output == "table":
        click.echo(token)
    else:  # the inventory reference in a document, so stdout stays JSON/YAML
        output.emit({"reference": token}, app.output)
    return ExitCode.OK


from nodeforge.commands.baremetal_classify import classify as _classify  # noqa: E402 - registered here
baremetal.add_command(_classify)

from nodeforge.commands.baremetal_audit import audit as _audit  # noqa: E402 - registered here
baremetal.add_command(_audit)

from nodeforge.commands.baremetal_baseline import baseline as _baseline  # noqa: E402 - registered here
baremetal.add_command(_baseline)
