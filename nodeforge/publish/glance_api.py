"""The vocabulary of nodeforge's images in Glance: tags, the ``nodeforge_`` property
namespace, the scope mark, and the side images a node image links to (its manifest, verify
report and canary report, each checked against the digest the image carries), which readers
such as ``templates`` and ``magnum/`` need without the publisher (and its signing stack).

The Glance calls themselves are :mod:`nodeforge.clients.image`; their names are re-exported
here, so the publish stage speaks of Glance through one module.

The bottom of ``nodeforge/publish/``: :mod:`.glance` (the publisher),
:mod:`.provenance` (verification), :mod:`.diff` (image diff) and
:mod:`.catalog` call these; this module imports none of them, so the
package's import graph has no circle (tests/test_import_graph.py).
:mod:`.glance` re-exports every name here for its callers.
"""

from __future__ import annotations

import hashlib

from nodeforge.clients.image import (  # noqa: F401 - re-exported: the publish stage's one Glance module
    ACTIVE, DEACTIVATED, FAILED, SIDE_MAX_BYTES, TRANSIENT, ForbiddenError, GlanceError, call, create_image,
    deactivate_image, delete_image, download, error, find_image, get_image, list_images, patch_image, put_data,
    set_ops, stream_data)
from nodeforge.clients.image import ImageError as PublishError   # the publish stage's name for it

P = "nodeforge_"  # namespace of nodeforge's own properties

TAG = "nodeforge"
TAG_MANIFEST = "nodeforge-manifest"
TAG_VERIFY_REPORT = "nodeforge-verify-report"
TAG_CANDIDATE = "nodeforge-candidate"
TAG_APPROVED = "nodeforge-approved"
TAG_SUPERSEDED = "nodeforge-superseded"
TAG_IN_USE = "nodeforge-in-use"
# The ownership mark: the scope of the declaration (lockfile) that made the image.
SCOPE = f"{P}scope"
# The scope of a build whose manifest names none (built before scopes, or a
# synthetic build) when publish is given none either.
DEFAULT_SCOPE = "default"


def tag_k8s(minor: str) -> str:
    return f"nodeforge-k8s-{minor}"


def tag_variant(variant: str) -> str:
    return f"nodeforge-{variant}"


def scope_of(image: dict) -> str | None:
    """The scope an image in Glance is marked with (None: legacy, published before scopes)."""
    value = image.get(SCOPE)
    return str(value) if value not in (None, "") else None


def download_linked(conn, image: dict, id_prop: str, sha_prop: str, what: str) -> bytes:
    """The side image ``image[id_prop]`` points at, verified against ``image[sha_prop]``."""
    linked_id = image.get(id_prop)
    expected = image.get(sha_prop)
    if not linked_id or not expected:
        raise PublishError(detail=f"image {image['id']} carries no nodeforge {what} reference")
    data = download(conn, linked_id, f"{what} {linked_id}", SIDE_MAX_BYTES)
    if data is None:
        raise PublishError(detail=f"{what} image {linked_id} of image {image['id']} is gone")
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise PublishError(detail=f"{what} image {linked_id}: sha256 {actual} does not match the "
                                  f"image's {sha_prop} {expected}")
    return data


def download_manifest(conn, image: dict) -> bytes:
    """The manifest of a node image, verified against its ``nodeforge_manifest_sha256``."""
    return download_linked(conn, image, f"{P}manifest_image", f"{P}manifest_sha256", "manifest")


def canary_property(resource_class: str) -> str:
    """The node-image property holding the canary verdict for ``resource_class``
    (``passed|failed <UTC time> node=<name>``)."""
    return f"{P}canary_" + "".join(ch if ch.isalnum() else "_" for ch in resource_class.lower())


def download_canary_report(conn, image: dict) -> bytes:
    """The canary.json stored for a node image, verified against its ``nodeforge_canary_sha256``."""
    return download_linked(conn, image, f"{P}canary_report", f"{P}canary_sha256", "canary report")


def download_verify_report(conn, image: dict) -> bytes:
    """The verify.json publish stored for a node image, verified against its ``nodeforge_verify_sha256``
    (whether it is a passing report for this image is :func:`nodeforge.publish.glance.verify_binding` +
    :func:`nodeforge.imageverify.verifyreport.judge`)."""
    return download_linked(conn, image, f"{P}verify_report", f"{P}verify_sha256", "verify report")
