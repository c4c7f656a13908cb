"""One exception hierarchy for nodeforge, with the process exit codes.

Every error carries a message template filled from keyword arguments, so
messages are uniform and never built from raw request data (which may hold
secrets). The CLI maps each class to its exit code; see README "Exit codes".
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    # Batch commands: some items succeeded, some failed.
    PARTIAL = 3
    # `release check`: a new patch release (or minor) exists upstream.
    NEW_RELEASE = 10
    # `baremetal audit`: a node differs from its profile's baseline, or from its class (3 stays
    # "some nodes could not be read", so monitoring tells the two apart).
    DRIFT = 11


class NodeforgeError(Exception):
    """Base class. Subclasses set ``message`` as a str.format template."""

    message = "nodeforge failed"
    exit_code = ExitCode.FAILURE
    hint: str | None = None
    # Structured data added to the error document printed with --output json|yaml.
    details: dict | None = None

    def __init__(self, message: str | None = None, *, hint: str | None = None, **kwargs):
        self.kwargs = kwargs
        template = message if message is not None else self.message
        try:
            text = template.format(**kwargs)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError):
            # A message already built from data ("value {x.y", a stray brace): used as it is.
            text = template
        if hint is not None:
            self.hint = hint
        super().__init__(text)


class UsageError(NodeforgeError):
    message = "invalid usage: {detail}"
    exit_code = ExitCode.USAGE


class ConfigError(NodeforgeError):
    """A configuration or data file is invalid; names the file and key path."""

    message = "{path}: {detail}"
    exit_code = ExitCode.USAGE


class MissingToolError(NodeforgeError):
    message = "required tool '{tool}' not found (Debian package '{package}'); run 'make setup' to install it"


class PartialFailure(NodeforgeError):
    message = "{failed} of {total} items failed"
    exit_code = ExitCode.PARTIAL
