"""Bare-metal Nova flavors: one per Ironic resource class, declared in
``manifests/flavors.yaml``, reconciled as a pure plan then an apply.

A bare-metal flavor asks Placement for exactly one unit of the node's
resource class and nothing else (``resources:CUSTOM_<RC>=1``,
``resources:VCPU=0``, ``resources:MEMORY_MB=0``, ``resources:DISK_GB=0``) and
for the node's traits (``trait:CUSTOM_X=required``). A flavor entry may name a
hardware profile (``profile: compute``): resource class and required traits
then come from ``manifests/hardware-profiles.yaml``.

Nova flavors are immutable except ``description``, extra specs and project
access: :func:`plan` reports each differing field; immutable drift (vcpus,
ram, disk, ephemeral, swap, public) needs a re-create, done only with
``replace=True`` (same flavor ID, so references by ID survive).

Ownership scopes: every flavor nodeforge writes is marked with the extra
specs ``nodeforge:managed=true`` and ``nodeforge:scope=<scope>``, the scope of
the file (its ``scope:`` key, else :func:`nodeforge.scope.derive_scope` of the
file). A file sees only its own scope's flavors as ``unlisted`` and prunes
only those (``prune=True``); flavors of other scopes are left out of the plan
(counted in ``other_scopes``). A listed name that exists under another scope
is a ``conflict``: :func:`apply` refuses the whole plan before any write.
Legacy flavors (``nodeforge:managed=true`` without a scope, made before
scopes) are reported as ``legacy`` and never touched, unless
``adopt_legacy=True`` counts the unlisted ones as this scope's; a legacy or
unmarked flavor the file lists by name is taken into the file's scope (the
plan shows the added ``nodeforge:scope``).

Nova is called through :mod:`nodeforge.clients.compute` (microversion 2.86: Nova
validates extra specs and refuses a malformed one, HTTP 400, instead of storing it).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field, ValidationError, WrapValidator

from nodeforge import plan as PL, schema
from nodeforge.clients import compute as nova, identity as keystone
from nodeforge.clients.compute import MICROVERSION, NovaError, read_flavors  # noqa: F401 - re-exported
from nodeforge.errors import ConfigError, ExitCode, NodeforgeError
from nodeforge.schema import Declared, Rule, register, vocab
from nodeforge.ironic import constants as C
from nodeforge.scope import derive_scope, scope_problem
from nodeforge.ironic import profiles as hw

log = logging.getLogger(__name__)

DEFAULT_PATH = Path("manifests/flavors.yaml")
MANAGED_KEY = "nodeforge:managed"
SCOPE_KEY = "nodeforge:scope"
RESERVED_PREFIX = "nodeforge:"
ZERO_RESOURCES = ("VCPU", "MEMORY_MB", "DISK_GB")
IMMUTABLE = ("vcpus", "ram", "disk", "ephemeral", "swap", "is_public")
_RC_SPEC = re.compile(r"^resources(\d*):(CUSTOM_[A-Z0-9_]+)$")
_TRAIT_SPEC = re.compile(r"^trait(\d*):([A-Z0-9_]+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,254}$")


class ScopeConflict(NodeforgeError):
    message = ("{path} (scope '{scope}') lists flavors that belong to another scope in Nova: {flavors}; "
               "nothing was written")
    hint = ("another flavors file (another team's) owns them: rename the flavor in this file, or sync it "
            "from the file that owns it (docs/flavors-and-templates.md, 'Ownership scopes')")


# The shared plan kinds (nodeforge/plan.py); flavor sync plans these nine, in this order:
# create; update (description, extra specs or access: in place); replace (immutable field differs:
# delete + create, only with replace=True); drift (immutable field differs, replace not allowed:
# reported only); no-op; prune (this scope's, not in the file: delete, only with prune=True);
# unlisted (this scope's, not in the file, prune not allowed: reported only); conflict (listed, but
# the flavor in Nova belongs to another scope: refused); legacy (managed=true without a scope, not
# in the file: reported, never touched).
Action = PL.Kind
KINDS = (PL.Kind.CREATE, PL.Kind.UPDATE, PL.Kind.REPLACE, PL.Kind.DRIFT, PL.Kind.NOOP, PL.Kind.PRUNE,
         PL.Kind.UNLISTED, PL.Kind.CONFLICT, PL.Kind.LEGACY)


# ----------------------------------------------------------------------------- desired state

@dataclasses.dataclass(frozen=True)
class FlavorSpec:
    name: str
    resource_class: str                  # Ironic resource class (baremetal-compute)
    required_traits: tuple[str, ...]
    vcpus: int = 1
    ram: int = 1024                      # MiB
    disk: int = 0                        # GiB
    is_public: bool = True
    projects: tuple[str, ...] = ()       # names or IDs (private flavors)
    description: str | None = None
    extra: tuple[tuple[str, str], ...] = ()
    id: str | None = None
    profile: str | None = None
    scope: str | None = None             # the file's; marks the flavor (nodeforge:scope)

    @property
    def placement_class(self) -> str:
        return hw.placement_resource_class(self.resource_class)

    def extra_specs(self) -> dict[str, str]:
        specs = {f"resources:{self.placement_class}": "1",
                 **{f"resources:{r}": "0" for r in ZERO_RESOURCES},
                 **{f"trait:{t}": "required" for t in self.required_traits},
                 MANAGED_KEY: "true"}
        if self.scope is not None:
            specs[SCOPE_KEY] = self.scope
        specs.update(dict(self.extra))
        return specs

    def to_dict(self) -> dict:
        return {"name": self.name, "resource_class": self.resource_class,
                "placement_resource_class": self.placement_class, "required_traits": list(self.required_traits),
                "vcpus": self.vcpus, "ram": self.ram, "disk": self.disk, "is_public": self.is_public,
                "projects": list(self.projects), "description": self.description, "profile": self.profile,
                "scope": self.scope, "extra_specs": self.extra_specs()}


@dataclasses.dataclass(frozen=True)
class FlavorFile:
    path: str
    flavors: tuple[FlavorSpec, ...]
    scope: str                          # ownership scope (nodeforge:scope on every flavor of the file)
    scope_source: str = "file"          # "file" (scope: key) or "derived" (from the file's path)

    def by_name(self) -> dict[str, FlavorSpec]:
        return {f.name: f for f in self.flavors}


# ----------------------------------------------------------------------------- the file's declaration

# Nova's own bounds: vcpus, ram and disk are 32-bit integers; names, extra
# spec keys and values at most 255 characters; descriptions 65535.
_INT32 = 2 ** 31 - 1
_SPEC_VALUE = Annotated[str, Field(max_length=255), Rule("at most 255 characters")]


def _spec_key(value: str) -> str:
    if value.startswith(RESERVED_PREFIX):
        raise ValueError(f"'{value}': keys starting '{RESERVED_PREFIX}' are nodeforge's ownership mark (set "
                         "'scope:' at the top of the file)")
    if _RC_SPEC.match(value) or value in {f"resources:{r}" for r in ZERO_RESOURCES}:
        raise ValueError(f"'{value}' is set by nodeforge (use resource_class / profile)")
    return value


SpecKey = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_spec_key),
                    Rule(f"an extra spec key (1-255 characters); not resources:CUSTOM_*, resources:VCPU/MEMORY_MB/"
                         f"DISK_GB or {RESERVED_PREFIX}*, which nodeforge sets")]


class ProjectAccess(Declared):
    """A private flavor: the projects (Keystone names or IDs) that may use it."""

    projects: Annotated[list[Annotated[str, Field(min_length=1, max_length=255)]], Field(min_length=1)]


def one_of(rule: str):
    """A union's several member errors as one problem saying what is expected."""
    def check(value, handler):
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"must be {rule}, got {schema.kind_of(value)}") from None
    return WrapValidator(check)


