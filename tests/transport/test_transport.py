"""nodeforge.transport: error mapping, the retry policy and paging, over a real local HTTP server
reached through a real keystoneauth adapter (no OpenStack service needed: the server answers
what each test scripts, as Ironic, Nova, Magnum or Glance would)."""

from __future__ import annotations

import email.utils
import json
import socket
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from nodeforge import redact, transport
from nodeforge.transport import ErrorKind as K
from tests.support.http import adapter_for as _adapter, server  # noqa: F401 - server: the fixture

IRONIC_409_DUP = '{"error_message": "{\\"faultstring\\": \\"A node with name n1 already exists.\\"}"}'
IRONIC_409_LOCKED = ('{"error_message": "{\\"faultstring\\": \\"Node abc is locked by host h, please retry after '
                     'the current operation is completed.\\"}"}')
LOCKED = {K.DUPLICATE: ("already exists",), K.LOCKED: ("locked",)}


# ----------------------------------------------------------------------------- mapping

@pytest.mark.parametrize("body, detail", [
    (IRONIC_409_DUP, "A node with name n1 already exists."),
    ('{"badRequest": {"message": "Invalid extra_specs", "code": 400}}', "Invalid extra_specs"),      # Nova
    ('{"errors": [{"title": "Bad", "detail": "master_count is 0"}, {"title": "T2"}]}', "master_count is 0; T2"),
    ('{"message": "Image not found"}', "Image not found"),                                             # Glance
    ('{"error": {"message": "The request you have made requires authentication.", "code": 401}}',
     "The request you have made requires authentication."),                                           # Keystone
    ("<html><body>503 Service Unavailable</body></html>", "<html><body>503 Service Unavailable</body></html>"),
    ('{"unrelated": 1}', '{"unrelated": 1}'),
    ("", ""),
])
def test_detail_of_each_services_error_body(body, detail):
    assert transport.detail_of(body) == detail


@pytest.mark.parametrize("status, body, kind", [
    (409, IRONIC_409_DUP, K.DUPLICATE), (409, IRONIC_409_LOCKED, K.LOCKED),
    (409, '{"message": "wrong state"}', K.CONFLICT),
    (503, "", K.UNAVAILABLE), (404, "", K.NOT_FOUND), (410, "", K.GONE), (400, "", K.BAD_REQUEST),
    (401, "", K.AUTH), (403, "", K.AUTH), (429, "", K.RATE_LIMITED), (500, "", K.SERVER), (502, "", K.SERVER),
    (418, "", K.OTHER),
])
def test_classify_kind_from_status_and_body(status, body, kind):
    assert transport.classify(status, body, markers=LOCKED).kind is kind


def test_kinds_retried_by_the_api_policy():
    assert {k for k in K if k.retriable} == {K.LOCKED, K.UNAVAILABLE, K.NETWORK, K.RATE_LIMITED}
    assert K.INVALID is K.BAD_REQUEST and K.BAD_REQUEST.value == "invalid"     # Ironic's error_kind string
    assert transport.DOWNLOAD.should_retry(transport.Failure(K.SERVER, 500, ""))
    assert not transport.API.should_retry(transport.Failure(K.SERVER, 500, ""))


def test_retry_after_seconds_and_http_date():
    assert transport.retry_after({"Retry-After": "7"}) == 7.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= transport.retry_after({"Retry-After": later}) <= 31
    assert transport.retry_after({"Retry-After": "soon"}) is None
    assert transport.retry_after({}) is None


def test_failure_and_error_never_carry_a_secret():
    secret = "s3cr3t-passw0rd-value"
    redact.register(secret)
    body = json.dumps({"message": f"bad password {secret} for https://admin:{secret}@bmc.example/x?token=abc123"})
    failure = transport.classify(400, body)
    for text in (failure.detail, failure.text, str(transport.ApiError(failure, "create node"))):
        assert secret not in text and "abc123" not in text
        assert "***" in text


