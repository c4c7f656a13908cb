"""Magnum cluster templates from declarations: render and check the chain
template -> approved image -> flavor -> available bare-metal nodes.

A template file (``manifests/templates/NAME.yaml``) declares what its author
decides: name, Kubernetes minor, an image *selector* (approved, minor,
variant, OS; never an ID), node groups (role, variant, flavor, count),
labels and other Magnum fields, and optionally the ownership ``scope:`` its
images must carry (``nodeforge_scope``; without it any scope's image
qualifies, and the resolution says which scope the chosen one is of). See
docs/flavors-and-templates.md.

* :func:`resolve` reads Glance (the approved-image catalog), Nova (flavors)
  and Ironic (nodes) once and returns every broken link (:class:`Issue`):
  image missing, not approved, hidden, or of another Kubernetes version than
  the template's ``kube_tag``; flavor missing, not bare-metal-shaped, or with
  fewer available nodes than the template's node count.
* The Magnum driver the template targets (``driver:``, an entry-point name
  or a driver package; else derived from the image's ``os_distro`` through
  :mod:`nodeforge.magnum.drivers`) decides what is rendered: ``server_type``
  (``vm``: no driver serves ``bm``; bare-metal groups get bare-metal
  flavors), ``driver``, ``kube_tag`` in the driver's format, only labels the
  driver reads, and ``boot_volume_size`` when a flavor has no root disk.
  Networks (``external_network_id``, ``fixed_network``, ``fixed_subnet``)
  are resolved by name or ID in Neutron. Every such problem is an
  :class:`Issue` naming the file, line and field (``input=True``: bad input
  in the file, refused before any write by ``template apply``).
* :func:`render` turns a clean resolution into the Magnum cluster-template
  body and the equivalent ``openstack coe cluster template create`` command
  (plus ``nodegroup create`` commands for extra node groups).

Resolution reads only Glance, Nova, Neutron and Ironic; writing the template
to Magnum (versions, scope, digest) is :mod:`nodeforge.magnum.apply`.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field, ValidationError

from nodeforge import schema
from nodeforge.clients.identity import read_projects
from nodeforge.clients.network import read_networks
from nodeforge.compute import flavors as F
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.publish import glance_api as g
from nodeforge.schema import Declared, Rule, register, vocab
from nodeforge.schema.loader import plain
from nodeforge.magnum import drivers as D
from nodeforge.scope import derive_scope

DEFAULT_DIR = Path("manifests/templates")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
VARIANTS = ("vm", "baremetal")
ROLES = ("master", "worker")
# Magnum cluster-template fields a template may set besides the managed ones.
MAGNUM_FIELDS = {"keypair_id", "external_network_id", "fixed_network", "fixed_subnet", "network_driver",
                 "volume_driver", "dns_nameserver", "docker_volume_size", "docker_storage_driver", "http_proxy",
                 "https_proxy", "no_proxy", "public", "hidden", "master_lb_enabled", "floating_ip_enabled",
                 "tls_disabled", "registry_enabled", "insecure_registry", "apiserver_port"}
SERVER_TYPE = "vm"                         # the only server_type any maintained driver serves
LABEL_PREFIX = "nodeforge_"                # labels nodeforge sets (ownership, version, digest)
NETWORK_FIELDS = ("external_network_id", "fixed_network", "fixed_subnet")


class TemplateBroken(NodeforgeError):
    message = "template {name} has {count} broken link(s):\n  {details}"


def minor_of(version: str | None) -> str | None:
    m = _VERSION.match(str(version or ""))
    return f"{m.group(1)}.{m.group(2)}" if m else None


# ----------------------------------------------------------------------------- declarations

@dataclasses.dataclass(frozen=True)
class NodeGroup:
    name: str
    role: str
    variant: str
    flavor: str
    count: int


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    path: str
    kubernetes: str                       # minor, "1.36"
    selector: dict                        # k8s, os_distro, os_version
    groups: tuple[NodeGroup, ...]
    labels: dict
    magnum: dict
    coe: str = "kubernetes"
    description: str | None = None
    scope: str | None = None              # images only of this ownership scope; None: any scope
    driver: str | None = None             # entry-point name or driver package; None: derived from os_distro
    project: str | None = None            # Keystone project (name or ID) that owns the Magnum template; None: --os-cloud's
    lines: dict = dataclasses.field(default_factory=dict, compare=False)   # field -> line in the file

    def where(self, field: str) -> tuple[str, int | None, str]:
        """(file, line, field) of a field of the declaration, for error messages."""
        line = self.lines.get(field)
        if line is None and "." in field:
            line = self.lines.get(field.rsplit(".", 1)[0])
        if line is None and "[" in field:
            line = self.lines.get(field.split(".", 1)[0].split("[", 1)[0])
        return self.path, line, field

    @property
    def ownership_scope(self) -> str:
        """The scope of the templates this file writes to Magnum: ``scope:``, else derived from the path."""
        return self.scope if self.scope is not None else derive_scope(self.path)

    @property
    def kube_tag(self) -> str | None:
        """The author's explicit ``kube_tag`` label, if any."""
        return self.labels.get("kube_tag")

    @property
    def kube_minor(self) -> str:
        """The Kubernetes minor the template stands for: its kube_tag's, else ``kubernetes``."""
        return minor_of(self.kube_tag) or self.kubernetes

    def default_groups(self) -> tuple[NodeGroup, NodeGroup]:
        master = next(gr for gr in self.groups if gr.role == "master")
        worker = next(gr for gr in self.groups if gr.role == "worker")
        return master, worker


