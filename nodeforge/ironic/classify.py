"""Classify Ironic nodes by hardware profile: a pure plan, then an apply.

:func:`plan` reads every selected node (and its inspection data) once and,
per node, evaluates every profile: which one matched, and why each other one
did not. Outcomes (:class:`Outcome`):

* ``no-op``: the node already has its profile's resource class and traits;
* ``update``: resource class and/or traits differ (listed field by field);
* ``no-match`` / ``ambiguous``: no profile, or several, match: flagged, never written;
* ``refused``: the resource class would change on a node in a state where
  Ironic forbids it (``active``, ``deploying``...); reported, not attempted;
* ``no-facts``: nothing is known about the node's hardware.

Traits: the node keeps every trait no profile in the file sets; of the
profile traits it gets exactly its own profile's (so moving a node between
profiles also removes the old profile's traits).

:func:`apply` writes only ``update`` nodes: one PATCH for the resource class,
one PUT of the whole trait list. A plan with nothing to do makes no write.

Ownership scope: with ``scope=``, only nodes enrolled by an inventory of that
scope (``extra.nodeforge_scope``) are planned; nodes of other scopes and
unscoped ones are left out (counted in ``Plan.skipped``), so one team's
profiles never flag nor rewrite another team's nodes. Without it every
(selected) node is planned, as before.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from concurrent.futures import ThreadPoolExecutor

from nodeforge import plan as PL
from nodeforge.errors import ExitCode
from nodeforge.ironic import constants as C
from nodeforge.ironic import profiles as P
from nodeforge.plan import FieldChange
from nodeforge.ironic.provisioner import IronicError, Provisioner
from nodeforge.redact import scrub

log = logging.getLogger(__name__)


# The shared plan kinds (nodeforge/plan.py; ``flagged``: no-match, ambiguous,
# refused, no-facts); classify plans these six, in this order.
Outcome = PL.Kind
KINDS = (PL.Kind.NOOP, PL.Kind.UPDATE, PL.Kind.NO_MATCH, PL.Kind.AMBIGUOUS, PL.Kind.REFUSED, PL.Kind.NO_FACTS)


@dataclasses.dataclass
class NodeClass:
    name: str
    uuid: str
    provision_state: str | None
    outcome: Outcome
    facts: P.Facts | None
    evaluations: list[P.Evaluation]
    profile: str | None = None
    resource_class: str | None = None          # desired
    traits: list[str] | None = None            # desired (whole list)
    changes: list[FieldChange] = dataclasses.field(default_factory=list)
    detail: str | None = None

    @property
    def matched(self) -> list[str]:
        return [e.profile for e in self.evaluations if e.matched]

    def why_not(self) -> dict[str, list[str]]:
        return {e.profile: list(e.reasons) for e in self.evaluations if not e.matched}

    def to_change(self) -> PL.Change:
        """This node's plan in the shared shape (nodeforge/plan.py)."""
        return PL.Change(self.outcome, self.name, tuple(self.changes), self.detail)

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "provision_state": self.provision_state,
                "outcome": self.outcome.value, "profile": self.profile, "matched": self.matched,
                "resource_class": self.resource_class, "traits": self.traits,
                "changes": [c.to_dict() for c in self.changes], "detail": self.detail,
                "why_not": self.why_not(),
                "facts": self.facts.to_dict() if self.facts else None}


@dataclasses.dataclass
class Plan:
    nodes: list[NodeClass]
    profiles: P.ProfileSet
    scope: str | None = None
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)   # scope ("" for none) -> nodes left out

    def counts(self) -> dict[str, int]:
        return PL.counts(KINDS, (n.outcome for n in self.nodes))

    @property
    def flagged(self) -> list[NodeClass]:
        return [n for n in self.nodes if n.outcome.flagged]

    def unused_profiles(self) -> list[str]:
        """Profiles that matched none of the planned nodes."""
        used = {p for n in self.nodes for p in n.matched}
        return [p.name for p in self.profiles.profiles if p.name not in used]

    def overlaps(self) -> list[dict]:
        """Sets of profiles that matched the same node, with those nodes."""
        seen: dict[tuple[str, ...], list[str]] = {}
        for n in self.nodes:
            if len(n.matched) > 1:
                seen.setdefault(tuple(n.matched), []).append(n.name)
        return [{"profiles": list(k), "nodes": v} for k, v in seen.items()]

    def to_dict(self) -> dict:
        return {"profiles_file": self.profiles.path, "scope": self.scope, "skipped": dict(sorted(self.skipped.items())),
                "summary": self.counts(),
                "unused_profiles": self.unused_profiles(), "overlaps": self.overlaps(),
                "nodes": [n.to_dict() for n in self.nodes]}


def select(nodes: list[dict], patterns: list[str] | tuple[str, ...] | None) -> list[dict]:
    """Nodes whose name or UUID matches one of the glob ``patterns`` (all when none)."""
    if not patterns:
        return nodes
    return [n for n in nodes
            if any(fnmatch.fnmatchcase(n.get("name") or "", p) or n["uuid"] == p for p in patterns)]


def node_scope(node: dict) -> str | None:
    """The ownership scope the node was enrolled with (None: none)."""
    return (node.get("extra") or {}).get(C.EXTRA_SCOPE)


def in_scope(nodes: list[dict], scope: str | None) -> tuple[list[dict], dict[str, int]]:
    """The nodes of ``scope`` (all when None), and how many of the others per
    scope ("" for nodes without one)."""
    if scope is None:
        return nodes, {}
    mine, skipped = [], {}
    for n in nodes:
        s = node_scope(n)
        if s == scope:
            mine.append(n)
        else:
            skipped[s or ""] = skipped.get(s or "", 0) + 1
    return mine, skipped


