"""``template upgrade-plan``: for every cluster, the templates to move it
through, along the Kubernetes version-skew policy. Read-only and pure over
the same :class:`~.live.LiveState` the audit reads.

The policy (https://kubernetes.io/releases/version-skew-policy/):

* the control plane moves **one minor at a time**; within a minor a patch
  upgrade may go straight to the newest patch;
* kubelets may be up to **three minors** older than the API server, never
  newer.

The plan for a cluster on Kubernetes 1.M.P (its ``kube_tag``, else its
template's):

1. **patch**: the newest approved patch of 1.M, if newer than 1.M.P;
2. **minor**: then 1.M+1 (its newest patch), 1.M+2, ... one step each, up to
   the newest minor a target template offers; a missing minor stops the plan
   there (``blocked``: minors cannot be skipped).

Node groups: Magnum's ``cluster upgrade CLUSTER TEMPLATE`` moves the control
plane and the default worker group; any other node group moves with
``--nodegroup NG`` and only to the cluster's current template. When the
state holds node groups (``LiveState.nodegroups``), a group whose minor would
fall more than three behind the next control-plane minor is upgraded to the
cluster's current template *before* that step, and every non-default group
follows the cluster to its final template at the end.

A **target template** is one a cluster may move to: not hidden, its image
approved (no image finding of the audit), its image's ``kube_version`` equal
to its ``kube_tag``, and of the cluster's template's shape: same ``coe``,
driver, ``server_type``, OS distro, master and worker flavor (an upgrade
changes versions, not machines). Clusters on a minor outside the maintained
minors are **urgent**.
"""

from __future__ import annotations

import dataclasses
import shlex

from nodeforge.magnum import audit as A
from nodeforge.magnum.live import LiveState

# Magnum statuses from which an upgrade is accepted.
UPGRADABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPGRADE_COMPLETE", "RESUME_COMPLETE", "RESTORE_COMPLETE",
              "ROLLBACK_COMPLETE", "CHECK_COMPLETE", "ADOPT_COMPLETE")
MAX_KUBELET_SKEW = 3


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str                 # patch | minor | nodegroup
    from_version: str
    to_version: str
    template: str             # target template name
    template_id: str
    nodegroup: str | None = None
    reason: str = ""
    ref: str = ""             # what the command names: the template's name when unique, else its ID

    def command(self, cluster: str) -> str:
        args = ["openstack", "coe", "cluster", "upgrade", cluster, self.ref or self.template_id]
        if self.nodegroup:
            args += ["--nodegroup", self.nodegroup]
        return shlex.join(args)


@dataclasses.dataclass
class ClusterPlan:
    cluster: str
    cluster_id: str
    status: str
    template: str
    template_id: str
    kube_tag: str | None
    urgent: bool
    steps: list[Step]
    notes: list[str]
    cluster_ref: str = ""      # what the commands name: the cluster's name when unique, else its ID

    def commands(self) -> list[str]:
        return [s.command(self.cluster_ref or self.cluster) for s in self.steps]

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "cluster_id": self.cluster_id, "status": self.status,
                "template": self.template, "template_id": self.template_id, "kube_tag": self.kube_tag,
                "urgent": self.urgent, "notes": self.notes,
                "steps": [{**dataclasses.asdict(s), "command": c} for s, c in zip(self.steps, self.commands())],
                "commands": self.commands()}


def _shape(t: dict, idx: A.Index) -> tuple:
    image, _ = idx.image(t.get("image_id"))

    def flavor(ref):
        f = idx.flavor(ref)
        return f["id"] if f else ref

    return (t.get("coe") or "kubernetes", t.get("driver") or "", t.get("server_type") or "vm",
            A.effective_distro(t, image), flavor(t.get("master_flavor_id")), flavor(t.get("flavor_id")))


def targets(idx: A.Index) -> list[dict]:
    """Templates a cluster may move to (see the module docstring)."""
    out = []
    for t in idx.state.templates:
        if t.get("hidden") or A.image_findings(t, idx):
            continue
        version = A.parse_version(A.kube_tag(t))
        image, _ = idx.image(t.get("image_id"))
        if version is None or A.parse_version((image or {}).get("kube_version")) != version:
            continue
        out.append(t)
    return out


def _best(cands: list[dict]) -> dict:
    """The newest version; among equals the newest created, then by name (stable)."""
    return max(cands, key=lambda t: (A.parse_version(A.kube_tag(t)), t.get("created_at") or "", t.get("name") or ""))


def _v(version: tuple[int, int, int]) -> str:
    return f"v{version[0]}.{version[1]}.{version[2]}"


