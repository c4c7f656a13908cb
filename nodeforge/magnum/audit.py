"""``template check --live``: audit every cluster template and cluster in Magnum.

Every template is audited, nodeforge's own and hand-made ones alike, against
what Glance, Nova and Ironic hold now (:class:`~.live.LiveState`, read once
per resource type). :func:`audit` is pure: state in, :class:`Finding` rows
out, one per problem:

=====================  ===================================================
kind                   when
=====================  ===================================================
``image_missing``      the template's ``image_id`` names no image Glance lists (deleted, or never there)
``image_deleted``      the image is ``deleted`` / ``pending_delete``
``image_retired``      retired by retention: deactivated, or tagged ``nodeforge-superseded``
``image_hidden``       ``os_hidden`` (unlisted; superseded or withdrawn)
``image_not_approved`` not tagged ``nodeforge-approved`` (a candidate, or no nodeforge catalog image)
``image_status``       any other status than ``active``
``kube_version``       the image's ``kube_version`` is not the template's ``kube_tag``
``kube_tag``           no ``kube_tag`` label, or one outside the maintained Kubernetes minors
``flavor_missing``     ``flavor_id`` / ``master_flavor_id`` names no Nova flavor
``flavor_shape``       a bare-metal flavor (one with a ``resources:CUSTOM_*`` extra spec) that is not
                       bare-metal-shaped (:meth:`nodeforge.compute.flavors.Shape.problems`)
``capacity``           a bare-metal flavor with no ``available``, non-maintenance node of its resource
                       class and traits
``boot_volume``        a flavor with a zero root disk and no ``boot_volume_size`` label > 0
``driver``             no known driver serves (server_type, os_distro, coe); or the template's
                       ``driver`` is unknown or does not serve it
``cluster_image``      a cluster whose template's image is no longer approved (one per cluster)
``cluster_template``   a cluster whose template is not in Magnum's listing
=====================  ===================================================

Maintained minors (:func:`maintained_minors`): ``--maintained`` if given;
else the Kubernetes minors the version lockfile pins (``manifests/
versions.yaml``: one entry per minor upstream maintains; the newest three if
it has more); else the three newest minors of the approved nodeforge images
in Glance.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from nodeforge.compute import flavors as F
from nodeforge.publish import glance_api as g
from nodeforge.magnum import drivers
from nodeforge.magnum.live import LiveState

MAINTAINED = 3
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?([-+].*)?$")
IMAGE_KINDS = ("image_missing", "image_deleted", "image_retired", "image_hidden", "image_not_approved",
               "image_status")
# The label nodeforge's apply writes on each version of a template ; absent on hand-made ones.
VERSION_LABEL = "nodeforge_template_version"


def parse_version(text) -> tuple[int, int, int] | None:
    """``v1.36.1`` / ``1.36.1`` / ``1.36`` -> (1, 36, 1) / (1, 36, 0); None if not a version."""
    m = _VERSION.match(str(text or "").strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def minor_of(text) -> str | None:
    v = parse_version(text)
    return f"{v[0]}.{v[1]}" if v else None


def minor_key(minor: str) -> tuple[int, int]:
    major, _, m = minor.partition(".")
    return int(major), int(m)


@dataclasses.dataclass(frozen=True)
class Maintained:
    minors: tuple[str, ...]
    source: str             # "option", "lockfile PATH", "approved images", "none"

    def to_dict(self) -> dict:
        return {"minors": list(self.minors), "source": self.source}


def maintained_minors(option: Iterable[str] | None, lockfile_minors: Iterable[str] | None,
                      images: list[dict], *, lockfile_label: str = "lockfile") -> Maintained:
    """The rule in the module docstring: option, else lockfile, else approved images."""
    if option:
        return Maintained(tuple(sorted(set(option), key=minor_key)), "option")
    if lockfile_minors:
        minors = sorted(set(lockfile_minors), key=minor_key)[-MAINTAINED:]
        return Maintained(tuple(minors), lockfile_label)
    found = {i.get(f"{g.P}k8s_minor") or minor_of(i.get("kube_version")) for i in images
             if g.TAG_APPROVED in (i.get("tags") or []) and i.get("status") == g.ACTIVE}
    found.discard(None)
    if found:
        return Maintained(tuple(sorted(found, key=minor_key)[-MAINTAINED:]), "approved images")
    return Maintained((), "none")


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str
    template: str             # name ('' for a cluster whose template is gone)
    template_id: str
    subject: str              # the field (image_id, flavor_id, labels.kube_tag, driver) or the cluster
    detail: str
    cluster: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Index:
    """Lookups over a :class:`LiveState` (images and flavors by ID or by unique name)."""

    def __init__(self, state: LiveState):
        self.state = state
        self.images = {i["id"]: i for i in state.images}
        self.image_names: dict[str, list[dict]] = {}
        for i in state.images:
            self.image_names.setdefault(i.get("name"), []).append(i)
        self.flavors = {f["id"]: f for f in state.flavors}
        self.flavor_names: dict[str, list[dict]] = {}
        for f in state.flavors:
            self.flavor_names.setdefault(f.get("name"), []).append(f)
        self.templates = {t["uuid"]: t for t in state.templates}
        self.clusters_of: dict[str, list[dict]] = {}
        for c in state.clusters:
            self.clusters_of.setdefault(c.get("cluster_template_id"), []).append(c)

    def image(self, ref) -> tuple[dict | None, str | None]:
        if not ref:
            return None, "the template names no image"
        if ref in self.images:
            return self.images[ref], None
        named = self.image_names.get(ref, [])
        if len(named) == 1:
            return named[0], None
        if named:
            return None, f"{len(named)} images are named '{ref}' (Magnum needs one)"
        return None, f"no image '{ref}' in Glance (deleted, or never there / not visible)"

    def flavor(self, ref) -> dict | None:
        if ref in self.flavors:
            return self.flavors[ref]
        named = self.flavor_names.get(ref, [])
        return named[0] if len(named) == 1 else None


def image_problem(image: dict) -> tuple[str, str] | None:
    """(kind, detail) of the first reason ``image`` may not back a template, or None."""
    tags = set(image.get("tags") or [])
    status = image.get("status")
    what = f"image {image['id']} ({image.get('name')})"
    if status in ("deleted", "pending_delete"):
        return "image_deleted", f"{what} is {status}"
    if status == g.DEACTIVATED or g.TAG_SUPERSEDED in tags:
        why = "deactivated" if status == g.DEACTIVATED else f"tagged {g.TAG_SUPERSEDED}"
        return "image_retired", f"{what} was retired by image retention ({why})"
    if status != g.ACTIVE:
        return "image_status", f"{what} is '{status}', not active"
    if image.get("os_hidden"):
        return "image_hidden", f"{what} is hidden (os_hidden: superseded or withdrawn)"
    if g.TAG_APPROVED not in tags:
        if g.TAG_CANDIDATE in tags:
            return "image_not_approved", f"{what} is a candidate, not approved ('nodeforge image promote')"
        return "image_not_approved", f"{what} is not an approved nodeforge catalog image (no {g.TAG_APPROVED} tag)"
    return None


def kube_tag(template: dict) -> str | None:
    return (template.get("labels") or {}).get("kube_tag")


def cluster_kube_tag(cluster: dict, template: dict | None) -> str | None:
    """A cluster's Kubernetes version: its own ``kube_tag`` label (clusters may override
    labels), else its template's."""
    return (cluster.get("labels") or {}).get("kube_tag") or (kube_tag(template) if template else None)


