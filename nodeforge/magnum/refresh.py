"""Image refresh: a template or a cluster whose image was superseded by an approved image
of the **same** Kubernetes version (a rebuild after a security update), planned as its own
step of ``template upgrade-plan``. Pure, over the :class:`~.live.LiveState` the audit reads.

*Superseded* is the catalog's notion (:mod:`nodeforge.publish.catalog`): images of one
group (Kubernetes minor, variant, OS: :func:`~nodeforge.publish.catalog.group_filters`)
and one ownership scope (``nodeforge_scope``; a legacy image without one only by other
legacy ones) replace each other on promote; the approved, active, listed one promoted
last (``nodeforge_promoted_at``, else ``created_at``) is the group's current image, the
one ``template apply`` picks. An image is superseded by a same-version rebuild when its
group has an approved, active, listed image other than itself of the same
``kube_version``, promoted after it, or any such one when the image itself is no longer
approved and listed (hidden or retired by retention, :func:`~nodeforge.publish.catalog.state`).

Templates are planned per *line*: a nodeforge template's current version (the highest
``nodeforge_template_version`` of its scope and name; older versions are hidden by apply
and their clusters planned on their own), every visible hand-made template. A line's step:

* ``refresh``: its group's current image is a same-version rebuild of its image:
  ``nodeforge template apply NAME`` makes ``NAME-v(N+1)`` with it (hand-made: by hand);
* ``patch``: its group's current image is a newer patch: apply makes a patch version
  (the version step a template takes; its clusters then follow the version steps).
"""

from __future__ import annotations

import dataclasses

from nodeforge.magnum import apply as AP, audit as A, drivers
from nodeforge.publish import catalog, glance_api as g

P = g.P


def _key(image: dict) -> tuple[str, str]:
    """Promotion order, as ``template apply`` picks (newest promoted, then newest created)."""
    return image.get(f"{P}promoted_at") or "", image.get("created_at") or ""


def current(image: dict) -> bool:
    """Approved, active and listed: an image a template may be given now."""
    return catalog.state(image) == "approved" and image.get("status") == g.ACTIVE


def _in_filters(image: dict, filters: dict) -> bool:
    """Whether a listed image passes Glance's filters (tags: all of them; properties: equal)."""
    tags = set(image.get("tags") or [])
    return all(set(v) <= tags if k == "tag" else str(image.get(k)) == str(v) for k, v in filters.items())


def group(image: dict, images: list[dict]) -> list[dict]:
    """The images of ``image``'s catalog group and scope (itself included); empty for an image
    that is not a nodeforge catalog image (no Kubernetes minor or variant)."""
    if not image.get(f"{P}k8s_minor") or not image.get(f"{P}variant"):
        return []
    scope = g.scope_of(image)
    filters = catalog.group_filters(image, scope)
    return [i for i in images if _in_filters(i, filters) and g.scope_of(i) == scope]


def newest(image: dict, images: list[dict]) -> dict | None:
    """The group's current image (what ``template apply`` would choose), or None."""
    usable = [i for i in group(image, images) if current(i)]
    return max(usable, key=_key) if usable else None


def superseded_by(image: dict, images: list[dict]) -> dict | None:
    """The same-version rebuild that supersedes ``image`` (module docstring), or None."""
    version = A.parse_version(image.get("kube_version"))
    if version is None:
        return None
    same = [i for i in group(image, images) if i["id"] != image["id"] and current(i)
            and A.parse_version(i.get("kube_version")) == version]
    if not same:
        return None
    best = max(same, key=_key)
    return best if not current(image) or _key(best) > _key(image) else None


def rolling(template: dict, image: dict | None) -> drivers.Driver | None:
    """The template's driver when it replaces nodes on ``cluster upgrade`` to a template with
    another image (Cluster API rolls the machines), else None: the refresh is manual."""
    named = template.get("driver")
    if named:
        found = drivers.get(named)
    else:
        serving = drivers.serving(template.get("server_type") or "vm", A.effective_distro(template, image),
                                  template.get("coe") or "kubernetes")
        found = serving[0] if len(serving) == 1 else None
    return found if found is not None and found.rolling_image else None


def line_of(template: dict) -> tuple[str, str] | None:
    """(scope, name) of a nodeforge template's line; None for a hand-made one."""
    m = AP.marks(template)
    return (m[AP.MARK_SCOPE], m[AP.MARK_TEMPLATE]) if m[AP.MARK_SCOPE] and m[AP.MARK_TEMPLATE] else None


