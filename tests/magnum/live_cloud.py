"""Helpers for tests against the local cloud's real Magnum: images that look like
nodeforge catalog entries (tags and properties as publish/promote set them, a few
bytes of data so they are ``active``), flavors, hand-made cluster templates, and
clean-up of everything a test made (clusters purged from the local Magnum's own
database: a CREATE_FAILED cluster cannot be deleted through the API here)."""

from __future__ import annotations

import time


from nodeforge.clients import compute as nova
from nodeforge.publish import glance as g
from nodeforge.clients import container_infra as client

DRIVER = "k8s_cluster_api_debian"
# How long a test waits for the conductor to record a cluster's create. It gets to each within
# seconds (about a minute on a loaded machine); a cluster still CREATE_IN_PROGRESS after this
# is a stuck conductor (it once was: a write refused at once by SQLite), not a slow one.
RECORD_TIMEOUT = 300


def conductor_errors(paths, last: int = 8) -> str:
    """The first line of the conductor's last ``last`` ERROR records (its application log), for a
    failure message: what it raised instead of recording the cluster."""
    log = paths.log / "magnum-conductor-app.log"
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"({log}: {exc})"
    heads, prev = [], None
    for line in lines:
        parts = line.split(" ", 5)
        if len(parts) > 4 and parts[3] == "ERROR":
            key = (parts[0], parts[1])            # one record: its lines share the timestamp
            if key != prev:
                heads.append(line[:300])
            prev = key
    return "\n".join(heads[-last:]) or "(no ERROR records)"


class LiveCloud:
    def __init__(self, devcloud, prefix: str):
        self.devcloud = devcloud
        self.admin = devcloud.admin()
        self.prefix = prefix
        self.images: list[str] = []
        self.flavors: list[str] = []
        self.templates: list[str] = []
        self.clusters: list[str] = []

    def image(self, version: str, *, approved: bool = True, variant: str = "vm", **props) -> dict:
        minor = ".".join(version.split(".")[:2])
        tags = [g.TAG, g.tag_k8s(minor), g.tag_variant(variant), g.TAG_APPROVED if approved else g.TAG_CANDIDATE]
        body = {"name": f"{self.prefix}k8s-{version}-{variant}", "disk_format": "raw", "container_format": "bare",
                "visibility": "public" if approved else "private", "tags": tags, "os_distro": "debian",
                "os_version": "12", "kube_version": f"v{version}", f"{g.P}role": "image",
                f"{g.P}k8s_minor": minor, f"{g.P}variant": variant, g.SCOPE: "audit-test", **props}
        img = g.create_image(self.admin, body)
        self.images.append(img["id"])
        resp = self.admin.image.put(f"/images/{img['id']}/file", data=b"\0" * 4096,
                                    headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code < 300, resp.text
        return g.get_image(self.admin, img["id"])

    def flavor(self, name: str, *, disk: int = 10, extra_specs: dict | None = None) -> dict:
        f = nova.call(self.admin, "POST", "/flavors", "create flavor",
                    body={"flavor": {"name": self.prefix + name, "ram": 1024, "vcpus": 1, "disk": disk}})["flavor"]
        self.flavors.append(f["id"])
        if extra_specs:
            nova.call(self.admin, "POST", f"/flavors/{f['id']}/os-extra_specs", "extra specs",
                    body={"extra_specs": extra_specs})
        return f

    def template(self, name: str, image: dict, flavor: dict, **fields) -> dict:
        body = {"name": self.prefix + name, "coe": "kubernetes", "image_id": image["id"],
                "flavor_id": flavor["id"], "master_flavor_id": flavor["id"], "server_type": "vm",
                "driver": DRIVER, "network_driver": "calico", "external_network_id": "public",
                "labels": {"kube_tag": image.get("kube_version")}, **fields}
        t = client.create_template(self.admin, body)
        self.templates.append(t["uuid"])
        return t

    def cluster(self, name: str, template: dict) -> dict:
        c = client.create_cluster(self.admin, {"name": self.prefix + name, "cluster_template_id": template["uuid"],
                                               "master_count": 1, "node_count": 1})
        self.clusters.append(c["uuid"])
        return c

    def wait_cluster_recorded(self, uuid: str, timeout: float = RECORD_TIMEOUT) -> dict:
        """The cluster once the conductor is done with it (CREATE_FAILED here: no Cluster API
        management cluster); the tests do not depend on which status it ends in."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                c = client.get_cluster(self.admin, uuid)
            except client.MagnumError as exc:
                # Right after create, before the conductor made its node groups, Magnum answers
                # 400 "master_count ... Value: '0'" for the cluster.
                assert "master_count" in str(exc), exc
                c = None
            if c and c.get("status") and c["status"] != "CREATE_IN_PROGRESS":
                return c
            assert time.monotonic() < deadline, (f"cluster {uuid} not recorded in {timeout} s "
                                                 f"({c.get('status') if c else 'no node groups yet'}); the "
                                                 f"conductor's last errors:\n{conductor_errors(self.devcloud.paths)}")
            time.sleep(1)

    def cleanup(self) -> None:
        from nodeforge.devcloud import magnum as dc_magnum

        if self.clusters:
            dc_magnum.purge_clusters(self.devcloud.paths, self.clusters)
        for t in self.templates:
            client.delete_template(self.admin, t)
        for f in self.flavors:
            nova.call(self.admin, "DELETE", f"/flavors/{f}", "cleanup", missing_ok=True)
        for i in self.images:
            g.delete_image(self.admin, i)
        left = [t["name"] for t in client.read_templates(self.admin) if t["name"].startswith(self.prefix)]
        assert not left, f"templates left behind: {left}"