# ----------------------------------------------------------------------------- the file's declaration

TEMPLATE_NAME_RULE = "1-255 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
TemplateName = Annotated[str, AfterValidator(lambda v: _matches(v, r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}",
                                                                TEMPLATE_NAME_RULE)), Rule(TEMPLATE_NAME_RULE)]
_Text255 = Annotated[str, Field(min_length=1, max_length=255), Rule("1-255 characters")]


def _matches(value: str, pattern: str, rule: str) -> str:
    if not re.fullmatch(pattern, value):
        raise ValueError(f"must be {rule}, got {value!r}")
    return value


def _label_key(key: str) -> str:
    if key.startswith(LABEL_PREFIX):
        raise ValueError(f"'{key}': labels starting '{LABEL_PREFIX}' are set by nodeforge (ownership scope, version, "
                         "digest)")
    return key


def _project(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a Keystone project name or ID")
    return value


def _driver(value: str) -> str:
    if D.get(value) is None and value not in D.PACKAGES:
        raise ValueError(f"unknown Magnum driver {value!r} (one of {', '.join(D.DRIVERS)}, or a driver package: "
                         f"{', '.join(D.PACKAGES)})")
    return value


LABEL_VALUE_RULE = ('a string of at most 4096 characters, or an integer (quoted: "true", "1.30"; unquoted, YAML '
                    'reads a boolean or a number)')
LabelKey = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_label_key),
                     Rule(f"a Magnum label name; not starting '{LABEL_PREFIX}' (nodeforge's)")]


class ImageSelector(Declared):
    """Which approved image: chosen by selector, never by ID."""

    k8s: Optional[_Text255] = None
    os_distro: Optional[_Text255] = Field(None, description="the image's os_distro (debian, ubuntu)")
    os_version: Optional[_Text255] = Field(None, description='quoted: "12", "24.04"')


class NodeGroupDecl(Declared):
    """One node group: its role, image variant, flavor and node count."""

    name: Optional[vocab.Name] = Field(None, description="default: default-<role>")
    role: Literal["master", "worker"] = "worker"
    variant: Literal["vm", "baremetal"]
    flavor: _Text255 = Field(description="a Nova flavor name or ID")
    count: vocab.bounded(0, 10000, integer=True) = Field(1, description="nodes (a master group: at least 1)")


class MagnumFields(Declared):
    """Magnum cluster-template fields passed through as they are."""

    keypair_id: Optional[_Text255] = None
    external_network_id: Optional[_Text255] = Field(None, description="Neutron external network, name or ID")
    fixed_network: Optional[_Text255] = Field(None, description="Neutron network, name or ID")
    fixed_subnet: Optional[_Text255] = Field(None, description="Neutron subnet, name or ID")
    network_driver: Optional[_Text255] = None
    volume_driver: Optional[_Text255] = None
    dns_nameserver: Optional[vocab.IPAddress] = None
    docker_volume_size: Optional[vocab.PositiveInt] = None
    docker_storage_driver: Optional[_Text255] = None
    http_proxy: Optional[vocab.HttpUrl] = None
    https_proxy: Optional[vocab.HttpUrl] = None
    no_proxy: Optional[_Text255] = None
    public: Optional[bool] = None
    hidden: Optional[bool] = None
    master_lb_enabled: Optional[bool] = None
    floating_ip_enabled: Optional[bool] = None
    tls_disabled: Optional[bool] = None
    registry_enabled: Optional[bool] = None
    insecure_registry: Optional[_Text255] = None
    apiserver_port: Optional[vocab.Port] = None


assert set(MagnumFields.model_fields) == MAGNUM_FIELDS


