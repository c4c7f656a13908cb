"""The approved-image catalog: promote, list and show nodeforge images.

An image published by ``image publish`` is a *candidate* (private, tag
``nodeforge-candidate``). ``promote`` makes a verified candidate *approved*
(public, tag ``nodeforge-approved``) and applies the retention policy to the
older approved images of its group (Kubernetes minor, variant, OS) **and its
ownership scope** (``nodeforge_scope``, see :mod:`.glance`): approved images
of other scopes, and legacy ones without a scope, are never hidden,
deactivated or deleted by a promote. An image published before scopes has no
scope: promote refuses it unless given one (``scope=``), which it then
carries. Promote
is a plan (:func:`plan_promote`, pure: Glance records in, actions out) and an
apply (:func:`apply_promote`), so ``--dry-run`` shows exactly what would change.

"Verified" is never taken from the ``nodeforge_verify`` string alone: before
planning, :func:`check_verify_report` downloads the verify report publish
stored beside the image (digest-checked against ``nodeforge_verify_sha256``)
and judges it again with :mod:`.verifyreport` against the Glance image's
build id, manifest digest and ``os_hash_value``. Promote may run in another
job, on another machine, than verify and publish.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging

from nodeforge import plan as PL
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imageverify import attest, verifyreport
from nodeforge.publish import glance as g
from nodeforge.clients import container_infra
from nodeforge.publish.retention import Expire, RetentionPolicy, magnum_hold
from nodeforge.schema import loader

log = logging.getLogger(__name__)
P = g.P


class PromoteRefused(NodeforgeError):
    message = "cannot promote {image}: {detail}"


# The shared plan kinds (nodeforge/plan.py); a promote plans these five: approve (the promoted
# image); keep (stays approved and listed); hide (approved, bootable by ID, unlisted); deactivate; delete.
Action = PL.Kind
KINDS = (PL.Kind.APPROVE, PL.Kind.KEEP, PL.Kind.HIDE, PL.Kind.DEACTIVATE, PL.Kind.DELETE)


@dataclasses.dataclass(frozen=True)
class Step:
    image_id: str
    name: str
    action: Action
    reason: str
    scope: str | None = None        # the ownership scope the promote acts within

    def to_change(self) -> PL.Change:
        """This step in the shared shape (nodeforge/plan.py)."""
        return PL.Change(self.action, self.name or self.image_id, (), self.reason)

    def to_dict(self) -> dict:
        return {"image_id": self.image_id, "name": self.name, "action": self.action.value, "reason": self.reason,
                "scope": self.scope}


def state(image: dict) -> str:
    tags = set(image.get("tags") or [])
    if g.TAG_APPROVED in tags:
        return "superseded" if image.get("os_hidden") or g.TAG_SUPERSEDED in tags else "approved"
    return "candidate" if g.TAG_CANDIDATE in tags else "unknown"


def in_use(image: dict) -> bool:
    return str(image.get(f"{P}in_use", "")).lower() in ("true", "yes", "1") or g.TAG_IN_USE in (image.get("tags") or [])


def _promoted_key(image: dict) -> str:
    return image.get(f"{P}promoted_at") or image.get("created_at") or ""


def check_promotable(image: dict) -> None:
    name = image.get("name") or image["id"]
    if g.TAG not in (image.get("tags") or []) or image.get(f"{P}role") != "image":
        raise PromoteRefused(image=name, detail="not a nodeforge node image (published by 'nodeforge image publish')")
    if image.get("status") != g.ACTIVE:
        raise PromoteRefused(image=name, detail=f"its status is '{image.get('status')}', not active")
    verify = image.get(f"{P}verify")
    if verify != "passed":
        raise PromoteRefused(image=name, detail=f"its build's boot verification is '{verify or 'absent'}'; "
                                                "only builds that passed 'nodeforge image verify' are approved")
    if not image.get(f"{P}verify_report") or not image.get(f"{P}verify_sha256"):
        raise PromoteRefused(image=name, detail=f"it carries no verify report ({P}verify_report, {P}verify_sha256): "
                                                "'nodeforge_verify' alone proves nothing; publish the verified "
                                                "build directory again to attach its verify.json")


def check_verify_report(conn, image: dict) -> verifyreport.Verdict:
    """Refuse ``image`` unless the verify report stored beside it in Glance is intact, signed by a
    trusted verifier key, and, judged strictly again, passes for this very image (its build id,
    manifest digest and bytes)."""
    name = image.get("name") or image["id"]
    source = f"verify report {image[f'{P}verify_report']}"
    try:
        data = g.download_verify_report(conn, image)
        binding = g.verify_binding(image)
        report = attest.open_report(data, source).report
    except (g.PublishError, attest.AttestationError) as exc:
        raise PromoteRefused(image=name, detail=str(exc)) from None
    verdict = verifyreport.judge(report, [binding], source)[binding.variant]
    if not verdict.passed:
        raise PromoteRefused(image=name, detail=verdict.reason)
    return verdict


def check_canary(conn, image: dict, classes: tuple[str, ...] | list[str]) -> None:
    """Refuse a bare-metal ``image`` unless a canary deploy passed on each of ``classes`` (the
    canary policy's required resource classes): the per-class verdict property says passed, and
    the canary report stored beside the image (digest-checked) is this image's and says passed
    for that class. VM images and an empty ``classes`` are not concerned."""
    if not classes or image.get(f"{P}variant") != "baremetal":
        return
    name = image.get("name") or image["id"]
    missing = [rc for rc in classes if not str(image.get(g.canary_property(rc)) or "").startswith("passed ")]
    if missing:
        raise PromoteRefused(image=name, detail=f"no passing canary deploy on {', '.join(missing)} (the canary policy "
                                                "asks for one); run 'nodeforge image canary' first")
    try:
        report = loader.parse_json(f"image {name}'s canary report", g.download_canary_report(conn, image))
    except (g.PublishError, ConfigError) as exc:
        raise PromoteRefused(image=name, detail=f"its canary report cannot be trusted: {exc}") from None
    results = {r.get("resource_class"): r for r in report.get("results", []) if isinstance(r, dict)}
    wrong = [rc for rc in classes if report.get("image_id") != image["id"] or not (results.get(rc) or {}).get("passed")]
    if wrong:
        raise PromoteRefused(image=name, detail=f"its canary report does not show a pass of this image on "
                                                f"{', '.join(wrong)}")


def promote_scope(image: dict, scope: str | None = None) -> str:
    """The scope a promote of ``image`` acts within: the image's own ``nodeforge_scope``.
    ``scope`` (validated) must then be the same; an image without one (published before
    scopes) is refused unless ``scope`` is given, which it is then taken into."""
    g.check_scope(scope)
    name = image.get("name") or image["id"]
    own = g.scope_of(image)
    if own is not None:
        if scope is not None and scope != own:
            raise PromoteRefused(image=name, detail=f"it belongs to scope '{own}', not '{scope}' "
                                                    f"({g.SCOPE}); promote it within its own scope")
        return own
    if scope is None:
        raise PromoteRefused(image=name, detail=f"it carries no {g.SCOPE} (published before ownership scopes), "
                                                "so it is no declaration's: give --scope to take it into one "
                                                "(retention then acts within that scope)")
    return scope


def group_filters(image: dict, scope: str | None = None) -> dict:
    """Glance filters for the approved images of ``image``'s group (and ``scope``, if given)."""
    filters = {"tag": [g.TAG, g.TAG_APPROVED, g.tag_k8s(image[f"{P}k8s_minor"]), g.tag_variant(image[f"{P}variant"])],
               "os_distro": image.get("os_distro"), "os_version": image.get("os_version")}
    if scope is not None:
        filters[g.SCOPE] = scope
    return filters


def plan_promote(image: dict, approved: list[dict], policy: RetentionPolicy, *,
                 scope: str | None = None, users: dict[str, list[str]] | None = None) -> list[Step]:
    """Steps for promoting ``image`` given the approved images of its group. Retention
    considers only the images of the promote's scope (:func:`promote_scope`): any other
    image in ``approved`` (another scope's, or a legacy one without a scope) gets no step.
    ``users`` (image ID -> Magnum templates/clusters using it): an image beyond ``keep``
    that Magnum uses is hidden, never deactivated or deleted."""
    check_promotable(image)
    own = promote_scope(image, scope)
    others = sorted((i for i in approved if i["id"] != image["id"] and i.get("status") != g.DEACTIVATED
                     and g.scope_of(i) == own),
                    key=_promoted_key, reverse=True)
    adopted = "" if g.scope_of(image) else f"; taken into scope '{own}'"
    steps = [Step(image["id"], image.get("name", ""), Action.APPROVE, "promoted" + adopted, own)]
    for pos, other in enumerate(others, start=2):
        name = other.get("name", "")
        if pos <= policy.visible:
            steps.append(Step(other["id"], name, Action.KEEP, f"newest {policy.visible} stay listed", own))
        elif pos <= policy.keep:
            steps.append(Step(other["id"], name, Action.HIDE,
                              f"beyond visible={policy.visible}, within keep={policy.keep}", own))
        elif in_use(other):
            steps.append(Step(other["id"], name, Action.HIDE, f"beyond keep={policy.keep} but marked in use", own))
        elif hold := magnum_hold(other["id"], users):
            steps.append(Step(other["id"], name, Action.HIDE, f"beyond keep={policy.keep} but {hold}", own))
        else:
            action = Action.DELETE if policy.expire is Expire.DELETE else Action.DEACTIVATE
            steps.append(Step(other["id"], name, action, f"beyond keep={policy.keep}", own))
    return steps


def _tags_op(image: dict, add: set[str], remove: set[str]) -> dict:
    tags = (set(image.get("tags") or []) - remove) | add
    return {"op": "replace", "path": "/tags", "value": sorted(tags)}


def apply_promote(conn, steps: list[Step], images: dict[str, dict]) -> None:
    """Carry out ``steps``; the promotion itself first, so a refusal (a member
    may not publicize) changes nothing else."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for step in steps:
        img = images[step.image_id]
        what = f"{step.action.value} of {step.name or step.image_id}"
        if step.action is Action.APPROVE:
            try:
                g.patch_image(conn, img["id"], [
                    {"op": "replace", "path": "/visibility", "value": "public"},
                    {"op": "replace", "path": "/os_hidden", "value": False},
                    _tags_op(img, {g.TAG_APPROVED}, {g.TAG_CANDIDATE, g.TAG_SUPERSEDED}),
                    *g.set_ops(img, {f"{P}promoted_at": now,
                                     **({g.SCOPE: step.scope} if step.scope and not g.scope_of(img) else {})}),
                ], what)
            except g.ForbiddenError as exc:
                raise PromoteRefused(image=step.name or step.image_id,
                                     detail=f"{exc} (making an image public is an admin action in Glance's "
                                            "default policy; promote with an admin cloud)") from None
            _side_images_public(conn, img)
        elif step.action is Action.KEEP:
            continue
        elif step.action in (Action.HIDE, Action.DEACTIVATE):
            g.patch_image(conn, img["id"], [{"op": "replace", "path": "/os_hidden", "value": True},
                                             _tags_op(img, {g.TAG_SUPERSEDED}, set())], what)
            if step.action is Action.DEACTIVATE:
                g.deactivate_image(conn, img["id"])
        elif step.action is Action.DELETE:
            g.delete_image(conn, img["id"])
            for prop in (f"{P}manifest_image", f"{P}verify_report", f"{P}provenance", f"{P}files_image"):
                if img.get(prop):
                    g.delete_image(conn, img[prop])
        log.info("%s: %s (%s)", step.image_id, step.action.value, step.reason)


def _side_images_public(conn, image: dict) -> None:
    """The manifest, verify report, provenance and per-file manifest images go public with their node image."""
    for prop, what in ((f"{P}manifest_image", "manifest"), (f"{P}verify_report", "verify report"),
                       (f"{P}provenance", "provenance"), (f"{P}files_image", "per-file manifest")):
        side_id = image.get(prop)
        if not side_id:
            continue
        try:
            m = g.get_image(conn, side_id)
        except g.PublishError:
            log.warning("%s image %s of %s is missing", what, side_id, image["id"])
            continue
        if m.get("visibility") != "public":
            g.patch_image(conn, side_id, [{"op": "replace", "path": "/visibility", "value": "public"}],
                          f"publicizing {what} {side_id}")


@dataclasses.dataclass
class PromotePlan:
    """What promoting an image does: its steps (the promotion first) and the
    images they act on, as read when planning."""

    steps: list[Step]
    images: dict[str, dict]

    def counts(self) -> dict[str, int]:
        return PL.counts(KINDS, (s.action for s in self.steps))

    def changes(self) -> list[PL.Change]:
        """The steps in the shared plan shape (nodeforge/plan.py)."""
        return [s.to_change() for s in self.steps]


def plan(conn, ref: str, policy: RetentionPolicy, *, scope: str | None = None,
         canary_classes: tuple[str, ...] = ()) -> PromotePlan:
    """Plan promoting ``ref`` within its scope (``scope``: see
    :func:`promote_scope`); reads Glance (and Magnum's users), writes nothing.
    Raises when the image may not be promoted (state, verify report)."""
    g.check_scope(scope)
    image = g.find_image(conn, ref)
    check_promotable(image)
    own = promote_scope(image, scope)
    check_verify_report(conn, image)
    check_canary(conn, image, canary_classes)
    approved = g.list_images(conn, **group_filters(image, own))
    # Templates may name their image by name: resolve names among the group's images.
    steps = plan_promote(image, approved, policy, scope=own, users=_users(conn, [image, *approved]))
    return PromotePlan(steps, {i["id"]: i for i in [image, *approved]})


def apply(conn, plan_: PromotePlan) -> list[Step]:
    """Carry out a :func:`plan` (the promotion first); the steps made."""
    apply_promote(conn, plan_.steps, plan_.images)
    return plan_.steps


def promote(conn, ref: str, policy: RetentionPolicy, *, scope: str | None = None,
            canary_classes: tuple[str, ...] = ()) -> list[Step]:
    """Promote ``ref``: :func:`apply` of :func:`plan` (a dry run is ``plan(...).steps``); the steps made."""
    return apply(conn, plan(conn, ref, policy, scope=scope, canary_classes=canary_classes))


# --------------------------------------------------------------------------
# Listing and facts

def summary(image: dict) -> dict:
    return {
        "id": image["id"],
        "name": image.get("name"),
        "k8s": (image.get("kube_version") or "").lstrip("v"),
        "variant": image.get(f"{P}variant"),
        "os": f"{image.get('os_distro', '')} {image.get('os_version', '')}".strip(),
        "build_date": image.get("image_build_date"),
        "state": state(image),
        "scope": g.scope_of(image),
        "verify": image.get(f"{P}verify", "absent"),
        "signed": "img_signature" in image,
        "visibility": image.get("visibility"),
        "status": image.get("status"),
    }


def _users(conn, images: list[dict]) -> dict[str, list[str]] | None:
    """Image ID -> Magnum templates and clusters using it; None when the cloud has no Magnum."""
    return container_infra.image_users(conn, images)


def list_catalog(conn, *, approved: bool = False, k8s: str | None = None, variant: str | None = None,
                 include_hidden: bool = False, scope: str | None = None) -> list[dict]:
    """nodeforge node images as :func:`summary` rows; ``scope``: only that scope's (legacy
    images without a scope are in no scope). Each row's ``used_by`` lists the Magnum
    templates and clusters using the image (None: the cloud has no Magnum)."""
    g.check_scope(scope)
    filters = {g.SCOPE: scope} if scope is not None else {}
    tags = [g.TAG]
    if approved:
        tags.append(g.TAG_APPROVED)
    if k8s:
        tags.append(g.tag_k8s(".".join(k8s.lstrip("v").split(".")[:2])))
    if variant:
        tags.append(g.tag_variant(variant))
    images = [i for i in g.list_images(conn, tag=tags, **filters) if i.get(f"{P}role") == "image"
              and (scope is None or g.scope_of(i) == scope)]
    if k8s and k8s.count(".") == 2:
        images = [i for i in images if (i.get("kube_version") or "").lstrip("v") == k8s.lstrip("v")]
    if not include_hidden:
        images = [i for i in images if not i.get("os_hidden")]
    users = _users(conn, images)
    rows = [dict(summary(i), used_by=None if users is None else users.get(i["id"], [])) for i in images]
    rows.sort(key=lambda r: (r["k8s"], r["variant"] or "", r["build_date"] or ""), reverse=True)
    return rows


CATALOG_SCHEMA = "nodeforge-catalog/1"


def snapshot(conn, *, cloud: str | None = None, scope: str | None = None) -> dict:
    """The catalog as one document (what a report's catalog page is made from): every nodeforge
    node image the connection sees, hidden ones included, as :func:`list_catalog` rows, with when
    and from which cloud it was taken."""
    import datetime

    taken = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"schema": CATALOG_SCHEMA, "cloud": cloud, "scope": scope, "taken_at": taken,
            "images": list_catalog(conn, include_hidden=True, scope=scope)}


_CORE = {"id", "name", "status", "visibility", "os_hidden", "tags", "size", "virtual_size", "disk_format",
         "container_format", "checksum", "os_hash_algo", "os_hash_value", "min_disk", "min_ram", "owner",
         "protected", "created_at", "updated_at", "file", "schema", "self", "direct_url", "locations", "stores"}


def show(conn, ref: str) -> dict:
    image = g.find_image(conn, ref)
    facts = summary(image)
    facts.update({
        "build_id": image.get(f"{P}build_id"),
        "k8s_minor": image.get(f"{P}k8s_minor"),
        "architecture": image.get("architecture"),
        "hidden": bool(image.get("os_hidden")),
        "promoted_at": image.get(f"{P}promoted_at"),
        "signature": ({"key_type": image.get("img_signature_key_type"),
                       "hash_method": image.get("img_signature_hash_method"),
                       "certificate_id": image.get("img_signature_certificate_uuid")}
                      if "img_signature" in image else None),
        "manifest_image": image.get(f"{P}manifest_image"),
        "manifest_sha256": image.get(f"{P}manifest_sha256"),
        "verify_report": image.get(f"{P}verify_report"),
        "verify_sha256": image.get(f"{P}verify_sha256"),
        "provenance": image.get(f"{P}provenance"),
        "provenance_sha256": image.get(f"{P}provenance_sha256"),
        "lockfile_sha256": image.get(f"{P}lockfile_sha256"),
        "hash": f"{image.get('os_hash_algo')}:{image.get('os_hash_value')}",
        "size": image.get("size"),
        "disk_format": image.get("disk_format"),
        "min_disk": image.get("min_disk"),
        "min_ram": image.get("min_ram"),
        "tags": sorted(image.get("tags") or []),
        "in_use": in_use(image),
        "used_by": (None if (users := _users(conn, [image])) is None else users.get(image["id"], [])),
        "properties": {k: v for k, v in sorted(image.items()) if k not in _CORE and k != "img_signature"},
    })
    return facts
