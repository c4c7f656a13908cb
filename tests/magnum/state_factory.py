"""Plain dicts shaped like the API answers the live audit reads (Magnum 23, Glance v2,
Nova 2.86, Ironic): a small consistent cloud the audit and upgrade-plan tests change one
field at a time."""

from __future__ import annotations

import copy
import itertools

from nodeforge.magnum.live import LiveState

_ids = itertools.count(1)


def uid(prefix: str) -> str:
    return f"{prefix}-{next(_ids):04d}"


def image(version: str = "1.36.4", *, variant: str = "baremetal", approved: bool = True, **kw) -> dict:
    minor = ".".join(version.split(".")[:2])
    tags = ["nodeforge", f"nodeforge-k8s-{minor}", f"nodeforge-{variant}"]
    tags.append("nodeforge-approved" if approved else "nodeforge-candidate")
    img = {"id": uid("img"), "name": f"nodeforge-k8s-{version}-debian-12-{variant}", "status": "active",
           "visibility": "public" if approved else "private", "os_hidden": False, "tags": tags,
           "os_distro": "debian", "os_version": "12", "kube_version": f"v{version}",
           "nodeforge_role": "image", "nodeforge_k8s_minor": minor, "nodeforge_variant": variant,
           "nodeforge_scope": "platform", "created_at": "2026-01-01T00:00:00Z"}
    img.update(kw)
    return img


def bm_flavor(name: str = "bm.compute", rc: str = "CUSTOM_BAREMETAL_COMPUTE", **kw) -> dict:
    f = {"id": uid("flv"), "name": name, "vcpus": 1, "ram": 1024, "disk": 40,
         "extra_specs": {f"resources:{rc}": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
                         "resources:DISK_GB": "0", "trait:CUSTOM_RAID": "required"}}
    f.update(kw)
    return f


def vm_flavor(name: str = "m1.large", **kw) -> dict:
    f = {"id": uid("flv"), "name": name, "vcpus": 4, "ram": 8192, "disk": 40, "extra_specs": {}}
    f.update(kw)
    return f


def node(rc: str = "baremetal-compute", *, state: str = "available", maintenance: bool = False, **kw) -> dict:
    n = {"uuid": uid("node"), "name": uid("n"), "resource_class": rc, "provision_state": state,
         "maintenance": maintenance, "traits": ["CUSTOM_RAID"]}
    n.update(kw)
    return n


def template(img: dict, flavor: dict, *, name: str | None = None, kube_tag: str | None = None, **kw) -> dict:
    labels = {"kube_tag": kube_tag if kube_tag is not None else img.get("kube_version")}
    t = {"uuid": uid("ct"), "name": name or uid("tmpl"), "coe": "kubernetes", "image_id": img["id"],
         "master_flavor_id": flavor["id"], "flavor_id": flavor["id"], "server_type": "vm",
         "cluster_distro": img.get("os_distro"), "driver": "k8s_cluster_api_debian", "labels": labels,
         "hidden": False, "public": False, "created_at": "2026-01-01T00:00:00Z"}
    if kube_tag == "":
        t["labels"] = {}
    t.update(kw)
    return t


def cluster(tmpl: dict, *, name: str | None = None, status: str = "CREATE_COMPLETE", kube_tag: str | None = None,
            **kw) -> dict:
    c = {"uuid": uid("cl"), "name": name or uid("cluster"), "status": status, "cluster_template_id": tmpl["uuid"],
         "labels": dict(tmpl.get("labels") or {}, **({"kube_tag": kube_tag} if kube_tag else {})),
         "master_count": 1, "node_count": 2}
    c.update(kw)
    return c


def healthy() -> dict:
    """A clean cloud: one approved 1.36.4 image, one bare-metal flavor with a node, a template, a cluster."""
    img = image()
    flv = bm_flavor()
    tmpl = template(img, flv, name="k8s-1.36-baremetal")
    return {"images": [img], "flavors": [flv], "nodes": [node()], "templates": [tmpl],
            "clusters": [cluster(tmpl, name="prod")], "img": img, "flavor": flv, "template": tmpl}


def state_of(parts: dict, nodegroups: dict | None = None) -> LiveState:
    p = copy.deepcopy(parts)
    return LiveState(templates=p["templates"], clusters=p["clusters"], images=p["images"], flavors=p["flavors"],
                     nodes=p["nodes"], nodegroups=nodegroups or {})
