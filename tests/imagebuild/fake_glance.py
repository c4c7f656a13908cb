"""An in-memory stand-in for the Glance v2 REST calls nodeforge makes (through
``conn.image.get/post/put/patch/delete``), for fast tests of the publish and
promote paths. It computes ``os_hash_value`` (sha512) over the uploaded bytes
as Glance does, filters listings on properties and tags, and keeps image data,
so a report stored by publish can be downloaded, swapped or tampered with.

Only what nodeforge uses is modelled; the real Glance is covered by the
``devcloud`` tests.
"""

from __future__ import annotations

import hashlib
import json
import uuid


class Response:
    def __init__(self, status_code: int, body=None, content: bytes = b""):
        self.status_code = status_code
        self._body = body
        self.content = content if body is None else json.dumps(body).encode()
        self.text = self.content.decode("utf-8", "replace")

    def json(self):
        if self._body is None:
            raise ValueError("no JSON body")
        return self._body

    def iter_content(self, chunk_size: int = 1):
        for i in range(0, len(self.content), chunk_size):
            yield self.content[i:i + chunk_size]

    def close(self):
        pass


class FakeImageService:
    def __init__(self):
        self.images: dict[str, dict] = {}
        self.data: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []

    # -- helpers

    def _split(self, url: str) -> list[str]:
        return [p for p in url.split("/") if p]

    def _missing(self):
        return Response(404, {"message": "image not found"})

    # -- verbs

    def request(self, url: str, method: str, *, raise_exc=False, connect_retries=None, status_code_retries=None,
                json=None, params=None, data=None, headers=None, stream: bool = False):
        """The one entry nodeforge.transport calls (an openstacksdk proxy's ``request``)."""
        if method == "GET":
            return self.get(url, params=params, stream=stream)
        if method == "POST":
            return self.post(url, json=json)
        if method == "PUT":
            return self.put(url, data=data, headers=headers)
        if method == "PATCH":
            return self.patch(url, json=json, headers=headers)
        if method == "DELETE":
            return self.delete(url)
        raise AssertionError(f"unexpected {method} {url}")

    def get(self, url: str, params=None, stream: bool = False):
        self.calls.append(("GET", url))
        parts = self._split(url)
        if parts == ["images"]:
            return Response(200, {"images": [dict(i) for i in self.images.values() if self._matches(i, params or {})],
                                  "next": None})
        if len(parts) == 2:
            img = self.images.get(parts[1])
            return Response(200, dict(img)) if img else self._missing()
        if len(parts) == 3 and parts[2] == "file":
            if parts[1] not in self.images:
                return self._missing()
            return Response(200, content=self.data.get(parts[1], b""))
        raise AssertionError(f"unexpected GET {url}")

    def _matches(self, img: dict, params: dict) -> bool:
        for key, want in params.items():
            if key in ("limit", "visibility"):
                continue
            if key == "os_hidden":
                if bool(img.get("os_hidden")) != (want == "true"):
                    return False
            elif key == "tag":
                tags = want if isinstance(want, list) else [want]
                if not set(tags) <= set(img.get("tags") or []):
                    return False
            elif want is not None and img.get(key) != want:
                return False
        return True

    def post(self, url: str, json=None):
        self.calls.append(("POST", url))
        parts = self._split(url)
        if parts == ["images"]:
            image_id = str(uuid.uuid4())
            img = {"visibility": "shared", "os_hidden": False, "tags": [], **json, "id": image_id,
                   "status": "queued", "created_at": f"2026-01-01T00:00:{len(self.images):02d}Z"}
            self.images[image_id] = img
            return Response(201, dict(img))
        if len(parts) == 4 and parts[2:] == ["actions", "deactivate"]:
            if parts[1] not in self.images:
                return self._missing()
            self.images[parts[1]]["status"] = "deactivated"
            return Response(204, content=b"")
        raise AssertionError(f"unexpected POST {url}")

    def put(self, url: str, data=None, headers=None):
        self.calls.append(("PUT", url))
        parts = self._split(url)
        assert len(parts) == 3 and parts[2] == "file", url
        img = self.images.get(parts[1])
        if img is None:
            return self._missing()
        if isinstance(data, (bytes, bytearray)):
            body = bytes(data)
        else:
            chunks = []
            while chunk := data.read(1 << 20):
                chunks.append(chunk)
            body = b"".join(chunks)
        self.data[parts[1]] = body
        img.update(status="active", size=len(body), os_hash_algo="sha512",
                   os_hash_value=hashlib.sha512(body).hexdigest(), checksum=hashlib.md5(body).hexdigest())
        return Response(204, content=b"")

    def patch(self, url: str, json=None, headers=None):
        self.calls.append(("PATCH", url))
        parts = self._split(url)
        img = self.images.get(parts[1])
        if img is None:
            return self._missing()
        for op in json:
            key = op["path"].lstrip("/")
            if op["op"] == "remove":
                img.pop(key, None)
            else:
                img[key] = op["value"]
        return Response(200, dict(img))

    def delete(self, url: str):
        self.calls.append(("DELETE", url))
        parts = self._split(url)
        if self.images.pop(parts[1], None) is None:
            return self._missing()
        self.data.pop(parts[1], None)
        return Response(204, content=b"")


class FakeConn:
    def __init__(self):
        self.image = FakeImageService()