ACCESS_RULE = "'public' or {projects: [name-or-id, ...]} (at least one project)"
SPEC_VALUE_RULE = ("a string of at most 255 characters (quoted: unquoted, YAML reads 1.30 as a number) "
                   "or an integer")


class _FlavorFields(Declared):
    """Fields a flavor entry and ``defaults:`` share."""

    profile: Optional[vocab.Slug] = Field(None, description="a profile of the hardware profiles file: "
                                                            "resource class and traits come from it")
    resource_class: Optional[vocab.ResourceClass] = Field(None, description="Ironic resource class "
                                                                            "(else the profile's)")
    required_traits: Optional[list[vocab.Trait]] = Field(None, description="traits the node must have (else the "
                                                                           "profile's)")
    vcpus: vocab.bounded(1, _INT32, integer=True) = Field(1, description="what Nova shows; Placement asks for none")
    ram_mb: vocab.bounded(1, _INT32, integer=True) = Field(1024, description="MiB")
    disk_gb: vocab.bounded(0, _INT32, integer=True) = Field(0, description="GiB; 0: Magnum needs a boot volume")
    access: Annotated[Union[Literal["public"], ProjectAccess], one_of(ACCESS_RULE), Rule(ACCESS_RULE)] = "public"
    description: Optional[vocab.text(65535)] = None
    extra_specs: Optional[dict[SpecKey, Annotated[Union[_SPEC_VALUE, int], one_of(SPEC_VALUE_RULE),
                                                  Rule(SPEC_VALUE_RULE)]]] = Field(
        None, description="more extra specs (Nova validates them, microversion 2.86); values are strings "
                          "(quoted: an unquoted yes or 1.30 is a boolean or a number) or integers")


