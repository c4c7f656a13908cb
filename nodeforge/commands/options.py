"""Click options defined once and shared by every command (pip-tools style)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from nodeforge.output import FORMATS


@dataclasses.dataclass
class AppContext:
    os_cloud: str | None = None
    output: str = "table"
    verbose: int = 0
    log_format: str = "text"

    def connect(self):
        """An openstacksdk connection for ``--os-cloud`` (clouds.yaml rules)."""
        from nodeforge import cloud, log

        if not self.os_cloud:        # openstacksdk takes the only cloud in clouds.yaml: say which, and from where
            name, source = cloud.cloud_named([], os.environ)
            if source.startswith("the only cloud in "):
                log.say(f"using cloud '{name}', {source} (OS_CLOUD and --os-cloud are not set)", level="info")
        return cloud.connect(self.os_cloud)


pass_app = click.make_pass_decorator(AppContext, ensure=True)

os_cloud = click.option(
    "--os-cloud",
    default=lambda: os.environ.get("OS_CLOUD"),
    show_default="$OS_CLOUD",
    help="Cloud name in clouds.yaml (as openstacksdk resolves it).",
)
output = click.option(
    "--output", "-o", type=click.Choice(FORMATS), default="table", show_default=True,
    help="Human table, or JSON/YAML for scripts.",
)
verbose = click.option("-v", "--verbose", count=True, help="More logging (-vv for library debug).")
log_format = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Log line format on stderr.",
)
dry_run = click.option("--dry-run", is_flag=True, help="Show the plan; write nothing.")
report_file = click.option(
    "--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the result as JSON to this file (what -o json prints; e.g. for 'report html'), "
         "whatever -o shows.")


def write_report(data, path: Path | None) -> None:
    """The document of ``--report FILE``: the same JSON ``-o json`` prints (secrets masked by
    field), replaced atomically, so a reader never sees half a report."""
    if path is not None:
        from nodeforge.base.fs import atomic_write
        from nodeforge.output import dumps

        atomic_write(path, dumps(data, "json").rstrip("\n") + "\n")
baremetal_cloud = click.option(
    "--baremetal-cloud", default=lambda: os.environ.get("NODEFORGE_BAREMETAL_CLOUD"),
    show_default="$NODEFORGE_BAREMETAL_CLOUD, else --os-cloud",
    help="Cloud for Ironic reads (system scope under secure RBAC: nodeforge-dev-system on the local cloud); "
         "Nova and Glance use --os-cloud.",
)


def _override(field):
    def callback(ctx: click.Context, param, value):
        if value is not None and value != () and value != 0:
            app = ctx.find_object(AppContext)
            if app is not None:
                setattr(app, field, value)
                if field in ("verbose", "log_format"):
                    from nodeforge import log

                    log.setup(app.verbose, app.log_format)
        return value

    return callback


def _leaf_params() -> list[click.Parameter]:
    """The global options again, for placing after the subcommand
    (``nodeforge devcloud status --output json``); unset ones change nothing."""
    return [
        click.Option(["--os-cloud"], default=None, expose_value=False, callback=_override("os_cloud"),
                     help="Cloud name in clouds.yaml (overrides the global option)."),
        click.Option(["--output", "-o"], type=click.Choice(FORMATS), default=None, expose_value=False,
                     callback=_override("output"), help="table, json or yaml."),
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_override("verbose"),
                     help="More logging."),
        click.Option(["--log-format"], type=click.Choice(["text", "json"]), default=None, expose_value=False,
                     callback=_override("log_format"), help="Log line format on stderr."),
    ]


def add_common_options(command: click.Command) -> None:
    """Give every leaf command the global options, so they work on either side
    of the subcommand name."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_common_options(sub)
        return
    existing = {opt for p in command.params for opt in getattr(p, "opts", [])}
    for param in _leaf_params():
        if not existing.intersection(param.opts):
            command.params.append(param)


def _check_scope(ctx, param, value):
    """--scope: the shared ownership-scope rule (a bad one exits 2 before any API call)."""
    if value is None:
        return None
    from nodeforge import scope as C

    problem = C.scope_problem(value)
    if problem:
        raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


def scope(help_text: str):
    """``--scope SCOPE``: an ownership scope (images, nodes), checked by the shared rule."""
    return click.option("--scope", "scope", metavar="SCOPE", callback=_check_scope, help=help_text)


