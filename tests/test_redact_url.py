"""The URL redactor (nodeforge.redact): every form a credential takes in a URL is masked by
:func:`redact_url`, found in free text by :func:`redact_urls`, and applied by ``scrub``, the
logging filter and ``scrub_obj``; the sensitive query keys are extendable (never reducible)
through ``NODEFORGE_REDACT_QUERY_KEYS``."""

from __future__ import annotations

import logging

import pytest

from nodeforge import redact
from nodeforge.redact import (ENV_REDACT_QUERY_KEYS, MASK, UNPARSEABLE_URL, ScrubFilter, is_secret_field, redact_url,
                              redact_urls, scrub, scrub_obj, sensitive_query_keys, url_has_credentials)

S = "Zq9HIDDENv4"     # the credential in every case below

# (url, redacted): one per form a credential takes.
FORMS = [
    # user info, whatever the password holds
    (f"https://user:{S}@host.example/path", "https://***@host.example/path"),
    (f"https://{S}@host.example/path", "https://***@host.example/path"),                 # a token as user name
    (f"https://user:pa/{S}@host.example/path", "https://***@host.example/path"),         # '/' in the password
    (f"https://user:pa?{S}@host.example/path?a=1", "https://***@host.example/path?a=1"),  # '?'
    (f"https://user:pa#{S}@host.example/path#top", "https://***@host.example/path#top"),  # '#'
    (f"https://user:p@{S}@host.example/path", "https://***@host.example/path"),          # '@'
    (f"https://user:p:{S}@host.example:8443/path", "https://***@host.example:8443/path"),  # ':'
    (f"https://user:/?#@:{S}@host.example/", "https://***@host.example/"),               # all of them
    (f"https://user:{S}@[2001:db8::1]:8080/x", "https://***@[2001:db8::1]:8080/x"),
    (f"http://us er:{S}@host.example/debian", "http://***@host.example/debian"),         # a space
    # no scheme
    (f"user:{S}@host.example/path", "***@host.example/path"),
    (f"user:pa/{S}@proxy.example:3128", "***@proxy.example:3128"),
    (f"//user:{S}@host.example/path", "//***@host.example/path"),
    # query parameters, any case, percent-encoded names
    (f"https://s3.example/b/o?X-Amz-Signature={S}&X-Amz-Credential={S}&X-Amz-Security-Token={S}&x=1",
     "https://s3.example/b/o?X-Amz-Signature=***&X-Amz-Credential=***&X-Amz-Security-Token=***&x=1"),
    (f"https://storage.example/b/o?X-Goog-Algorithm=GOOG4&X-Goog-Credential={S}&X-Goog-Signature={S}",
     "https://storage.example/b/o?X-Goog-Algorithm=GOOG4&X-Goog-Credential=***&X-Goog-Signature=***"),
    (f"https://oss.example/o?OSSAccessKeyId={S}&Expires=1&Signature={S}",
     "https://oss.example/o?OSSAccessKeyId=***&Expires=1&Signature=***"),
    (f"https://blob.example/c/o?sv=2022-11-02&sp=r&sig={S}", "https://blob.example/c/o?sv=2022-11-02&sp=r&sig=***"),
    (f"https://h.example/x?TOKEN={S}", "https://h.example/x?TOKEN=***"),
    (f"https://h.example/x?x%2Damz%2Dsignature={S}", "https://h.example/x?x%2Damz%2Dsignature=***"),
    (f"https://h.example/x?access_token={S};password={S}", "https://h.example/x?access_token=***;password=***"),
    (f"https://h.example/x?passwd={S}&secret={S}&api_key={S}&apikey={S}&key={S}&client_secret={S}",
     "https://h.example/x?passwd=***&secret=***&api_key=***&apikey=***&key=***&client_secret=***"),
    (f"https://h.example/x?ipmi_password={S}", "https://h.example/x?ipmi_password=***"),   # is_secret_field names
    (f"https://h.example/x?next=https://u:{S}@i.example/", "https://h.example/x?next=https://***@i.example/"),
    # fragments
    (f"https://app.example/cb#access_token={S}&token_type=bearer", "https://app.example/cb#***"),
    (f"https://app.example/cb#id_token={S}", "https://app.example/cb#***"),
    (f"https://app.example/cb#secret-{S}", "https://app.example/cb#***"),
    (f"https://app.example/cb#key={S}", "https://app.example/cb#***"),
    # cannot be parsed: masked whole
    (f"http://user:{S}@[::1/debian", UNPARSEABLE_URL),
    (f"http://user:{S}@host.example:99999/debian", UNPARSEABLE_URL),
    (f"http://user:{S}@host.example:port/debian", UNPARSEABLE_URL),
    (f"http://user:{S}@/debian", "http://***@/debian"),
    # a password holding '?' or a host:port whose query holds '@': both readings hide something
    (f"http://h.example:1?X-Amz-Signature=@{S}", UNPARSEABLE_URL),
    (f"http://user:1/{S}@h.example:1,b", UNPARSEABLE_URL),
]