class FlavorDefaults(_FlavorFields):
    """Values every flavor entry gets unless it sets its own."""


class FlavorEntry(_FlavorFields):
    """One bare-metal flavor."""

    name: vocab.DisplayName
    id: Optional[Union[Annotated[str, Field(min_length=1, max_length=255)], int]] = Field(
        None, description="Nova flavor ID (kept on a re-create); default: Nova's")


class FlavorsFile(Declared):
    """``manifests/flavors.yaml``: one Nova flavor per Ironic resource class."""

    version: Literal[1]
    scope: Optional[vocab.ScopeName] = Field(None, description="ownership scope (default: derived from the path)")
    profiles: Optional[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        None, description="hardware profiles file, relative to this file")
    defaults: Optional[FlavorDefaults] = None
    flavors: list[FlavorEntry]


KIND = register("flavors", FlavorsFile, title="Bare-metal flavors", path=str(DEFAULT_PATH),
                description="Nova flavors, one per Ironic resource class (docs/flavors-and-templates.md).")


def load(path: Path | str = DEFAULT_PATH, profiles_path: Path | str | None = None) -> FlavorFile:
    """Read and validate ``flavors.yaml``; every problem at once, each as
    ``file:line: key.path: detail`` (:class:`~nodeforge.schema.SchemaError`).
    ``profiles:`` in the file (relative to it) or ``profiles_path`` names the
    profiles file. ``scope:`` names the file's ownership scope; without it the
    scope is derived from the file's path (:func:`nodeforge.scope.derive_scope`)."""
    path = Path(path)
    document = schema.load(path, limits=KIND.limits)
    data = document.data
    if not isinstance(data, dict) or not isinstance(data.get("flavors"), list):
        raise schema.SchemaError(str(path), [document.problem((), "must be a mapping with 'version: 1' and a "
                                                                  "'flavors:' list")])
    problems: list[schema.Problem] = []
    declared = None
    try:
        declared = FlavorsFile.model_validate(data)
    except ValidationError as exc:
        problems += schema.problems_of(exc, document, FlavorsFile)
    scope, scope_source = _file_scope(path, data)
    profiles = _profiles_of(path, data, profiles_path)
    problems += _entry_problems(document, data, profiles)
    if problems or declared is None:
        raise schema.SchemaError(str(path), sorted(problems, key=lambda p: p.line or 0))
    base = declared.defaults.model_dump(exclude_unset=True) if declared.defaults else {}
    out = [_flavor_spec(entry, base, profiles, scope) for entry in declared.flavors]
    return FlavorFile(str(path), tuple(out), scope, scope_source)


