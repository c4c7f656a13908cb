"""``nodeforge image canary``: a plan (reads Glance and Ironic, writes nothing), then its apply.

The image is a published nodeforge bare-metal image (Glance); its build directory gives the
image's own checks (what ``image verify`` checks, now on the deployed node) and receives
``canary.json``; the report is stored beside the image in Glance with a verdict property per
resource class, which promote reads (:func:`nodeforge.publish.catalog.check_canary`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Callable

from nodeforge.base.fs import atomic_write
from nodeforge.canary import run
from nodeforge.canary.phonehome import Listener
from nodeforge.canary.policy import CanaryPolicy
from nodeforge.errors import NodeforgeError, UsageError
from nodeforge.imageverify import boottest, builddir
from nodeforge.ironic.provisioner import Provisioner
from nodeforge.publish import glance as g

REPORT = "canary.json"
SCHEMA = "nodeforge.canary/1"
ENV_LISTEN = "NODEFORGE_CANARY_LISTEN"          # host:port the phone-home listener binds
ENV_ADVERTISE = "NODEFORGE_CANARY_ADVERTISE"    # the base URL the node is told (what it reaches)


class CanaryFailed(NodeforgeError):
    message = "canary deploy failed: {detail}"


@dataclasses.dataclass
class CanaryPlan:
    image: dict
    policy: CanaryPolicy
    scope: str
    classes: list[run.ClassPlan]
    build_dir: Path

    @property
    def problems(self) -> list[str]:
        return [f"{c.resource_class}: {c.problem}" for c in self.classes if c.problem and c.required]

    def rows(self) -> list[dict]:
        return [{"resource_class": c.resource_class, "required": c.required,
                 "node": (c.allocation or {}).get("node_uuid") or (c.candidates[0] if c.candidates else None),
                 "action": "resume" if c.allocation else ("deploy" if c.candidates else "none"),
                 "candidates": len(c.candidates), "problem": c.problem} for c in self.classes]

    def to_dict(self) -> dict:
        return {"image": self.image["id"], "name": self.image.get("name"), "scope": self.scope,
                "policy": self.policy.describe(), "classes": self.rows(), "problems": self.problems}


def listen_settings(listen: str | None = None, advertise: str | None = None) -> tuple[str, int, str | None]:
    """(host, port, advertised base URL) from the options, else ``$NODEFORGE_CANARY_LISTEN`` /
    ``$NODEFORGE_CANARY_ADVERTISE``, else 127.0.0.1, any free port, the listened address."""
    listen = listen or os.environ.get(ENV_LISTEN) or "127.0.0.1:0"
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen / ${ENV_LISTEN}: expected HOST:PORT, got {listen!r}")
    return host, int(port), advertise or os.environ.get(ENV_ADVERTISE) or None


def find_image(conn, build: builddir.BuildDir, image_ref: str | None = None) -> dict:
    """The published bare-metal image of ``build`` (or ``image_ref``, which must be it)."""
    if image_ref:
        image = g.find_image(conn, image_ref)
    else:
        found = [i for i in g.list_images(conn, **{f"{g.P}build_id": build.build_id, f"{g.P}variant": "baremetal",
                                                    f"{g.P}role": "image"}) if i.get("status") == g.ACTIVE]
        if not found:
            raise UsageError(f"build {build.build_id} has no published bare-metal image in this cloud; "
                             "run 'nodeforge image publish' first (or name one with --image)")
        image = found[0]
    if image.get(f"{g.P}variant") != "baremetal" or g.TAG not in (image.get("tags") or []):
        raise UsageError(f"{image.get('name') or image['id']}: not a nodeforge bare-metal image "
                         f"(variant {image.get(f'{g.P}variant')!r}); the canary deploys bare-metal images")
    if image.get(f"{g.P}build_id") != build.build_id:
        raise UsageError(f"{image.get('name') or image['id']} was published from build {image.get(f'{g.P}build_id')}, "
                         f"not from {build.path} (build {build.build_id})")
    return image


def plan(conn, prov: Provisioner, build_dir: Path, policy: CanaryPolicy, *, image_ref: str | None = None,
         scope: str | None = None) -> CanaryPlan:
    """What the canary would do: the image, and per class of the policy the allocation to resume
    or the nodes it may take. Reads Glance and Ironic; writes nothing."""
    build = builddir.load(build_dir)
    image = find_image(conn, build, image_ref)
    own = scope or g.scope_of(image) or g.DEFAULT_SCOPE
    return CanaryPlan(image, policy, own, run.plan(prov, policy, own) if policy.asked else [], Path(build_dir))


def apply(prov: Provisioner, p: CanaryPlan, publisher: g.Publisher, *,
          listen: tuple[str, int, str | None] = ("127.0.0.1", 0, None), cache_dir: Path | None = None,
          say: Callable[[str], None] = lambda _m: None, poll: float = 5.0,
          expected: tuple | None = None) -> dict:
    """Run every class's canary (one after the other), write ``canary.json`` into the build
    directory, store it beside the image with the verdicts, and return it. Raises
    :class:`CanaryFailed` when a required class did not pass (after everything was recorded).
    ``expected``: the image's (expectations, facts) when the caller has them (``(None, None)``:
    only the deploy's own checks); by default read offline from the build directory."""
    if not p.policy.asked:
        return {"schema": SCHEMA, "image_id": p.image["id"], "asked": False, "results": [],
                "policy": p.policy.describe()}
    if expected is None:
        say("reading the image offline for its own checks")
        expected = boottest.expectations(p.build_dir, "baremetal", cache_dir=cache_dir)
    exp, facts = expected
    req = run.Request(image_id=p.image["id"], scope=p.scope, policy=p.policy, expectations=exp, facts=facts,
                      poll=poll, say=say)
    host, port, advertise = listen
    results = []
    with Listener(host, port, advertise=advertise) as listener:
        for cp in p.classes:
            say(f"{cp.resource_class}: canary deploy of {p.image.get('name')}")
            results.append(run.run_class(prov, req, cp, listener))
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {"schema": SCHEMA, "image_id": p.image["id"], "image_name": p.image.get("name"),
              "build_id": p.image.get(f"{g.P}build_id"), "scope": p.scope, "asked": True,
              "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "policy": p.policy.to_dict(),
              "results": [r.to_dict() for r in results]}
    data = (json.dumps(report, indent=1, sort_keys=True) + "\n").encode()
    atomic_write(Path(p.build_dir) / REPORT, data.decode())
    verdicts = {g.canary_property(r.resource_class): run.property_value(r, now) for r in results}
    publisher.attach_canary(builddir.load(p.build_dir), "baremetal", p.image, data, verdicts)
    failed = [f"{r.resource_class}: {r.reason}" for r in results if not r.passed
              and any(c.resource_class == r.resource_class and c.required for c in p.policy.classes)]
    if failed:
        raise CanaryFailed(detail="; ".join(failed))
    return report
