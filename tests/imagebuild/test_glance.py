"""Publishing to Glance: build-directory reading, properties, streaming
upload with digest check, the manifest image, idempotency and clean-up."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import urllib.parse

import pytest

from nodeforge.base import sums as base_sums
from nodeforge.imageverify import builddir
from nodeforge.publish import glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import change_last_byte, make_build_dir
from tests.imagebuild.glance_fixtures import admin, member, policy, tracker  # noqa: F401 - fixtures
from tests.imagebuild.verify_fixture import write_verify

SCS_AND_MAGNUM = ("os_distro", "os_version", "architecture", "kube_version", "hw_firmware_type", "hw_machine_type",
                  "hw_disk_bus", "hw_scsi_model", "hw_rng_model", "image_build_date", "image_source",
                  "image_description", "image_original_user", "replace_frequency", "uuid_validity", "provided_until")
NODEFORGE = ("nodeforge_build_id", "nodeforge_variant", "nodeforge_lockfile_sha256", "nodeforge_manifest_sha256",
             "nodeforge_manifest_image", "nodeforge_verify", "nodeforge_verify_report", "nodeforge_verify_sha256")


# --------------------------------------------------------------------------
# Build directory reader (no cloud)

def test_builddir_reads_the_image_build_layout(tmp_path):
    d = make_build_dir(tmp_path, k8s="1.35.2", verify="passed")
    b = builddir.load(d)
    assert (b.k8s_version, b.k8s_minor, b.os_distro, b.os_version, b.architecture) == \
        ("1.35.2", "1.35", "debian", "12", "x86_64")
    assert set(b.variants) == {"vm", "baremetal"}
    vm = b.variant("vm")
    assert vm.disk_format == "qcow2" and b.variant("baremetal").disk_format == "raw"
    assert vm.sha512 == hashlib.sha512(vm.path.read_bytes()).hexdigest()
    assert vm.verify is builddir.VerifyStatus.PASSED and "checks passed" in vm.verify_reason
    assert b.verify_raw == (d / "verify.json").read_bytes()
    assert b.manifest_sha256 == hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest()
    assert b.lockfile_sha256 == json.loads((d / "manifest.json").read_text())["lockfile"]["sha256"]


def test_builddir_verify_absent_failed_and_per_variant(tmp_path):
    absent = builddir.load(make_build_dir(tmp_path, verify=None)).variant("vm")
    assert absent.verify is builddir.VerifyStatus.ABSENT and "no verify.json" in absent.verify_reason
    failed = builddir.load(make_build_dir(tmp_path, verify="failed")).variant("vm")
    assert failed.verify is builddir.VerifyStatus.FAILED and "NF-HARD-003 failed" in failed.verify_reason
    d = make_build_dir(tmp_path, verify=None)
    write_verify(d, "passed", variants=["vm"])
    write_verify(d, "failed", variants=["baremetal"])
    b = builddir.load(d)
    assert (b.variant("vm").verify, b.variant("baremetal").verify) == ("passed", "failed")


def test_builddir_lenient_verify_forms_no_longer_pass(tmp_path):
    """What the old reader took for a pass: a bare verdict, a 'result', a section without image_sha256."""
    d = make_build_dir(tmp_path)
    for lenient, problem in [({"variants": {"vm": {"passed": True}, "baremetal": {"passed": True}}}, "schema is missing"),
                             ({"passed": True}, "schema is missing"), ({"result": "ok"}, "schema is missing"),
                             ({"vm": {"result": "pass"}}, "schema is missing")]:
        (d / "verify.json").write_text(json.dumps(lenient))
        b = builddir.load(d)
        for v in ("vm", "baremetal"):
            assert b.variant(v).verify is builddir.VerifyStatus.FAILED, lenient
            assert f"verify.json: {problem}" in b.variant(v).verify_reason
    (d / "verify.json").write_text("{not json")
    damaged = builddir.load(d).variant("vm")
    assert damaged.verify is builddir.VerifyStatus.FAILED and "not valid JSON" in damaged.verify_reason


def test_builddir_refuses_image_without_digest_and_unknown_variant(tmp_path):
    d = make_build_dir(tmp_path, variants=("vm",))
    with pytest.raises(builddir.BuildDirError, match="no 'baremetal' image"):
        builddir.load(d).variant("baremetal")
    (d / "SHA512SUMS").write_text("")
    with pytest.raises(builddir.BuildDirError, match="SHA512SUMS: no entry for nodeforge-k8s-1.36.0-vm.qcow2"):
        builddir.load(d)
    with pytest.raises(builddir.BuildDirError, match="no manifest.json"):
        builddir.load(tmp_path)


def test_properties_cover_magnum_scs_and_nodeforge(tmp_path):
    b = builddir.load(make_build_dir(tmp_path))
    props = g.image_properties(b, b.variant("vm"), RetentionPolicy(keep=4), manifest_image_id="m-id",
                               verify_report_id="r-id", verify_sha256="0" * 64)
    for key in SCS_AND_MAGNUM + NODEFORGE + ("hw_qemu_guest_agent",):
        assert props.get(key), key
    assert props["kube_version"] == "v1.36.0" and props["uuid_validity"] == "last-4"
    assert "hw_qemu_guest_agent" not in g.image_properties(b, b.variant("baremetal"), RetentionPolicy(),
                                                           manifest_image_id="m", verify_report_id="r",
                                                           verify_sha256="0" * 64)
    g.check_properties("x", props)  # small enough for MySQL and Nova


def test_property_limits_checked_client_side():
    with pytest.raises(g.PropertyLimitError, match="Nova would truncate"):
        g.check_properties("img", {"nodeforge_x": "a" * 256})
    with pytest.raises(g.PropertyLimitError, match="limit 65535"):
        g.check_properties("img", {"img_signature": "a" * 70000})
    g.check_properties("img", {"img_signature": "a" * 700})  # a long signature is fine
    with pytest.raises(g.PropertyLimitError, match="129 properties"):
        g.check_properties("img", {f"k{i}": "v" for i in range(129)})
    with pytest.raises(g.PropertyLimitError, match="longer than 255"):
        g.check_properties("img", {"k" * 256: "v"})


# --------------------------------------------------------------------------
# Against the local Glance

@pytest.mark.devcloud
def test_publish_end_to_end(tmp_path, admin, tracker, policy):
    d = tracker.build(make_build_dir(tmp_path, size=3 * 1024 * 1024 + 17))
    b = builddir.load(d)
    results = {r.variant: r for r in g.Publisher(admin, policy).publish(b)}
    sums = base_sums.read_sums(d / "SHA512SUMS")
    for variant, r in results.items():
        assert r.action == "uploaded"
        img = g.get_image(admin, r.image_id)
        assert img["status"] == "active" and img["visibility"] == "private"
        assert img["os_hash_algo"] == "sha512" and img["os_hash_value"] == sums[b.variant(variant).path.name]
        assert img["disk_format"] == b.variant(variant).disk_format
        for key in SCS_AND_MAGNUM + NODEFORGE:
            assert img.get(key), f"{variant}: {key} missing"
        assert (variant == "vm") == ("hw_qemu_guest_agent" in img)
        assert "nodeforge_uploader" not in img  # the in-flight marker is gone
        assert set(img["tags"]) == {"nodeforge", "nodeforge-k8s-1.36", f"nodeforge-{variant}", "nodeforge-candidate"}
        assert img["min_ram"] == 2048 and img["min_disk"] >= 1
        # The manifest travels with the image: hidden, byte-identical, digest-checked.
        manifest = g.get_image(admin, img["nodeforge_manifest_image"])
        assert manifest["os_hidden"] is True and "nodeforge" not in manifest["tags"]
        assert g.download_manifest(admin, img) == (d / "manifest.json").read_bytes()
        # So does the verify report promote judges again: hidden, byte-identical, digest-checked.
        report = g.get_image(admin, img["nodeforge_verify_report"])
        assert report["os_hidden"] is True and report["tags"] == ["nodeforge-verify-report"]
        assert img["nodeforge_verify_report"] == r.verify_report_id and img["nodeforge_verify"] == "passed"
        assert g.download_verify_report(admin, img) == (d / "verify.intoto.json").read_bytes()
        assert img["nodeforge_verify_sha256"] == hashlib.sha256((d / "verify.intoto.json").read_bytes()).hexdigest()
    # Template authors' listings show node images only, not manifests or reports.
    listed = {i["id"] for i in g.list_images(admin, tag="nodeforge")}
    assert {r.image_id for r in results.values()} <= listed
    assert not {r.manifest_image_id for r in results.values()} & listed
    assert not {r.verify_report_id for r in results.values()} & listed


@pytest.mark.devcloud
def test_second_publish_uploads_nothing(tmp_path, admin, tracker, policy):
    b = builddir.load(tracker.build(make_build_dir(tmp_path, variants=("vm",))))
    first = g.Publisher(admin, policy).publish(b)[0]
    before = {i["id"] for i in tracker.images(b.build_id)}
    second = g.Publisher(admin, policy).publish(b)[0]
    assert (second.action, second.image_id, second.manifest_image_id, second.verify_report_id) == \
        ("exists", first.image_id, first.manifest_image_id, first.verify_report_id)
    assert {i["id"] for i in tracker.images(b.build_id)} == before and len(before) == 4   # + manifest, report, provenance
    assert g.Publisher(admin, policy).plan(b).results[0].action == "exists"


@pytest.mark.devcloud
def test_hash_mismatch_deletes_image_and_fails(tmp_path, admin, tracker, policy):
    d = tracker.build(make_build_dir(tmp_path, variants=("baremetal",)))
    image = d / "nodeforge-k8s-1.36.0-baremetal.raw"
    change_last_byte(image)
    with pytest.raises(g.PublishError, match="does not match SHA512SUMS"):
        g.Publisher(admin, policy).publish(builddir.load(d))
    left = [i for i in tracker.images(d.name) if i.get("nodeforge_role") == "image"]
    assert left == []


@pytest.mark.devcloud
def test_leftover_in_flight_image_is_cleaned_and_publish_completes(tmp_path, admin, tracker, policy):
    """A killed publish leaves a queued/saving image: the next run removes it."""
    b = builddir.load(tracker.build(make_build_dir(tmp_path, variants=("vm",))))
    stale = g.create_image(admin, {"name": "stale", "disk_format": "qcow2", "container_format": "bare",
                                   "nodeforge_build_id": b.build_id, "nodeforge_variant": "vm",
                                   "nodeforge_role": "image", "nodeforge_uploader": "otherhost:1:1"})
    assert stale["status"] == "queued"
    r = g.Publisher(admin, policy).publish(b)[0]
    assert r.action == "uploaded" and stale["id"] in r.cleaned
    assert {i["status"] for i in tracker.images(b.build_id)} == {"active"}


class DroppingProxy:
    """A TCP proxy to Glance that cuts every connection whose request body
    passes ``limit`` bytes (a network drop mid-upload)."""

    def __init__(self, target: tuple[str, int], limit: int, hold_after: int | None = None):
        self.target, self.limit = target, limit
        # With hold_after, a connection stops forwarding once that many bytes
        # went through (``held`` is set) until ``release`` is set: the upload
        # is then provably mid-stream, whatever the machine's load.
        self.hold_after = hold_after
        self.held = threading.Event()
        self.release = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.cuts = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client):
        try:
            upstream = socket.create_connection(self.target)
        except OSError:  # the server is down: refuse, as it would
            client.close()
            return

        def back():
            try:
                while data := upstream.recv(65536):
                    client.sendall(data)
            except OSError:
                pass
            finally:
                client.close()

        threading.Thread(target=back, daemon=True).start()
        sent = 0
        try:
            while data := client.recv(65536):
                sent += len(data)
                if sent > self.limit:
                    self.cuts += 1
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    break
                upstream.sendall(data)
                if self.hold_after is not None and sent > self.hold_after and not self.release.is_set():
                    self.held.set()
                    self.release.wait(timeout=300)
                    # Released: nothing more goes through, both sides are closed and Glance sees the
                    # body end early. (Forwarding what the client had sent meanwhile could complete
                    # the upload: a killed client's socket still delivers its buffered bytes, which
                    # on a loaded machine were the whole 16 MiB once, and the image went active.)
                    break
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self):
        self.sock.close()


@pytest.mark.devcloud
def test_connection_dropped_mid_upload_leaves_nothing_and_rerun_completes(tmp_path, devcloud, admin, tracker, policy):
    import openstack

    b = builddir.load(tracker.build(make_build_dir(tmp_path, variants=("baremetal",), size=8 * 1024 * 1024)))
    glance_url = urllib.parse.urlsplit(admin.image.get_endpoint())
    proxy = DroppingProxy((glance_url.hostname, glance_url.port), limit=2 * 1024 * 1024)
    try:
        cut = openstack.connect(cloud="nodeforge-dev", image_endpoint_override=f"http://127.0.0.1:{proxy.port}")
        with pytest.raises(g.UploadInterrupted, match="upload interrupted"):
            g.Publisher(cut, policy).publish(b)
        assert proxy.cuts >= 1
    finally:
        proxy.close()
    # Nothing in flight is left: the failed run removed its image, or the
    # next run does. Either way the re-run completes.
    r = g.Publisher(admin, policy).publish(b)[0]
    assert r.action == "uploaded"
    statuses = [i["status"] for i in tracker.images(b.build_id)]
    assert statuses == ["active"] * 4  # node image + manifest + verify report + provenance


@pytest.mark.devcloud
def test_publish_killed_mid_upload_then_rerun_cleans_and_completes(tmp_path, devcloud, admin, tracker, policy):
    """kill -9 of `nodeforge image publish` while the image data is streaming."""
    import signal
    import subprocess
    import sys

    import yaml

    b = builddir.load(tracker.build(make_build_dir(tmp_path, variants=("baremetal",), size=16 * 1024 * 1024)))
    glance_url = urllib.parse.urlsplit(admin.image.get_endpoint())
    # The proxy stops forwarding once 4 MiB of the 16 MiB went through: the kill lands mid-stream.
    proxy = DroppingProxy((glance_url.hostname, glance_url.port), limit=1 << 40, hold_after=4 * 1024 * 1024)
    clouds = yaml.safe_load(devcloud.paths.clouds_yaml.read_text())
    clouds["clouds"]["nodeforge-dev"]["image_endpoint_override"] = f"http://127.0.0.1:{proxy.port}"
    cfg = tmp_path / "clouds.yaml"
    cfg.write_text(yaml.safe_dump(clouds))
    cfg.chmod(0o600)
    env = dict(os.environ, OS_CLIENT_CONFIG_FILE=str(cfg), OS_CLOUD="nodeforge-dev")
    proc = subprocess.Popen([sys.executable, "-m", "nodeforge.cli", "image", "publish", str(b.path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    def images() -> dict[str, str]:
        return {i["id"]: i["status"] for i in tracker.images(b.build_id) if i.get("nodeforge_role") == "image"}

    try:
        assert proxy.held.wait(timeout=300), f"the upload never got 4 MiB into Glance (exit {proc.poll()})"
        deadline = time.monotonic() + 60
        while "saving" not in images().values():      # Glance has started storing the data
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"upload never reached 'saving': {images()} (exit {proc.poll()})"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
        proxy.release.set()       # the held connection closes: Glance sees the body end early
        proxy.close()
    # Glance has given up on the dropped upload (status back to 'queued') before the re-run looks.
    deadline = time.monotonic() + 120
    while "saving" in (left := images()).values():
        assert time.monotonic() < deadline, f"Glance still 'saving' the killed upload: {left}"
        time.sleep(0.2)
    # The killed run left its image in flight ('queued'), or Glance marked the broken upload 'killed'
    # (seen on a loaded machine): either way the re-run must clean it up.
    assert left and set(left.values()) <= g.TRANSIENT | g.FAILED, left
    r = g.Publisher(admin, policy).publish(b)[0]
    assert r.action == "uploaded" and set(left) <= set(r.cleaned)
    assert [i["status"] for i in tracker.images(b.build_id)] == ["active"] * 4   # + manifest, report, provenance


@pytest.mark.slow
@pytest.mark.devcloud
def test_glance_restarted_mid_upload_then_rerun_cleans_and_completes(tmp_path, monkeypatch, policy):
    """A second local cloud (image services only, ports shifted) so restarting
    its Glance disturbs nobody; everything in it goes with its directory."""
    import openstack.config
    from openstack import connection

    from nodeforge.devcloud.cloud import DevCloud
    from nodeforge.devcloud.paths import Paths

    root = tmp_path / "devcloud"
    root.mkdir()
    (root / "venvs").symlink_to(Paths.default().venvs.resolve())
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_DIR", str(root))
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_PORT_OFFSET", "23000")
    cloud = DevCloud(Paths(root))
    try:
        cloud.up(["image"])
        # openstacksdk puts OS_CLIENT_CONFIG_FILE (the session's cloud, set by
        # conftest) before any config_files given here: point it at this cloud.
        monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(cloud.paths.clouds_yaml))
        conf = openstack.config.OpenStackConfig(config_files=[str(cloud.paths.clouds_yaml)])
        assert conf.get_one("nodeforge-dev").config["auth"]["auth_url"].endswith(f":{5000 + 23000}/v3"), \
            "this test must talk to its own cloud, not the session's"
        conn = connection.Connection(config=conf.get_one("nodeforge-dev"))
        b = builddir.load(make_build_dir(tmp_path, variants=("baremetal",), size=16 * 1024 * 1024))
        glance_url = urllib.parse.urlsplit(conn.image.get_endpoint())
        proxy = DroppingProxy((glance_url.hostname, glance_url.port), limit=1 << 40, hold_after=4 * 1024 * 1024)
        # The override must be part of the cloud config: Connection() ignores
        # it when given a ready config.
        slow = connection.Connection(config=conf.get_one(
            "nodeforge-dev", image_endpoint_override=f"http://127.0.0.1:{proxy.port}", api_timeout=30))
        errors: list[Exception] = []

        def run():
            try:
                g.Publisher(slow, policy).publish(b)
            except Exception as exc:  # noqa: BLE001 - inspected below
                errors.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        assert proxy.held.wait(timeout=120), f"the upload never got 4 MiB into Glance: {errors or 'no error'}, alive={worker.is_alive()}"
        cloud.supervisor.stop("glance")
        proxy.release.set()
        worker.join(timeout=120)
        assert not worker.is_alive(), "publish still running two minutes after Glance stopped"
        proxy.close()
        assert errors and isinstance(errors[0], g.PublishError | g.GlanceError), errors
        cloud.up(["image"])
        conn = connection.Connection(config=conf.get_one("nodeforge-dev"))
        left = {i["id"]: i["status"] for i in g.list_images(conn, nodeforge_build_id=b.build_id)
                if i.get("nodeforge_role") == "image"}
        # Glance died with the image in 'saving'; the failed run could not delete it.
        assert left and set(left.values()) <= g.TRANSIENT, left
        r = g.Publisher(conn, policy).publish(b)[0]
        assert r.action == "uploaded" and set(left) <= set(r.cleaned)
        assert [i["status"] for i in g.list_images(conn, nodeforge_build_id=b.build_id)] == ["active"] * 4
    finally:
        cloud.down()