def _file_scope(path: Path, data: dict) -> tuple[str | None, str]:
    """The file's ``scope:`` (None when it is not a valid scope: the declaration names it), or
    the scope derived from its path; and which of the two it is."""
    raw_scope = data.get("scope")
    if "scope" in data:
        return (raw_scope if isinstance(raw_scope, str) and scope_problem(raw_scope) is None else None), "file"
    return derive_scope(path), "derived"


def _profiles_of(path: Path, data: dict, profiles_path: Path | str | None):
    """The hardware profiles file: ``profiles_path``, else the file's ``profiles:`` (relative to
    it); None without either."""
    ppath = profiles_path
    if ppath is None and isinstance(data.get("profiles"), str) and data["profiles"]:
        ppath = path.parent / data["profiles"]
    return hw.load(ppath) if ppath is not None else None


def _entry_problems(document: schema.Document, data: dict, profiles) -> list[schema.Problem]:
    """What the declaration cannot see across entries: a duplicate name, a profile not in the
    profiles file, an entry with neither resource class nor profile."""
    problems: list[schema.Problem] = []
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}
    names: set[str] = set()
    for i, raw in enumerate(data["flavors"]):
        if not isinstance(raw, dict):
            continue          # reported by the declaration
        raw = {**defaults, **raw}
        name = raw.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(document.problem(("flavors", i, "name"), f"duplicate flavor '{name}'"))
            names.add(name)
        rc, profile = raw.get("resource_class"), raw.get("profile")
        if isinstance(profile, str):
            if profiles is None:
                problems.append(document.problem(("flavors", i, "profile"),
                                                 "no profiles file (set 'profiles:' or --profiles)"))
            elif profile not in profiles.by_name():
                problems.append(document.problem(("flavors", i, "profile"), f"'{profile}' is not in "
                                                 f"{profiles.path} ({', '.join(profiles.by_name())})"))
            else:
                rc = rc or profiles.by_name()[profile].resource_class
        if not rc and profile is None:
            problems.append(document.problem(("flavors", i), f"flavor '{name}' needs resource_class or profile"))
    return problems


def _flavor_spec(entry: FlavorEntry, base: dict, profiles, scope: str | None) -> FlavorSpec:
    """One validated entry over the file's defaults, its profile's resource class and traits filled in."""
    f = {**base, **entry.model_dump(exclude_unset=True)}
    get = lambda k: f.get(k, FlavorEntry.model_fields[k].default)  # noqa: E731
    rc, traits, profile = f.get("resource_class"), f.get("required_traits"), f.get("profile")
    if profile is not None:
        p = profiles.by_name()[profile]
        rc = rc or p.resource_class
        traits = list(p.traits) if traits is None else traits
    access = get("access")
    is_public = access == "public"
    projects = () if is_public else tuple(access["projects"])
    extra = f.get("extra_specs") or {}
    return FlavorSpec(name=entry.name, resource_class=rc, required_traits=tuple(sorted(set(traits or []))),
                      vcpus=get("vcpus"), ram=get("ram_mb"), disk=get("disk_gb"), is_public=is_public,
                      projects=projects, description=f.get("description"),
                      extra=tuple(sorted((k, str(v)) for k, v in extra.items())),
                      id=str(entry.id) if entry.id is not None else None, profile=profile, scope=scope)


# ----------------------------------------------------------------------------- Nova (clients.compute)

def list_flavors(conn) -> list[dict]:
    """Every flavor (public and private) with its extra specs (and, for
    private ones, the projects with access)."""
    out = nova.read_flavors(conn)
    for f in out:
        f["projects"] = [] if f.get("os-flavor-access:is_public", True) else nova.flavor_access(conn, f["id"])
    return out