# Kept as they are: nothing in them is a credential.
PLAIN = ["https://deb.debian.org/debian", "http://127.0.0.1:5000/v3/auth/tokens", "https://h.example/x?a=1&b=2#top",
         "https://h.example/docs#keyboard-shortcuts", "http://[::1]:8080/a@b", "https://h.example/~user@x/",
         "fake://node-1", "https://h.example/x?sv=2022-11-02"]


@pytest.mark.parametrize("url,shown", FORMS, ids=range(len(FORMS)))
def test_redact_url_masks_every_form(url, shown):
    assert redact_url(url) == shown
    assert S not in redact_url(url)
    assert url_has_credentials(url)


@pytest.mark.parametrize("url,shown", FORMS, ids=range(len(FORMS)))
@pytest.mark.parametrize("around", ["{}", "error: cannot fetch {}: HTTP 403", "({})", "url={}.", "'{}'", "a\n{}\tb",
                                    '{{"url": "{}"}}', "[{}]", "x,{}"])
def test_redact_urls_finds_every_form_in_free_text(url, shown, around):
    text = redact_urls(around.format(url))
    assert S not in text, text
    assert S not in scrub(around.format(url))


@pytest.mark.parametrize("url", PLAIN)
def test_a_url_without_credentials_is_kept(url):
    assert redact_url(url) == url
    assert redact_urls(f"see {url} now") == f"see {url} now"
    assert not url_has_credentials(url)


@pytest.mark.parametrize("text", [
    "expected a BMC URL: ipmi://HOST[:PORT], redfish[+http|+https]://HOST[:PORT][/redfish/v1/Systems/ID]",
    "image registry.k8s.io/pause:3.9@sha256:" + "0a" * 32, "git@github.com:org/repo.git", "mail root@host.example",
    "nodes[0].bmc: at 12:30 (not @ all)", "ssh admin@10.0.0.1:22"])
def test_free_text_that_holds_no_url_credential_is_kept(text):
    assert redact_urls(text) == text


def test_the_password_with_a_slash_is_masked_where_urlsplit_would_cut_it():
    """urlsplit reads ``user:pa/ss@host`` as host ``user``, port ``pa``: the old redactor left it whole."""
    url = "https://user:pa/ss@deb.example/debian"
    assert redact_url(url) == "https://***@deb.example/debian"
    assert redact_urls(f"nonnumeric port in {url}") == "nonnumeric port in https://***@deb.example/debian"


def test_punctuation_around_a_url_in_a_sentence_is_kept():
    assert redact_urls(f"holds credentials (http://h.example/x?token={S}); see https://u:{S}@h.example/x.") == \
        "holds credentials (http://h.example/x?token=***); see https://***@h.example/x."


# --- configuration: NODEFORGE_REDACT_QUERY_KEYS adds keys, never removes one --------------------------

def test_the_environment_adds_query_keys(monkeypatch):
    url = f"https://h.example/x?X-Custom-Auth={S}&tenant_sig={S}&other=1"
    assert redact_url(url) == f"https://h.example/x?X-Custom-Auth={S}&tenant_sig={S}&other=1"
    monkeypatch.setenv(ENV_REDACT_QUERY_KEYS, " x-custom-auth , TENANT_SIG,,")
    assert redact_url(url) == "https://h.example/x?X-Custom-Auth=***&tenant_sig=***&other=1"
    assert redact_urls(f"GET /x?tenant_sig={S} 403") == "GET /x?tenant_sig=*** 403"
    assert {"x-custom-auth", "tenant_sig"} <= sensitive_query_keys()
    assert url_has_credentials(url)


