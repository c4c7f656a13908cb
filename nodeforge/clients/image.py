"""Glance v2 (the image service): get, list, create, patch, delete, deactivate, upload and
download images, over :mod:`nodeforge.transport` (its retry policy and status mapping; Glance's
message in :class:`GlanceError`, a 403 as :class:`ForbiddenError`, an image that is not there or
not one nodeforge can read as :class:`ImageError`).

Plain Glance v2 REST through the openstacksdk session's image proxy: the SDK's ``create_image``
adds its own ``owner_specified.*`` properties, reads the file for checksums first, and its list
call ignores property filters. What nodeforge's images mean in Glance (tags, the ``nodeforge_``
properties, the scope mark, the side images) is the publish stage's, in
:mod:`nodeforge.publish.glance_api`.
"""

from __future__ import annotations

import uuid

from nodeforge import transport
from nodeforge.errors import NodeforgeError

# Glance image statuses: in flight (an upload or import that may have died),
# failed, and the resting ones.
TRANSIENT = frozenset({"queued", "saving", "importing", "uploading"})
FAILED = frozenset({"killed"})
ACTIVE = "active"
DEACTIVATED = "deactivated"


class GlanceError(NodeforgeError):
    message = "Glance {what} failed (HTTP {status}): {detail}"


class ForbiddenError(GlanceError):
    message = "Glance refused {what} (HTTP 403): {detail}"


class ImageError(NodeforgeError):
    """An image that is not there, not unique, or not one nodeforge reads (the publish stage
    raises and catches it as ``PublishError``)."""
    message = "{detail}"


def error(failure: transport.Failure, what: str) -> GlanceError:
    """The error class for a refused Glance call (403: :class:`ForbiddenError`)."""
    cls = ForbiddenError if failure.forbidden else GlanceError
    return cls(what=what, status=failure.status or "no answer", detail=failure.short(300))


def call(conn, method: str, url: str, what: str, **kwargs):
    """One Glance call (:func:`nodeforge.transport.request`: the API retry policy, Glance's
    message in :class:`GlanceError`); ``missing_ok=True``: a 404 is None."""
    return transport.request(conn.image, method, url, what=what, error=error, **kwargs)


def list_images(conn, **filters) -> list[dict]:
    """Every image matching ``filters`` (Glance v2 query parameters, including
    custom properties and repeated ``tag``), hidden ones included, any visibility."""
    out, seen = [], set()
    for hidden in ("false", "true"):
        params = dict(filters, os_hidden=hidden, limit=200)
        params.setdefault("visibility", "all")
        for img in transport.paged(conn.image, "/images", "images", what="image list", params=params, error=error):
            if img["id"] not in seen:
                seen.add(img["id"])
                out.append(img)
    return out


def get_image(conn, image_id: str) -> dict:
    resp = call(conn, "GET", f"/images/{image_id}", f"reading image {image_id}", missing_ok=True)
    if resp is None:
        raise ImageError(detail=f"no image {image_id} (or it is not visible to this project)")
    return resp.json()


def find_image(conn, ref: str) -> dict:
    """An image by ID, or by exact name when the name is unique."""
    try:
        uuid.UUID(ref)
    except ValueError:
        matches = list_images(conn, name=ref)
        if len(matches) != 1:
            raise ImageError(detail=f"{len(matches)} images are named '{ref}'; give the image ID")
        return matches[0]
    return get_image(conn, ref)


def create_image(conn, body: dict) -> dict:
    return call(conn, "POST", "/images", f"creating image {body.get('name')}", json=body).json()


def patch_image(conn, image_id: str, ops: list[dict], what: str) -> dict:
    return call(conn, "PATCH", f"/images/{image_id}", what, json=ops,
                headers={"Content-Type": "application/openstack-images-v2.1-json-patch"}).json()


def set_ops(image: dict, props: dict) -> list[dict]:
    """JSON-patch ops setting ``props`` on ``image`` (add or replace)."""
    return [{"op": "replace" if k in image else "add", "path": f"/{k}", "value": v} for k, v in props.items()]


def delete_image(conn, image_id: str) -> bool:
    return call(conn, "DELETE", f"/images/{image_id}", f"deleting image {image_id}", missing_ok=True) is not None


def deactivate_image(conn, image_id: str) -> None:
    call(conn, "POST", f"/images/{image_id}/actions/deactivate", f"deactivating image {image_id}")


def put_data(conn, image_id: str, data, what: str):
    """Upload image data, once (a streamed body cannot be sent again): a refused upload raises
    :class:`GlanceError`, no answer raises :class:`transport.ApiError` of kind NETWORK."""
    return transport.request(conn.image, "PUT", f"/images/{image_id}/file", what=what, error=transport.ApiError,
                             retry=transport.ONCE, data=data, headers={"Content-Type": "application/octet-stream"})


# A side image (manifest, per-file manifest, verify or canary report) is read into memory: at most this.
SIDE_MAX_BYTES = 64 << 20


def stream_data(conn, image_id: str, chunk: int = 1 << 20):
    """An image's data as it streams from Glance, ``chunk`` bytes at a time (for hashing an image
    of any size without holding it)."""
    resp = transport.request(conn.image, "GET", f"/images/{image_id}/file", what=f"downloading image {image_id}",
                             stream=True)
    try:
        yield from resp.iter_content(chunk)
    finally:
        resp.close()


def download(conn, image_id: str, what: str, max_bytes: int | None = None) -> bytes | None:
    """An image's data (None: the image is gone, or holds no data); with ``max_bytes``, a larger
    image is a PublishError after reading at most that many bytes."""
    resp = call(conn, "GET", f"/images/{image_id}/file", f"downloading {what}", missing_ok=True, stream=True)
    try:
        return transport.content_of(resp, max_bytes)
    except transport.TooLarge:
        raise ImageError(detail=f"{what}: larger than {max_bytes >> 20} MiB; not read "
                                  "(not a document nodeforge stored)") from None