def node_facts(node: dict, provisioner: Provisioner, preflight: dict[str, P.Facts] | None = None) -> P.Facts | None:
    """Inspection data first; else the pre-flight's facts for this node; else
    the node's properties (None when those say nothing either)."""
    data = provisioner.get_inventory(node["uuid"])
    if data and (data.get("inventory") or {}):
        return P.facts_from_inventory(data, node.get("properties") or {})
    if preflight and node.get("name") in preflight:
        return preflight[node["name"]]
    facts = P.facts_from_properties(node.get("properties") or {})
    if all(getattr(facts, k) is None for k in P.SCALAR_FACTS):
        return None
    return facts


def classify_node(node: dict, facts: P.Facts | None, profiles: P.ProfileSet) -> NodeClass:
    """The plan for one node (pure: node dict and facts in, decision out)."""
    state = node.get("provision_state")
    nc = NodeClass(node.get("name") or node["uuid"], node["uuid"], state, Outcome.NOOP, facts, [])
    if facts is None:
        nc.outcome = Outcome.NO_FACTS
        nc.detail = ("no inspection data and no hardware properties: inspect the node "
                     "(inventory 'inspect: true') or pass --inventory for Redfish pre-flight facts")
        return nc
    nc.evaluations = P.evaluate(profiles, facts)
    matched = nc.matched
    if not matched:
        nc.outcome = Outcome.NO_MATCH
        nc.detail = "no profile matches: " + "; ".join(
            f"{e.profile}: {', '.join(e.reasons)}" for e in nc.evaluations)
        return nc
    if len(matched) > 1:
        nc.outcome = Outcome.AMBIGUOUS
        nc.detail = f"matches {len(matched)} profiles ({', '.join(matched)}): make their rules exclusive"
        return nc
    profile = profiles.by_name()[matched[0]]
    nc.profile = profile.name
    current_rc = node.get("resource_class")
    current_traits = sorted(node.get("traits") or [])
    keep = [t for t in current_traits if t not in profiles.managed_traits]
    nc.resource_class = profile.resource_class
    nc.traits = sorted(set(keep) | set(profile.traits))
    if current_rc != profile.resource_class:
        nc.changes.append(FieldChange("resource_class", current_rc, profile.resource_class))
    if current_traits != nc.traits:
        nc.changes.append(FieldChange("traits", current_traits, nc.traits))
    if not nc.changes:
        return nc
    nc.outcome = Outcome.UPDATE
    ps = C.ProvisionState.parse(state)
    if current_rc and current_rc != profile.resource_class and ps not in C.RESOURCE_CLASS_UPDATE_STATES:
        nc.outcome = Outcome.REFUSED
        nc.detail = (f"node is '{state}': Ironic forbids changing the resource class of a node outside "
                     f"{', '.join(sorted(s.value for s in C.RESOURCE_CLASS_UPDATE_STATES))} "
                     f"({current_rc} -> {profile.resource_class}); not attempted. Undeploy it first")
    return nc


def plan(provisioner: Provisioner, profiles: P.ProfileSet, *, nodes: list[str] | None = None,
         preflight: dict[str, P.Facts] | None = None, jobs: int = 8, scope: str | None = None) -> Plan:
    selected, skipped = in_scope(select(provisioner.list_nodes(), nodes), scope)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        facts = list(pool.map(lambda n: node_facts(n, provisioner, preflight), selected))
    return Plan([classify_node(n, f, profiles) for n, f in zip(selected, facts)], profiles, scope, skipped)


@dataclasses.dataclass
class ApplyResult:
    name: str
    uuid: str
    outcome: Outcome
    ok: bool
    error: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "outcome": self.outcome.value, "ok": self.ok,
                "error": self.error}

    def result(self) -> PL.Result:
        """As the shared :class:`nodeforge.plan.Result` (a flagged node: failed, never attempted)."""
        return PL.result(self.name, self.outcome, ok=self.ok, error=self.error)


def exit_code(plan_: Plan, results: list[ApplyResult] | None = None) -> ExitCode:
    """0: every node classified; 3: some flagged, or a write failed (never 1:
    a node flagged is the file's to fix, not a failed run). ``results``: None
    for a dry run (the plan's own verdict)."""
    got = ([r.result() for r in results] if results is not None
           else [PL.planned(n.name, n.outcome) for n in plan_.nodes])
    return PL.exit_code(got, none_done_fails=False)


def apply(plan_: Plan, provisioner: Provisioner, *, jobs: int = 1) -> list[ApplyResult]:
    """Write the ``update`` nodes; flagged nodes are reported as failed (not written).

    One node at a time by default: two writes per node are cheap, and parallel
    trait writes made the local cloud's SQLite-backed Ironic answer 500
    ("database is locked")."""
    def one(nc: NodeClass) -> ApplyResult:
        if nc.outcome is Outcome.NOOP:
            return ApplyResult(nc.name, nc.uuid, nc.outcome, True)
        if nc.outcome is not Outcome.UPDATE:
            return ApplyResult(nc.name, nc.uuid, nc.outcome, False, nc.detail)
        try:
            for change in nc.changes:
                if change.field == "resource_class":
                    provisioner.patch_node(nc.uuid, [{"op": "add", "path": "/resource_class",
                                                      "value": nc.resource_class}])
                elif change.field == "traits":
                    provisioner.set_traits(nc.uuid, nc.traits or [])
            log.info("classified %s as %s: %s", nc.name, nc.profile, ", ".join(c.field for c in nc.changes))
        except IronicError as exc:
            return ApplyResult(nc.name, nc.uuid, nc.outcome, False, scrub(str(exc)))
        return ApplyResult(nc.name, nc.uuid, nc.outcome, True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, plan_.nodes))