def test_delay_is_capped_jittered_backoff_and_honours_retry_after():
    policy = transport.RetryPolicy(attempts=6, base=0.25, cap=4.0)
    for attempt in range(8):
        full = min(4.0, 0.25 * 2 ** attempt)
        for _ in range(50):
            assert full / 2 <= policy.delay(attempt) <= full
    assert policy.delay(0, transport.Failure(K.RATE_LIMITED, 429, "", retry_after=9.0)) == 9.0
    assert policy.delay(0, transport.Failure(K.RATE_LIMITED, 429, "", retry_after=900.0)) == policy.max_retry_after


# ----------------------------------------------------------------------------- over HTTP

class Recorder:
    def __init__(self):
        self.sleeps: list[float] = []
        self.retried: list[str] = []
        self.attempts: list[tuple[int | None, str | None]] = []
        self.begun = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def on_retry(self, failure, delay):
        self.retried.append(failure.key)

    # Observer
    def begin(self):
        self.begun += 1

    def end(self, status, failure, latency):
        assert latency >= 0
        self.attempts.append((status, failure.kind.value if failure else None))


def _policy(rec: Recorder, **kw) -> transport.RetryPolicy:
    return transport.RetryPolicy(sleep=rec.sleep, **kw)


def test_transient_answers_are_retried_then_succeed(server):
    server.answers = [(503, "No free conductor workers available", {}), (409, IRONIC_409_LOCKED, {})]
    server.final = (200, '{"uuid": "u1"}', {})
    rec = Recorder()
    resp = transport.request(_adapter(server.url), "POST", "/nodes", what="create node", json={"name": "n1"},
                             retry=_policy(rec), observer=rec, on_retry=rec.on_retry, markers=LOCKED)
    assert transport.json_of(resp) == {"uuid": "u1"}
    assert rec.retried == ["503", "409"] and len(rec.sleeps) == 2
    assert rec.begun == 3 and rec.attempts == [(503, "unavailable"), (409, "locked"), (200, None)]


def test_permanent_answer_is_raised_at_once_as_the_callers_error(server):
    server.answers = [(409, IRONIC_409_DUP, {})]
    rec = Recorder()

    class MyError(Exception):
        def __init__(self, failure, what):
            super().__init__(f"{what}: {failure.detail}")
            self.failure = failure

    with pytest.raises(MyError) as info:
        transport.request(_adapter(server.url), "POST", "/nodes", what="create node n1", error=MyError,
                          retry=_policy(rec), markers=LOCKED)
    assert info.value.failure.kind is K.DUPLICATE and info.value.failure.status == 409
    assert str(info.value) == "create node n1: A node with name n1 already exists."
    assert rec.sleeps == [] and len(server.seen) == 1


def test_retries_stop_after_the_attempts(server):
    server.answers = [(503, "busy", {})] * 10
    rec = Recorder()
    with pytest.raises(transport.ApiError) as info:
        transport.request(_adapter(server.url), "GET", "/nodes", what="list nodes", retry=_policy(rec, attempts=4))
    assert info.value.kind is K.UNAVAILABLE and "HTTP 503" in str(info.value)
    assert len(server.seen) == 4 and len(rec.sleeps) == 3


def test_retry_after_is_honoured(server):
    server.answers = [(429, "slow down", {"Retry-After": "3"})]
    rec = Recorder()
    transport.request(_adapter(server.url), "GET", "/images", what="image list", retry=_policy(rec))
    assert rec.sleeps == [3.0]


def test_missing_ok_and_expect(server):
    server.answers = [(404, '{"message": "no such node"}', {}), (200, "{}", {})]
    rec = Recorder()
    assert transport.request(_adapter(server.url), "GET", "/nodes/x", what="get", missing_ok=True,
                             retry=_policy(rec)) is None
    with pytest.raises(transport.ApiError) as info:        # a create that answers 200, not 201
        transport.request(_adapter(server.url), "POST", "/clustertemplates", what="create", expect=(201,),
                          retry=_policy(rec))
    assert info.value.kind is K.OTHER and info.value.status == 200


