"""Ironic facts in one table: states, verbs, the states each verb ends in,
where nodeforge keeps its bookkeeping on a node; and the ownership-scope rule
shared by the declaration files.

What nodeforge knows about Ironic's behaviour lives here, so the lifecycle and
the provisioner never compare raw strings scattered around. The API's own
facts (microversions, page size, the 409 bodies that tell a duplicate from a
locked node) are its client's, :mod:`nodeforge.clients.baremetal`, and are
re-exported here.
"""

from __future__ import annotations

import enum

# Ironic's microversions and page size are its client's (nodeforge/clients/baremetal.py), re-exported here.
from nodeforge.clients.baremetal import (  # noqa: F401
    API_VERSION, BIOS_API_VERSION, DUPLICATE_MARKERS, FIRMWARE_API_VERSION, HISTORY_API_VERSION,
    INVENTORY_API_VERSION, LOCKED_MARKERS, PAGE_LIMIT)

# The newest events of each node an enrollment report keeps.
HISTORY_EVENTS = 20


class ProvisionState(str, enum.Enum):
    ENROLL = "enroll"
    VERIFYING = "verifying"
    MANAGEABLE = "manageable"
    INSPECTING = "inspecting"
    INSPECT_WAIT = "inspect wait"
    INSPECT_FAILED = "inspect failed"
    CLEANING = "cleaning"
    CLEAN_WAIT = "clean wait"
    CLEAN_FAILED = "clean failed"
    AVAILABLE = "available"
    ACTIVE = "active"
    DEPLOYING = "deploying"
    DEPLOY_WAIT = "wait call-back"
    DEPLOY_FAILED = "deploy failed"
    ERROR = "error"

    @classmethod
    def parse(cls, value: str | None) -> "ProvisionState | None":
        try:
            return cls(value) if value is not None else None
        except ValueError:
            return None


class Verb(str, enum.Enum):
    MANAGE = "manage"
    INSPECT = "inspect"
    CLEAN = "clean"
    PROVIDE = "provide"
    ABORT = "abort"
    DEPLOY = "active"          # deploy an image (instance_info, optionally a config drive)
    UNDEPLOY = "deleted"       # tear down; automated cleaning follows, then ``available``


# The stable state each verb ends in (openstacksdk's EXPECTED_STATES).
EXPECTED_STATE = {
    Verb.MANAGE: ProvisionState.MANAGEABLE,
    Verb.INSPECT: ProvisionState.MANAGEABLE,
    Verb.CLEAN: ProvisionState.MANAGEABLE,
    Verb.PROVIDE: ProvisionState.AVAILABLE,
    Verb.DEPLOY: ProvisionState.ACTIVE,
    Verb.UNDEPLOY: ProvisionState.AVAILABLE,
}

# Transient states: the conductor is working; poll again later.
TRANSIENT_STATES = frozenset({
    ProvisionState.VERIFYING, ProvisionState.INSPECTING, ProvisionState.INSPECT_WAIT,
    ProvisionState.CLEANING, ProvisionState.CLEAN_WAIT, ProvisionState.DEPLOYING,
    ProvisionState.DEPLOY_WAIT,
})

# A node in one of these belongs to a workload: enrollment never touches it.
IN_USE_STATES = frozenset({ProvisionState.ACTIVE, ProvisionState.DEPLOYING,
                           ProvisionState.DEPLOY_WAIT, ProvisionState.DEPLOY_FAILED})

# A node whose resource class is already set may only get another one in
# these states (ironic/conductor/manager.py, update_node): Nova would not
# update an instance's allocation, and could schedule onto the node again.
RESOURCE_CLASS_UPDATE_STATES = frozenset({ProvisionState.ENROLL, ProvisionState.INSPECTING,
                                          ProvisionState.INSPECT_WAIT, ProvisionState.MANAGEABLE,
                                          ProvisionState.AVAILABLE})

# HTTP statuses worth retrying (409 only when the body says "locked").
RETRIABLE_STATUS = frozenset({409, 503})

# Ironic masks these driver_info keys as "******" when reading a node back.
SECRET_DRIVER_INFO_KEYS = frozenset({"ipmi_password", "redfish_password", "drac_password",
                                     "ilo_password", "irmc_password", "snmp_auth_key",
                                     "snmp_priv_key", "ipmi_kg_key"})

# Where nodeforge keeps its own bookkeeping on the node (``extra``).
EXTRA_FINGERPRINT = "nodeforge_credential_fp"
EXTRA_CHECKPOINT = "nodeforge_stage"
EXTRA_RETRIES = "nodeforge_retries"
# A baseline apply in progress: the state the node goes back to once cleaned ("available").
EXTRA_BASELINE = "nodeforge_baseline"
# The ownership scope of the declaration (inventory) that enrolled the node;
# see :func:`nodeforge.scope.derive_scope` and docs/inventory.md, "Scopes".
EXTRA_SCOPE = "nodeforge_scope"


# ----------------------------------------------------------------------------- ownership scopes
#
# Whatever nodeforge marks as its own (Ironic nodes, Nova flavors) carries the
# scope of the declaration that made it: the file's ``scope:`` key, else a
# default derived from the file (:func:`nodeforge.scope.derive_scope`). Reconciles act on, and
# report as unlisted, only objects of their own scope; an object of another
# scope is never modified. Kept here (not Ironic-specific) because the flavor
# code already reads this module.

# The scope rule lives in nodeforge/scope.py (shared by every feature package).
from nodeforge.scope import SCOPE_PATTERN, SCOPE_RULE, derive_scope, scope_problem  # noqa: E402,F401