class TemplateFile(Declared):
    """``manifests/templates/NAME.yaml``: one Magnum cluster template."""

    name: TemplateName
    description: Optional[vocab.text(1000)] = None
    kubernetes: vocab.KubeMinor
    coe: Literal["kubernetes"] = "kubernetes"
    image: ImageSelector = Field(default_factory=ImageSelector)
    node_groups: Annotated[list[NodeGroupDecl], Field(min_length=1)]
    labels: dict[LabelKey, Annotated[Union[Annotated[str, Field(max_length=4096)], int], F.one_of(LABEL_VALUE_RULE),
                                     Rule(LABEL_VALUE_RULE)]] = Field(default_factory=dict)
    magnum: MagnumFields = Field(default_factory=MagnumFields)
    scope: Optional[vocab.ScopeName] = Field(None, description="only images of this ownership scope")
    driver: Optional[Annotated[str, AfterValidator(_driver), Rule("a Magnum driver entry point or package")]] = None
    project: Optional[Annotated[str, Field(max_length=255), AfterValidator(_project),
                                Rule("a Keystone project name or ID")]] = None


KIND = register("template", TemplateFile, title="Cluster templates", path=str(DEFAULT_DIR / "NAME.yaml"),
                description="Magnum cluster templates from declarations (docs/flavors-and-templates.md).")

_NOTES = {"image": "images are chosen by selector, never by ID",
          "magnum": "not a cluster-template field nodeforge passes through"}


def parse(doc, label: str) -> Template:
    """Validate a parsed template (a round-trip tree keeps its lines; plain data has none);
    every problem at once in a :class:`~nodeforge.schema.SchemaError`."""
    return _parse(schema.Document(str(label), "yaml", doc, plain(doc)))


def _parse(document: schema.Document) -> Template:
    label, data = document.path, document.data
    if not isinstance(data, dict):
        raise schema.SchemaError(label, [document.problem((), "must be a mapping (name, kubernetes, image, "
                                                              "node_groups, labels)")])
    problems: list[schema.Problem] = []
    declared = None
    try:
        declared = TemplateFile.model_validate(data)
    except ValidationError as exc:
        for p in schema.problems_of(exc, document, TemplateFile):
            note = _NOTES.get(p.keypath[0]) if len(p.keypath) == 2 and p.detail.startswith("unknown key") else None
            problems.append(dataclasses.replace(p, detail=f"{p.detail}; {note}") if note else p)
    raw_groups = data.get("node_groups") if isinstance(data.get("node_groups"), list) else []
    groups = [gr for gr in raw_groups if isinstance(gr, dict)]
    roles = [gr.get("role", "worker") for gr in groups]
    if groups and (roles.count("master") != 1 or "worker" not in roles):
        problems.append(document.problem(("node_groups",), "exactly one master group and at least one worker group"))
    elif groups:
        master = next(gr for gr in groups if gr.get("role", "worker") == "master")
        worker = next(gr for gr in groups if gr.get("role", "worker") == "worker")
        if master.get("variant") != worker.get("variant"):
            problems.append(document.problem(("node_groups",), "the master group and the first worker group share "
                                             "the template's one image in Magnum; their variants differ "
                                             f"({master.get('variant')}, {worker.get('variant')}). Put the other "
                                             "variant in an additional worker group"))
    for i, gr in enumerate(raw_groups):
        if isinstance(gr, dict) and gr.get("role") == "master" and gr.get("count") == 0:
            problems.append(document.problem(("node_groups", i, "count"), "a master group needs count >= 1"))
    names = [str(gr.get("name") or f"default-{gr.get('role', 'worker')}") for gr in groups]
    if len(set(names)) != len(names):
        problems.append(document.problem(("node_groups",), "names must be unique"))
    if problems or declared is None:
        raise schema.SchemaError(label, sorted(problems, key=lambda p: p.line or 0))
    t = declared
    groups = tuple(NodeGroup(gr.name or f"default-{gr.role}", gr.role, gr.variant, gr.flavor, gr.count)
                   for gr in t.node_groups)
    selector = {k: v for k, v in t.image.model_dump(exclude_none=True).items()}
    magnum = t.magnum.model_dump(exclude_unset=True)
    lines = {k: document.line((k,)) for k in data}
    lines.update({f"labels.{k}": document.line(("labels", k)) for k in t.labels})
    lines.update({f"magnum.{k}": document.line(("magnum", k)) for k in magnum})
    for i, gr in enumerate(raw_groups):
        lines[f"node_groups[{i}]"] = document.line(("node_groups", i))
        for k in gr:
            lines[f"node_groups[{i}].{k}"] = document.line(("node_groups", i, k)) or lines[f"node_groups[{i}]"]
    return Template(name=t.name, path=label, kubernetes=t.kubernetes, selector=selector, groups=groups,
                    labels={k: str(v) for k, v in t.labels.items()}, magnum=magnum, coe=t.coe, description=t.description, scope=t.scope,
                    driver=t.driver, project=t.project, lines={k: v for k, v in lines.items() if v is not None})