# -- options shared by several commands: one definition each (same names, envvars and defaults
#    everywhere; the help, where a command says more about its use, is the command's).

CACHE_DIR_ENV = "NODEFORGE_CACHE_DIR"
WORK_DIR_ENV = "NODEFORGE_WORK_DIR"
LOCKFILE_ENV = "NODEFORGE_LOCKFILE"
SOURCES_ENV = "NODEFORGE_SOURCES"


def cache_dir(help: str = "Artifact cache.  [default: $XDG_CACHE_HOME/nodeforge/artifacts]"):
    """``--cache-dir DIR`` ($NODEFORGE_CACHE_DIR): the artifact cache (nodeforge/pins/cache.py)."""
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar=CACHE_DIR_ENV,
                        help=help)


def work_dir(help: str = "Scratch space (several GiB, removed afterwards).  [default: $TMPDIR]"):
    """``--work-dir DIR`` ($NODEFORGE_WORK_DIR): scratch space for build and verify."""
    return click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), envvar=WORK_DIR_ENV,
                        help=help)


def lockfile(help: str = "The version lockfile.", default=None):
    """``--lockfile FILE`` ($NODEFORGE_LOCKFILE, passed as ``lockfile_path``): the version lockfile.
    ``default``: a path or a callable (default: :data:`nodeforge.pins.lockfile.DEFAULT_PATH`)."""
    if default is None:
        from nodeforge.pins import lockfile as lockfile_mod

        default = lockfile_mod.DEFAULT_PATH
    return click.option("--lockfile", "lockfile_path", type=click.Path(dir_okay=False, path_type=Path),
                        envvar=LOCKFILE_ENV, default=default, show_default="manifests/versions.yaml", help=help)


def sources(help: str = "Artifact mirror settings.  [default: sources.yaml beside the lockfile]"):
    """``--sources FILE`` ($NODEFORGE_SOURCES, passed as ``sources_file``): mirror settings."""
    return click.option("--sources", "sources_file", type=click.Path(dir_okay=False, path_type=Path),
                        envvar=SOURCES_ENV, help=help)


def variants(help: str = "Only this variant (repeatable).  [default: every image in the build]"):
    """``--variant NAME`` (repeatable, passed as ``variants``): image variants of a build directory."""
    from nodeforge.imageverify import builddir

    return click.option("--variant", "variants", multiple=True, type=click.Choice(sorted(builddir.VARIANT_FORMATS)),
                        help=help)


def variant(help: str = "Only this variant."):
    """``--variant NAME`` (one, passed as ``variant``): an image variant (``image list``)."""
    from nodeforge.imageverify import builddir

    return click.option("--variant", type=click.Choice(sorted(builddir.VARIANT_FORMATS)), help=help)


def _variant_list(ctx, param, value: str) -> tuple[str, ...]:
    from nodeforge.imagebuild import render

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in names if v not in render.VARIANTS]
    if unknown or not names:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(render.VARIANTS)}")
    return names


def variant_list(help: str = "Comma-separated variants to build from the one root filesystem."):
    """``--variant vm,baremetal`` (comma-separated, passed as ``variants``; default every variant):
    the variants a build makes (``image build``)."""
    from nodeforge.imagebuild import render

    return click.option("--variant", "variants", default=",".join(render.VARIANTS), show_default=True,
                        callback=_variant_list, help=help)


def signing(fn):
    """--sign-key, --sign-key-passphrase and --sign-cert-id (the publishing key; passed to the
    command as ``sign_key``, ``passphrase_ref``, ``sign_cert_id``)."""
    fn = click.option("--sign-cert-id", metavar="ID", help="Barbican secret ID of the key's certificate "
                                                           "(from 'nodeforge image signing-cert upload').")(fn)
    fn = click.option("--sign-key-passphrase", "passphrase_ref", metavar="REF",
                      help="Where the key's passphrase is: env:VAR or file:PATH (never the passphrase itself).")(fn)
    return click.option("--sign-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help="Private key (PEM/DER, RSA or EC P-384/P-521) to sign the image data and its "
                             "provenance with.")(fn)


def check_signing(sign_key, passphrase_ref, sign_cert_id) -> None:
    if bool(sign_key) != bool(sign_cert_id):
        raise click.UsageError("--sign-key and --sign-cert-id go together")
    if passphrase_ref and not sign_key:
        raise click.UsageError("--sign-key-passphrase needs --sign-key")
