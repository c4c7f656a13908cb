"""One OpenStack REST call, and paging, over an openstacksdk service proxy.

:func:`request` sends one call through an openstacksdk/keystoneauth adapter
(``conn.baremetal``, ``conn.compute``, ``conn.image``, ...: auth, endpoint,
TLS and microversion negotiation from ``clouds.yaml`` / ``OS_CLOUD``), with
keystoneauth's own retries off and :mod:`nodeforge.transport.retry`'s
policy instead; a refused call raises the caller's error class, built from
the :class:`~nodeforge.transport.errors.Failure` (:func:`errors.classify`).
An :class:`Observer` sees every attempt (Ironic's pacing: a slot before the
call, status and latency after it).

:func:`paged` reads a whole collection, page after page, the way each
service pages: :func:`next_link` (Ironic, Glance: ``"next": URL``),
:func:`links_next` (Nova: ``flavors_links`` with ``rel: next``),
:func:`marker` (Magnum: ``marker=<last uuid>`` while ``next`` is set).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

from nodeforge.transport import errors as E
from nodeforge.transport.retry import API, Refused, RetryPolicy


class Observer(Protocol):
    def begin(self) -> None: ...
    def end(self, status: int | None, failure: E.Failure | None, latency: float) -> None:
        """After every attempt: ``status`` None and ``failure`` None when it raised something unexpected."""


def request(adapter, method: str, url: str, *, what: str, error: E.ErrorFactory = E.ApiError,
            retry: RetryPolicy | None = API, observer: Observer | None = None,
            on_retry: Callable[[E.Failure, float], None] | None = None, missing_ok: bool = False,
            expect: tuple[int, ...] | None = None, markers: Mapping[E.ErrorKind, tuple[str, ...]] | None = None,
            idempotent: bool | None = None, **kwargs: Any):
    """The response of ``method url`` (retried per ``retry``), or None when ``missing_ok`` and
    the answer is 404; any other failure raises ``error(failure, what)``.

    A POST that got no answer may have been carried out, so it is not sent again unless the
    caller says repeating it is safe (``idempotent=True``: the service refuses a duplicate, as
    Ironic does for a node name or a port address); an answer that refused it (503, 429, 409
    locked) is retried whatever the method."""
    from keystoneauth1 import exceptions as ks_exc   # here, not at import: a command's --help needs no HTTP stack

    policy = retry or API
    if not (idempotent if idempotent is not None else method.upper() != "POST"):
        policy = policy.replace(retry_on=policy.retry_on - {E.ErrorKind.NETWORK})

    def attempt():
        if observer is not None:
            observer.begin()
        started, status, failure = time.monotonic(), None, None
        try:
            resp = adapter.request(url, method, raise_exc=False, connect_retries=0, status_code_retries=0, **kwargs)
        except ks_exc.ConnectionError as exc:
            failure = E.network(exc)
        else:
            status = resp.status_code
            failure = E.failure_of(resp, expect=expect, markers=markers)
        finally:
            if observer is not None:
                observer.end(status, failure, time.monotonic() - started)
        if failure is not None:
            raise Refused(failure)
        return resp

    try:
        return policy.run(attempt, what=what, on_retry=on_retry)
    except Refused as refused:
        if missing_ok and refused.failure.kind is E.ErrorKind.NOT_FOUND:
            return None
        raise error(refused.failure, what) from None


def json_of(resp):
    """The JSON body of a response (None for an empty one, or none at all)."""
    if resp is None or not resp.content:
        return None
    return resp.json()


class TooLarge(ValueError):
    """A response body larger than the caller's limit (read up to the limit only)."""


def content_of(resp, max_bytes: int | None = None) -> bytes | None:
    """The body of a response, or None for none at all (None, or 204 No Content). With
    ``max_bytes`` (a streamed response), at most that many bytes are read: more is :class:`TooLarge`."""
    if resp is None or resp.status_code == 204:
        return None
    if max_bytes is None:
        return resp.content
    chunks, total = [], 0
    try:
        for chunk in resp.iter_content(1 << 16):
            total += len(chunk)
            if total > max_bytes:
                raise TooLarge(f"larger than {max_bytes} bytes")
            chunks.append(chunk)
    finally:
        resp.close()
    return b"".join(chunks)


# -- paging -------------------------------------------------------------------------------

NextUrl = Callable[[dict, list, str, str], "str | None"]


def relative(href: str, anchor: str) -> str:
    """``href`` (absolute or not) from the collection's path ``anchor`` on: the endpoint's own
    prefix (``/v1``, ``/v2.1/<project>``) is the adapter's business."""
    parts = urlsplit(href)
    path = parts.path
    at = path.find(anchor)
    path = path[at:] if at >= 0 else path
    return path + (f"?{parts.query}" if parts.query else "")


def next_link(body: dict, items: list, url: str, anchor: str) -> str | None:
    """Ironic, Glance: ``{"next": "<url of the next page>"}``."""
    nxt = body.get("next")
    return relative(nxt, anchor) if nxt else None


def links_next(key: str) -> NextUrl:
    """Nova: ``{"<key>": [{"rel": "next", "href": ...}]}``."""
    def nxt(body: dict, items: list, url: str, anchor: str) -> str | None:
        hrefs = [link["href"] for link in body.get(key) or [] if link.get("rel") == "next"]
        return relative(hrefs[0], anchor) if hrefs else None
    return nxt


def marker(field: str = "uuid") -> NextUrl:
    """Magnum: the next page is ``marker=<last item's field>`` while the answer has ``next``."""
    def nxt(body: dict, items: list, url: str, anchor: str) -> str | None:
        if not body.get("next") or not items:
            return None
        parts = urlsplit(url)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "marker"]
        return parts.path + "?" + urlencode(query + [("marker", items[-1][field])])
    return nxt


def _anchor(url: str) -> str:
    path = urlsplit(url).path
    first = path.strip("/").split("/", 1)[0]
    return f"/{first}" if first else path


def paged(adapter, url: str, key: str, *, what: str, next_url: NextUrl = next_link,
          params: dict | None = None, **kwargs: Any) -> list[dict]:
    """Every item of the collection ``key`` from ``url`` on (``params``: the first page's
    query; the next pages' URLs carry theirs); ``kwargs`` go to :func:`request`."""
    out: list[dict] = []
    anchor = _anchor(url)
    nxt: str | None = url
    while nxt:
        extra = {"params": params} if params is not None else {}
        body = json_of(request(adapter, "GET", nxt, what=what, **extra, **kwargs)) or {}
        items = body.get(key) or []
        out.extend(items)
        nxt, params = next_url(body, items, nxt, anchor), None
    return out