def load_all(directory: Path | str = DEFAULT_DIR) -> dict[str, Template]:
    directory = Path(directory)
    files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    if not files:
        raise ConfigError(path=str(directory), detail="no template files (*.yaml)")
    out: dict[str, Template] = {}
    for f in files:
        t = _parse(schema.load(f, limits=KIND.limits))
        if t.name in out:
            raise ConfigError(path=str(f), detail=f"template name '{t.name}' also in {out[t.name].path}")
        out[t.name] = t
    return out


def select(templates: dict[str, Template], names) -> list[Template]:
    if not names:
        return list(templates.values())
    missing = [n for n in names if n not in templates]
    if missing:
        raise ConfigError(path=", ".join(missing), detail=f"no such template (have: {', '.join(templates)})")
    return [templates[n] for n in names]


# ----------------------------------------------------------------------------- cloud state

@dataclasses.dataclass
class CloudState:
    """What resolution reads, fetched once: nodeforge images, flavors, nodes,
    and Neutron's networks and subnets (None: not read, e.g. no Neutron in
    the catalog; a template naming a network then has an issue)."""

    images: list[dict]
    flavors: list[dict]
    nodes: list[dict]
    networks: list[dict] | None = None      # {id, name, is_router_external}
    subnets: list[dict] | None = None       # {id, name, network_id}
    projects: list[dict] | None = None      # Keystone {id, name}; None: not readable with this cloud's token

    @classmethod
    def fetch(cls, conn, baremetal_conn) -> "CloudState":
        from nodeforge.ironic.provisioner import SdkProvisioner

        images = [i for i in g.list_images(conn, tag=[g.TAG]) if i.get(f"{g.P}role") == "image"]
        networks, subnets = read_networks(conn)
        return cls(images, F.list_flavors(conn), SdkProvisioner(baremetal_conn).list_nodes(), networks, subnets,
                   read_projects(conn))


# ----------------------------------------------------------------------------- resolution

@dataclasses.dataclass(frozen=True)
class Issue:
    template: str
    kind: str            # image | flavor | capacity | kube_version | driver | node_group | network | label | boot_volume
    subject: str         # node group(s), image, field
    detail: str
    path: str | None = None          # the template file
    line: int | None = None
    field: str | None = None         # the field of the file (node_groups[1].flavor, magnum.fixed_network, ...)
    input: bool = False              # bad input in the file (refused before any write), not a cloud state

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def location(self) -> str | None:
        if self.path is None:
            return None
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        return f"{self.kind} ({self.subject}): {self.detail}"

    def located(self) -> str:
        """``file:line: field: detail`` (the form bad input is reported in)."""
        where = self.location
        text = f"{self.field}: {self.detail}" if self.field else str(self)
        return f"{where}: {text}" if where else text


# Issues that are not a reason to refuse writing a template to Magnum: the
# nodes a template's clusters run on are no longer 'available'.
WARNING_KINDS = ("capacity",)


@dataclasses.dataclass
class Resolution:
    template: Template
    images: dict[str, dict]          # variant -> chosen image
    flavors: dict[str, dict]         # flavor name -> Nova flavor
    issues: list[Issue]
    capacity: dict[str, dict]
    driver: D.Driver | None = None
    networks: dict[str, str] = dataclasses.field(default_factory=dict)   # field -> Neutron ID
    project_id: str | None = None    # the declared owning project, resolved in Keystone (None: not declared)

    @property
    def ok(self) -> bool:
        return not self.issues

    @property
    def blocking(self) -> list[Issue]:
        """Issues that stop a write to Magnum (all but :data:`WARNING_KINDS`)."""
        return [i for i in self.issues if i.kind not in WARNING_KINDS]

    @property
    def bad_input(self) -> list[Issue]:
        return [i for i in self.issues if i.input]

    def to_dict(self) -> dict:
        return {"template": self.template.name, "ok": self.ok, "issues": [i.to_dict() for i in self.issues],
                "image_scope": self.template.scope or "any",
                "driver": self.driver.name if self.driver else None,
                "images": {v: {"id": i["id"], "name": i.get("name"), "kube_version": i.get("kube_version"),
                               "scope": g.scope_of(i)} for v, i in self.images.items()},
                "flavors": {n: f["id"] for n, f in self.flavors.items()}, "networks": dict(self.networks),
                "project_id": self.project_id,
                "capacity": self.capacity}


