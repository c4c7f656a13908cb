"""The canary policy, ``manifests/canary-policy.yaml``: which resource classes need a passing
canary deploy of a bare-metal image before it is promoted, with the bounds and the rules for
repeated failures.

:func:`load` validates the whole file against :class:`CanaryPolicyDecl` (``docs/schemas.md``) and
names the file, line and key of each problem. A cloud without the file promotes as before:
:func:`load` of a missing default path gives :data:`NO_POLICY`, which asks for no canary and says so.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

from pydantic import Field

from nodeforge.schema import Declared, Rule, register, validate, vocab
from nodeforge.schema import load as schema_load

DEFAULT_PATH = Path("manifests/canary-policy.yaml")


class TimeoutsDecl(Declared):
    """Bounds of each canary phase, in seconds."""

    allocation: Annotated[vocab.PositiveInt, Field(description="an allocation to find its node")] = 120
    deploy: Annotated[vocab.PositiveInt, Field(description="deploy to `active` (agent boot, image write)")] = 2400
    first_boot: Annotated[vocab.PositiveInt, Field(description="`active` to the node's report")] = 1200
    clean: Annotated[vocab.PositiveInt, Field(description="undeploy and cleaning back to `available`")] = 2400


class ClassDecl(Declared):
    """One resource class whose nodes must run the image before it is approved."""

    resource_class: vocab.ResourceClass
    required: Annotated[bool, Field(description="promote refuses the image without a passing canary here")] = True


class CanaryPolicyDecl(Declared):
    """Which resource classes need a passing canary deploy before a bare-metal image is promoted."""

    version: Annotated[int, Rule("1"), Field(ge=1, le=1)] = 1
    resource_classes: Annotated[list[ClassDecl], Field(min_length=1)]
    timeouts: TimeoutsDecl = TimeoutsDecl()
    attempts: Annotated[vocab.PositiveInt, Rule("1-5"), Field(le=5,
                        description="deploys of one image per class before it is failed")] = 1
    maintenance_after: Annotated[vocab.PositiveInt, Field(
        description="consecutive failed canaries on one node before it is put in maintenance")] = 2
    lessee: Annotated[vocab.Slug | None, Field(
        description="a node whose lessee is set is taken only when it is this one")] = None


KIND = register("canary-policy", CanaryPolicyDecl, title="Canary deploy policy",
                path="manifests/canary-policy.yaml",
                description="Read by `image canary` and by promote (see docs/canary.md).")


@dataclasses.dataclass(frozen=True)
class Timeouts:
    allocation: float = 120
    deploy: float = 2400
    first_boot: float = 1200
    clean: float = 2400


@dataclasses.dataclass(frozen=True)
class CanaryClass:
    resource_class: str
    required: bool = True


@dataclasses.dataclass(frozen=True)
class CanaryPolicy:
    classes: tuple[CanaryClass, ...] = ()
    timeouts: Timeouts = Timeouts()
    attempts: int = 1
    maintenance_after: int = 2
    lessee: str | None = None
    source: str | None = None          # the file, None when there is none

    @property
    def asked(self) -> bool:
        return bool(self.classes)

    def required_classes(self) -> list[str]:
        return [c.resource_class for c in self.classes if c.required]

    def describe(self) -> str:
        if not self.asked:
            return "no canary asked for (no canary policy file)" if self.source is None else \
                f"no canary asked for ({self.source} lists no resource class)"
        return (f"canary on {', '.join(c.resource_class for c in self.classes)} "
                f"({self.source}; required: {', '.join(self.required_classes()) or 'none'})")

    def to_dict(self) -> dict:
        return {"source": self.source, "resource_classes": [dataclasses.asdict(c) for c in self.classes],
                "timeouts": dataclasses.asdict(self.timeouts), "attempts": self.attempts,
                "maintenance_after": self.maintenance_after, "lessee": self.lessee}


NO_POLICY = CanaryPolicy()


def _checks(document, decl: CanaryPolicyDecl):
    seen: dict[str, int] = {}
    for i, c in enumerate(decl.resource_classes):
        if c.resource_class in seen:
            yield document.problem(("resource_classes", i, "resource_class"),
                                   f"{c.resource_class!r} is listed twice (first at resource_classes[{seen[c.resource_class]}])")
        seen.setdefault(c.resource_class, i)


def load(path: Path | str | None = None) -> CanaryPolicy:
    """The policy in ``path`` (default :data:`DEFAULT_PATH`); a missing default file is
    :data:`NO_POLICY`, a missing named file an error (it was asked for)."""
    explicit = path is not None
    path = Path(path) if explicit else DEFAULT_PATH
    if not path.exists() and not explicit:
        return NO_POLICY
    document = schema_load(path, format="yaml", limits=KIND.limits)
    decl = validate(document, CanaryPolicyDecl, checks=_checks)
    t = decl.timeouts
    return CanaryPolicy(classes=tuple(CanaryClass(c.resource_class, c.required) for c in decl.resource_classes),
                        timeouts=Timeouts(t.allocation, t.deploy, t.first_boot, t.clean),
                        attempts=decl.attempts, maintenance_after=decl.maintenance_after,
                        lessee=decl.lessee, source=str(path))
