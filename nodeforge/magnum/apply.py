"""``template apply``: declared cluster templates written to Magnum, as versions.

Plan (pure: resolutions + Magnum's templates and clusters as plain dicts, see
:mod:`nodeforge.clients.container_infra`), then apply. Rules (docs/flavors-and-templates.md,
"template apply"):

* **Naming.** A template file ``NAME`` becomes Magnum templates ``NAME-v1``,
  ``NAME-v2``, ... The next version is one more than the highest ``NAME-vK``
  Magnum has (whoever made it), so a name is never reused.
* **Marks.** Every template nodeforge writes carries the labels
  ``nodeforge_scope`` (the file's ownership scope: ``scope:``, else derived
  from its path), ``nodeforge_template`` (NAME), ``nodeforge_template_version``
  (N) and ``nodeforge_digest`` (a SHA-256 of the rendered content), and the
  tags ``nodeforge,scope:<scope>,v<N>``. Only templates marked with the
  file's scope and name are ever changed; hand-made ones and other scopes'
  are never touched.
* **Versions.** The content is everything Magnum would build from (image,
  flavors, driver, server type, networks, labels, the ``magnum:`` fields
  except public/hidden). Same digest as the current version: nothing to
  create (a re-run makes 0 writes); another digest: a new version. Then
  every older version not yet hidden gets ``hidden=true``. Older versions
  are never deleted and never changed beyond ``hidden`` (Magnum accepts only
  name/public/hidden/tags updates on a template a cluster uses).
* ``public``/``hidden`` of the current version come from the file
  (``magnum.public``, ``magnum.hidden``) and are updated in place.
* Bad input (unknown driver, missing flavor or network, a node group the
  driver cannot serve, ...) anywhere in the selected files refuses the whole
  apply before any write (:class:`TemplateInputError`, exit 2); a template
  whose links are broken otherwise (no approved image, ...) is not written
  and reported (exit 3).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from typing import Any

from nodeforge import plan as PL
from nodeforge.magnum import templates as T
from nodeforge.errors import ConfigError, ExitCode
from nodeforge.clients import container_infra as mc

log = logging.getLogger(__name__)

MARK_SCOPE = "nodeforge_scope"
MARK_TEMPLATE = "nodeforge_template"
MARK_VERSION = "nodeforge_template_version"
MARK_DIGEST = "nodeforge_digest"
MARKS = (MARK_SCOPE, MARK_TEMPLATE, MARK_VERSION, MARK_DIGEST)
# Fields Magnum lets change on a template in use; nodeforge changes only these in place.
MUTABLE = ("public", "hidden", "tags")


class TemplateInputError(ConfigError):
    message = "{count} problem(s) in the template file(s), nothing was written:\n  {details}"


# The shared plan kinds (nodeforge/plan.py); template apply plans these five, in this order:
# create (first version); new-version (content changed: version N+1, older ones hidden); update
# (public/hidden/tags of the current version, or hiding older versions); no-op; broken (links
# broken: no approved image, ...: not written).
Action = PL.Kind
KINDS = (PL.Kind.CREATE, PL.Kind.NEW_VERSION, PL.Kind.UPDATE, PL.Kind.NOOP, PL.Kind.BROKEN)


def versioned_name(name: str, version: int) -> str:
    return f"{name}-v{version}"


def version_of_name(name: str, magnum_name: str | None) -> int | None:
    m = re.fullmatch(re.escape(name) + r"-v(\d+)", str(magnum_name or ""))
    return int(m.group(1)) if m else None


def tags_for(scope: str, version: int) -> str:
    return f"nodeforge,scope:{scope},v{version}"


def content_of(body: dict) -> dict:
    """What a version is made of: the body less name, public/hidden/tags and nodeforge's marks."""
    out = {k: v for k, v in body.items() if k not in ("name", *MUTABLE)}
    out["labels"] = {k: str(v) for k, v in (body.get("labels") or {}).items() if k not in MARKS}
    return out


def digest(body: dict, project_id: str | None = None) -> str:
    """The version's content digest; a declared owning project is part of the content (Magnum cannot move a
    template to another project, so another project is another version)."""
    content = content_of(body)
    if project_id:
        content["project_id"] = project_id
    canon = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def marks(tmpl: dict) -> dict:
    labels = tmpl.get("labels") or {}
    return {k: labels.get(k) for k in MARKS}


def owned(tmpl: dict, scope: str, name: str) -> bool:
    m = marks(tmpl)
    return m[MARK_SCOPE] == scope and m[MARK_TEMPLATE] == name


def _version(tmpl: dict) -> int:
    try:
        return int(marks(tmpl)[MARK_VERSION])
    except (TypeError, ValueError):
        return 0


# ----------------------------------------------------------------------------- plan

# One field of the current version before -> after (str: ``field: before -> after``).
Change = PL.FieldChange


