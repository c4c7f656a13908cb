"""The agent ramdisk in Glance: its kernel and initramfs as two public images that nodes name as
``driver_info.deploy_kernel`` / ``deploy_ramdisk`` (Ironic downloads them from Glance itself).

Idempotent per ramdisk: the images carry the digest of the ramdisk's inputs
(``nodeforge_agent_digest``) and the file's own sha256 (``nodeforge_sha256``); a second publish
of the same ramdisk finds them and uploads nothing. An image of that digest left by an
interrupted upload (queued, saving, killed) is deleted first. After an upload Glance's own hash
of the data (``os_hash_value``) must match the file's, or the image is deleted again.
Public: Ironic reads them with its own service credentials, from another project.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodeforge.base import fs
from nodeforge.publish import glance_api as ga

ROLE = f"{ga.P}role"
DIGEST = f"{ga.P}agent_digest"
SHA256 = f"{ga.P}sha256"
VERSION = f"{ga.P}agent_version"
TAG_AGENT = "nodeforge-agent"
ROLES = {"kernel": ("agent-kernel", "aki"), "ramdisk": ("agent-ramdisk", "ari")}
DRIVER_INFO = {"kernel": "deploy_kernel", "ramdisk": "deploy_ramdisk"}


@dataclasses.dataclass
class AgentImage:
    part: str                    # kernel | ramdisk
    name: str
    path: Path
    sha256: str
    image_id: str | None = None
    action: str = "upload"       # upload | exists | uploaded
    cleaned: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return {"part": self.part, "name": self.name, "file": str(self.path), "sha256": self.sha256,
                "image_id": self.image_id, "action": self.action, "cleaned": self.cleaned,
                "driver_info": DRIVER_INFO[self.part]}


def plan(conn, record: dict, files: dict[str, Path], scope: str) -> list[AgentImage]:
    """What publishing the ramdisk of ``record`` (``ramdisk.json``) would do; ``files``: part ->
    path (kernel, ramdisk). Reads Glance, writes nothing."""
    digest = record["digest"]
    found = ga.list_images(conn, **{DIGEST: digest})
    out = []
    for part, path in files.items():
        role, _ = ROLES[part]
        sha = record["files"][path.name]["sha256"]
        item = AgentImage(part, f"nodeforge-agent-{digest[:12]}.{path.name.rsplit('.', 1)[-1]}", path, sha)
        for img in (i for i in found if i.get(ROLE) == role):
            if img.get("status") == ga.ACTIVE and img.get(SHA256) == sha and ga.scope_of(img) == scope:
                item.image_id, item.action = img["id"], "exists"
            elif img.get("status") in ga.TRANSIENT | ga.FAILED:
                item.cleaned.append(img["id"])
        out.append(item)
    return out


def apply(conn, record: dict, items: list[AgentImage], scope: str) -> list[AgentImage]:
    """Upload what :func:`plan` found missing; the same items with their image IDs."""
    for item in items:
        for stale in item.cleaned:
            ga.delete_image(conn, stale)
        if item.action == "exists":
            continue
        digests = fs.digest_file(item.path, ("sha256", "sha512"))       # one read: the record's and Glance's
        if digests["sha256"] != item.sha256:
            raise ga.PublishError(detail=f"{item.path} does not match its ramdisk record's sha256; rebuild it")
        role, fmt = ROLES[item.part]
        img = ga.create_image(conn, {
            "name": item.name, "disk_format": fmt, "container_format": fmt, "visibility": "public",
            "tags": [ga.TAG, TAG_AGENT], ROLE: role, DIGEST: record["digest"], SHA256: item.sha256,
            VERSION: str(record.get("ipa_version") or ""), ga.SCOPE: scope})
        try:
            with open(item.path, "rb") as fh:
                ga.put_data(conn, img["id"], fh, f"uploading {item.name}")
            stored = ga.get_image(conn, img["id"])
            algo = stored.get("os_hash_algo") or "sha512"
            local = digests.get(algo) or fs.digest_file(item.path, (algo,))[algo]
            if stored.get("status") != ga.ACTIVE or stored.get("os_hash_value") != local:
                raise ga.PublishError(detail=f"{item.name}: Glance holds other data than {item.path} "
                                             f"(status {stored.get('status')})")
        except BaseException:
            ga.delete_image(conn, img["id"])
            raise
        item.image_id, item.action = img["id"], "uploaded"
    return items


def driver_info(items: list[AgentImage]) -> dict[str, str]:
    """``deploy_kernel`` / ``deploy_ramdisk`` for a node's driver_info."""
    return {DRIVER_INFO[i.part]: i.image_id for i in items if i.image_id}
