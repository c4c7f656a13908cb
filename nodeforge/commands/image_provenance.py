"""``nodeforge image provenance IMAGE``: check an image's signed SLSA provenance (docs/publishing.md,
"Provenance"). Thin: the checks are :func:`nodeforge.publish.provenance.verify`.

Exit 0: valid; 1: invalid (the message names the check that failed: missing provenance,
provenance digest, envelope, signature, statement, subject digest, build id); 2: usage.
"""

from __future__ import annotations

from pathlib import Path

import click

from nodeforge import output
from nodeforge.commands import options
from nodeforge.publish import provenance


@click.command("provenance")
@click.argument("image")
@click.option("--cert", "cert_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Check the signature against this PEM certificate (pins the publishing key).")
@click.option("--cert-id", metavar="ID",
              help="Check against this Barbican certificate.  [default: the image's img_signature_certificate_uuid]")
@click.option("--download", is_flag=True,
              help="Also download the image data and hash it (slow; by default the subject is compared with the "
                   "os_hash_value Glance computed on upload).")
@options.pass_app
def provenance_cmd(app, image, cert_path, cert_id, download):
    """Fetch IMAGE's provenance from Glance, check its signature with the publishing certificate
    and that its subject is the image data Glance serves; print a summary."""
    if cert_path and cert_id:
        raise click.UsageError("--cert and --cert-id are alternatives")
    report = provenance.verify(app.connect(), image, cert_path=cert_path, cert_id=cert_id, download=download)
    if app.output == "table":
        rows = []
        for key, value in report.items():
            if key == "subjects":
                value = ", ".join(f"{s['name']} sha256:{s['sha256'][:16]}..." for s in value)
            elif key == "dependencies":
                value = ", ".join(f"{k} {n}" for k, n in value.items())
            elif key == "download":
                value = f"{value['bytes']} bytes in {value['seconds']} s" if value else "no"
            rows.append({"field": key, "value": value})
        output.emit(report, app.output, rows=rows, columns=["field", "value"], title="provenance valid")
    else:
        output.emit(report, app.output)


COMMANDS = (provenance_cmd,)