@dataclasses.dataclass
class TemplatePlan:
    name: str                        # the file's template name
    scope: str
    action: Action
    path: str | None = None
    version: int | None = None       # the version current after apply
    magnum_name: str | None = None
    current: dict | None = None      # the current version in Magnum (before apply)
    body: dict | None = None         # what is created (create / new-version)
    changes: list[Change] = dataclasses.field(default_factory=list)     # field by field, vs the current version
    updates: dict = dataclasses.field(default_factory=dict)            # in-place changes of the current version
    hide: list[dict] = dataclasses.field(default_factory=list)         # older versions to hide
    versions: list[dict] = dataclasses.field(default_factory=list)     # every version of ours, with clusters
    issues: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    digest: str | None = None
    images: dict = dataclasses.field(default_factory=dict)
    project_id: str | None = None    # the declared owning project (None: the project of --os-cloud)

    @property
    def writes(self) -> int:
        return ((1 if self.action in (Action.CREATE, Action.NEW_VERSION) else 0) + (1 if self.updates else 0)
                + len(self.hide))

    def to_change(self) -> PL.Change:
        """This template's plan in the shared shape (nodeforge/plan.py)."""
        return PL.Change(self.action, self.name, tuple(self.changes), "; ".join(self.issues) or None)

    def to_dict(self) -> dict:
        return {"template": self.name, "scope": self.scope, "path": self.path, "action": self.action.value,
                "version": self.version, "magnum_name": self.magnum_name,
                "current": ({"uuid": self.current.get("uuid"), "name": self.current.get("name"),
                             "version": _version(self.current)} if self.current else None),
                "digest": self.digest, "project_id": self.project_id, "changes": [c.to_dict() for c in self.changes],
                "updates": self.updates,
                "hide": [{"uuid": h.get("uuid"), "name": h.get("name")} for h in self.hide],
                "versions": self.versions, "images": self.images, "issues": self.issues,
                "warnings": self.warnings, "writes": self.writes, "body": self.body}


def _flat(body: dict) -> dict:
    out = {}
    for k, v in body.items():
        if k == "labels":
            out.update({f"labels.{lk}": str(lv) for lk, lv in (v or {}).items()})
        else:
            out[k] = v
    return out


def diff(current: dict | None, desired: dict) -> list[Change]:
    """Field by field, the desired body vs a template as Magnum answers it (labels per key)."""
    if current is None:
        return [Change("template", None, "new")]
    have, want = _flat(current), _flat(desired)
    marks_ = {f"labels.{m}" for m in MARKS}
    keys = [k for k in want if k != "name" and k not in marks_] + sorted(
        k for k in have if k.startswith("labels.") and k not in want and k not in marks_)
    out = []
    for k in keys:
        h, w = have.get(k), want.get(k)
        if h != w and not (h in (None, "") and w in (None, "")):
            out.append(Change(k, h, w))
    return out


def plan_template(res: T.Resolution, magnum_templates: list[dict], clusters: list[dict]) -> TemplatePlan:
    """Desired vs what Magnum has, for one resolved template (pure)."""
    t = res.template
    scope = t.ownership_scope
    ours = sorted((m for m in magnum_templates if owned(m, scope, t.name)), key=_version)
    using: dict[str, list[str]] = {}
    for c in clusters:
        using.setdefault(c.get("cluster_template_id"), []).append(c.get("name") or c.get("uuid"))
    versions = [{"version": _version(m), "uuid": m.get("uuid"), "name": m.get("name"), "hidden": bool(m.get("hidden")),
                 "digest": marks(m)[MARK_DIGEST], "clusters": sorted(using.get(m.get("uuid"), []))} for m in ours]
    current = ours[-1] if ours else None
    p = TemplatePlan(t.name, scope, Action.NOOP, t.path, current=current, versions=versions)
    blocking = res.blocking
    p.warnings = [str(i) for i in res.issues if i not in blocking]
    if blocking:
        p.action = Action.BROKEN
        p.issues = [i.located() if i.input else str(i) for i in blocking]
        return p
    rendered = T.render(res, allow_warnings=True)
    p.images = rendered["images"]
    body = rendered["cluster_template"]
    public, hidden = bool(t.magnum.get("public", False)), bool(t.magnum.get("hidden", False))
    p.project_id = res.project_id
    p.digest = digest(body, p.project_id)
    taken = [v for m in magnum_templates if (v := version_of_name(t.name, m.get("name"))) is not None]
    if current is not None and marks(current)[MARK_DIGEST] == p.digest:
        p.version = _version(current)
        p.magnum_name = current.get("name")
        want = {"public": public, "hidden": hidden, "tags": tags_for(scope, p.version)}
        p.updates = {k: v for k, v in want.items() if (current.get(k) if k != "tags" else _tags(current)) != v}
        p.changes = [Change(k, current.get(k), v) for k, v in p.updates.items()]
        older = ours[:-1]
    else:
        p.version = max([0, *taken, *(_version(m) for m in ours)]) + 1
        p.magnum_name = versioned_name(t.name, p.version)
        p.action = Action.CREATE if current is None else Action.NEW_VERSION
        labels = {**body["labels"], MARK_SCOPE: scope, MARK_TEMPLATE: t.name, MARK_VERSION: str(p.version),
                  MARK_DIGEST: p.digest}
        p.body = {**body, "name": p.magnum_name, "labels": labels, "public": public, "hidden": hidden,
                  "tags": tags_for(scope, p.version)}
        p.changes = diff(current, {**body, "public": public, "hidden": hidden})
        if current is not None and p.project_id and current.get("project_id") != p.project_id:
            p.changes.append(Change("project_id", current.get("project_id"), p.project_id))
        older = ours
    p.hide = [m for m in older if not m.get("hidden")]
    if p.action is Action.NOOP and (p.updates or p.hide):
        p.action = Action.UPDATE
    return p


