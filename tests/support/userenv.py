"""The cloud settings of the shell the tests run in, cleared before any test runs.

``make test`` in a shell where ``eval "$(nodeforge devcloud env)"`` exported the
demo's cloud (``OS_CLIENT_CONFIG_FILE``, ``OS_CLOUD``), or where ``OS_AUTH_URL``
and friends name a production cloud, must not reach that cloud: openstacksdk
and the ``openstack`` CLI read every ``OS_*`` variable, and an ``OS_CLOUD``
wins over the arguments of a connection. The test session's own cloud settings
are set by its fixtures (``tests/conftest.py``: ``devcloud``).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# nodeforge's own variables that select a cloud or a local cloud's state directory and ports.
# Test-session knobs (NODEFORGE_TEST_CLOUD, NODEFORGE_VERIFY_ACCEL, ...) are kept.
NODEFORGE_CLOUD_SETTINGS = frozenset({
    "NODEFORGE_DEVCLOUD_DIR",            # the local cloud's state directory (clouds.yaml among it)
    "NODEFORGE_DEVCLOUD_PORT_OFFSET",    # the local cloud's ports
    "NODEFORGE_BAREMETAL_CLOUD",         # the cloud of the bare-metal commands (--baremetal-cloud)
    "NODEFORGE_CLOUDS_YAML",             # the CI jobs' clouds.yaml (ci/)
    "NODEFORGE_CANARY_LISTEN",           # the canary's phone-home listener and its URL (devcloud env)
    "NODEFORGE_CANARY_ADVERTISE",
    "NODEFORGE_CANARY_POLICY",           # which classes need a canary (image canary, image promote)
})


def cloud_settings(environ: MutableMapping[str, str]) -> list[str]:
    """The names of the variables in ``environ`` that select a cloud."""
    return sorted(name for name in environ if name.startswith("OS_") or name in NODEFORGE_CLOUD_SETTINGS)


def clear(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Remove every cloud setting from ``environ``; the names removed (never the values)."""
    names = cloud_settings(environ)
    for name in names:
        del environ[name]
    return names


# nodeforge's verify-gate settings (imageverify/attest.py): which key signs verify reports, which
# keys are trusted, how old a report may be. The session sets its own.
VERIFIER_SETTINGS = ("NODEFORGE_VERIFIER_KEY", "NODEFORGE_TRUSTED_VERIFIERS", "NODEFORGE_VERIFY_MAX_AGE_DAYS")


def use_test_verifier(key: "os.PathLike[str]", environ: MutableMapping[str, str] = os.environ) -> None:
    """Point the verify gate at the test session's own verifier key (made on first use) and
    nothing else: the user's key, trust set and maximum age are dropped."""
    for name in VERIFIER_SETTINGS:
        environ.pop(name, None)
    environ["NODEFORGE_VERIFIER_KEY"] = os.fspath(key)
