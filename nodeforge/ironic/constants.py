"""Ironic facts in one table: API version, states, verbs, retriable errors;
and the ownership-scope rule shared by the declaration files.

Everything nodeforge knows about Ironic's behaviour lives here, so the
lifecycle and the provisioner never compare raw strings scattered around.
"""

from __future__ import annotations

import enum

# 1.70: manual cleaning with ``disable_ramdisk`` (cleaning without an agent).
# 1.47 brought ``automated_clean`` per node; 1.37 traits; 1.50 owner.
API_VERSION = "1.70"

# 1.81: GET /nodes/{node}/inventory (stored inspection data).
INVENTORY_API_VERSION = "1.81"
# Node history (the conductor's record of a node's errors and events): API 1.78.
HISTORY_API_VERSION = "1.78"
# GET /nodes/{node}/bios?detail=True (each setting with its registry fields): API 1.74.
BIOS_API_VERSION = "1.74"
# GET /nodes/{node}/firmware (the firmware components Ironic cached): API 1.86.
FIRMWARE_API_VERSION = "1.86"
# The newest events of each node an enrollment report keeps.
HISTORY_EVENTS = 20

# Ironic lists at most this many items per page (``[api] max_limit``).
PAGE_LIMIT = 1000


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

# 409 bodies that are *not* transient: retrying cannot help.
DUPLICATE_MARKERS = ("already exists",)
# 409 bodies that are transient (NodeLocked; "node is busy" from some versions).
LOCKED_MARKERS = ("is locked by host", "please retry after the current operation",
                  "locked")

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