def resolve_projects(conn, refs: tuple[str, ...]) -> tuple[str, ...]:
    ids = []
    for ref in refs:
        project_id = keystone.find_project(conn, ref)
        if project_id is None:
            raise ConfigError(path="flavors", detail=f"project '{ref}' not found in Keystone")
        ids.append(project_id)
    return tuple(sorted(ids))


# ----------------------------------------------------------------------------- plan

# One field before -> after; ``mutable`` False: changing it re-creates the flavor.
Change = PL.FieldChange


@dataclasses.dataclass
class FlavorPlan:
    name: str
    action: Action
    spec: FlavorSpec | None = None
    current: dict | None = None
    changes: list[Change] = dataclasses.field(default_factory=list)
    project_ids: tuple[str, ...] = ()
    note: str | None = None

    @property
    def flavor_id(self) -> str | None:
        return (self.current or {}).get("id") or (self.spec.id if self.spec else None)

    def to_change(self) -> PL.Change:
        """This flavor's plan in the shared shape (nodeforge/plan.py)."""
        return PL.Change(self.action, self.name, tuple(self.changes), self.note)

    def to_dict(self) -> dict:
        return {"name": self.name, "action": self.action.value, "id": self.flavor_id,
                "changes": [c.to_dict() for c in self.changes], "note": self.note}


@dataclasses.dataclass
class Plan:
    flavors: list[FlavorPlan]
    scope: str | None = None
    scope_source: str = "file"
    other_scopes: dict[str, int] = dataclasses.field(default_factory=dict)   # scope -> flavors (not ours)
    path: str | None = None             # the flavors file

    def counts(self) -> dict[str, int]:
        return PL.counts(KINDS, (f.action for f in self.flavors))

    @property
    def blocked(self) -> list[FlavorPlan]:
        return [f for f in self.flavors if f.action in (Action.DRIFT, Action.UNLISTED)]

    @property
    def conflicts(self) -> list[FlavorPlan]:
        return [f for f in self.flavors if f.action is Action.CONFLICT]

    def refusal(self) -> "ScopeConflict | None":
        """Why the plan must not be applied at all (a listed flavor of another scope)."""
        if not self.conflicts:
            return None
        return ScopeConflict(path=self.path or "the flavors file", scope=self.scope,
                             flavors=", ".join(f"{p.name} (scope '{scope_of(p.current)}')" for p in self.conflicts))

    def to_dict(self) -> dict:
        return {"scope": self.scope, "scope_source": self.scope_source, "summary": self.counts(),
                "flavors": [f.to_dict() for f in self.flavors],
                "other_scopes": dict(sorted(self.other_scopes.items()))}


def scope_of(flavor: dict) -> str | None:
    """The scope a flavor in Nova is marked with (None: no scope)."""
    return (flavor.get("extra_specs") or {}).get(SCOPE_KEY)


def is_legacy(flavor: dict) -> bool:
    """Marked by a nodeforge before scopes: ``nodeforge:managed=true``, no scope."""
    specs = flavor.get("extra_specs") or {}
    return specs.get(MANAGED_KEY) == "true" and SCOPE_KEY not in specs


def _actual(flavor: dict) -> dict:
    return {"vcpus": flavor.get("vcpus"), "ram": flavor.get("ram"), "disk": flavor.get("disk"),
            "ephemeral": flavor.get("OS-FLV-EXT-DATA:ephemeral", 0), "swap": flavor.get("swap") or 0,
            "is_public": flavor.get("os-flavor-access:is_public", True)}