def template_version(template: dict) -> str | None:
    """The version nodeforge's apply gave a template (label), else None (hand-made)."""
    return (template.get("labels") or {}).get(VERSION_LABEL)


def effective_distro(template: dict, image: dict | None) -> str | None:
    return template.get("cluster_distro") or (image or {}).get("os_distro")


def image_findings(t: dict, idx: Index) -> list[Finding]:
    """The findings about a template's image alone (what makes its clusters' image unapproved)."""
    name, tid = t.get("name") or "", t.get("uuid") or ""
    image, why = idx.image(t.get("image_id"))
    if image is None:
        return [Finding("image_missing", name, tid, "image_id", why)]
    problem = image_problem(image)
    return [Finding(problem[0], name, tid, "image_id", problem[1])] if problem else []


def _audit_template(t: dict, idx: Index, maintained: Maintained) -> list[Finding]:
    out = image_findings(t, idx)
    image, _ = idx.image(t.get("image_id"))
    out += _kube_findings(t, image, maintained)
    out += _flavor_findings(t, idx)
    out += _driver_findings(t, image)
    return out


def _kube_findings(t: dict, image: dict | None, maintained: Maintained) -> list[Finding]:
    """Kubernetes version: label present, maintained, and the image's."""
    name, tid = t.get("name") or "", t.get("uuid") or ""
    out = []
    tag = kube_tag(t)
    if not tag:
        out.append(Finding("kube_tag", name, tid, "labels.kube_tag",
                           "no kube_tag label: the driver's default Kubernetes version applies, "
                           "which no image records"))
    elif parse_version(tag) is None:
        out.append(Finding("kube_tag", name, tid, "labels.kube_tag", f"kube_tag '{tag}' is not a version"))
    else:
        minor = minor_of(tag)
        if maintained.minors and minor not in maintained.minors:
            side = "older than" if minor_key(minor) < minor_key(maintained.minors[0]) else "outside"
            out.append(Finding("kube_tag", name, tid, "labels.kube_tag",
                               f"kube_tag {tag} is minor {minor}, {side} the maintained minors "
                               f"{', '.join(maintained.minors)} ({maintained.source})"))
        if image is not None:
            version = image.get("kube_version")
            if not version:
                out.append(Finding("kube_version", name, tid, "image_id",
                                   f"image {image['id']} ({image.get('name')}) records no kube_version; the "
                                   f"template's kube_tag is {tag}"))
            elif parse_version(version) != parse_version(tag):
                out.append(Finding("kube_version", name, tid, "image_id",
                                   f"image {image['id']} ({image.get('name')}) is Kubernetes {version} but the "
                                   f"template's kube_tag is {tag}"))
    return out


