"""``image agent-ramdisk --publish`` against the session cloud's real Glance: the kernel and
initramfs of a (small, stand-in) cached ramdisk become two public images with the file's sha256
and the ramdisk's digest; a second publish finds them; an upload an earlier run left half-done
is removed; a file that no longer matches its record is refused before any upload."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from nodeforge import cli
from nodeforge.imagebuild import ramdisk
from nodeforge.publish import agent_images, glance_api as ga

pytestmark = [pytest.mark.devcloud]


def _fake_cache(p: ramdisk.RamdiskPlan, tag: str) -> dict:
    p.cache.mkdir(parents=True)
    files = {ramdisk.KERNEL: f"kernel {tag}".encode(), ramdisk.INITRAMFS: f"initramfs {tag}".encode() * 1000}
    for name, data in files.items():
        (p.cache / name).write_bytes(data)
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    (p.cache / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    record = {"schema": ramdisk.SCHEMA, "digest": p.digest, "ipa_version": p.ipa_version,
              "files": {n: {"sha256": h, "bytes": len(files[n])} for n, h in sums.items()}}
    (p.cache / ramdisk.RECORD).write_text(json.dumps(record))
    return record


def _publish(capsys, scope: str, *extra: str) -> tuple[int, dict | str]:
    code = cli.main(["--os-cloud", "nodeforge-dev", "image", "agent-ramdisk", "--publish", "--scope", scope,
                     "-o", "json", *extra])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


def test_publish_uploads_once_and_cleans_what_an_interrupted_upload_left(devcloud, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    conn = devcloud.admin()
    scope, tag = f"t-agent-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    p = ramdisk.plan()
    record = _fake_cache(p, tag)
    made: list[str] = []
    try:
        code, doc = _publish(capsys, scope, "--dry-run")
        assert code == 0 and [g["action"] for g in doc["glance"]] == ["upload", "upload"]

        code, doc = _publish(capsys, scope)
        assert code == 0, doc
        ids = doc["driver_info"]
        made += ids.values()
        assert set(ids) == {"deploy_kernel", "deploy_ramdisk"}
        for key, name in (("deploy_kernel", ramdisk.KERNEL), ("deploy_ramdisk", ramdisk.INITRAMFS)):
            img = ga.get_image(conn, ids[key])
            assert img["status"] == "active" and img["visibility"] == "public"
            assert img[agent_images.SHA256] == record["files"][name]["sha256"]
            assert img[agent_images.DIGEST] == p.digest and ga.scope_of(img) == scope
            assert img["disk_format"] == ("aki" if key == "deploy_kernel" else "ari")
            assert ga.download(conn, ids[key], name) == (p.cache / name).read_bytes()

        # A second publish finds them; an image of this digest that an interrupted upload left
        # (queued: created, no data) is removed.
        stale = ga.create_image(conn, {"name": "stale", "disk_format": "ari", "container_format": "ari",
                                       agent_images.ROLE: "agent-ramdisk", agent_images.DIGEST: p.digest,
                                       ga.SCOPE: scope})
        made.append(stale["id"])
        code, doc = _publish(capsys, scope)
        assert code == 0 and doc["driver_info"] == ids
        assert [g["action"] for g in doc["glance"]] == ["exists", "exists"]
        assert doc["glance"][1]["cleaned"] == [stale["id"]]
        assert ga.list_images(conn, id=stale["id"]) == []

        # The cached file changed behind its record: refused, nothing uploaded.
        (p.cache / ramdisk.INITRAMFS).write_bytes(b"tampered")
        code, err = _publish(capsys, f"{scope}-2")
        assert code != 0 and "SHA256SUMS" in err
        assert ga.list_images(conn, **{ga.SCOPE: f"{scope}-2"}) == []
    finally:
        for image_id in made:
            ga.delete_image(conn, image_id)