def plan_flavor(spec: FlavorSpec, current: dict | None, project_ids: tuple[str, ...], *,
                replace: bool = False) -> FlavorPlan:
    """Desired vs actual, field by field (pure)."""
    if current is None:
        return FlavorPlan(spec.name, Action.CREATE, spec, None, [Change("flavor", None, "new", True)], project_ids)
    p = FlavorPlan(spec.name, Action.NOOP, spec, current, project_ids=project_ids)
    want = {"vcpus": spec.vcpus, "ram": spec.ram, "disk": spec.disk, "ephemeral": 0, "swap": 0,
            "is_public": spec.is_public}
    have = _actual(current)
    for key in IMMUTABLE:
        if have[key] != want[key]:
            p.changes.append(Change(key, have[key], want[key], False))
    if spec.id is not None and current["id"] != spec.id:
        p.changes.append(Change("id", current["id"], spec.id, False))
    if (current.get("description") or None) != (spec.description or None):
        p.changes.append(Change("description", current.get("description"), spec.description, True))
    specs_have, specs_want = current.get("extra_specs") or {}, spec.extra_specs()
    for key in sorted(set(specs_have) | set(specs_want)):
        if specs_have.get(key) != specs_want.get(key):
            p.changes.append(Change(f"extra_specs.{key}", specs_have.get(key), specs_want.get(key), True))
    if not spec.is_public and tuple(sorted(current.get("projects") or [])) != project_ids:
        p.changes.append(Change("projects", sorted(current.get("projects") or []), list(project_ids), True))
    if not p.changes:
        return p
    if any(not c.mutable for c in p.changes):
        p.action = Action.REPLACE if replace else Action.DRIFT
        if not replace:
            p.note = ("flavors are immutable in Nova: " + ", ".join(c.field for c in p.changes if not c.mutable)
                      + " differ; re-create with --replace (same ID)")
    else:
        p.action = Action.UPDATE
    return p


def plan(conn, flavor_file: FlavorFile, *, replace: bool = False, prune: bool = False,
         adopt_legacy: bool = False, flavors: list[dict] | None = None) -> Plan:
    """The whole plan for one file, within its scope (pure but for reading
    Nova and Keystone). See the module docstring for the scope rule."""
    flavors = list_flavors(conn) if flavors is None else flavors
    scope = flavor_file.scope
    by_name = {f["name"]: f for f in flavors}
    out = []
    for spec in flavor_file.flavors:
        current = by_name.get(spec.name)
        owner = scope_of(current) if current is not None else None
        if current is not None and owner is not None and owner != scope:
            out.append(FlavorPlan(spec.name, Action.CONFLICT, spec, current,
                                  [Change(f"extra_specs.{SCOPE_KEY}", owner, scope, False)],
                                  note=f"flavor exists in Nova under scope '{owner}' (not '{scope}'): refused, "
                                       "another declaration owns it"))
            continue
        projects = resolve_projects(conn, spec.projects) if spec.projects else ()
        p = plan_flavor(spec, current, projects, replace=replace)
        if current is not None and owner is None and p.note is None:
            what = "legacy flavor (nodeforge:managed, no scope)" if is_legacy(current) else "not made by nodeforge"
            p.note = f"{what}: listed here, taken into scope '{scope}'"
        out.append(p)
    listed = {s.name for s in flavor_file.flavors}
    other: dict[str, int] = {}
    for f in flavors:
        if f["name"] in listed:
            continue
        owner = scope_of(f)
        if owner is not None and owner != scope:
            other[owner] = other.get(owner, 0) + 1
        elif owner == scope or (is_legacy(f) and adopt_legacy):
            whose = f"scope '{scope}'" if owner == scope else "legacy (no scope), adopted with --adopt-legacy"
            note = f"{whose}, not in {flavor_file.path}" + ("" if prune else "; delete with --prune")
            out.append(FlavorPlan(f["name"], Action.PRUNE if prune else Action.UNLISTED, None, f,
                                  [Change("flavor", f["id"], None, True)], note=note))
        elif is_legacy(f):
            out.append(FlavorPlan(f["name"], Action.LEGACY, None, f,
                                  note="nodeforge:managed=true without nodeforge:scope (made before scopes): "
                                       "belongs to no file, left alone; --adopt-legacy counts it as this scope's"))
    return Plan(out, scope, flavor_file.scope_source, other, flavor_file.path)


# ----------------------------------------------------------------------------- apply