def _describe_selector(t: Template, variant: str) -> str:
    parts = [f"Kubernetes {t.selector.get('k8s', t.kubernetes)}", f"variant {variant}"]
    if "os_distro" in t.selector or "os_version" in t.selector:
        parts.append("os " + " ".join(t.selector[k] for k in ("os_distro", "os_version") if k in t.selector))
    if t.scope is not None:
        parts.append(f"scope {t.scope}")
    return ", ".join(parts)


def _why_unusable(image: dict) -> str | None:
    tags = set(image.get("tags") or [])
    if image.get("status") != g.ACTIVE:
        return f"status {image.get('status')}"
    if g.TAG_APPROVED not in tags:
        return "not approved (candidate)" if g.TAG_CANDIDATE in tags else "not approved"
    if image.get("os_hidden"):
        return "hidden (superseded or withdrawn)"
    return None


def choose_image(t: Template, variant: str, images: list[dict]) -> tuple[dict | None, str | None]:
    """The newest approved, visible, active image the selector picks (within the template's
    scope, if it names one), or why none."""
    minor = t.selector.get("k8s", t.kubernetes)
    group = [i for i in images
             if i.get(f"{g.P}k8s_minor") == minor and i.get(f"{g.P}variant") == variant
             and all(str(i.get(k)) == v for k, v in t.selector.items() if k in ("os_distro", "os_version"))
             and (t.scope is None or g.scope_of(i) == t.scope)]
    usable = [i for i in group if _why_unusable(i) is None]
    if usable:
        usable.sort(key=lambda i: (i.get(f"{g.P}promoted_at") or "", i.get("created_at") or ""), reverse=True)
        return usable[0], None
    what = f"no approved image for {_describe_selector(t, variant)}"
    if group:
        return None, what + ": " + "; ".join(f"{i['id']} ({i.get('name')}) is {_why_unusable(i)}" for i in group)
    others = sorted({i.get(f"{g.P}k8s_minor") for i in images
                     if i.get(f"{g.P}variant") == variant and _why_unusable(i) is None
                     and (t.scope is None or g.scope_of(i) == t.scope)} - {None})
    elsewhere = sorted({g.scope_of(i) or "none (legacy)" for i in images
                        if i.get(f"{g.P}k8s_minor") == minor and i.get(f"{g.P}variant") == variant
                        and _why_unusable(i) is None and g.scope_of(i) != t.scope}) if t.scope else []
    return None, what + ": the catalog has none" + (
        f" (approved {variant} images exist for Kubernetes {', '.join(others)})" if others else "") + (
        f" (approved ones of other scopes: {', '.join(elsewhere)})" if elsewhere else "")


def _issue(t: Template, kind: str, subject: str, detail: str, field: str | None = None,
           input: bool = False) -> Issue:
    path, line, field = t.where(field) if field else (t.path, None, None)
    return Issue(t.name, kind, subject, detail, path, line, field, input)


def _group_field(t: Template, gr: NodeGroup, key: str) -> str:
    return f"node_groups[{t.groups.index(gr)}].{key}"


