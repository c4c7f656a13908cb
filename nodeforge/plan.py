"""Plan/apply as a contract: the types every mutating operation shares.

A mutating operation (enroll, classify, flavor sync, template apply, catalog
promote, release bump, glance publish; prefetch, render, build and verify
too, whose plans are their own shapes) is split in two:

- a pure ``plan(...)``: it reads, compares desired with actual and returns a
  plan whose entries each have a :class:`Kind` (create, update, no-op, ...),
  a target, the fields before/after (:class:`FieldChange`, secrets masked) and
  a reason; it writes nothing, and ``--dry-run`` prints it;
- an ``apply(plan)``: it makes the writes and returns one :class:`Result` per
  entry (done, failed or skipped, with an error kind when it failed).

:func:`exit_code` is the one way from results to the process exit code:
0 every entry done, 3 partial (some failed or flagged), 1 every entry failed,
2 a usage error (raised before any plan, see :class:`nodeforge.errors.UsageError`).

Each feature keeps its plan entry class (``enroll.NodePlan``,
``flavors.FlavorPlan``, ...: they carry what their apply needs) and its
JSON fields; the kinds, the field changes, the results and the exit rule are
these.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Iterable, Sequence

from nodeforge.errors import ExitCode
from nodeforge.redact import MASK, is_secret_field, scrub, scrub_obj


class Kind(str, enum.Enum):
    """What a plan entry does (the values are the ``action``/``outcome``
    strings the JSON outputs show)."""

    # writes
    CREATE = "create"
    UPDATE = "update"               # in place
    NEW_VERSION = "new-version"     # content changed: a new version beside the old (Magnum templates)
    REPLACE = "replace"             # immutable field differs: delete + create
    DELETE = "delete"
    PRUNE = "prune"                 # not in the file any more: delete
    APPROVE = "approve"             # catalog: becomes the approved image
    HIDE = "hide"                   # catalog: approved, unlisted
    DEACTIVATE = "deactivate"       # catalog: not bootable
    # nothing to write
    NOOP = "no-op"
    KEEP = "keep"                   # catalog: stays approved and listed
    # reported, not written (the run ends partial)
    DRIFT = "drift"                 # immutable field differs, replace not allowed
    UNLISTED = "unlisted"           # this scope's, not in the file, prune not allowed
    LEGACY = "legacy"               # marked by an older nodeforge without a scope: never touched
    # refused (never written)
    ERROR = "error"
    CONFLICT = "conflict"           # belongs to another scope
    BROKEN = "broken"               # links broken (no approved image, ...)
    REFUSED = "refused"             # the service forbids it (resource class of a deployed node)
    NO_MATCH = "no-match"
    AMBIGUOUS = "ambiguous"
    NO_FACTS = "no-facts"

    def __str__(self) -> str:          # the value in messages and f-strings, never "Kind.X"
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def writes(self) -> bool:
        """Applying it makes a write."""
        return self in WRITING

    @property
    def flagged(self) -> bool:
        """Not written because something is wrong (a refusal or a problem to fix)."""
        return self in FLAGGED

    @property
    def reported(self) -> bool:
        """Not written by policy (drift, unlisted): shown, the run ends partial."""
        return self in (Kind.DRIFT, Kind.UNLISTED)


WRITING = frozenset({Kind.CREATE, Kind.UPDATE, Kind.NEW_VERSION, Kind.REPLACE, Kind.DELETE, Kind.PRUNE,
                     Kind.APPROVE, Kind.HIDE, Kind.DEACTIVATE})
FLAGGED = frozenset({Kind.ERROR, Kind.CONFLICT, Kind.BROKEN, Kind.REFUSED, Kind.NO_MATCH, Kind.AMBIGUOUS,
                     Kind.NO_FACTS})


def counts(kinds: Sequence[Kind], entries: Iterable[Kind]) -> dict[str, int]:
    """``{kind: count}`` over ``kinds`` (a feature's kinds, in its order; each present, zero or not)."""
    out = {k.value: 0 for k in kinds}
    for k in entries:
        out[Kind(k).value] = out.get(Kind(k).value, 0) + 1
    return out


ROTATED = "(rotated)"


@dataclasses.dataclass(frozen=True)
class FieldChange:
    """One field of a target, before -> after. A secret field (by name,
    :func:`nodeforge.redact.is_secret_field`) is shown masked on both sides
    (``(rotated)`` stays: it says the secret changed, not what it is);
    ``mutable`` is given where it matters (flavors: False means a re-create)."""

    field: str
    current: Any
    desired: Any
    mutable: bool | None = None

    def to_dict(self) -> dict:
        extra = {} if self.mutable is None else {"mutable": self.mutable}
        if is_secret_field(self.field):
            return {"field": self.field, "current": MASK if self.current is not None else None,
                    "desired": self.desired if self.desired == ROTATED else MASK, **extra}
        return {**scrub_obj({"field": self.field, "current": self.current, "desired": self.desired}), **extra}

    def __str__(self) -> str:
        if is_secret_field(self.field):
            d = self.to_dict()
            return f"{self.field}: {d['current']} -> {d['desired']}"
        return f"{self.field}: {self.current} -> {self.desired}"


def describe(changes: Iterable[FieldChange], *, skip: Iterable[str] = ()) -> str:
    """``field: before -> after; ...`` for a table cell (secrets masked)."""
    skip = set(skip)
    return "; ".join(str(c) for c in changes if c.field not in skip)


@dataclasses.dataclass(frozen=True)
class Change:
    """A plan entry in the shared shape: what happens to which target, the
    fields before/after and why. Features build it from their own entries
    (``to_change()``) for code that handles any plan (exit codes, summaries)."""

    kind: Kind
    target: str
    fields: tuple[FieldChange, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "target": self.target, "fields": [f.to_dict() for f in self.fields],
                "reason": scrub(self.reason) if self.reason else None}


class Status(str, enum.Enum):
    DONE = "done"          # written, or nothing to write
    FAILED = "failed"      # planned as refused, or a write was refused
    SKIPPED = "skipped"    # not written by policy (drift, unlisted, flagged), or a dry run


@dataclasses.dataclass(frozen=True)
class Result:
    """The outcome of applying one plan entry."""

    target: str
    kind: Kind
    status: Status
    error: str | None = None
    error_kind: str | None = None     # a feature's error kind (bare metal: ironic.errorkind.ErrorKind)

    @property
    def ok(self) -> bool:
        return self.status is Status.DONE or (self.status is Status.SKIPPED and not self.problem)

    @property
    def problem(self) -> bool:
        """Counts against the run: failed, or skipped because it is flagged or reported."""
        return self.status is Status.FAILED or (self.status is Status.SKIPPED
                                                 and (self.kind.flagged or self.kind.reported))

    def to_dict(self) -> dict:
        return {"target": self.target, "kind": self.kind.value, "status": self.status.value,
                "error": scrub(self.error) if self.error else None, "error_kind": self.error_kind}


def result(target: str, kind: Kind, *, ok: bool, error: str | None = None, error_kind: str | None = None,
           attempted: bool = True) -> Result:
    """A :class:`Result` from a feature's ``ok`` flag: not ok is FAILED when
    attempted (or refused), SKIPPED when left alone by policy."""
    if ok:
        status = Status.DONE
    elif attempted or kind.flagged:
        status = Status.FAILED
    else:
        status = Status.SKIPPED
    return Result(target, Kind(kind), status, error, error_kind)


def planned(target: str, kind: Kind) -> Result:
    """What a dry run reports for a plan entry: DONE when it needs nothing
    fixed (a write to make counts as done), SKIPPED when it is flagged or
    reported (so :func:`exit_code` of a dry run matches the real run's,
    writes aside)."""
    kind = Kind(kind)
    return Result(target, kind, Status.SKIPPED if (kind.flagged or kind.reported) else Status.DONE)


def exit_code(results: Iterable[Result], *, none_done_fails: bool = True) -> ExitCode:
    """The one rule from results to the exit code: 0 (OK) when no result is
    a problem (:attr:`Result.problem`); 1 (FAILURE) when every result is one
    and ``none_done_fails`` (enroll, preflight: nothing succeeded); else 3
    (PARTIAL). Usage errors (2) are raised before any plan."""
    results = list(results)
    problems = [r for r in results if r.problem]
    if not problems:
        return ExitCode.OK
    if none_done_fails and len(problems) == len(results):
        return ExitCode.FAILURE
    return ExitCode.PARTIAL
