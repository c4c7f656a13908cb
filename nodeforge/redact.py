"""Keep secrets out of every log line, error, report and exception.

Three mechanisms work together:

* :class:`Secret` wraps a sensitive value; its ``str``/``repr`` are masked, so
  a secret that slips into an f-string or a traceback prints as ``***``.
* **By field**, for structured output (``-o json|yaml``, tables, reports):
  :func:`scrub_obj` masks the value of every field that holds a secret
  (:func:`is_secret_field`: ``password``, ``ipmi_password``, ``snmp_auth_key``,
  ``token``, ...) whatever it is, and leaves every other field as it is, so a
  password ``ipmi`` does not hide the driver name ``ipmi``, and a password
  equal to the username does not mask (and so reveal) the username.
* **By search**, for free text only (log lines, error messages, and the
  free-text fields of structured output such as ``error``, ``detail``,
  ``message``): :func:`register` records the raw value of every secret
  nodeforge reads, and the logging filter and :func:`scrub` replace any
  registered value found in the text. Values shorter than
  :data:`MIN_SEARCH_LENGTH` are never searched for (they would mask ordinary
  words); they are masked by field and, being :class:`Secret`, never formatted.
* **URLs** are redacted by field wherever they are shown: :func:`redact_url`
  replaces the user info (``user:pass@``) and the value of every
  credential-like query parameter (``token``, ``sig``, ``X-Amz-Signature``,
  ...) with ``***``; :func:`scrub` applies it to every URL in free text, so a
  log line or error carrying such a URL never shows the credential.
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"
MIN_SEARCH_LENGTH = 8
_lock = threading.Lock()
_known: set[str] = set()

# Field names whose value is a secret (Ironic's secret driver_info keys among
# them: ipmi_password, ipmi_kg_key, snmp_auth_key, snmp_priv_key, ...).
_SECRET_FIELD = re.compile(r"(^|[_.-])(password|passwd|passphrase|secret|token|kg_key|auth_key|priv_key|"
                           r"private_key|api_key|secret_key|access_key)$", re.I)
# Fields of structured output that hold free text (messages built from other
# data): masked by search as log lines are.
FREE_TEXT_FIELDS = frozenset({"error", "errors", "detail", "details", "message", "hint", "reason", "reasons",
                              "last_error", "maintenance_reason", "description", "stderr", "stdout", "output",
                              "log", "text", "summary"})


def is_secret_field(name) -> bool:
    """True for a field name that holds a secret (``password``, ``bmc.password``,
    ``driver_info.ipmi_password``, ``snmp_auth_key``, ``token``, ...)."""
    return isinstance(name, str) and bool(_SECRET_FIELD.search(name))


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value
        register(value)

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return MASK

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self):  # never pickle the value by accident
        raise TypeError("Secret values cannot be pickled")


def register(value: str | None) -> None:
    # Short values would mask unrelated text (a password "ipmi", "admin");
    # they are still wrapped in Secret and masked by field.
    if value and len(value) >= MIN_SEARCH_LENGTH:
        with _lock:
            _known.add(value)


def scrub(text: str) -> str:
    """``text`` with every registered secret masked, and the credentials of
    every URL in it (user info, ``?token=``-like parameters: :func:`redact_url`)."""
    if not text:
        return text
    text = redact_urls(text)
    with _lock:
        values = sorted(_known, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_obj(obj, *, free_text: bool = False):
    """Return a copy of a JSON-like structure with secrets masked by field:
    the value of a secret field (:func:`is_secret_field`) becomes ``***``;
    strings in free-text fields (:data:`FREE_TEXT_FIELDS`, or everything when
    ``free_text``) are masked by search (:func:`scrub`); other values are kept."""
    if isinstance(obj, Secret):
        return MASK
    if isinstance(obj, str):
        return scrub(obj) if free_text else obj
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if is_secret_field(k) and v not in (None, "", MASK):
                out[k] = MASK
            else:
                out[k] = scrub_obj(v, free_text=free_text or k in FREE_TEXT_FIELDS)
        return out
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v, free_text=free_text) for v in obj]
    return obj


class ScrubFilter(logging.Filter):
    """Logging filter that masks registered secrets in the final message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must still log
            message = str(record.msg)
        record.msg = scrub(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        return True


# --- URLs: credentials by field ------------------------------------------------------
# Query parameters that carry a credential (pre-signed URLs, API tokens), besides
# every name is_secret_field() matches.
_SECRET_QUERY = re.compile(r"^(x-amz-(signature|credential|security-token)|sig|signature|key|apikey|api-key|"
                           r"auth|authorization|access_token|code|session|sessionid|jwt|pass|pwd|"
                           r"temp_url_sig|ticket|credential|credentials)$", re.I)


def _secret_query_name(name: str) -> bool:
    return bool(_SECRET_QUERY.match(name)) or is_secret_field(name) or is_secret_field(name.replace("-", "_"))


def url_has_credentials(url: str) -> bool:
    """True when ``url`` carries a credential: a user name or password before
    the host (``user:pass@``), or a credential-like query parameter (``?token=``)."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "@" in str(url)
    if "@" in parts.netloc:
        return True
    return any(_secret_query_name(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True))


def redact_url(url) -> str:
    """``url`` with its user info (``user:pass@``) and the values of
    credential-like query parameters replaced by ``***``: the form of a URL
    that may be printed, logged or put in an error."""
    from urllib.parse import urlsplit, urlunsplit

    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return re.sub(r"//[^/@]*@", f"//{MASK}@", text)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = []
        for piece in query.split("&"):
            name, eq, value = piece.partition("=")
            pairs.append(f"{name}={MASK}" if eq and _secret_query_name(name) and value else piece)
        query = "&".join(pairs)
    if netloc == parts.netloc and query == parts.query:
        return text
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


_QUERY_IN_TEXT = re.compile(r"([?&])([A-Za-z0-9_.-]+)=([^&#\s'\"<>]+)")


def redact_urls(text: str) -> str:
    """Every URL in free ``text`` through :func:`redact_url`, and every
    credential-like query parameter of a bare path (``/x?token=...``, as
    urllib3 quotes a request) masked."""
    if not text:
        return text
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    if "=" in text and ("?" in text or "&" in text):
        text = _QUERY_IN_TEXT.sub(lambda m: f"{m[1]}{m[2]}={MASK}" if _secret_query_name(m[2]) else m[0], text)
    return text
