"""One error-kind enum for bare metal: why a node failed, whichever step said so.

Pre-flight (:mod:`preflight`: the BMC itself), the plan (:mod:`enroll`: the
inventory against Ironic), Ironic's refusals (the transport's
:class:`nodeforge.transport.ErrorKind`, mapped by :meth:`ErrorKind.of`) and
the lifecycle (:mod:`lifecycle`: states, timeouts, rejected verbs) all name
their failures with these members; the values are the ``failure`` /
``error_kind`` / ``error_type`` strings the reports show, and
:data:`nodeforge.ironic.report.HINTS` is keyed by them.
"""

from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    # -- pre-flight (the BMC, before Ironic is touched)
    NETWORK = "network"                      # BMC unreachable (also: no answer from Ironic)
    AUTH = "auth"                            # credentials refused (also: Ironic's 401/403)
    TLS = "tls"
    AMBIGUOUS_SYSTEM = "ambiguous-system"
    UNSUPPORTED = "unsupported"
    ERROR = "error"                          # anything else the BMC said
    # -- the plan (inventory against Ironic)
    CONFLICT = "conflict"                    # MAC/BMC/uuid already another node's (also: any other 409)
    SCOPE = "scope"                          # another inventory's node
    # -- Ironic's refusals (the transport's kinds, same values)
    DUPLICATE = "duplicate"
    LOCKED = "locked"
    UNAVAILABLE = "unavailable"
    NOT_FOUND = "not_found"
    GONE = "gone"
    INVALID = "invalid"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    OTHER = "other"
    # -- the lifecycle
    POWER_CREDENTIALS = "power-credentials"  # Ironic could not talk to the BMC (manage)
    MANAGE_TIMEOUT = "manage-timeout"
    INSPECT_TIMEOUT = "inspect-timeout"
    CLEAN_TIMEOUT = "clean-timeout"
    PROVIDE_TIMEOUT = "provide-timeout"
    INSPECT_FAILED = "inspect-failed"        # parked in maintenance by the recovery policy
    CLEAN_FAILED = "clean-failed"
    MANAGE_REJECTED = "manage-rejected"      # Ironic refused the stage's verb
    INSPECT_REJECTED = "inspect-rejected"
    CLEAN_REJECTED = "clean-rejected"
    PROVIDE_REJECTED = "provide-rejected"
    UNEXPECTED_STATE = "unexpected-state"
    API = "api"                              # another refused write during the lifecycle
    TIMEOUT = "timeout"                      # the whole run's timeout
    DELETED = "deleted"                      # the node disappeared from Ironic

    def __str__(self) -> str:          # the value in messages and f-strings, never "Kind.X"
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def of(cls, kind) -> "ErrorKind":
        """The member for a transport kind (or any string of the same value;
        one this enum does not know yet is OTHER: tests/test_plan.py keeps
        them in step)."""
        try:
            return cls(getattr(kind, "value", kind))
        except ValueError:
            return cls.OTHER

    @classmethod
    def timeout(cls, stage: str) -> "ErrorKind":
        """``<stage>-timeout`` (manage, inspect, clean, provide)."""
        return cls(f"{getattr(stage, 'value', stage)}-timeout")

    @classmethod
    def rejected(cls, stage: str) -> "ErrorKind":
        """``<stage>-rejected``: Ironic refused the verb that starts the stage."""
        return cls(f"{getattr(stage, 'value', stage)}-rejected")


def of_error(exc) -> ErrorKind:
    """The kind of a refused Ironic call (:class:`nodeforge.ironic.provisioner.IronicError`)."""
    return ErrorKind.of(exc.kind)