def test_no_answer_is_network_and_retried():
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = Recorder()
    with pytest.raises(transport.ApiError) as info:
        transport.request(_adapter(f"http://127.0.0.1:{port}/v1"), "GET", "/nodes", what="list nodes",
                          retry=_policy(rec, attempts=3), observer=rec, on_retry=rec.on_retry)
    assert info.value.kind is K.NETWORK and info.value.status is None
    assert "(HTTP network)" in str(info.value) and "127.0.0.1" not in str(info.value)
    assert rec.retried == ["network", "network"] and rec.attempts == [(None, "network")] * 3


@pytest.mark.parametrize("method, idempotent, attempts", [("POST", None, 1), ("POST", True, 3), ("GET", None, 3),
                                                         ("PUT", None, 3)])
def test_a_post_without_an_answer_is_not_sent_again_unless_safe(method, idempotent, attempts):
    """It may have been carried out (a second Magnum template, Glance image or flavor)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = Recorder()
    with pytest.raises(transport.ApiError) as info:
        transport.request(_adapter(f"http://127.0.0.1:{port}/v1"), method, "/things", what="write",
                          retry=_policy(rec, attempts=3), observer=rec, idempotent=idempotent)
    assert info.value.kind is K.NETWORK and len(rec.attempts) == attempts


def test_a_post_refused_by_an_answer_is_retried(server):
    server.answers = [(503, "busy", {})]
    server.final = (201, "{}", {})
    rec = Recorder()
    transport.request(_adapter(server.url), "POST", "/clustertemplates", what="create", retry=_policy(rec))
    assert len(server.seen) == 2


def test_paging_next_link_links_next_and_marker(server):
    base = server.url
    server.pages = {
        "/v1/nodes/detail?limit=2": {"nodes": [{"uuid": "a"}, {"uuid": "b"}],
                                     "next": f"{base}/nodes/detail?limit=2&marker=b"},
        "/v1/nodes/detail?limit=2&marker=b": {"nodes": [{"uuid": "c"}]},
        "/v1/flavors/detail?limit=1": {"flavors": [{"id": "1"}], "flavors_links": [
            {"rel": "next", "href": f"{base}/flavors/detail?limit=1&marker=1"}]},
        "/v1/flavors/detail?limit=1&marker=1": {"flavors": [{"id": "2"}], "flavors_links": []},
        "/v1/clusters/detail?limit=1": {"clusters": [{"uuid": "x"}], "next": "whatever"},
        "/v1/clusters/detail?limit=1&marker=x": {"clusters": [{"uuid": "y"}], "next": None},
    }
    ad = _adapter(base)
    assert [n["uuid"] for n in transport.paged(ad, "/nodes/detail?limit=2", "nodes", what="list")] == ["a", "b", "c"]
    assert [f["id"] for f in transport.paged(ad, "/flavors/detail?limit=1", "flavors", what="list",
                                             next_url=transport.links_next("flavors_links"))] == ["1", "2"]
    assert [c["uuid"] for c in transport.paged(ad, "/clusters/detail?limit=1", "clusters", what="list",
                                               next_url=transport.marker("uuid"))] == ["x", "y"]


def test_paging_first_page_params(server):
    base = server.url
    server.pages = {"/v1/images?os_hidden=false&limit=1": {"images": [{"id": "i1"}], "next": "/v2/images?marker=i1"},
                    "/v1/images?marker=i1": {"images": [{"id": "i2"}]}}
    got = transport.paged(_adapter(base), "/images", "images", what="image list",
                          params={"os_hidden": "false", "limit": 1})
    assert [i["id"] for i in got] == ["i1", "i2"]
    assert parse_qs(urlsplit(server.seen[0][1]).query) == {"os_hidden": ["false"], "limit": ["1"]}


def test_content_of_no_content(server):
    server.answers = [(204, "", {}), (200, "data", {})]
    rec = Recorder()
    ad = _adapter(server.url)
    assert transport.content_of(transport.request(ad, "GET", "/images/x/file", what="get", retry=_policy(rec))) is None
    assert transport.content_of(transport.request(ad, "GET", "/images/x/file", what="get", retry=_policy(rec))) == b"data"
    assert transport.content_of(None) is None