def heads(templates: list[dict]) -> list[dict]:
    """The templates planned as lines: each nodeforge line's highest version, every visible hand-made one."""
    top: dict[tuple[str, str], dict] = {}
    out = []
    for t in templates:
        line = line_of(t)
        if line is None:
            if not t.get("hidden"):
                out.append(t)
        elif line not in top or AP._version(t) > AP._version(top[line]):
            top[line] = t
    return sorted(out + list(top.values()), key=lambda t: (t.get("name") or "", t["uuid"]))


@dataclasses.dataclass(frozen=True)
class TemplateStep:
    kind: str                  # refresh | patch
    from_version: str
    to_version: str
    from_image: str
    to_image: str
    to_image_name: str
    new_template: str          # the version apply makes (NAME-vN); '' for a hand-made template
    reason: str
    command: str | None        # None: a manual step (``manual`` says what)
    manual: str = ""


@dataclasses.dataclass
class TemplatePlan:
    template: str
    template_id: str
    managed: str | None        # the nodeforge template NAME (apply's file); None: hand-made
    kube_tag: str | None
    image_id: str | None
    clusters: list[str]
    steps: list[TemplateStep]
    notes: list[str]

    def to_dict(self) -> dict:
        return {**{k: v for k, v in dataclasses.asdict(self).items() if k != "steps"},
                "steps": [dataclasses.asdict(s) for s in self.steps],
                "commands": [s.command for s in self.steps if s.command]}


def _next_name(t: dict, templates: list[dict]) -> str:
    """The name ``template apply`` gives the line's next version (one above any NAME-vK in Magnum)."""
    scope, name = line_of(t)
    taken = [v for m in templates if (v := AP.version_of_name(name, m.get("name"))) is not None]
    ours = [AP._version(m) for m in templates if AP.owned(m, scope, name)]
    return AP.versioned_name(name, max([0, *taken, *ours]) + 1)


def plan_template(t: dict, idx: A.Index) -> TemplatePlan:
    """One line's plan (module docstring)."""
    image, why = idx.image(t.get("image_id"))
    line = line_of(t)
    plan = TemplatePlan(t.get("name") or "", t["uuid"], line[1] if line else None, A.kube_tag(t), t.get("image_id"),
                        sorted(c.get("name") or c["uuid"] for c in idx.clusters_of.get(t["uuid"], [])), [], [])
    if image is None:
        plan.notes.append(f"{why}: its catalog group is unknown, no refresh")
        return plan
    if not group(image, idx.state.images):
        plan.notes.append(f"image {image['id']} is not a nodeforge catalog image (no Kubernetes minor or variant): "
                          "no refresh known")
        return plan
    pick = newest(image, idx.state.images)
    if pick is None or pick["id"] == image["id"]:
        plan.notes.append("its image is its group's current approved image" if pick else
                          "its group has no approved, listed image: nothing to refresh to (see check --live)")
        return plan
    have, want = A.parse_version(image.get("kube_version")), A.parse_version(pick.get("kube_version"))
    if have is None or want is None or want < have:
        plan.notes.append(f"its group's current image {pick['id']} is Kubernetes {pick.get('kube_version')}, "
                          f"not newer than its image's {image.get('kube_version')}: no step")
        return plan
    kind = "refresh" if want == have else "patch"
    reason = (f"image {image['id']} ({image.get('name')}) {catalog.state(image)}: superseded by the same-version "
              f"rebuild {pick['id']} ({pick.get('name')})" if kind == "refresh" else
              f"newer approved patch {pick.get('kube_version')} of its group: {pick['id']} ({pick.get('name')})")
    if line:
        new = _next_name(t, idx.state.templates)
        plan.steps.append(TemplateStep(kind, image.get("kube_version") or "", pick.get("kube_version") or "",
                                       image["id"], pick["id"], pick.get("name") or "", new, reason,
                                       f"nodeforge template apply {line[1]}"))
    else:
        plan.steps.append(TemplateStep(kind, image.get("kube_version") or "", pick.get("kube_version") or "",
                                       image["id"], pick["id"], pick.get("name") or "", "", reason, None,
                                       manual=f"hand-made template: create a copy of {plan.template} with image "
                                              f"{pick['id']} (openstack coe cluster template create ... --image "
                                              f"{pick['id']}), or declare it in a template file for "
                                              "'nodeforge template apply'"))
    return plan


def plan_templates(idx: A.Index) -> list[TemplatePlan]:
    return [plan_template(t, idx) for t in heads(idx.state.templates)]
