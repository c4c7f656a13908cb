"""The ``nodeforge`` command: global options and the command groups.

This module only wires things together. Each group lives in
``nodeforge/commands/<area>.py`` and calls the library; no logic here.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from nodeforge import __version__, log, output
from nodeforge.commands import options
from nodeforge.errors import ExitCode, NodeforgeError
from nodeforge.redact import scrub


# The command groups: name -> the module defining it (nodeforge/commands/<name>.py).
GROUPS = {name: f"nodeforge.commands.{name}" for name in
          ("devcloud", "release", "image", "baremetal", "flavor", "template", "pipeline", "report")}
# What ``nodeforge --help`` lists for each group without importing it: the first paragraph of the
# group's docstring (tests/test_cli_errors.py holds them equal).
SUMMARIES = {
    "baremetal": "Bare-metal enrollment into Ironic (system-scoped credentials: --os-cloud nodeforge-dev-system).",
    "devcloud": "Run a real local OpenStack (Keystone, Glance, Nova API, Placement, Barbican, Ironic, Neutron, "
                "Magnum with RabbitMQ) plus Redfish and IPMI BMC emulators on 127.0.0.1.",
    "flavor": "Bare-metal Nova flavors: one per Ironic resource class.",
    "image": "Node images: publish to Glance, sign, promote, list.",
    "pipeline": "The release pipeline: a new Kubernetes patch release or Debian package update to approved "
                "images, recorded.",
    "release": "Release watch: Kubernetes patch releases and Debian package updates; bump the locks, prefetch "
               "artifacts.",
    "report": "Reports to look at: HTML pages made from the JSON documents nodeforge writes.",
    "template": "Magnum cluster templates: approved image + bare-metal flavors + capacity + driver.",
}


class LazyGroup(click.Group):
    """A group whose subcommand groups are imported when click first asks for one
    (:meth:`get_command`): a command pays only for its own imports (``release prefetch``
    starts in half the time of importing every group); ``nodeforge --help`` lists them all
    from their summaries (:meth:`format_commands`), importing none. Each group gets the global
    options when it is loaded (:func:`options.add_common_options`), so they work on either
    side of it."""

    def __init__(self, *args, lazy: dict[str, str], summaries: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy, self.summaries = dict(lazy), dict(summaries)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with a group not loaded yet shown by its summary, shortened as click
        shortens a loaded group's help."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if cmd is None and name in self.summaries:
                rows.append((name, click.Command(name, help=self.summaries[name]).get_short_help_str(limit)))
            elif (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy, *self.commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            group = getattr(importlib.import_module(self.lazy[name]), name)
            options.add_common_options(group)
            self.add_command(group, name)
        return self.commands.get(name)


@click.group(cls=LazyGroup, lazy=GROUPS, summaries=SUMMARIES, context_settings={"help_option_names": ["-h", "--help"]})
@options.os_cloud
@options.output
@options.verbose
@options.log_format
@click.version_option(__version__, prog_name="nodeforge")
@click.pass_context
def cli(ctx: click.Context, os_cloud, output, verbose, log_format):
    """Kubernetes node images and bare-metal pools for OpenStack."""
    ctx.obj = options.AppContext(os_cloud=os_cloud, output=output, verbose=verbose, log_format=log_format)
    log.setup(verbose, log_format)


def _formats(argv: list[str]) -> tuple[str, str]:
    """(--output, --log-format) as given on the command line (either side of
    the subcommand; the last wins), read from the arguments themselves so an
    error found while parsing them is still reported in the chosen format."""
    out, log_format = "table", "text"
    args = iter(argv)
    for arg in args:
        if arg == "--":
            break
        for names, kind in ((("--output", "-o"), "output"), (("--log-format",), "log")):
            value = None
            if arg in names:
                value = next(args, None)
            else:
                for name in names:
                    prefix = name + "=" if name.startswith("--") else name
                    if arg.startswith(prefix) and len(arg) > len(prefix):
                        value = arg[len(prefix):]
            if kind == "output" and value in output.FORMATS:
                out = value
            elif kind == "log" and value in ("text", "json"):
                log_format = value
    return out, log_format


def report_error(argv: list[str], message: str, hint: str | None, code: int, *, details: dict | None = None,
                 text: str | None = None, documents: list | None = None) -> int:
    """The one place a failed command is reported (README "Exit codes"):

    * stderr: ``error: ...`` and ``hint: ...`` lines, or with ``--log-format
      json`` one JSON line (level ``error``, with ``hint`` and ``exit_code``);
      ``text`` replaces the plain-text form (click's usage message);
    * stdout, with ``--output json|yaml``: the error as one document,
      ``{"error", "hint", "exit_code", ...details}``. What the command had
      emitted before failing (``documents``, held by :func:`output.collect`)
      stays in that one document: a report's own keys beside the error keys
      (so ``-o json`` of a failed verify or a refused flavor sync is still the
      report), anything else under ``result``.

    Messages are free text and masked by search; ``details`` are structured
    and masked by field (:mod:`nodeforge.redact`)."""
    fmt, log_format = _formats(argv)
    message = scrub(message)
    hint = scrub(hint) if hint else None
    if log_format == "json":
        click.echo(log.error_line(message, hint=hint, exit_code=int(code)), err=True)
    elif text is not None:
        click.echo(text, err=True, nl=False)
    else:
        click.echo(f"error: {message}", err=True)
        if hint:
            click.echo(f"hint: {hint}", err=True)
    if fmt in ("json", "yaml"):
        doc = {"error": message, "hint": hint, "exit_code": int(code), **(details or {})}
        results = [data for data, _ in documents or []]
        if len(results) == 1 and isinstance(results[0], dict):
            doc.update((k, v) for k, v in results[0].items() if k not in doc)
        elif results:
            doc["result"] = results[0] if len(results) == 1 else results
        output.flush([(output.plain(doc), fmt)])
    elif documents:
        output.flush(documents)
    return int(code)


def _click_text(exc: click.ClickException) -> str:
    """What click itself prints for ``exc`` (usage line, then the error)."""
    import io

    buf = io.StringIO()
    exc.show(file=buf)
    return buf.getvalue()


def _report_unexpected(argv: list[str], exc: Exception, documents) -> int:
    """An exception nodeforge did not expect (a bug, or a library's error about input nothing
    checked first): one ``error:`` line, exit 1, never a raw traceback. Its text goes through
    :func:`report_error`'s masking (registered secrets, URL credentials: a library's message may
    quote the URL it was given); the traceback, masked the same way by the logging filter, is
    logged with ``-v``."""
    import logging

    logging.getLogger("nodeforge.cli").info("unexpected error", exc_info=exc)
    return report_error(argv, f"unexpected error: {type(exc).__name__}: {exc}",
                        "this is a bug in nodeforge; run the command again with -v for the traceback "
                        "(credentials masked) and report it", ExitCode.FAILURE, documents=documents)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    with output.collect() as docs:
        try:
            rv = cli.main(args=args, prog_name="nodeforge", standalone_mode=False)
        except click.exceptions.Exit as exc:
            output.flush(docs)
            return exc.exit_code
        except click.exceptions.Abort as exc:
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):   # click's form of Ctrl-C
                return report_error(args, "interrupted", None, 130, text="interrupted\n", documents=docs)
            return report_error(args, "aborted", None, ExitCode.FAILURE, text="aborted\n", documents=docs)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f"see '{ctx.command_path} --help'" if ctx is not None else None
            return report_error(args, exc.format_message(), hint, ExitCode.USAGE, text=_click_text(exc),
                                documents=docs)
        except NodeforgeError as exc:
            return report_error(args, str(exc), exc.hint, exc.exit_code, details=exc.details, documents=docs)
        except KeyboardInterrupt:
            return report_error(args, "interrupted", None, 130, text="interrupted\n", documents=docs)
        except Exception as exc:  # noqa: BLE001 - a bug: reported like any failure, its text masked
            from nodeforge import cloud

            unreachable = cloud.failure_of(exc, *cloud.cloud_named(args, os.environ))
            if unreachable is not None:
                return report_error(args, str(unreachable), unreachable.hint, unreachable.exit_code,
                                    documents=docs)
            return _report_unexpected(args, exc, docs)
        except BaseException:
            output.flush(docs)
            raise
        output.flush(docs)
    # With standalone_mode=False click returns ctx.exit(code) as the value.
    return rv if isinstance(rv, int) else ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
