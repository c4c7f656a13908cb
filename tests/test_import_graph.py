"""The layer rule on nodeforge's import graph, and one implementation of each
base-layer concept (docs/architecture.md, "Layers").

Every module under ``nodeforge/`` is parsed (``ast``; imports inside functions
count, they are imports all the same). Each module belongs to a *unit*: a
feature package (``nodeforge.pins``), a top-level module (``nodeforge.errors``)
or a module of the base layer (``nodeforge.base.runner``). Each unit has a
rank in :data:`LAYERS`. A module may import its own unit, or a unit of a
strictly lower rank; an import of an equal or higher rank from another unit
(sideways or up) fails, and so does importing a ``_private`` name or module
of another unit. Inside a unit, modules may not import each other round (a
circle, lazy imports included). Then :data:`ONE_HOME` fails on a second implementation of a
base-layer concept (running a host tool, atomic replacement, SHA*SUMS
parsing, YAML loading) outside its one module, except the entries of
:data:`ALLOWED`, each with its reason.

The HTTP rules (status mapping and retries only in ``nodeforge/transport/``)
and who speaks to OpenStack (openstacksdk imported, the transport's request
functions called: only ``nodeforge/clients/``, ``cloud.py``, the transport and
``devcloud/``) are ``tests/test_layers.py``'s.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "nodeforge"

# Bottom to top. Units on one line share a rank: they may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("nodeforge", "nodeforge.errors"),
    ("nodeforge.redact",),
    ("nodeforge.log", "nodeforge.output", "nodeforge.scope", "nodeforge.cloud"),
    # the base layer proper: one implementation each (runner, fs, sums, qemuimg, ipmitool, secrets)
    ("nodeforge.base.fs", "nodeforge.base.runner", "nodeforge.base.secrets", "nodeforge.base"),
    ("nodeforge.base.sums", "nodeforge.base.qemuimg", "nodeforge.base.ipmitool", "nodeforge.base.dsse"),
    ("nodeforge.schema", "nodeforge.transport"),
    ("nodeforge.plan",),
    # service clients (one module per OpenStack service) and data every feature above may read
    ("nodeforge.clients", "nodeforge.magnum.drivers"),
    # the image pipeline, in stage order (the OS package lock beside the pins, below them)
    ("nodeforge.oslock",),
    ("nodeforge.pins",),
    ("nodeforge.imagebuild",),
    ("nodeforge.imageverify",),
    ("nodeforge.publish",),
    # bare metal and clusters
    ("nodeforge.ironic",),
    # the canary deploy: a bare-metal image through Ironic onto a node, judged by verify's checks
    ("nodeforge.canary",),
    ("nodeforge.compute",),
    ("nodeforge.magnum.templates",),
    ("nodeforge.magnum",),
    # orchestration and the local cloud
    ("nodeforge.pipeline", "nodeforge.devcloud"),
    # reports: HTML made from the JSON documents the features above write
    ("nodeforge.report",),
    # the CLI: options shared by several commands (their defaults and choices come from the features)
    ("nodeforge.commands.options",),
    ("nodeforge.commands",),
    ("nodeforge.cli",),
    ("nodeforge.demo",),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
BASE_TOP = RANK["nodeforge.plan"]   # the base layer: every unit up to here


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The longest unit of :data:`LAYERS` that is ``module`` or a package containing it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in RANK:
            return candidate
    raise AssertionError(f"{module}: in no layer of tests/test_import_graph.py LAYERS; add its package there "
                         f"(and to docs/architecture.md)")


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str      # importing module
    target: str      # imported module
    name: str | None  # the name taken from it (``from target import name``), if any
    file: Path
    line: int

    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def imports_of(path: Path, tree: ast.AST | None = None) -> list[Edge]:
    """Every nodeforge import of ``path``, top-level or inside a function."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = tree or ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nodeforge":
                    out.append(Edge(module, alias.name, None, path, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "nodeforge":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if _is_module(sub):
                    out.append(Edge(module, sub, None, path, node.lineno))
                else:
                    out.append(Edge(module, target, alias.name, path, node.lineno))
    return out


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def parsed() -> dict[Path, ast.AST]:
    return {p: ast.parse(p.read_text(), str(p)) for p in _modules()}


@pytest.fixture(scope="module")
def edges(parsed) -> list[Edge]:
    return [e for p, tree in parsed.items() for e in imports_of(p, tree)]


def layer_violations(edges: list[Edge]) -> list[str]:
    bad = []
    for e in edges:
        src, dst = unit_of(e.source), unit_of(e.target)
        if src == dst or dst == "nodeforge" and e.name is None:
            continue
        if RANK[dst] >= RANK[src]:
            how = "sideways" if RANK[dst] == RANK[src] else "up"
            bad.append(f"{e.where()}: {e.source} imports {e.target}{'.' + e.name if e.name else ''} ({how}: "
                       f"{src} is layer {RANK[src]}, {dst} layer {RANK[dst]})")
        private = [part for part in (e.target.split(".")[len(dst.split(".")):] + ([e.name] if e.name else []))
                   if part.startswith("_") and not part.startswith("__")]
        if private:
            bad.append(f"{e.where()}: {e.source} takes {'.'.join(private)} from {e.target}: "
                       f"another unit's internals (make it public there, or move it)")
    return bad


def package_shares(root: Path) -> dict[str, float]:
    """Each top-level package's (or top-level module's) share of the lines of code under ``root``."""
    lines: dict[str, int] = {}
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(root).parts
        top = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        lines[top] = lines.get(top, 0) + len(path.read_text().splitlines())
    total = sum(lines.values())
    return {name: n / total for name, n in lines.items()}


def test_no_package_holds_more_than_a_quarter_of_the_code():
    shares = package_shares(PKG)
    assert len(shares) > 4, shares           # a quarter of something with more than four parts
    big = {name: f"{share:.0%}" for name, share in shares.items() if share > 0.25}
    assert not big, f"split these packages (the stages or concerns they hold): {big}"


def test_the_size_rule_counts_lines_per_top_level_package(tmp_path):
    for rel, n in (("a/__init__.py", 1), ("a/x.py", 59), ("b/y.py", 20), ("c.py", 20)):
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x = 1\n" * n)
    assert package_shares(tmp_path) == {"a": 0.6, "b": 0.2, "c": 0.2}


def test_every_module_is_in_a_layer(edges):
    for p in _modules():
        unit_of(module_name(p))


def test_imports_go_down_only(edges):
    assert edges, "no nodeforge imports found: the parser is broken"
    bad = layer_violations(edges)
    assert not bad, "imports against the layer order (tests/test_import_graph.py LAYERS):\n" + "\n".join(bad)


def test_the_base_layer_imports_no_feature_package(edges):
    base = [e for e in edges if RANK[unit_of(e.source)] <= BASE_TOP]
    assert base, "no imports from the base layer found"
    above = [f"{e.where()}: {e.source} imports {e.target}" for e in base if RANK[unit_of(e.target)] > BASE_TOP]
    assert not above, "\n".join(above)


def test_the_rule_catches_an_upward_a_sideways_and_a_private_import(tmp_path):
    """The checker itself: edges it must refuse, and one it must accept."""
    f = PKG / "pins" / "release.py"
    up = Edge("nodeforge.pins.release", "nodeforge.imagebuild.render", None, f, 1)
    sideways = Edge("nodeforge.pipeline.run", "nodeforge.devcloud.cloud", None, f, 2)
    private = Edge("nodeforge.publish.glance", "nodeforge.imageverify.builddir", "_first", f, 3)
    down = Edge("nodeforge.publish.catalog", "nodeforge.clients.container_infra", "image_users", f, 4)
    base_up = Edge("nodeforge.base.runner", "nodeforge.imagebuild.disk", None, f, 5)
    bad = layer_violations([up, sideways, private, down, base_up])
    assert len(bad) == 4 and ":1:" in bad[0] and "up" in bad[0] and "sideways" in bad[1]
    assert "_first" in bad[2] and "base.runner" in bad[3]


def test_relative_and_lazy_imports_are_seen(tmp_path):
    src = PKG / "publish" / "catalog.py"
    tree = ast.parse("def f():\n    from nodeforge.magnum import live\n    from . import glance\n"
                     "    from .retention import _private\n")
    got = {(e.target, e.name) for e in imports_of(src, tree)}
    assert got == {("nodeforge.magnum.live", None), ("nodeforge.publish.glance", None),
                   ("nodeforge.publish.retention", "_private")}


# --- no circle inside a unit ------------------------------------------------------------

def circles(edges: list[Edge]) -> list[list[Edge]]:
    """Import circles among the modules of one unit (a package's modules importing each other
    round, lazy imports included: a lazy import that dodges a circle at import time is a circle
    all the same). Each circle is given as its edges, from its first module (sorted) round."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        if e.source != e.target and unit_of(e.source) == unit_of(e.target):
            graph.setdefault(e.source, {}).setdefault(e.target, e)
    found, seen = [], set()
    for start in sorted(graph):
        # The shortest path back to ``start`` (breadth first), if any.
        back: dict[str, Edge] = {}
        queue = [start]
        while queue and start not in back:
            nxt = []
            for node in queue:
                for target, e in sorted(graph.get(node, {}).items()):
                    if target not in back:
                        back[target] = e
                        nxt.append(target)
            queue = nxt
        if start not in back:
            continue
        path, node = [], start
        while True:
            e = back[node]
            path.append(e)
            node = e.source
            if node == start:
                break
        path.reverse()
        key = frozenset(e.source for e in path)
        if key not in seen:
            seen.add(key)
            found.append(path)
    return found


def test_no_import_circle_inside_a_unit(edges):
    found = circles(edges)
    text = ["  " + " -> ".join([c[0].source] + [f"{e.target} ({e.where()})" for e in c]) for c in found]
    assert not found, ("import circles inside a package (move what both need into a module below both, "
                       "as publish/glance_api.py is for the Glance REST calls):\n" + "\n".join(text))


def test_the_circle_rule_catches_a_lazy_circle_and_accepts_a_chain():
    f = PKG / "publish" / "glance.py"
    chain = [Edge("nodeforge.publish.glance", "nodeforge.publish.provenance", None, f, 1),
             Edge("nodeforge.publish.provenance", "nodeforge.publish.glance_api", None, f, 2),
             Edge("nodeforge.publish.glance", "nodeforge.publish.glance_api", "get_image", f, 3)]
    assert circles(chain) == []
    lazy = Edge("nodeforge.publish.provenance", "nodeforge.publish.glance", None, f, 4)   # inside a function
    [circle] = circles(chain + [lazy])
    assert {e.line for e in circle} == {1, 4}
    across = Edge("nodeforge.publish.provenance", "nodeforge.pins.release", None, f, 5)   # another unit's
    assert circles(chain + [across]) == []


# --- one implementation each -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Concept:
    name: str
    home: str                       # the one module allowed
    calls: tuple[str, ...] = ()     # dotted call/attribute names (``subprocess.run``)
    methods: tuple[str, ...] = ()   # ``<anything>.rename(...)``
    strings: tuple[str, ...] = ()   # regexes on string constants
    modules: tuple[str, ...] = ()   # imported modules (``import subprocess``)
    defines: tuple[str, ...] = ()   # function names only the home may define (same name, another signature)


ONE_HOME = [
    Concept("running a host tool", "nodeforge/base/runner.py",
            calls=("subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
                   "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput", "os.system",
                   "os.popen", "os.spawnv", "os.execv", "os.execvp", "shutil.which"),
            modules=("subprocess",), defines=("require", "which", "log_tail")),
    Concept("atomic replacement", "nodeforge/base/fs.py", calls=("os.replace", "os.rename", "os.renames"),
            methods=("rename",), defines=("atomic_write", "move_into_place")),
    Concept("file hashing", "nodeforge/base/fs.py", defines=("sha256_file", "digest_file", "_sha256_file",
                                                              "hash_file", "file_digest")),
    Concept("DSSE envelopes", "nodeforge/base/dsse.py", defines=("pae", "keyid", "scheme_for")),
    Concept("SHA*SUMS lines", "nodeforge/base/sums.py",
            strings=(r"\[ \*\]", r"\\s\+\\\*\?", r"[0-9]a-fA-F\]\+\) ?[ \\]"),
            defines=("read_sums", "write_sums", "parse_sums", "format_sums")),
    Concept("YAML loading", "nodeforge/schema/loader.py",
            calls=("yaml.safe_load", "yaml.load", "yaml.safe_load_all", "yaml.load_all", "yaml.full_load",
                   "yaml.unsafe_load", "yaml.parse", "yaml.compose", "YAML", "ruamel.yaml.YAML",
                   "ruamel.yaml.main.YAML")),
]

# (file, concept name) -> why this file may do it itself.
ALLOWED = {
    ("nodeforge/schema/fastyaml.py", "YAML loading"):
        "the loader's own fast path for large files (libyaml's events; the round-trip parser's settings), "
        "reached only through schema.loader.load",
    ("nodeforge/imageverify/verify_guest.py", "running a host tool"):
        "runs inside the guest under the image's python3, standard library only (shipped as text in the seed)",
    ("nodeforge/imageverify/boottest.py", "running a host tool"):
        "QEMU runs as a supervised process (Popen, polled for the guest's report, then stopped): not a "
        "command run to completion",
    ("nodeforge/imageverify/accel.py", "running a host tool"):
        "the KVM probe's guests run as supervised QEMU processes (Popen, their console polled until the "
        "kernel finishes or stalls, then killed): not a command run to completion",
    ("nodeforge/devcloud/process.py", "running a host tool"):
        "the local cloud's daemons: detached Popen with pidfiles, health checks and stop (a supervisor, "
        "not a command run to completion)",
    ("nodeforge/devcloud/bmc/machine.py", "running a host tool"):
        "runs inside the Redfish emulator (bmc virtualenv, standard library only, never imports nodeforge): "
        "the QEMU machines behind machine-backed systems, supervised processes driven over QMP",
}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def second_implementations(path: Path, tree: ast.AST, concept: Concept) -> list[str]:
    rel = str(path.relative_to(ROOT))
    if rel == concept.home:
        return []
    hits = []
    aliases: dict[str, str] = {}      # local name -> dotted origin (``from os import replace``)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if any(a.name == m or a.name.startswith(m + ".") for m in concept.modules):
                    hits.append(f"{rel}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any(node.module == m or node.module.startswith(m + ".") for m in concept.modules):
                hits.append(f"{rel}:{node.lineno}: from {node.module} import ...")
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None:
                name = aliases.get(name, name)
                if name in concept.calls or name.rsplit(".", 1)[-1] in concept.calls and "." not in name:
                    hits.append(f"{rel}:{node.lineno}: {name}(...)")
            if isinstance(node.func, ast.Attribute) and node.func.attr in concept.methods:
                hits.append(f"{rel}:{node.lineno}: .{node.func.attr}(...)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in concept.defines:
            hits.append(f"{rel}:{node.lineno}: def {node.name}: a second one (its home is {concept.home})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and concept.strings:
            if any(re.search(rx, node.value) for rx in concept.strings):
                hits.append(f"{rel}:{node.lineno}: a {concept.name} pattern {node.value[:40]!r}")
    return hits


@pytest.mark.parametrize("concept", ONE_HOME, ids=lambda c: c.name)
def test_one_implementation(concept, parsed):
    found, used = [], set()
    for path, tree in parsed.items():
        hits = second_implementations(path, tree, concept)
        key = (str(path.relative_to(ROOT)), concept.name)
        if hits and key in ALLOWED:
            used.add(key)
            continue
        found += hits
    assert not found, (f"{concept.name} belongs in {concept.home} only (or an ALLOWED entry with its reason):\n"
                       + "\n".join(found))
    stale = [k for k, _ in ALLOWED.items() if k[1] == concept.name and k not in used]
    assert not stale, f"ALLOWED entries that no longer apply (remove them): {stale}"


@pytest.mark.parametrize("source, concept_name", [
    ("import subprocess\nsubprocess.run(['ls'])\n", "running a host tool"),
    ("from subprocess import run\nrun(['ls'])\n", "running a host tool"),
    ("import shutil\nshutil.which('ls')\n", "running a host tool"),
    ("import os\nos.replace('a', 'b')\n", "atomic replacement"),
    ("from pathlib import Path\nPath('a').rename('b')\n", "atomic replacement"),
    ("import re\nLINE = re.compile(r'^(?P<hex>[0-9a-fA-F]+) [ *](?P<name>.+)$')\n", "SHA*SUMS lines"),
    ("import yaml\nyaml.safe_load('a: 1')\n", "YAML loading"),
    ("from ruamel.yaml import YAML\nYAML(typ='safe')\n", "YAML loading"),
    ("def atomic_write(path, text):\n    pass\n", "atomic replacement"),
    ("def read_sums(path):\n    return {}\n", "SHA*SUMS lines"),
    ("def require(*tools):\n    return {}\n", "running a host tool"),
])
def test_a_second_implementation_is_caught(source, concept_name):
    concept = next(c for c in ONE_HOME if c.name == concept_name)
    path = PKG / "pins" / "example.py"
    assert second_implementations(path, ast.parse(source), concept), source
    home = ROOT / concept.home
    assert not second_implementations(home, ast.parse(source), concept), "the home module may"
