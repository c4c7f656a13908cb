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

**Image refresh** (:mod:`.refresh`): a cluster whose template's image was
superseded by an approved image of the same Kubernetes version (a security
rebuild) moves to a template of its shape and version with that image, as a
``refresh`` step **first**, at its current version, before any minor step (the
fix reaches the cluster now, not after the minor walk); the template is its
own line's (one Magnum has, else the version ``template apply`` is to make:
the templates' plan), else any of its shape with that image. When a patch step exists, that step replaces the image itself and no
refresh is added. A driver that rolls nodes on a template change (both known
ones) gets the ``cluster upgrade`` command, any other a manual step; non-default
node groups follow the cluster to its refreshed template.
"""

from __future__ import annotations

import dataclasses
import shlex

from nodeforge.magnum import audit as A, refresh as R
from nodeforge.magnum.live import LiveState

# Magnum statuses from which an upgrade is accepted.
UPGRADABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPGRADE_COMPLETE", "RESUME_COMPLETE", "RESTORE_COMPLETE",
              "ROLLBACK_COMPLETE", "CHECK_COMPLETE", "ADOPT_COMPLETE")
MAX_KUBELET_SKEW = 3


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str                 # refresh | patch | minor | nodegroup
    from_version: str
    to_version: str
    template: str             # target template name
    template_id: str
    nodegroup: str | None = None
    reason: str = ""
    ref: str = ""             # what the command names: the template's name when unique, else its ID
    manual: str = ""          # a step no command does: what to do by hand (the command is then None)

    def command(self, cluster: str) -> str | None:
        if self.manual:
            return None
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
        """The commands of the steps that have one (a manual step has none)."""
        return [c for s in self.steps if (c := s.command(self.cluster_ref or self.cluster))]

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "cluster_id": self.cluster_id, "status": self.status,
                "template": self.template, "template_id": self.template_id, "kube_tag": self.kube_tag,
                "urgent": self.urgent, "notes": self.notes,
                "steps": [{**dataclasses.asdict(s), "command": s.command(self.cluster_ref or self.cluster)}
                          for s in self.steps],
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


def _nodegroups(plan: ClusterPlan, nodegroups: list[dict] | None, current: tuple, template: dict) -> list[dict]:
    """The non-default node groups with their minor (their version, else the cluster's) and template."""
    groups = []
    for ng in nodegroups or []:
        if ng.get("is_default"):
            continue
        v = A.parse_version(ng.get("version") or ng.get("labels", {}).get("kube_tag")) or current
        if v[:2] > current[:2]:
            plan.notes.append(f"node group {ng.get('name')} is on {_v(v)}, newer than the control plane "
                              f"({_v(current)}): the skew policy forbids it")
        groups.append({"name": ng.get("name"), "version": v, "template": template})
    return groups


def _pending(template: dict, repl: dict, idx: A.Index, shape: tuple, lines: dict) -> tuple[dict | None, str]:
    """The version ``template apply`` will make with ``repl`` for the cluster's line, when the
    templates' plan has that refresh and the line's head has the cluster's shape."""
    tp = lines.get(R.line_of(template))
    step = tp.steps[0] if tp and tp.steps else None
    if step is None or _shape(idx.templates[tp.template_id], idx) != shape:
        return None, ""
    if step.kind != "refresh" or step.to_image != repl["id"]:
        return None, (f"; '{step.command}' makes {step.new_template}, a {step.kind} to {step.to_version}: plan "
                      "again after it")
    return {"name": step.new_template, "uuid": ""}, f"; {step.new_template} is made by '{step.command}' first"


def _refresh(cluster: str, template: dict, idx: A.Index, cands: list[dict], shape: tuple, current: tuple,
             lines: dict) -> tuple[Step | None, dict | None]:
    """The image refresh of a cluster on ``template`` (its image superseded by a same-version
    rebuild, nodeforge/magnum/refresh.py) and the template it moves to (None: not known yet)."""
    image, _ = idx.image(template.get("image_id"))
    repl = R.superseded_by(image, idx.state.images) if image else None
    if repl is None:
        return None, None
    have = [t for t in cands if t["uuid"] != template["uuid"] and _shape(t, idx) == shape
            and A.parse_version(A.kube_tag(t)) == current
            and (idx.image(t.get("image_id"))[0] or {}).get("id") == repl["id"]]
    reason = f"image {image['id']} superseded by the same-version rebuild {repl['id']} ({repl.get('name')})"
    # Its own line first (a version Magnum has, else the one apply is to make), then any of its shape.
    own = [t for t in have if R.line_of(template) and R.line_of(t) == R.line_of(template)]
    target, more = (_best(own), "") if own else _pending(template, repl, idx, shape, lines)
    if target is None and have:
        target, more = _best(have), ""
    name, tid = (target.get("name") or "", target["uuid"]) if target else ("", "")
    driver = R.rolling(template, image)
    if target is None:
        manual = (f"no template of its shape has image {repl['id']} yet{more or ' (see the templates plan)'}: make "
                  f"one, then upgrade the cluster to it")
    elif driver is None:
        manual = (f"driver {template.get('driver') or '(none named)'} is not known to replace nodes on a template "
                  f"change: add node groups on image {repl['id']} (openstack coe nodegroup create {cluster} NG "
                  f"--image {repl['id']}), drain and delete the old ones; the control plane needs a new cluster "
                  f"from {name}")
    else:
        manual = ""
        reason += f"; {driver.name} replaces the nodes one by one (rolling){more}"
    return Step("refresh", _v(current), _v(current), name, tid, reason=reason, manual=manual), target


def _minor_steps(plan: ClusterPlan, by_minor: dict, groups: list[dict], at: tuple, at_template: dict) -> tuple:
    """Step 2 of the module docstring: one minor at a time, node groups kept within the kubelet skew."""
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
                g["version"], g["template"] = at, at_template
        best = _best(by_minor[nxt])
        new = A.parse_version(A.kube_tag(best))
        plan.steps.append(Step("minor", _v(at), _v(new), best.get("name") or "", best["uuid"],
                               reason="next minor (one at a time)"))
        at, at_template = new, best
        nxt = (at[0], at[1] + 1)
    return at, at_template


def plan_cluster(cluster: dict, idx: A.Index, maintained: A.Maintained, cands: list[dict],
                 nodegroups: list[dict] | None = None, lines: dict | None = None) -> ClusterPlan:
    """One cluster's steps (module docstring); ``lines``: the templates' plans by line
    (nodeforge/magnum/refresh.py), for a refresh to a version apply has still to make."""
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
    same, by_minor = _same_shape(template, shape, idx, cands)
    groups = _nodegroups(plan, nodegroups, current, template)

    at, at_template = current, template
    patch = [t for t in by_minor.get(current[:2], []) if A.parse_version(A.kube_tag(t)) > current]
    refresh, to = _refresh(name, template, idx, cands, shape, current, lines or {})
    if patch:
        best = _best(patch)
        new = A.parse_version(A.kube_tag(best))
        plan.steps.append(Step("patch", _v(at), _v(new), best.get("name") or "", best["uuid"],
                               reason=f"newest approved patch of {current[0]}.{current[1]}"))
        at, at_template = new, best
        if refresh:
            plan.notes.append(f"its image is superseded ({refresh.reason.split(';')[0]}): the patch step "
                              "replaces it, no separate refresh")
    elif refresh:          # same version: first, before any minor step
        plan.steps.append(refresh)
        at_template = to or at_template
    at, at_template = _minor_steps(plan, by_minor, groups, at, at_template)
    if at_template is not template:
        _nodegroups_follow(plan, groups, at, at_template)
    if not plan.steps:
        plan.notes.append("up to date: no newer target template of the same shape"
                          if same else "no target template of the same shape (coe, driver, server type, OS, "
                                       "flavors) with an approved image")
    if plan.urgent and maintained.minors and f"{at[0]}.{at[1]}" not in maintained.minors:
        plan.notes.append(f"still outside the maintained minors after the plan ({at[0]}.{at[1]})")
    return plan


def _same_shape(template: dict, shape: tuple, idx: A.Index, cands: list[dict]) -> tuple[list[dict], dict]:
    """The candidate templates of ``template``'s shape, and the same by Kubernetes minor. Never the
    cluster's own template: Magnum has nothing to do for an upgrade to it."""
    same = [t for t in cands if _shape(t, idx) == shape and t["uuid"] != template["uuid"]]
    by_minor: dict[tuple[int, int], list[dict]] = {}
    for t in same:
        v = A.parse_version(A.kube_tag(t))
        by_minor.setdefault((v[0], v[1]), []).append(t)
    return same, by_minor


def _nodegroups_follow(plan: ClusterPlan, groups: list[dict], at, at_template: dict) -> None:
    """A step for each node group not yet on the cluster's final template: it follows the cluster there."""
    for g in groups:
        if g["template"] is not at_template:
            plan.steps.append(Step("nodegroup", _v(g["version"]), _v(at), at_template.get("name") or "",
                                   at_template["uuid"], nodegroup=g["name"],
                                   reason="follows the cluster to its template"))
            g["version"], g["template"] = at, at_template


def plan(state: LiveState, maintained: A.Maintained, templates: list | None = None) -> list[ClusterPlan]:
    """A plan per cluster (pure); urgent ones first, then by name. ``templates``: the
    templates' plans (:func:`nodeforge.magnum.refresh.plan_templates`), made when not given."""
    idx = A.Index(state)
    cands = targets(idx)
    lines = {R.line_of(idx.templates[t.template_id]): t for t in
             (templates if templates is not None else R.plan_templates(idx))}
    lines.pop(None, None)
    names = [t.get("name") for t in state.templates]
    cluster_names = [c.get("name") for c in state.clusters]
    plans = []
    for c in state.clusters:
        ref = c.get("name") if c.get("name") and cluster_names.count(c.get("name")) == 1 else c["uuid"]
        p = plan_cluster(c, idx, maintained, cands, state.nodegroups.get(c["uuid"]), lines)
        p.cluster_ref = ref
        p.steps = [dataclasses.replace(s, ref=s.template if s.template and (names.count(s.template) == 1
                                                                           or not s.template_id)
                                       else s.template_id) for s in p.steps]
        plans.append(p)
    plans.sort(key=lambda p: (not p.urgent, p.cluster))
    return plans


def report(state: LiveState, maintained: A.Maintained) -> dict:
    templates = R.plan_templates(A.Index(state))
    plans = plan(state, maintained, templates)
    return {"maintained": maintained.to_dict(),
            "counts": {"clusters": len(plans), "urgent": sum(p.urgent for p in plans),
                       "with_steps": sum(bool(p.steps) for p in plans), "templates": len(templates),
                       "templates_with_steps": sum(bool(t.steps) for t in templates)},
            "templates": [t.to_dict() for t in templates],
            "clusters": [p.to_dict() for p in plans]}