def _choose_driver(t: Template, res_images: dict[str, dict], issues: list[Issue]) -> D.Driver | None:
    """The driver the template targets, checked against every node group's image; issues appended."""
    master, _ = t.default_groups()
    image = res_images.get(master.variant)
    os_distro = image.get("os_distro") if image else None
    if image is not None and not os_distro:
        issues.append(_issue(t, "image", master.name, f"image {image['id']} ({image.get('name')}) has no "
                             "os_distro property: Magnum refuses a template whose image has none"))
        return None
    explicit = D.get(t.driver) if t.driver else None
    if explicit is None:
        if os_distro is None:
            return None       # no image: reported already; the driver cannot be derived
        package = t.driver if t.driver in D.PACKAGES else None
        candidates = D.serving(SERVER_TYPE, os_distro, t.coe, package=package)
        if not candidates:
            known = ", ".join(f"{d.name} {', '.join(D.describe(p.server_type, p.os_distro, p.coe) for p in d.provides)}"
                              for d in D.DRIVERS.values() if package is None or d.package == package)
            issues.append(_issue(t, "driver", "driver", f"no {package or 'known'} Magnum driver serves "
                                 f"{D.describe(SERVER_TYPE, os_distro, t.coe)} (the image's os_distro "
                                 f"{os_distro}); known: {known}", "driver" if t.driver else "image.os_distro",
                                 input=True))
            return None
        if len(candidates) > 1:
            issues.append(_issue(t, "driver", "driver", f"several Magnum drivers serve "
                                 f"{D.describe(SERVER_TYPE, os_distro, t.coe)}: "
                                 f"{', '.join(d.name for d in candidates)}; name one with 'driver:'",
                                 "driver" if t.driver else "name", input=True))
            return None
        explicit = candidates[0]
    driver = explicit
    for gr in t.groups:
        img = res_images.get(gr.variant)
        if img is None:
            continue
        distro = img.get("os_distro")
        if not driver.serves(SERVER_TYPE, distro, t.coe):
            served = ", ".join(D.describe(p.server_type, p.os_distro, p.coe) for p in driver.provides)
            issues.append(_issue(t, "node_group", gr.name, f"driver {driver.name} cannot serve node group "
                                 f"'{gr.name}': its image {img['id']} is os_distro {distro}, cluster type "
                                 f"{D.describe(SERVER_TYPE, distro, t.coe)}; the driver serves {served}",
                                 _group_field(t, gr, "variant"), input=True))
    for key in t.labels:
        if key not in driver.labels:
            hint = (" (this driver takes the Kubernetes version from the image's kube_version)"
                    if key == "kube_tag" else "")
            issues.append(_issue(t, "label", f"labels.{key}", f"label '{key}' is not read by Magnum driver "
                                 f"{driver.name} ({driver.package}){hint}; labels it reads: "
                                 f"{', '.join(sorted(driver.labels))}", f"labels.{key}", input=True))
    if t.kube_tag and "kube_tag" in driver.labels and (why := driver.kube_tag_problem(t.kube_tag)):
        issues.append(_issue(t, "label", "labels.kube_tag", why, "labels.kube_tag", input=True))
    nd = t.magnum.get("network_driver")
    if driver.network_drivers and nd is not None and nd not in driver.network_drivers:
        issues.append(_issue(t, "driver", "magnum.network_driver", f"network_driver '{nd}': {driver.name} "
                             f"supports {', '.join(driver.network_drivers)} only", "magnum.network_driver",
                             input=True))
    return driver


def _resolve_networks(t: Template, state: CloudState, issues: list[Issue]) -> dict[str, str]:
    wanted = {k: str(t.magnum[k]) for k in NETWORK_FIELDS if t.magnum.get(k) is not None}
    if not wanted:
        return {}
    if state.networks is None:
        for k in wanted:
            issues.append(_issue(t, "network", f"magnum.{k}", "cannot be checked: no network service (Neutron) "
                                 "in this cloud's catalog", f"magnum.{k}", input=True))
        return {}
    out: dict[str, str] = {}
    for key, ref in wanted.items():
        if key == "fixed_subnet":
            pool, what = state.subnets or [], "subnet"
        else:
            pool, what = state.networks, "network"
            if key == "external_network_id":
                pool = [n for n in pool if n.get("is_router_external")]
                what = "external network"
        found = [x for x in pool if ref in (x["id"], x.get("name"))]
        by_id = [x for x in found if x["id"] == ref]
        found = by_id or found
        if not found:
            extra = ""
            if key == "external_network_id" and any(ref in (n["id"], n.get("name")) for n in state.networks):
                extra = " (a network of that name exists but is not external: router:external is false)"
            issues.append(_issue(t, "network", f"magnum.{key}", f"{what} '{ref}' not found in Neutron{extra}",
                                 f"magnum.{key}", input=True))
        elif len(found) > 1:
            issues.append(_issue(t, "network", f"magnum.{key}", f"{len(found)} {what}s are named '{ref}' "
                                 f"({', '.join(x['id'] for x in found)}): use the ID", f"magnum.{key}", input=True))
        else:
            out[key] = found[0]["id"]
    if "fixed_subnet" in out and "fixed_network" in out:
        subnet = next(x for x in state.subnets or [] if x["id"] == out["fixed_subnet"])
        if subnet.get("network_id") != out["fixed_network"]:
            issues.append(_issue(t, "network", "magnum.fixed_subnet", f"subnet '{wanted['fixed_subnet']}' is not "
                                 f"on network '{wanted['fixed_network']}'", "magnum.fixed_subnet", input=True))
    return out


def boot_volume_size(t: Template) -> int:
    try:
        return int(t.labels.get("boot_volume_size", "0"))
    except ValueError:
        return 0


def resolve(t: Template, state: CloudState) -> Resolution:
    issues: list[Issue] = []
    images = _resolve_images(t, state, issues)
    chosen, need = _resolve_flavors(t, state, issues)
    capacity = _resolve_capacity(t, state, chosen, need, issues)
    driver = _choose_driver(t, images, issues)
    networks = _resolve_networks(t, state, issues)
    project_id = _resolve_project(t, state, issues)
    return Resolution(t, images, chosen, issues, capacity, driver, networks, project_id)