@pytest.mark.parametrize("value", ["", "-token", "!sig,!x-amz-signature", "token=0", "none", ",", "*"])
def test_the_environment_cannot_remove_a_query_key(monkeypatch, value):
    monkeypatch.setenv(ENV_REDACT_QUERY_KEYS, value)
    assert sensitive_query_keys() >= {k.lower() for k in redact.SENSITIVE_QUERY_KEYS}
    for key in ("token", "sig", "X-Amz-Signature", "X-Goog-Credential", "OSSAccessKeyId"):
        assert redact_url(f"https://h.example/x?{key}={S}") == f"https://h.example/x?{key}=***"


def test_the_module_tuple_is_the_list_and_can_be_extended(monkeypatch):
    monkeypatch.setattr(redact, "SENSITIVE_QUERY_KEYS", (*redact.SENSITIVE_QUERY_KEYS, "x-vendor-proof"))
    assert redact_url(f"https://h.example/x?X-Vendor-Proof={S}") == "https://h.example/x?X-Vendor-Proof=***"


# --- where it is applied ---------------------------------------------------------------------------

def test_scrub_obj_redacts_urls_in_every_string_field():
    doc = {"driver_info": {"deploy_kernel": f"http://k:{S}@images.example/k",
                           "deploy_ramdisk": f"https://images.example/r?X-Goog-Signature={S}",
                           "snmp_community": S, "snmp_community_write": S},
           "labels": {"http_proxy": f"http://p:pa/{S}@proxy.example:3128"}, "driver": "ipmi", "names": ["a", "b"]}
    out = scrub_obj(doc)
    assert S not in repr(out)
    assert out["driver_info"]["deploy_kernel"] == "http://***@images.example/k"
    assert out["driver_info"]["snmp_community"] == MASK and out["driver_info"]["snmp_community_write"] == MASK
    assert out["labels"]["http_proxy"] == "http://***@proxy.example:3128"
    assert out["driver"] == "ipmi" and out["names"] == ["a", "b"]


@pytest.mark.parametrize("field", ["snmp_community", "snmp_community_read", "snmp_community_write",
                                   "driver_info.snmp_community"])
def test_the_snmp_community_is_a_secret_field(field):
    assert is_secret_field(field)


def test_the_logging_filter_redacts_urls_in_the_message_and_the_traceback():
    record = logging.LogRecord("nodeforge.t", logging.WARNING, __file__, 1, "fetching %s", (f"u:{S}@h.example/x",),
                               None)
    try:
        raise ValueError(f"nonnumeric port: 'https://user:pa/{S}@h.example/'")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    ScrubFilter().filter(record)
    assert S not in record.getMessage() and S not in record.exc_text
    record = logging.LogRecord("nodeforge.t", logging.WARNING, __file__, 1, "x", None, None)
    record.exc_text, record.stack_info = f"see http://u:{S}@h/", f"at https://h/?sig={S}"
    ScrubFilter().filter(record)
    assert S not in record.exc_text + record.stack_info


@pytest.mark.parametrize("text", [
    "http://x" + ")" * 100000, "a:" + "@x" * 50000, "x " * 50000 + f"http://u:{S}@h", "//" * 50000,
    "a:b@" * 30000 + "c", "?token=" * 20000, "http://h/?" + "a=1&" * 30000, "http://h/#" + "k=/" * 30000,
    "u:" + "/" * 100000 + "@h", "http://h/?a=" * 3000 + f"http://u:{S}@h/", "a." * 50000 + " b://",
    "[" * 50000 + "http://", "@:" * 50000])
def test_hostile_text_is_redacted_in_bounded_time(text):
    """Long hostile runs (a message quoting a hostile value): linear scans, no deep recursion."""
    import time

    start = time.monotonic()
    for shown in (redact_url(text), redact_urls(text), scrub(text), scrub_obj({"v": text})["v"]):
        assert S not in shown
    assert time.monotonic() - start < 10