def _tags(tmpl: dict) -> str | None:
    tags = tmpl.get("tags")
    if isinstance(tags, list):
        return ",".join(tags)
    return tags


@dataclasses.dataclass
class Plan:
    templates: list[TemplatePlan]

    def counts(self) -> dict[str, int]:
        return PL.counts(KINDS, (p.action for p in self.templates))

    @property
    def writes(self) -> int:
        return sum(p.writes for p in self.templates)

    def to_dict(self) -> dict:
        return {"summary": self.counts(), "writes": self.writes, "templates": [p.to_dict() for p in self.templates]}


def check_input(resolutions: list[T.Resolution]) -> None:
    """Refuse (before any write) when any selected file has bad input; names file, line, field."""
    bad = [i for r in resolutions for i in r.bad_input]
    if bad:
        raise TemplateInputError(path=", ".join(sorted({i.path for i in bad if i.path})), count=len(bad),
                                 details="\n  ".join(i.located() for i in bad))


def plan(resolutions: list[T.Resolution], magnum_templates: list[dict], clusters: list[dict]) -> Plan:
    check_input(resolutions)
    return Plan([plan_template(r, magnum_templates, clusters) for r in resolutions])


# ----------------------------------------------------------------------------- apply

@dataclasses.dataclass
class Result:
    template: str
    action: Action
    ok: bool
    version: int | None = None
    uuid: str | None = None
    magnum_name: str | None = None
    writes: int = 0
    hidden: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["action"] = self.action.value
        return d

    def result(self) -> PL.Result:
        """As the shared :class:`nodeforge.plan.Result` (broken: failed, never attempted)."""
        return PL.result(self.template, self.action, ok=self.ok, error=self.error)


def exit_code(plan_: Plan, results: list[Result] | None = None) -> ExitCode:
    """0: applied (or nothing to do); 3: some templates broken or a write
    failed (bad input is refused before any plan, exit 2). ``results``: None
    for a dry run (the plan's own verdict)."""
    got = ([r.result() for r in results] if results is not None
           else [PL.planned(p.name, p.action) for p in plan_.templates])
    return PL.exit_code(got, none_done_fails=False)


def _as_project(conn, project_id: str | None, cache: dict[str, Any]):
    """``conn``, or a connection of the same user scoped to ``project_id`` when that is another project.

    Writes to a template go through a token of its owning project: Magnum 23 looks a template up for the
    PATCH's network- and volume-driver checks before it widens an admin's view to all projects, so an
    admin of another project gets 404 for a template it can list."""
    if not project_id or project_id == getattr(conn, "current_project_id", None):
        return conn
    if project_id not in cache:
        cache[project_id] = conn.connect_as_project({"id": project_id})
    return cache[project_id]


def apply(conn, plan_: Plan) -> list[Result]:
    """Carry out the plan, template by template (one's failure does not stop the others).
    Older versions are hidden only once the new one exists."""
    results = []
    as_project: dict[str, Any] = {}
    for p in plan_.templates:
        r = Result(p.name, p.action, p.action is not Action.BROKEN, p.version,
                   (p.current or {}).get("uuid"), p.magnum_name)
        if p.action is Action.BROKEN:
            r.error = "; ".join(p.issues)
            results.append(r)
            continue
        try:
            if p.body is not None:
                # created with a token of the declared project, which then owns it
                created = mc.create_template(_as_project(conn, p.project_id, as_project), p.body)
                r.uuid, r.writes = created.get("uuid"), r.writes + 1
                log.info("cluster template %s: created (%s)", p.magnum_name, r.uuid)
            if p.updates:
                mc.patch_template(_as_project(conn, p.current.get("project_id"), as_project), p.current["uuid"],
                                  p.updates, f"update cluster template {p.magnum_name}")
                r.writes += 1
            for old in p.hide:
                mc.patch_template(_as_project(conn, old.get("project_id"), as_project), old["uuid"], {"hidden": True},
                                  f"hide cluster template {old.get('name')}")
                r.writes += 1
                r.hidden.append(old.get("name"))
        except mc.MagnumError as exc:
            r.ok, r.error = False, str(exc)
        results.append(r)
    return results