def _resolve_images(t: Template, state: CloudState, issues: list[Issue]) -> dict[str, dict]:
    """The image of each variant the node groups use, and its Kubernetes version against the template's."""
    images: dict[str, dict] = {}
    by_variant: dict[str, list[str]] = {}
    for gr in t.groups:
        by_variant.setdefault(gr.variant, []).append(gr.name)
    for variant, groups in by_variant.items():
        subject = ", ".join(groups)
        image, why = choose_image(t, variant, state.images)
        if image is None:
            issues.append(Issue(t.name, "image", subject, why))
            continue
        images[variant] = image
        version = image.get("kube_version")
        if minor_of(version) != t.kube_minor:
            source = f"kube_tag {t.kube_tag}" if t.kube_tag else f"kubernetes {t.kubernetes}"
            issues.append(Issue(t.name, "kube_version", subject,
                                f"image {image['id']} ({image.get('name')}) is Kubernetes {version} "
                                f"(minor {minor_of(version)}) but the template's {source} is minor {t.kube_minor}"))
        elif t.kube_tag and str(version).lstrip("v") != t.kube_tag.lstrip("v"):
            issues.append(Issue(t.name, "kube_version", subject,
                                f"image {image['id']} ({image.get('name')}) is Kubernetes {version} but the "
                                f"template's kube_tag is {t.kube_tag}"))
    return images


def _resolve_flavors(t: Template, state: CloudState,
                     issues: list[Issue]) -> tuple[dict[str, dict], dict[str, list[NodeGroup]]]:
    """Each node group's flavor (by name or ID): found, a root disk or a boot volume, bare-metal-shaped
    for a bare-metal group. The flavors found, and the bare-metal groups by flavor."""
    flavors_by_name = {f["name"]: f for f in state.flavors}
    flavors_by_id = {f["id"]: f for f in state.flavors}
    chosen: dict[str, dict] = {}
    need: dict[str, list[NodeGroup]] = {}
    for gr in t.groups:
        flavor = flavors_by_name.get(gr.flavor) or flavors_by_id.get(gr.flavor)
        if flavor is None:
            issues.append(_issue(t, "flavor", gr.name, f"flavor '{gr.flavor}' not found in Nova",
                                 _group_field(t, gr, "flavor"), input=True))
            continue
        if not flavor.get("disk") and boot_volume_size(t) <= 0:
            issues.append(_issue(t, "boot_volume", gr.name, f"flavor '{gr.flavor}' has no root disk (disk 0): "
                                 "Magnum refuses it unless the label boot_volume_size is > 0 (the root disk "
                                 "becomes a Cinder volume of that many GiB); set labels.boot_volume_size, or use "
                                 "a flavor with disk_gb", _group_field(t, gr, "flavor"), input=True))
        chosen[gr.flavor] = flavor
        if gr.variant == "baremetal":
            for problem in F.Shape.of(flavor).problems():
                issues.append(_issue(t, "flavor", gr.name, f"flavor '{gr.flavor}' is not bare-metal-shaped: "
                                     f"{problem}", _group_field(t, gr, "flavor")))
            need.setdefault(gr.flavor, []).append(gr)
    return chosen, need


def _resolve_capacity(t: Template, state: CloudState, chosen: dict[str, dict], need: dict[str, list[NodeGroup]],
                      issues: list[Issue]) -> dict[str, dict]:
    """Each bare-metal flavor's available nodes against the node counts its groups need."""
    capacity = {}
    for name, groups in need.items():
        flavor = chosen[name]
        shape = F.Shape.of(flavor)
        if shape.problems():
            continue
        available = sum(1 for n in state.nodes if shape.fits(n) and F.node_available(n))
        wanted = sum(gr.count for gr in groups)
        capacity[name] = {"available": available, "needed": wanted}
        if available < wanted:
            issues.append(Issue(t.name, "capacity", ", ".join(gr.name for gr in groups),
                                f"flavor '{name}' has {available} available node(s) (resource class "
                                f"{shape.resource_class}, traits {', '.join(sorted(shape.required)) or 'none'}; "
                                f"'available', not in maintenance); the template needs {wanted} ("
                                + " + ".join(f"{gr.name} {gr.count}" for gr in groups) + ")"))
    return capacity


def _resolve_project(t: Template, state: CloudState, issues: list[Issue]) -> str | None:
    """The declared ``project:`` as a Keystone project ID (by ID, else by unique name); issues appended."""
    if t.project is None:
        return None
    if state.projects is None:
        issues.append(_issue(t, "project", "project", f"project '{t.project}' cannot be checked: this cloud's "
                             "token may not list Keystone projects (use an admin cloud)", "project", input=True))
        return None
    found = [p for p in state.projects if t.project == p["id"]] or [
        p for p in state.projects if t.project == p.get("name")]
    if len(found) == 1:
        return found[0]["id"]
    detail = (f"project '{t.project}' not found in Keystone" if not found else
              f"{len(found)} projects are named '{t.project}': give its ID")
    issues.append(_issue(t, "project", "project", detail, "project", input=True))
    return None