def _create(conn, spec: FlavorSpec, project_ids: tuple[str, ...], flavor_id: str | None) -> dict:
    body = {"name": spec.name, "vcpus": spec.vcpus, "ram": spec.ram, "disk": spec.disk,
            "OS-FLV-EXT-DATA:ephemeral": 0, "swap": 0, "os-flavor-access:is_public": spec.is_public,
            "description": spec.description}
    if flavor_id:
        body["id"] = flavor_id
    flavor = nova.create_flavor(conn, body)
    try:
        _set_specs(conn, flavor["id"], spec.name, spec.extra_specs())
        for pid in project_ids:
            nova.add_access(conn, flavor["id"], spec.name, pid)
    except NovaError:
        # A half-made flavor would schedule onto anything: remove it.
        nova.delete_flavor(conn, flavor["id"], spec.name)
        raise
    return flavor


def _set_specs(conn, flavor_id: str, name: str, specs: dict[str, str]) -> None:
    """Set extra specs in one call; when Nova refuses them (its message does
    not name the key), find and name the refused ones."""
    try:
        nova.set_extra_specs(conn, flavor_id, f"extra specs of {name}", specs)
    except NovaError as exc:
        if "(HTTP 400)" not in str(exc) or len(specs) == 1:
            raise
        for key, value in specs.items():   # raises at the first refused key
            nova.set_extra_specs(conn, flavor_id, f"extra spec {key}={value} of {name}", {key: value})
        raise


def _update(conn, p: FlavorPlan) -> None:
    fid = p.current["id"]
    for c in p.changes:
        if c.field == "description":
            nova.set_description(conn, fid, p.name, c.desired)
    sets = {c.field.split(".", 1)[1]: c.desired for c in p.changes
            if c.field.startswith("extra_specs.") and c.desired is not None}
    if sets:
        _set_specs(conn, fid, p.name, sets)
    for c in p.changes:
        if c.field.startswith("extra_specs.") and c.desired is None:
            nova.unset_extra_spec(conn, fid, p.name, c.field.split(".", 1)[1])
        if c.field == "projects":
            for pid in sorted(set(c.desired) - set(c.current)):
                nova.add_access(conn, fid, p.name, pid)
            for pid in sorted(set(c.current) - set(c.desired)):
                nova.remove_access(conn, fid, p.name, pid)


@dataclasses.dataclass
class Result:
    name: str
    action: Action
    id: str | None
    ok: bool
    error: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "action": self.action.value, "id": self.id, "ok": self.ok, "error": self.error}

    def result(self) -> PL.Result:
        """As the shared :class:`nodeforge.plan.Result` (drift, unlisted: skipped, and the run partial)."""
        return PL.result(self.name, self.action, ok=self.ok, error=self.error, attempted=self.action.writes)


def exit_code(plan_: Plan, results: list[Result] | None = None) -> ExitCode:
    """0: in sync; 3: drift or unlisted flavors left as they are, or a write
    failed (a scope conflict is refused before, exit 1). ``results``: None
    for a dry run (the plan's own verdict)."""
    got = ([r.result() for r in results] if results is not None
           else [PL.planned(p.name, p.action) for p in plan_.flavors])
    return PL.exit_code(got, none_done_fails=False)


def apply(conn, plan_: Plan) -> list[Result]:
    """Carry out the plan. Drift, unlisted and legacy flavors are not
    written; each flavor's failure is its own (the others go on). A plan with
    a scope conflict is refused as a whole, before any write."""
    if (refused := plan_.refusal()) is not None:
        raise refused
    results = []
    for p in plan_.flavors:
        try:
            if p.action is Action.CREATE:
                fid = _create(conn, p.spec, p.project_ids, p.spec.id)["id"]
            elif p.action is Action.UPDATE:
                _update(conn, p)
                fid = p.current["id"]
            elif p.action is Action.REPLACE:
                fid = p.spec.id or p.current["id"]
                nova.delete_flavor(conn, p.current["id"], p.name)
                _create(conn, p.spec, p.project_ids, fid)
            elif p.action is Action.PRUNE:
                fid = p.current["id"]
                nova.delete_flavor(conn, fid, p.name)
            else:
                ok = p.action in (Action.NOOP, Action.LEGACY)     # legacy: reported, not a failure
                results.append(Result(p.name, p.action, p.flavor_id, ok, None if ok else p.note))
                continue
        except NovaError as exc:
            results.append(Result(p.name, p.action, p.flavor_id, False, str(exc)))
            continue
        log.info("flavor %s: %s", p.name, p.action.value)
        results.append(Result(p.name, p.action, fid, True))
    return results


