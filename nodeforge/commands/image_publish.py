"""``nodeforge image publish|manifest|promote|list|show|signing-cert``: Glance
publishing and the approved-image catalog (docs/publishing.md).

Thin commands: each parses options and calls nodeforge.publish.glance,
.signing or .catalog. They are attached to the ``image`` group in
nodeforge/commands/image.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodeforge import output
from nodeforge.canary import policy as canary_policy
from nodeforge.commands import image_canary, options
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance, retention, signing

VARIANTS = click.Choice(sorted(builddir.VARIANT_FORMATS))


def _retention_option(fn):
    return click.option("--retention", "retention_path", type=click.Path(dir_okay=False, path_type=Path),
                        default=retention.DEFAULT_PATH, show_default=True, envvar="NODEFORGE_IMAGE_RETENTION",
                        help="Retention policy and image metadata defaults.")(fn)


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@options.variants()
@options.signing
@click.option("--sign-hash", type=click.Choice(list(signing.HASH_METHODS)), default="SHA-256", show_default=True,
              help="Hash the signature covers.")
@options.scope(f"Ownership scope the images get (nodeforge_scope).  [default: the manifest's 'scope' "
               f"(the lockfile's), else '{glance.DEFAULT_SCOPE}']")
@_retention_option
@options.dry_run
@options.pass_app
def publish(app, build_dir, variants, sign_key, passphrase_ref, sign_cert_id, sign_hash, scope, retention_path,
            dry_run):
    """Upload a build's verified images to Glance as candidates, with manifest and verify report.

    Refuses, before uploading anything, any variant whose verify.json does
    not pass for this build, manifest and image bytes (and says why), and
    any variant of this build already in Glance under another scope. Streams
    each image from disk, then checks Glance's os_hash_value against
    SHA512SUMS (deletes the image on a mismatch). Publishing the same build
    again uploads nothing; images left in flight by an interrupted run are
    removed first."""
    options.check_signing(sign_key, passphrase_ref, sign_cert_id)
    build = builddir.load(build_dir)
    policy = retention.load(retention_path)
    conn = app.connect()
    sign = None
    if sign_key:
        signer = signing.load_signer(sign_key, passphrase_ref, hash_method=sign_hash)
        signing.check_key_matches(signer, signing.fetch_certificate(conn, sign_cert_id), sign_cert_id)
        sign = glance.SignOptions(signer, sign_cert_id)
    publisher = glance.Publisher(conn, policy, sign=sign, scope=scope)
    results = (publisher.plan(build, variants or None).results if dry_run
               else publisher.publish(build, variants or None))
    output.emit([r.to_dict() for r in results], app.output,
                columns=["variant", "action", "image_id", "scope", "verify", "signed", "size", "seconds",
                         "hash_value"])


@click.command("manifest")
@click.argument("image")
@options.pass_app
def manifest_cmd(app, image):
    """Print an image's package manifest (verified against its recorded sha256)."""
    conn = app.connect()
    data = glance.download_manifest(conn, glance.find_image(conn, image))
    sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")


@click.command()
@click.argument("image")
@options.scope("The scope the image must belong to; an image published before scopes (no nodeforge_scope) "
               "is taken into it.  [default: the image's own scope]")
@_retention_option
@image_canary.policy_option
@options.dry_run
@options.pass_app
def promote(app, image, scope, retention_path, policy_path, dry_run):
    """Approve a verified image and retire older approved ones of its group and scope.

    The image's verify report (stored beside it by publish) is downloaded and
    checked again against the image in Glance; anything but a pass for these
    bytes, this build and this manifest is refused. Older approved images of
    the same Kubernetes minor, variant, OS and ownership scope are kept
    listed, hidden, deactivated or deleted per the retention policy; images
    of other scopes, and legacy ones without a scope, are never touched.
    A bare-metal image also needs a passing canary deploy ('image canary',
    its report checked the same way) on each resource class the canary
    policy requires; without a policy file none is asked for."""
    policy = retention.load(retention_path)
    canary = canary_policy.load(policy_path)
    conn = app.connect()
    plan = catalog.plan(conn, image, policy, scope=scope, canary_classes=tuple(canary.required_classes()))
    steps = plan.steps if dry_run else catalog.apply(conn, plan)
    output.emit([s.to_dict() for s in steps], app.output, columns=["action", "image_id", "name", "scope", "reason"],
                title="plan (dry run)" if dry_run else None)


@click.command("list")
@click.option("--approved", is_flag=True, help="Only approved images.")
@click.option("--k8s", metavar="1.NN[.P]", help="Only this Kubernetes minor (or exact version).")
@options.variant()
@click.option("--all", "include_hidden", is_flag=True, help="Include hidden (superseded) images.")
@options.scope("Only images of this ownership scope (nodeforge_scope).  [default: every scope, and legacy "
               "images without one]")
@options.pass_app
def list_cmd(app, approved, k8s, variant, include_hidden, scope):
    """nodeforge images in Glance: IDs for templates and the facts behind them, and which
    Magnum templates and clusters use each (used_by)."""
    rows = catalog.list_catalog(app.connect(), approved=approved, k8s=k8s, variant=variant,
                                include_hidden=include_hidden, scope=scope)
    table = [dict(r, used_by=", ".join(r["used_by"]) if r["used_by"] is not None else "(no Magnum)")
             for r in rows]
    output.emit(rows, app.output, rows=table,
                columns=["id", "k8s", "variant", "os", "scope", "build_date", "state", "verify", "signed",
                         "visibility", "used_by"])


@click.command()
@click.argument("image")
@options.pass_app
def show(app, image):
    """Everything nodeforge knows about one image (ID or unique name)."""
    facts = catalog.show(app.connect(), image)
    if app.output == "table":
        rows = [{"field": k, "value": (", ".join(v) or "nothing" if k == "used_by" and v is not None else
                                       "(no Magnum)" if k == "used_by" else v)}
                for k, v in facts.items() if k != "properties"]
        output.emit(facts, app.output, rows=rows, columns=["field", "value"])
    else:
        output.emit(facts, app.output)


@click.group("signing-cert")
def signing_cert():
    """Image-signing certificates in Barbican (what Glance verifies against)."""


@signing_cert.command("upload")
@click.argument("cert", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Secret name.  [default: nodeforge-image-signing-<fingerprint>]")
@options.dry_run
@options.pass_app
def signing_cert_upload(app, cert, name, dry_run):
    """Store a PEM certificate in Barbican; prints the ID for --sign-cert-id.

    --dry-run checks the certificate and prints what would be stored (id: null)."""
    plan = signing.plan_certificate(cert, name)
    info = plan.info() if dry_run else signing.apply_certificate(app.connect(), plan)
    output.emit(info.to_dict(), app.output, rows=[{"field": k, "value": v} for k, v in info.to_dict().items()],
                columns=["field", "value"], title="plan (dry run)" if dry_run else None)


COMMANDS = (publish, manifest_cmd, promote, list_cmd, show, signing_cert)