# ----------------------------------------------------------------------------- render

def desired_labels(res: Resolution) -> dict[str, str]:
    """The template's labels as the driver reads them: the file's, plus ``kube_tag`` in the
    driver's format (from the image's kube_version, when the file sets none and the driver reads it)."""
    t = res.template
    master, _ = t.default_groups()
    image = res.images[master.variant]
    labels = dict(t.labels)
    if res.driver is not None and "kube_tag" in res.driver.labels:
        labels["kube_tag"] = t.kube_tag or res.driver.kube_tag_for(image.get("kube_version"))
    return labels


def render(res: Resolution, *, allow_warnings: bool = False) -> dict:
    """The Magnum cluster-template body (what the target driver accepts), node groups, and CLI commands.
    ``allow_warnings``: capacity shortfalls do not stop it (``template apply``)."""
    t = res.template
    issues = res.blocking if allow_warnings else res.issues
    if issues:
        raise TemplateBroken(name=t.name, count=len(issues), details="\n  ".join(map(str, issues)))
    master, worker = t.default_groups()
    image = res.images[master.variant]
    body = {"name": t.name, "coe": t.coe, "image_id": image["id"],
            "master_flavor_id": res.flavors[master.flavor]["id"], "flavor_id": res.flavors[worker.flavor]["id"],
            "server_type": SERVER_TYPE, "driver": res.driver.name, "labels": desired_labels(res),
            **{k: v for k, v in t.magnum.items() if k not in NETWORK_FIELDS}, **res.networks}
    extra = [gr for gr in t.groups if gr not in (master, worker)]
    groups = [{"name": gr.name, "role": gr.role, "variant": gr.variant, "flavor_id": res.flavors[gr.flavor]["id"],
               "flavor": gr.flavor, "image_id": res.images[gr.variant]["id"], "node_count": gr.count}
              for gr in t.groups]
    chosen = {v: {"id": i["id"], "scope": g.scope_of(i)} for v, i in sorted(res.images.items())}
    return {"template": t.name, "image_scope": t.scope or "any", "images": chosen,
            "driver": res.driver.name, "driver_package": res.driver.package,
            "cluster_type": {"server_type": SERVER_TYPE, "os_distro": image.get("os_distro"), "coe": t.coe},
            "cluster_template": body, "node_groups": groups,
            "cluster_defaults": {"master_count": master.count, "node_count": worker.count},
            "warnings": [str(i) for i in res.issues if i.kind in WARNING_KINDS],
            "commands": [create_command(body)] + [nodegroup_command(gr, res) for gr in extra]}


def create_command(body: dict) -> str:
    args = ["openstack", "coe", "cluster", "template", "create", body["name"], "--coe", body["coe"],
            "--image", body["image_id"], "--master-flavor", body["master_flavor_id"],
            "--flavor", body["flavor_id"], "--server-type", body["server_type"], "--driver", body["driver"]]
    flags = {"keypair_id": "--keypair", "external_network_id": "--external-network", "fixed_network":
             "--fixed-network", "fixed_subnet": "--fixed-subnet", "network_driver": "--network-driver",
             "volume_driver": "--volume-driver", "dns_nameserver": "--dns-nameserver",
             "docker_volume_size": "--docker-volume-size", "docker_storage_driver": "--docker-storage-driver",
             "http_proxy": "--http-proxy", "https_proxy": "--https-proxy", "no_proxy": "--no-proxy",
             "insecure_registry": "--insecure-registry", "tags": "--tags"}
    for key, flag in flags.items():
        if body.get(key) is not None:
            args += [flag, str(body[key])]
    switches = {"public": "--public", "hidden": "--hidden", "master_lb_enabled": "--master-lb-enabled",
                "tls_disabled": "--tls-disabled", "registry_enabled": "--registry-enabled"}
    for key, flag in switches.items():
        if body.get(key) is True:
            args.append(flag)
    if body.get("floating_ip_enabled") is False:
        args.append("--floating-ip-disabled")
    for key, value in sorted(body["labels"].items()):
        args += ["--labels", f"{key}={value}"]
    return shlex.join(args)


def nodegroup_command(gr: NodeGroup, res: Resolution) -> str:
    return shlex.join(["openstack", "coe", "nodegroup", "create", "CLUSTER", gr.name,
                       "--flavor", res.flavors[gr.flavor]["id"], "--image", res.images[gr.variant]["id"],
                       "--node-count", str(gr.count), "--role", gr.role])