def _flavor_findings(t: dict, idx: Index) -> list[Finding]:
    """The master and node flavors: in Nova, a root disk or a boot volume, bare-metal-shaped,
    an available node."""
    name, tid = t.get("name") or "", t.get("uuid") or ""
    out = []
    try:
        boot_volume = float((t.get("labels") or {}).get("boot_volume_size") or 0)
    except ValueError:
        boot_volume = 0
    for field in ("master_flavor_id", "flavor_id"):
        ref = t.get(field)
        if not ref:
            continue
        flavor = idx.flavor(ref)
        if flavor is None:
            out.append(Finding("flavor_missing", name, tid, field, f"flavor '{ref}' not found in Nova"))
            continue
        fname = f"flavor '{flavor.get('name')}' ({flavor['id']})" if flavor.get("name") != ref else f"flavor '{ref}'"
        if not flavor.get("disk") and boot_volume <= 0:
            out.append(Finding("boot_volume", name, tid, field,
                               f"{fname} has a zero root disk and the template sets no boot_volume_size "
                               "label > 0: nodes would boot from a volume of the cloud's default size, or fail"))
        shape = F.Shape.of(flavor)
        if not shape.resource_classes:
            continue                 # a VM flavor: nothing bare-metal to check
        problems = shape.problems()
        for problem in problems:
            out.append(Finding("flavor_shape", name, tid, field, f"{fname} is not bare-metal-shaped: {problem}"))
        if problems:
            continue
        available = sum(1 for n in idx.state.nodes if shape.fits(n) and F.node_available(n))
        if available == 0:
            fitting = sum(1 for n in idx.state.nodes if shape.fits(n))
            out.append(Finding("capacity", name, tid, field,
                               f"{fname} has no available node (resource class {shape.resource_class}, traits "
                               f"{', '.join(sorted(shape.required)) or 'none'}; {fitting} node(s) match, none "
                               "'available' and out of maintenance)"))
    return out


