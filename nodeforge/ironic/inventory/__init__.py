"""Bare-metal inventories: one model, four input formats, whole-batch validation.

Formats (``docs/inventory.md``; their schemas, generated from the declarations
below, in ``docs/schemas.md``), detected from the file or forced by ``fmt``:

* ``nodeforge`` YAML/JSON (:class:`NodeforgeFile`): ``{version: 1, scope: NAME,
  defaults: {...}, nodes: [...]}``.
* ``csv`` (:class:`CsvRow`): one node per row; the header names the columns.
* ``ironicclient`` (:class:`BulkFile`): python-ironicclient's ``baremetal create``
  file, all of it: chassis (with nested nodes), nodes with nested ports and port
  groups, port groups with nested ports (enrolled by :func:`enroll.plan_bulk`).
* ``bifrost`` (:class:`BifrostNode`): Bifrost's inventory (a mapping of node name
  to ``{driver, driver_info: {power: {...}}, nics: [{mac}], properties}``), JSON or
  YAML, or its legacy header-less CSV (:class:`BifrostCsvRow`).

Every file is read by the schema layer's one safe loader (:mod:`nodeforge.schema`)
and validated against its declaration (``declare.py``); each format's reader
(``fmt_nodeforge``, ``fmt_csv``, ``fmt_bulk``, ``fmt_bifrost``) is a thin
adapter that produce the mapping a nodeforge node (:class:`NodeEntry`) is, and
every problem is reported in the one shape ``file:line: key.path: detail``
(:class:`~nodeforge.schema.Problem`), the key path the one in the file as
written (``nodes[3].bmc.password``, ``defaults.bmc.username``,
``chassis[0].nodes[1].ports[2].address``, a CSV's ``[row].column``).

BMCs are URLs (``ipmi://host[:port]``, ``redfish[+http|+https]://host[:port][/redfish/v1/Systems/ID]``,
``redfish-virtualmedia://``, ``idrac-redfish://``, ``fake://``) mapped to the
Ironic hardware type, interfaces and ``driver_info`` by :data:`HARDWARE`.
Passwords and the other secret ``driver_info`` fields are credential references
(:mod:`.secrets`), masked by field in every output.

Every inventory has an ownership scope (:attr:`Inventory.scope`): ``scope:``
at the top of a nodeforge YAML/JSON file, else derived from the file's path
(:func:`nodeforge.scope.derive_scope`; the other formats have no place for it).
Enrollment marks nodes with it (``extra.nodeforge_scope``).
"""

from __future__ import annotations

# The package's API: the model, the declarations, the one reader (modules: model, declare, entries,
# fmt_*, reader; docs/architecture.md).
from nodeforge.ironic.inventory.model import (  # noqa: F401
    Bmc, bmc_key, bmc_key_from_driver_info, BmcKind, ChassisSpec, Cleaning, CleanMode, CleanStep, Format,
    Hardware, HARDWARE, Inventory, InventoryError, LIMITS, Location, NodeSpec, normalize_mac, parse_bmc_url,
    PortGroupSpec, PortSpec, SCHEMA_VERSION, SCHEMES)
from nodeforge.ironic.inventory.declare import (  # noqa: F401
    api_version_for, BIFROST_CSV_COLUMNS, BIFROST_CSV_MIN_COLUMNS, BIFROST_IGNORED, BifrostCsvRow,
    BifrostNic, BifrostNode, BMC_RULE, BmcAddress, BmcDefaults, BmcEntry, BulkChassis, BulkFile, BulkNode,
    BulkPort, BulkPortGroup, Cleaning_, CleaningPolicy, CleanStepEntry, CONDUCTOR_GROUP_RULE, CSV_COLUMNS,
    CSV_PREFIXES, CsvRow, Extra, IC_NEWER_API, IC_NODE_PASSTHROUGH, Interfaces, LOCAL_LINK_KEYS, Macs,
    NodeDefaults, NodeEntry, NodeforgeFile, Password, Uuid, UUID_RULE)
from nodeforge.ironic.inventory.entries import (  # noqa: F401
    detect_format, Remap)
from nodeforge.ironic.inventory.reader import (  # noqa: F401
    load)
from nodeforge.errors import ConfigError  # noqa: F401 - what a format's detection raises