# ----------------------------------------------------------------------------- shape and capacity

@dataclasses.dataclass(frozen=True)
class Shape:
    """What a flavor asks Placement for, read from its extra specs."""

    resource_classes: dict[str, str]      # CUSTOM_X -> amount
    zeroed: frozenset[str]                 # standard resources overridden to 0
    required: frozenset[str]
    forbidden: frozenset[str]

    @classmethod
    def of(cls, flavor: dict) -> "Shape":
        specs = flavor.get("extra_specs") or {}
        rcs, zeroed, req, forb = {}, set(), set(), set()
        for key, value in specs.items():
            if m := _RC_SPEC.match(key):
                rcs[m.group(2)] = str(value)
            elif key.startswith("resources:") and str(value) == "0":
                zeroed.add(key.split(":", 1)[1])
            elif m := _TRAIT_SPEC.match(key):
                (req if value == "required" else forb if value == "forbidden" else set()).add(m.group(2))
        return cls(rcs, frozenset(zeroed), frozenset(req), frozenset(forb))

    @property
    def resource_class(self) -> str | None:
        return next(iter(self.resource_classes)) if len(self.resource_classes) == 1 else None

    def problems(self) -> list[str]:
        """Why this is not a bare-metal flavor (empty: it is one)."""
        out = []
        if not self.resource_classes:
            out.append("no resources:CUSTOM_<RC>=1 extra spec (not a bare-metal flavor)")
        elif len(self.resource_classes) > 1:
            out.append(f"asks for several custom resource classes ({', '.join(sorted(self.resource_classes))})")
        elif list(self.resource_classes.values()) != ["1"]:
            out.append(f"resources:{self.resource_class}={self.resource_classes[self.resource_class]}, must be 1")
        missing = [r for r in ZERO_RESOURCES if r not in self.zeroed]
        if missing:
            out.append("does not zero " + ", ".join(f"resources:{r}" for r in missing)
                       + " (Nova would also ask Placement for VCPU/RAM/disk a bare-metal node does not report)")
        return out

    def fits(self, node: dict) -> bool:
        if node.get("resource_class") is None or self.resource_class is None:
            return False
        traits = set(node.get("traits") or [])
        return (hw.placement_resource_class(node["resource_class"]) == self.resource_class
                and self.required <= traits and not (self.forbidden & traits))


def node_available(node: dict) -> bool:
    return node.get("provision_state") == C.ProvisionState.AVAILABLE.value and not node.get("maintenance")


def capacity(flavors: list[dict], nodes: list[dict]) -> list[dict]:
    """Per bare-metal flavor: nodes matching its resource class and traits,
    how many are ``available`` and not in maintenance (schedulable), and
    how many are deployed or in maintenance."""
    rows = []
    for f in sorted(flavors, key=lambda f: f["name"]):
        shape = Shape.of(f)
        if not shape.resource_classes:
            continue
        fitting = [n for n in nodes if shape.fits(n)]
        rows.append({"flavor": f["name"], "id": f["id"], "resource_class": shape.resource_class,
                     "required_traits": sorted(shape.required),
                     "available": sum(1 for n in fitting if node_available(n)),
                     "active": sum(1 for n in fitting if n.get("provision_state") == "active"),
                     "maintenance": sum(1 for n in fitting if n.get("maintenance")),
                     "total": len(fitting), "problems": shape.problems()})
    return rows
