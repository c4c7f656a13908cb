"""Layer rules of nodeforge/, checked on the source (AST): one home for each transport concept.

* only ``nodeforge/transport/`` imports tenacity (the one retry policy);
* only ``nodeforge/transport/`` compares HTTP status codes (the one mapping of status to
  an error kind): no ``status_code == 404``, ``status >= 500``, ``code in (403, 404)``
  anywhere else;
* no hand-written retry loop (a loop that catches an exception and sleeps) outside it,
  but for the pollers listed in :data:`POLLERS` (they wait for a state, not retry a call);
* ``nodeforge/transport/`` imports no feature package: only nodeforge.errors,
  nodeforge.redact, itself, the standard library, keystoneauth/openstacksdk and tenacity;
* only the service clients (``nodeforge/clients/``, one module per OpenStack service), the
  connection (``nodeforge/cloud.py``), the transport itself and the local cloud's own set-up
  (``nodeforge/devcloud/``) speak to OpenStack: import openstacksdk or keystoneauth, call
  the transport's request functions (``request``, ``paged``) or take a service proxy of a
  connection (``conn.network``); a feature asks its service's client module. The files
  elsewhere that still do are listed in :data:`OPENSTACK_EXEMPT`, each with its reason;
* no test double (``Fake*``) lives in nodeforge/ (they are under tests/support/).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "nodeforge"
TRANSPORT = "nodeforge/transport/"

# Status checks of the devcloud's own emulators (health checks of the processes it runs), not
# calls of an OpenStack API: exempt by file, each named with its reason.
STATUS_EXEMPT = {
    "nodeforge/devcloud/bmc/__init__.py": "health check of the emulated Redfish BMC the devcloud runs",
    "nodeforge/devcloud/bmc/redfish_emulator.py": "the devcloud's Redfish emulator",
    "nodeforge/imageverify/verify_guest.py": "runs inside the guest on the standard library: its report's POST home",
}
# Loops that catch and sleep to wait for a state (a process healthy, a VM's report, nodes
# settling), not to retry one call.
POLLERS = {
    "nodeforge/devcloud/process.py": "waits for a started service's health check",
    "nodeforge/imageverify/boottest.py": "waits for the booted VM's report",
    "nodeforge/ironic/lifecycle.py": "the lifecycle's poll rounds (clock and sleep injected)",
    "nodeforge/imageverify/verify_guest.py": "in the guest, standard library only: the report POSTed while the network comes up",
}
# Where nodeforge speaks to OpenStack itself (see the module docstring).
OPENSTACK_HOMES = ("nodeforge/clients/", "nodeforge/transport/", "nodeforge/cloud.py", "nodeforge/devcloud/")
OPENSTACK_MODULES = ("openstack", "keystoneauth1")
TRANSPORT_MODULES = ("nodeforge.transport", "nodeforge.transport.rest")
REQUEST_FUNCTIONS = ("request", "paged")
# openstacksdk's service proxies (``conn.<proxy>``), on a name that is a connection (``conn``,
# ``connection``, ``..._conn``).
SERVICE_PROXIES = frozenset({
    "accelerator", "baremetal", "baremetal_introspection", "block_storage", "clustering", "compute",
    "container_infrastructure_management", "database", "dns", "identity", "image", "instance_ha", "key_manager",
    "load_balancer", "message", "network", "object_store", "orchestration", "placement", "shared_file_system",
    "workflow"})
# Files outside OPENSTACK_HOMES that speak to OpenStack all the same, each with its reason (none now:
# every service nodeforge calls has its client module).
OPENSTACK_EXEMPT: dict[str, str] = {}
ALLOWED_IN_TRANSPORT = ("nodeforge.errors", "nodeforge.redact", "nodeforge.transport", "keystoneauth1", "openstack",
                        "tenacity")
STATUS_NAMES = {"status", "status_code", "code"}


def _sources():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(), filename=rel)


def _imports(tree) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "nodeforge":
                out += [(node.lineno, f"nodeforge.{a.name}") for a in node.names]
    return out


def _is_status(e) -> bool:
    return ((isinstance(e, ast.Attribute) and e.attr in STATUS_NAMES)
            or (isinstance(e, ast.Name) and e.id in STATUS_NAMES))


def _is_http_code(e) -> bool:
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return 100 <= e.value <= 599
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_http_code(x) for x in e.elts)
    return False


def status_comparisons(tree) -> list[str]:
    return [f"{n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree) if isinstance(n, ast.Compare)
            and any(_is_status(p) for p in (n.left, *n.comparators))
            and any(_is_http_code(p) for p in (n.left, *n.comparators))]


def retry_loops(tree) -> list[str]:
    out = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        inner = list(ast.walk(loop))
        sleeps = [n for n in inner if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == "sleep"]
        if sleeps and any(isinstance(n, ast.Try) for n in inner):
            out.append(f"{loop.lineno}: loop catching and sleeping (line {sleeps[0].lineno})")
    return out


def _is_connection(node) -> bool:
    name = ast.unparse(node).rsplit(".", 1)[-1]
    return name in ("conn", "connection") or name.endswith("_conn")


def openstack_uses(tree) -> list[str]:
    """Where a module speaks to OpenStack itself: an openstacksdk or keystoneauth import, the
    transport's request functions (imported, called or passed on), a service proxy of a connection."""
    out, transport_names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OPENSTACK_MODULES:
                    out.append(f"{node.lineno}: import {a.name}")
                elif a.name in TRANSPORT_MODULES:
                    transport_names.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OPENSTACK_MODULES:
                out.append(f"{node.lineno}: from {node.module} import ...")
            for a in node.names:
                if f"{node.module}.{a.name}" in TRANSPORT_MODULES:
                    transport_names.add(a.asname or a.name)
                elif node.module in TRANSPORT_MODULES and a.name in REQUEST_FUNCTIONS:
                    out.append(f"{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in REQUEST_FUNCTIONS and ast.unparse(node.value) in transport_names:
            out.append(f"{node.lineno}: {ast.unparse(node)}")
        elif node.attr in SERVICE_PROXIES and _is_connection(node.value):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_only_the_service_clients_speak_to_openstack():
    found, used = {}, set()
    for rel, tree in _sources():
        if rel.startswith(OPENSTACK_HOMES) or not (hits := openstack_uses(tree)):
            continue
        if rel in OPENSTACK_EXEMPT:
            used.add(rel)
        else:
            found[rel] = hits
    assert found == {}, ("OpenStack spoken to outside nodeforge/clients/ (add the call to the service's "
                         f"client module, docs/architecture.md \"A new OpenStack call\"): {found}")
    stale = sorted(set(OPENSTACK_EXEMPT) - used)
    assert stale == [], f"OPENSTACK_EXEMPT entries that no longer apply (remove them): {stale}"


def test_the_openstack_rule_catches_what_it_forbids():
    caught = ["import openstack\n", "from openstack import exceptions\n", "import keystoneauth1.session\n",
              "from nodeforge import transport\ntransport.request(a, 'GET', '/x', what='x')\n",
              "from nodeforge import transport as T\nT.paged(a, '/x', 'x', what='x')\n",
              "def f():\n    from nodeforge.transport import paged\n",
              "import nodeforge.transport\nnodeforge.transport.request(a, 'GET', '/x', what='x')\n",
              "from nodeforge.transport import rest\nrest.request(a, 'GET', '/x', what='x')\n",
              "def f(conn):\n    return list(conn.network.networks())\n",
              "def f(self):\n    return self.conn.baremetal\n"]
    for source in caught:
        assert openstack_uses(ast.parse(source)), source
    fine = ("from nodeforge import transport\ntransport.ErrorKind.NOT_FOUND\n",
            "from nodeforge.transport import RetryPolicy, json_of\n",
            "def f(plan, session):\n    return plan.image, session.request\n",
            "from nodeforge.clients import identity\nidentity.read_projects(conn)\n")
    for source in fine:
        assert openstack_uses(ast.parse(source)) == [], source


def test_only_transport_imports_tenacity():
    found = [f"{rel}:{line}" for rel, tree in _sources() if not rel.startswith(TRANSPORT)
             for line, name in _imports(tree) if name.split(".")[0] == "tenacity"]
    assert found == [], f"tenacity outside nodeforge/transport (use transport.RetryPolicy): {found}"


def test_only_transport_compares_http_status():
    found = {rel: hits for rel, tree in _sources() if not rel.startswith(TRANSPORT) and rel not in STATUS_EXEMPT
             if (hits := status_comparisons(tree))}
    assert found == {}, ("HTTP status compared outside nodeforge/transport (use transport.kind_of / "
                         f"raise_for_response / ErrorKind): {found}")


def test_no_retry_loops_outside_transport():
    found = {rel: hits for rel, tree in _sources() if not rel.startswith(TRANSPORT) and rel not in POLLERS
             if (hits := retry_loops(tree))}
    assert found == {}, f"hand-written retry loops (use transport.RetryPolicy.run): {found}"


def test_transport_imports_no_feature_package():
    stdlib = sys.stdlib_module_names
    bad = [f"{rel}:{line} imports {name}" for rel, tree in _sources() if rel.startswith(TRANSPORT)
           for line, name in _imports(tree)
           if name.split(".")[0] not in stdlib and name != "__future__"
           and not any(name == a or name.startswith(a + ".") for a in ALLOWED_IN_TRANSPORT)]
    assert bad == []


def test_no_test_doubles_in_the_product():
    found = [f"{rel}:{n.lineno} {n.name}" for rel, tree in _sources() for n in ast.walk(tree)
             if isinstance(n, ast.ClassDef) and n.name.startswith("Fake")]
    assert found == [], f"test doubles belong under tests/support/: {found}"


def test_the_rules_catch_what_they_forbid():
    """The checks themselves find a status comparison, a retry loop, a transport import of a feature."""
    code = ast.parse("if resp.status_code >= 500: pass\nif status in (403, 404): pass\n"
                     "for i in range(3):\n    try:\n        call()\n    except OSError:\n        time.sleep(1)\n")
    assert len(status_comparisons(code)) == 2 and len(retry_loops(code)) == 1
    assert [n for _, n in _imports(ast.parse("from nodeforge import ironic"))] == ["nodeforge", "nodeforge.ironic"]
    assert status_comparisons(ast.parse("if len(x) == 200: pass\nif status == 'ok': pass")) == []


def test_one_class_per_name_for_the_shared_concepts():
    """A concept the whole tree shares has one class of its name: a second ``RetryPolicy``
    (a settings wrapper once had the name) would make two things of one word."""
    names = ("RetryPolicy", "Failure", "Provisioner", "Publisher")
    found = {n: [rel for rel, tree in _sources() for node in ast.walk(tree)
                 if isinstance(node, ast.ClassDef) and node.name == n] for n in names}
    assert {n: len(v) for n, v in found.items()} == dict.fromkeys(names, 1), found
