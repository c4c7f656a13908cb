"""The one way nodeforge runs a host tool: :func:`run`, and :func:`require`
to find a tool (naming the Debian package that provides it when missing).

* the command is an argv list (never a shell string); a :class:`~nodeforge.redact.Secret`
  in it is refused (secrets travel in the environment or on stdin), and the
  line logged at debug level is scrubbed (:func:`nodeforge.redact.scrub`);
  the environment is never logged;
* output is captured (stderr merged into stdout unless ``merge=False``), or
  streamed into a log (``stdout=`` an open file, or ``log_file=`` a path
  appended to);
* ``timeout`` kills the tool and raises :class:`CommandTimeout`;
* a non-zero exit raises one error class, :class:`CommandError`, carrying the
  tool, the exit status and the output's tail (scrubbed), or the caller's own
  class (``error=``: it receives the same fields, ``detail`` being
  :class:`CommandError`'s text), so a stage keeps its message prefix and exit
  code; ``check=False`` returns the completed process instead;
* ``privileged=True`` prefixes ``sudo -n`` when not running as root
  (:func:`as_root`).

The tool -> package table is ``manifests/host-packages.txt`` (``make setup``
installs every package in it). Long-running service processes (the local
cloud's daemons, a QEMU guest) are started elsewhere with their own
supervision; see the allow-list in ``tests/test_import_graph.py``.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import IO, Callable, Mapping, Sequence

from nodeforge.errors import MissingToolError, NodeforgeError
from nodeforge.redact import Secret, scrub

_log = logging.getLogger(__name__)

_MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "host-packages.txt"
# Where system tools live even when PATH (a user's, sudo's secure_path) lacks them.
SBIN_PATH = ("/usr/sbin", "/sbin")
TAIL_CHARS = 800
TAIL_LINES = 25

CompletedProcess = subprocess.CompletedProcess


class CommandError(NodeforgeError):
    """A host tool exited non-zero: ``tool``, ``status``, ``tail`` (the output's
    end, secrets masked) and, when the output went to a log file, ``log``."""

    message = "{detail}"

    @property
    def tool(self) -> str:
        return self.kwargs.get("tool", "")

    @property
    def status(self) -> int | None:
        return self.kwargs.get("status")

    @property
    def tail(self) -> str:
        return self.kwargs.get("tail", "")


class CommandTimeout(CommandError):
    """The tool ran longer than its ``timeout`` and was killed."""


# --- host-tool lookup ----------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def packages() -> dict[str, str]:
    """tool -> Debian package (``manifests/host-packages.txt``)."""
    table: dict[str, str] = {}
    try:
        text = _MANIFEST.read_text()
    except OSError:
        return table
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            for tool in fields[1:]:
                table[tool] = fields[0]
    return table


def sbin_path() -> str:
    """PATH plus the sbin directories (mkfs.*, sgdisk, debugfs live there)."""
    return os.pathsep.join([os.environ.get("PATH", ""), *SBIN_PATH])


def which(tool: str, *, path: str | None = None) -> str | None:
    """The tool's full path on PATH (or ``path``), or None."""
    return shutil.which(tool, path=path)


def require(*tools: str, path: str | None = None) -> dict[str, str]:
    """Resolve each tool on PATH (or ``path``); raise :class:`MissingToolError`
    naming the Debian package (and ``make setup``) for the first one missing."""
    found = {}
    for tool in tools:
        where = which(tool, path=path)
        if where is None:
            raise MissingToolError(tool=tool, package=packages().get(tool, tool))
        found[tool] = where
    return found


def as_root(argv: Sequence[str]) -> list[str]:
    """``argv`` as it must run to act as root: unchanged for root, else behind
    ``sudo -n`` (never prompting)."""
    argv = list(argv)
    return argv if os.geteuid() == 0 else ["sudo", "-n", *argv]


# --- running -------------------------------------------------------------------------------

def command_line(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line, registered secrets masked (for logs)."""
    return scrub(shlex.join(str(a) for a in argv))


def tail_of(text: str | bytes | None, *, chars: int = TAIL_CHARS) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return scrub((text or "").strip()[-chars:])


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (the end read only), secrets masked."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log written)"
    return scrub("\n".join(text.splitlines()[-lines:]))


def _check_argv(argv: Sequence) -> list[str]:
    out = []
    for a in argv:
        if isinstance(a, Secret):
            raise TypeError("a secret must not be passed on a command line (use the environment or stdin)")
        out.append(os.fspath(a) if isinstance(a, os.PathLike) else str(a))
    if not out:
        raise ValueError("empty command")
    return out


def run(argv: Sequence, *, check: bool = True, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        timeout: float | None = None, input: str | bytes | None = None, text: bool = True, merge: bool = True,
        stdout: IO | None = None, log_file: Path | str | None = None, log=None, privileged: bool = False,
        what: str | None = None, tail_chars: int = TAIL_CHARS, error: Callable[..., NodeforgeError] = CommandError,
        ) -> CompletedProcess:
    """Run ``argv`` to completion; see the module docstring.

    ``stdout``: an open (binary-capable) file receiving the output instead of
    capturing it; ``log_file``: a path the output is appended to (the error's
    tail is then the log's last lines); ``log``: an object with ``write(str)``
    that receives ``$ <command>`` and the captured output afterwards (a build
    log). ``what`` names the tool in the error (default: argv[0]'s basename).
    ``merge=False`` keeps stderr apart (captured; the tail is stderr's)."""
    argv = _check_argv(argv)
    if privileged:
        argv = as_root(argv)
    tool = what or Path(argv[0]).name
    line = command_line(argv)
    _log.debug("$ %s", line)
    opened = None
    if log_file is not None:
        opened = stdout = open(log_file, "ab")
    if isinstance(input, str) and not text:
        input = input.encode()
    try:
        if stdout is not None and hasattr(stdout, "flush"):
            stdout.flush()   # what the caller wrote before stays before the tool's output
        proc = subprocess.run(argv, stdout=subprocess.PIPE if stdout is None else stdout,
                              stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                              stdin=None if input is not None else subprocess.DEVNULL, input=input,
                              env=None if env is None else dict(env), cwd=cwd, timeout=timeout, text=text)
    except subprocess.TimeoutExpired as exc:
        where = getattr(stdout, "name", None)
        tail = log_tail(Path(where)) if isinstance(where, str) else tail_of(exc.output, chars=tail_chars)
        cls = CommandTimeout if error is CommandError else error
        raise cls(detail=f"{tool} did not finish within {timeout:g} s" + (f": {tail}" if tail else ""),
                  tool=tool, status=None, tail=tail, log=where) from None
    finally:
        if opened is not None:
            opened.close()
    if log is not None:
        log.write(f"$ {line}\n{scrub(proc.stdout or '') if text else ''}")
    if check and proc.returncode != 0:
        where = getattr(stdout, "name", None) if stdout is not None else None
        if isinstance(where, str):
            tail = log_tail(Path(where))
            detail = f"{tool} exited {proc.returncode}; see the log {where}:\n{tail}"
        else:
            tail = tail_of(proc.stdout if merge else proc.stderr, chars=tail_chars)
            detail = f"{tool} failed (exit {proc.returncode}): {tail}"
        raise error(detail=detail, tool=tool, status=proc.returncode, tail=tail, log=where)
    return proc



def output(argv: Sequence, **kw) -> str:
    """``run(argv, merge=False, **kw).stdout``: a tool's standard output (its
    stderr is the error's tail)."""
    return run(argv, merge=False, **kw).stdout
