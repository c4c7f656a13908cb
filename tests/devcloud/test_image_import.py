"""Glance's interoperable image import is enabled: glance-direct (stage,
then import) and web-download from a loopback HTTP server."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import threading
import time
import uuid

import pytest


def _wait_active(conn, image_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        image = conn.image.get_image(image_id)
        if image.status in ("active", "killed", "deleted"):
            return image
        time.sleep(0.3)
    return conn.image.get_image(image_id)


@pytest.fixture
def file_server(tmp_path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.devcloud
def test_web_download_from_loopback(devcloud, file_server):
    root, base = file_server
    data = os.urandom(200 * 1024)
    (root / "disk.raw").write_bytes(data)
    conn = devcloud.admin()
    image = conn.image.create_image(name=f"nf-test-webdl-{uuid.uuid4().hex[:6]}", disk_format="raw",
                                    container_format="bare")
    try:
        conn.image.import_image(image, method="web-download", uri=f"{base}/disk.raw")
        image = _wait_active(conn, image.id)
        assert image.status == "active"
        assert image.hash_value == hashlib.sha512(data).hexdigest()
    finally:
        conn.image.delete_image(image.id, ignore_missing=True)


@pytest.mark.devcloud
def test_glance_direct_stage_then_import(devcloud):
    data = os.urandom(150 * 1024)
    conn = devcloud.admin()
    image = conn.image.create_image(name=f"nf-test-direct-{uuid.uuid4().hex[:6]}", disk_format="raw",
                                    container_format="bare")
    try:
        resp = conn.image.put(f"/images/{image.id}/stage", data=data,
                              headers={"Content-Type": "application/octet-stream"})
        assert resp.status_code == 204
        assert conn.image.get_image(image.id).status == "uploading"
        conn.image.import_image(image, method="glance-direct")
        image = _wait_active(conn, image.id)
        assert image.status == "active"
        assert image.size == len(data)
    finally:
        conn.image.delete_image(image.id, ignore_missing=True)