def _driver_findings(t: dict, image: dict | None) -> list[Finding]:
    """The driver named (known, serving the template's server type, distro and COE), or one loaded that serves it."""
    name, tid = t.get("name") or "", t.get("uuid") or ""
    out = []
    server_type = t.get("server_type") or "vm"
    distro = effective_distro(t, image)
    coe = t.get("coe") or "kubernetes"
    tuple_ = drivers.describe(server_type, distro, coe)
    named = t.get("driver")
    if named:
        driver = drivers.get(named)
        if driver is None:
            out.append(Finding("driver", name, tid, "driver",
                               f"driver '{named}' is not a known Magnum driver ({', '.join(sorted(drivers.DRIVERS))})"))
        elif not distro or not driver.serves(server_type, distro, coe):
            others = [d.name for d in drivers.serving(server_type, distro, coe)]
            out.append(Finding("driver", name, tid, "driver",
                               f"driver '{named}' does not serve {tuple_}"
                               + (f" ({', '.join(others)} does)" if others else "")))
    elif not drivers.serving(server_type, distro, coe):
        out.append(Finding("driver", name, tid, "server_type",
                           f"no loaded driver serves {tuple_}: cluster create would be refused"
                           + (" (no driver serves server_type bm: give a vm template bare-metal flavors)"
                              if server_type == "bm" else "")))
    return out


def audit(state: LiveState, maintained: Maintained) -> list[Finding]:
    """Every finding over every template and cluster in ``state`` (pure)."""
    idx = Index(state)
    out: list[Finding] = []
    for t in sorted(state.templates, key=lambda t: (t.get("name") or "", t["uuid"])):
        found = _audit_template(t, idx, maintained)
        out.extend(found)
        bad_image = [f for f in found if f.kind in IMAGE_KINDS]
        for c in sorted(idx.clusters_of.get(t["uuid"], []), key=lambda c: c.get("name") or ""):
            if bad_image:
                out.append(Finding("cluster_image", t.get("name") or "", t["uuid"], c.get("name") or c["uuid"],
                                   f"cluster {c.get('name')} ({c.get('status')}) runs an image that is no longer "
                                   f"approved: {bad_image[0].detail}", cluster=c.get("name") or c["uuid"]))
    for c in state.clusters:
        if c.get("cluster_template_id") not in idx.templates:
            out.append(Finding("cluster_template", "", c.get("cluster_template_id") or "", c.get("name") or c["uuid"],
                               f"cluster {c.get('name')} references template {c.get('cluster_template_id')}, "
                               "which Magnum does not list", cluster=c.get("name") or c["uuid"]))
    return out


def clusters_by_template(state: LiveState) -> list[dict]:
    """Per template: its fields of interest and the clusters built from it (name, status,
    kube_tag, template version), each flagged when its image is no longer approved."""
    idx = Index(state)
    rows = []
    for t in sorted(state.templates, key=lambda t: (t.get("name") or "", t["uuid"])):
        bad = image_findings(t, idx)
        rows.append({
            "template": t.get("name"), "template_id": t["uuid"], "kube_tag": kube_tag(t),
            "template_version": template_version(t), "image_id": t.get("image_id"),
            "hidden": bool(t.get("hidden")), "driver": t.get("driver"),
            "clusters": [{"name": c.get("name"), "uuid": c["uuid"], "status": c.get("status"),
                          "kube_tag": cluster_kube_tag(c, t), "template_version": template_version(t),
                          "image_approved": not bad}
                         for c in sorted(idx.clusters_of.get(t["uuid"], []), key=lambda c: c.get("name") or "")],
        })
    return rows


def report(state: LiveState, maintained: Maintained) -> dict:
    findings = audit(state, maintained)
    return {"ok": not findings, "maintained": maintained.to_dict(),
            "counts": {"templates": len(state.templates), "clusters": len(state.clusters),
                       "findings": len(findings)},
            "findings": [f.to_dict() for f in findings], "templates": clusters_by_template(state)}