def plan_cluster(cluster: dict, idx: A.Index, maintained: A.Maintained, cands: list[dict],
                 nodegroups: list[dict] | None = None) -> ClusterPlan:
    template = idx.templates.get(cluster.get("cluster_template_id"))
    name = cluster.get("name") or cluster["uuid"]
    tag = A.cluster_kube_tag(cluster, template)
    plan = ClusterPlan(name, cluster["uuid"], cluster.get("status") or "", (template or {}).get("name") or "",
                       cluster.get("cluster_template_id") or "", tag, False, [], [])
    if template is None:
        plan.notes.append("its template is not in Magnum's listing: no plan")
        return plan
    current = A.parse_version(tag)
    if current is None:
        plan.notes.append(f"kube_tag {tag!r} is not a version: no plan")
        return plan
    minor = f"{current[0]}.{current[1]}"
    if maintained.minors and minor not in maintained.minors:
        plan.urgent = True
        plan.notes.append(f"Kubernetes {minor} is outside the maintained minors {', '.join(maintained.minors)} "
                          f"({maintained.source})")
    if plan.status and plan.status not in UPGRADABLE:
        plan.notes.append(f"status {plan.status}: Magnum upgrades only a cluster in a *_COMPLETE state; "
                          "fix or re-create it first")
    shape = _shape(template, idx)
    # Never the cluster's own template: Magnum has nothing to do for an upgrade to it.
    same = [t for t in cands if _shape(t, idx) == shape and t["uuid"] != template["uuid"]]
    by_minor: dict[tuple[int, int], list[dict]] = {}
    for t in same:
        v = A.parse_version(A.kube_tag(t))
        by_minor.setdefault((v[0], v[1]), []).append(t)

    # Node groups other than the default ones, with their minor (their version, else the cluster's).
    groups = []
    for ng in nodegroups or []:
        if ng.get("is_default"):
            continue
        v = A.parse_version(ng.get("version") or ng.get("labels", {}).get("kube_tag")) or current
        if v[:2] > current[:2]:
            plan.notes.append(f"node group {ng.get('name')} is on {_v(v)}, newer than the control plane "
                              f"({_v(current)}): the skew policy forbids it")
        groups.append({"name": ng.get("name"), "version": v})

    at, at_template = current, template
    patch = [t for t in by_minor.get(current[:2], []) if A.parse_version(A.kube_tag(t)) > current]
    if patch:
        best = _best(patch)
        new = A.parse_version(A.kube_tag(best))
        plan.steps.append(Step("patch", _v(at), _v(new), best.get("name") or "", best["uuid"],
                               reason=f"newest approved patch of {current[0]}.{current[1]}"))
        at, at_template = new, best
    newest = max(by_minor, default=None)
    nxt = (at[0], at[1] + 1)
    while newest is not None and nxt <= newest:
        if nxt not in by_minor:
            plan.notes.append(f"blocked at {_v(at)}: no target template for Kubernetes {nxt[0]}.{nxt[1]}, and the "
                              f"control plane moves one minor at a time (templates exist up to "
                              f"{newest[0]}.{newest[1]})")
            break
        for g in groups:       # kubelets at most three minors behind the API server
            if nxt[1] - g["version"][1] > MAX_KUBELET_SKEW or nxt[0] != g["version"][0]:
                plan.steps.append(Step("nodegroup", _v(g["version"]), _v(at), at_template.get("name") or "",
                                       at_template["uuid"], nodegroup=g["name"],
                                       reason=f"before the control plane goes to {nxt[0]}.{nxt[1]}: kubelets may be "
                                              f"at most {MAX_KUBELET_SKEW} minors behind it"))
                g["version"] = at
        best = _best(by_minor[nxt])
        new = A.parse_version(A.kube_tag(best))
        plan.steps.append(Step("minor", _v(at), _v(new), best.get("name") or "", best["uuid"],
                               reason="next minor (one at a time)"))
        at, at_template = new, best
        nxt = (at[0], at[1] + 1)
    if at_template is not template:
        for g in groups:
            if g["version"] != at:
                plan.steps.append(Step("nodegroup", _v(g["version"]), _v(at), at_template.get("name") or "",
                                       at_template["uuid"], nodegroup=g["name"],
                                       reason="follows the cluster to its template"))
                g["version"] = at
    final_minor = f"{at[0]}.{at[1]}"
    if not plan.steps:
        plan.notes.append("up to date: no newer target template of the same shape"
                          if same else "no target template of the same shape (coe, driver, server type, OS, "
                                       "flavors) with an approved image")
    if plan.urgent and maintained.minors and final_minor not in maintained.minors:
        plan.notes.append(f"still outside the maintained minors after the plan ({final_minor})")
    return plan


def plan(state: LiveState, maintained: A.Maintained) -> list[ClusterPlan]:
    """A plan per cluster (pure); urgent ones first, then by name."""
    idx = A.Index(state)
    cands = targets(idx)
    plans = [plan_cluster(c, idx, maintained, cands, state.nodegroups.get(c["uuid"])) for c in state.clusters]
    names = [t.get("name") for t in state.templates]
    cluster_names = [c.get("name") for c in state.clusters]
    for p in plans:
        p.cluster_ref = p.cluster if cluster_names.count(p.cluster) == 1 else p.cluster_id
        p.steps = [dataclasses.replace(s, ref=s.template if s.template and names.count(s.template) == 1
                                       else s.template_id) for s in p.steps]
    plans.sort(key=lambda p: (not p.urgent, p.cluster))
    return plans


def report(state: LiveState, maintained: A.Maintained) -> dict:
    plans = plan(state, maintained)
    return {"maintained": maintained.to_dict(),
            "counts": {"clusters": len(plans), "urgent": sum(p.urgent for p in plans),
                       "with_steps": sum(bool(p.steps) for p in plans)},
            "clusters": [p.to_dict() for p in plans]}
