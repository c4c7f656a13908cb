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
* **URLs**, wherever one can appear: :func:`redact_url` masks the user info
  (``user:pass@``, found at the last ``@`` before the host, so a password
  holding ``/ ? # @ :`` is masked whole; with or without a scheme), the value
  of every sensitive query parameter (:data:`SENSITIVE_QUERY_KEYS`: ``token``,
  ``sig``, ``X-Amz-Signature``, ``X-Goog-Credential``, ``OSSAccessKeyId``,
  ...; ``$NODEFORGE_REDACT_QUERY_KEYS`` adds names) and a fragment holding a
  credential (``#access_token=...``); a URL no parser can read is masked
  whole. :func:`redact_urls` does it to every URL in free text (``scheme://``
  and scheme-less ``user:pass@host``); :func:`scrub` (hence the logging
  filter and every error the CLI prints) and :func:`scrub_obj` (every string
  of structured output, whatever its field) apply it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading

MASK = "***"
MIN_SEARCH_LENGTH = 8
_lock = threading.Lock()
_known: set[str] = set()

# Field names whose value is a secret (Ironic's secret driver_info keys among
# them: ipmi_password, ipmi_kg_key, snmp_auth_key, snmp_priv_key, ...).
# snmp_community (and Ironic's snmp_community_read/_write) is the SNMP v1/v2c password.
_SECRET_FIELD = re.compile(r"(^|[_.-])(password|passwd|passphrase|secret|token|kg_key|auth_key|priv_key|"
                           r"private_key|api_key|secret_key|access_key|community|community_read|"
                           r"community_write)$", re.I)
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
    ``free_text``) are masked by search (:func:`scrub`); every other string keeps its
    value but for the credentials of the URLs in it (:func:`redact_urls`)."""
    if isinstance(obj, Secret):
        return MASK
    if isinstance(obj, str):
        return scrub(obj) if free_text else redact_urls(obj)
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
    """Logging filter that masks registered secrets and URL credentials (:func:`scrub`) in the
    final message, the exception text and the stack."""

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
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


# --- URLs ----------------------------------------------------------------------------
# Query parameters (and fragment keys) whose value is a credential: pre-signed object-store
# URLs (S3, GCS, OSS, Azure SAS, Swift temp URLs), API tokens, OAuth codes, passwords. Compared
# case-insensitively, after percent-decoding; every name is_secret_field() matches
# (``*_password``, ``*_token``, ``*_secret``, ...) counts too. NODEFORGE_REDACT_QUERY_KEYS
# (comma-separated) adds names; nothing removes one.
SENSITIVE_QUERY_KEYS: tuple[str, ...] = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token",
    "x-goog-signature", "x-goog-credential", "x-goog-security-token",
    "ossaccesskeyid", "x-oss-signature", "x-oss-credential", "x-oss-security-token", "security-token",
    "awsaccesskeyid", "googleaccessid", "signature", "sig", "temp_url_sig",
    "token", "access_token", "refresh_token", "id_token", "auth_token", "private_token", "private-token",
    "password", "passwd", "pass", "pwd", "secret", "client_secret",
    "api_key", "apikey", "api-key", "x-api-key", "key", "access_key", "secret_key",
    "auth", "authorization", "code", "session", "sessionid", "jwt", "ticket", "credential", "credentials",
)
ENV_REDACT_QUERY_KEYS = "NODEFORGE_REDACT_QUERY_KEYS"
UNPARSEABLE_URL = "<unparseable URL masked>"
# A fragment holding one of these words, or a sensitive key= anywhere, is masked whole.
_FRAGMENT_WORDS = re.compile(r"token|secret|passw|pwd|credential|signature|api[_-]?key|session|auth|"
                             r"(?<![a-z])(sig|key|code)(?![a-z])", re.I)
_FRAGMENT_KEY = re.compile(r"(?:^|(?<=[?&;/#]))([^?&;/#=]+)=")
# (SENSITIVE_QUERY_KEYS, $NODEFORGE_REDACT_QUERY_KEYS) -> their keys, for the last pair asked
_keys_cache: tuple = ((), None, frozenset())


def sensitive_query_keys(env=None) -> frozenset[str]:
    """The query keys whose values are masked: :data:`SENSITIVE_QUERY_KEYS` plus the names in
    ``$NODEFORGE_REDACT_QUERY_KEYS`` (comma-separated; it can only add), lower case."""
    global _keys_cache
    env = os.environ if env is None else env
    base, extra = SENSITIVE_QUERY_KEYS, env.get(ENV_REDACT_QUERY_KEYS) or ""
    cached = _keys_cache
    if cached[0] is base and cached[1] == extra:
        return cached[2]
    keys = frozenset(k.lower() for k in base) | {k.strip().lower() for k in extra.split(",") if k.strip()}
    _keys_cache = (base, extra, keys)
    return keys


def _secret_query_name(name: str, keys: frozenset[str] | None = None) -> bool:
    from urllib.parse import unquote_plus

    key = unquote_plus(name).strip() if "%" in name or "+" in name else name.strip()
    return (key.lower() in (keys if keys is not None else sensitive_query_keys()) or is_secret_field(key)
            or is_secret_field(key.replace("-", "_")))


class _Unparseable(ValueError):
    pass


@dataclasses.dataclass
class _Url:
    """A URL cut into its pieces as written (joined back, they are the text): ``head`` is the
    scheme and ``//`` (or nothing for a scheme-less ``user:pass@host/path``)."""

    head: str
    userinfo: str | None
    hostport: str
    path: str
    query: str | None
    fragment: str | None

    def text(self) -> str:
        return (self.head + ("" if self.userinfo is None else self.userinfo + "@") + self.hostport + self.path
                + ("" if self.query is None else "?" + self.query)
                + ("" if self.fragment is None else "#" + self.fragment))


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# What follows the '@' that ends the user info: a host (a name or a [bracketed] IP literal),
# an optional port, then the end or the path, query or fragment.
_HOST_PORT = re.compile(r"(?:\[[^\]\s/?#@]*\]|[^\s\[\]/?#@:]*)(?::[0-9]*)?(?=[/?#]|\Z)")
_IP_LITERAL_PREFIX = re.compile(r"\[[^\]]*\](?::[0-9]*)?")


def _first_of(text: str, chars: str) -> int:
    found = [i for i in (text.find(c) for c in chars) if i >= 0]
    return min(found) if found else len(text)


def _split_authority(rest: str, *, standard: bool = False) -> tuple[str | None, str]:
    """(user info or None, the rest from the host on) of ``rest`` (what follows ``//``).

    The user info ends at the *last* ``@`` followed by a host: a password may hold ``/ ? # @ :``,
    so the first ``/`` does not end the authority when what comes before it already holds a
    ``:`` or an ``@`` (``user:pa/ss@host/path``: the user info is ``user:pa/ss``). ``standard``:
    RFC 3986's reading instead (the authority ends at the first ``/ ? #``)."""
    if "@" not in rest:
        return None, rest
    prefix = rest[:_first_of(rest, "/?#")]
    if standard:
        return (prefix.rpartition("@")[0], rest[prefix.rfind("@") + 1:]) if "@" in prefix else (None, rest)
    if "@" not in prefix and (":" not in prefix or _IP_LITERAL_PREFIX.fullmatch(prefix)):
        return None, rest          # a plain host: any '@' is in the path, query or fragment
    at = len(rest)
    while (at := rest.rfind("@", 0, at)) >= 0:
        if _HOST_PORT.match(rest, at + 1):
            return rest[:at], rest[at + 1:]
    # No '@' is followed by a host: user info with nothing readable after it, or a host:port
    # whose path holds an '@' -- or a password holding '/' (user:1/x@host:1,b): cannot tell.
    raise _Unparseable("user info without a host after it")


def _parse(text: str, *, schemeless: bool = False, standard: bool = False) -> _Url:
    """``text`` cut into a :class:`_Url`; :class:`_Unparseable` when no parser can read it."""
    if text.startswith("//"):
        head, rest = "//", text[2:]        # a network-path reference: //user:pass@host/path
    elif schemeless:
        head, rest = "", text
    else:
        m = _SCHEME.match(text)
        if m and text[m.end():m.end() + 2] == "//":
            head, rest = text[:m.end() + 2], text[m.end() + 2:]
        elif "@" in text:
            head, rest = "", text          # user:pass@host/path (the "scheme" is the user name)
        else:
            head, rest = None, text        # mailto:x, urn:..., a path: no authority
    if head is None:
        head, userinfo, hostport = "", None, ""
    else:
        userinfo, rest = _split_authority(rest, standard=standard)
        end = _first_of(rest, "/?#")
        hostport, rest = rest[:end], rest[end:]
        if not _HOST_PORT.fullmatch(hostport) or (not head and userinfo is not None and not hostport):
            raise _Unparseable("not a host[:port]")
    fragment = query = None
    if "#" in rest:
        rest, fragment = rest.split("#", 1)
    if "?" in rest:
        rest, query = rest.split("?", 1)
    url = _Url(head, userinfo, hostport, rest, query, fragment)
    # The real parser must read what is left (masked user info in place): a bad port, an
    # unbalanced or invalid [IP literal], characters NFKC would turn into delimiters.
    from urllib.parse import urlsplit

    shown = dataclasses.replace(url, userinfo=None if userinfo is None else MASK)
    try:
        # (a scheme-less user:pass@host is read as the authority it is: after '//')
        as_authority = "//" if not head and (userinfo is not None or hostport) else ""
        urlsplit(as_authority + shown.text()).port  # noqa: B018 - raises ValueError
    except ValueError as exc:
        raise _Unparseable(str(exc)) from None
    return url


_MAX_NESTING = 4      # URLs inside query parameters inside URLs...: deeper, a value is masked whole


def _masked_pairs(text: str, depth: int = 0) -> tuple[str, bool]:
    """``a=1&token=x`` -> ``a=1&token=***``: the value of every sensitive key masked (``&`` or
    ``;`` between pairs); True when something was masked."""
    out, masked, keys = [], False, sensitive_query_keys()
    for piece in re.split(r"([&;])", text):
        name, eq, value = piece.partition("=")
        if eq and value and _secret_query_name(name, keys):
            out.append(f"{name}={MASK}")
            masked = True
        elif eq and ("://" in value or ("@" in value and ":" in value)):
            # a URL inside a parameter (?proxy=http://user:pass@host, ?u=user:pass@host)
            shown = (_redact(value, whole=False, schemeless="://" not in value, depth=depth + 1)
                     if depth < _MAX_NESTING else MASK)
            out.append(f"{name}={shown}")
            masked = masked or shown != value
        else:
            out.append(piece)
    return "".join(out), masked


def _masked_fragment(fragment: str) -> str:
    """The fragment, masked whole when it holds a credential: a sensitive ``key=value`` pair
    (``#access_token=...``), or a word like token, secret, password, sig or key."""
    from urllib.parse import unquote_plus

    if not fragment:
        return fragment
    # a sensitive key= anywhere in it (#access_token=..., #/callback?code=...), or a telling word
    if any(_secret_query_name(key) for key in _FRAGMENT_KEY.findall(fragment)):
        return MASK
    return MASK if _FRAGMENT_WORDS.search(unquote_plus(fragment)) else fragment


def _masked(url: _Url, depth: int = 0) -> tuple[_Url, list[str]]:
    """``url`` with its credentials masked, and the pieces of text masked."""
    shown, hidden = dataclasses.replace(url), []
    if url.userinfo is not None:
        shown.userinfo = MASK
        hidden.append(url.userinfo)
    if url.query:
        shown.query, masked = _masked_pairs(url.query, depth)
        if masked:
            hidden.append(url.query)
    if url.fragment:
        shown.fragment = _masked_fragment(url.fragment)
        if shown.fragment != url.fragment:
            hidden.append(url.fragment)
    return shown, hidden


def _redact(text: str, *, whole: bool = True, schemeless: bool = False, depth: int = 0) -> str:
    try:
        url = _parse(text, schemeless=schemeless)
    except _Unparseable:
        # Nothing can say where its credentials are: masked whole, unless (in free text, not
        # ``whole``) it has nowhere to hold one (``ipmi://HOST[:PORT]`` in a rule).
        return UNPARSEABLE_URL if whole or any(c in text for c in "@?#=;") else text
    shown, _ = _masked(url, depth)
    out = shown.text()
    if url.userinfo is not None and any(c in url.userinfo for c in "/?#"):
        # Two readings: a password holding '/', '?' or '#' (masked above), or a host whose path,
        # query or fragment holds an '@' (``host:1?sig=@x``). When the second one has a
        # credential that the first leaves in sight, nothing says which is right: masked whole.
        try:
            _, hidden = _masked(_parse(text, schemeless=schemeless, standard=True), depth)
        except _Unparseable:
            hidden = []
        if any(_visible(piece, out) for piece in hidden):
            return UNPARSEABLE_URL
    return out


def _visible(piece: str, out: str) -> bool:
    """Whether any credential-bearing part of ``piece`` (split at the URL delimiters) is in ``out``."""
    return any(part and part != MASK and part in out for part in re.split(r"[/?#&;=@:]", piece))


def url_has_credentials(url) -> bool:
    """True when ``url`` carries a credential: user info before the host (``user:pass@``,
    whatever the password holds), a sensitive query parameter (``?token=``) or fragment
    (``#access_token=``); a URL that cannot be parsed counts when it holds an ``@``."""
    text = str(url)
    try:
        parts = _parse(text)
    except _Unparseable:
        return "@" in text
    return (parts.userinfo is not None or (parts.query is not None and _masked_pairs(parts.query)[1])
            or (parts.fragment is not None and _masked_fragment(parts.fragment) != parts.fragment))


def redact_url(url) -> str:
    """``url`` as it may be printed, logged or put in an error: its user info
    (``user:pass@``, found whatever the password holds, with or without a scheme)
    becomes ``***@``, the value of every sensitive query parameter
    (:func:`sensitive_query_keys`) ``***``, a fragment holding a credential
    (``#access_token=...``) ``#***``; a URL no parser can read is
    :data:`UNPARSEABLE_URL` as a whole. Anything else is kept as it is."""
    return _redact(str(url))


# Free text: every scheme://... run of characters (a scheme is at most 32 characters: no
# quadratic scan of a long word), every //host... (a network-path reference) starting a run or
# after '=', '(', ','..., and every run holding a ':' then an '@' (a scheme-less user:pass@host,
# from after the last '=', '(', ',' ... before its ':').
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s'\"<>]+")
_NET_PATH_IN_TEXT = re.compile(r"(?:^|(?<=[\s'\"<>(\[{=,;]))//[^\s'\"<>/][^\s'\"<>]*")
_RUN_IN_TEXT = re.compile(r"[^\s'\"<>]+")
# An image reference by digest (name:tag@sha256:<hex>): not a user:pass@host.
_DIGEST_REF = re.compile(r"@[A-Za-z0-9_+.-]+:[0-9a-fA-F]{32,}(?![^\s/?#])")
_QUERY_IN_TEXT = re.compile(r"([?&])([A-Za-z0-9_.%-]+)=([^&#\s'\"<>]+)")


_CLOSING = {")": "(", "]": "[", "}": "{"}


def _url_in_text(m: re.Match) -> str:
    """One ``scheme://...`` of free text, redacted; the punctuation that ends the sentence
    around it (``.``, ``,``, ``;``, an unbalanced ``)``) kept after it."""
    url = m.group(0)
    count = {c: url.count(c) for c in "()[]{}"}
    end = len(url)
    while end and url[end - 1] in ".,;:!?)]}":
        closing = url[end - 1]
        if closing in _CLOSING:
            if count[closing] <= count[_CLOSING[closing]]:
                break
            count[closing] -= 1
        end -= 1
    return _redact(url[:end], whole=False) + url[end:]


def _schemeless(m: re.Match) -> str:
    run = m.group(0)
    colon = run.find(":")
    if colon < 0 or "@" not in run[colon:] or _DIGEST_REF.search(run):
        return run                 # no password: user@host (an e-mail address), git@host:repo
    start = max(run.rfind(c, 0, colon) for c in "=([{,;") + 1
    scheme = _SCHEME.match(run, start)
    if scheme and run.startswith("//", scheme.end()):
        return run                 # a scheme://... URL: redacted already
    shown = _redact(run[start:], whole=False, schemeless=True)
    return run[:start] + shown


def redact_urls(text: str) -> str:
    """Every URL in free ``text`` through :func:`redact_url`: ``scheme://...``, a scheme-less
    ``user:pass@host/path``, and the sensitive query parameters of a bare path
    (``/x?token=...``, as urllib3 quotes a request). A URL that cannot be parsed and could
    hold a credential is masked whole."""
    if not text:
        return text
    if "://" in text:
        text = _URL_IN_TEXT.sub(_url_in_text, text)
    if "//" in text:
        text = _NET_PATH_IN_TEXT.sub(_url_in_text, text)
    if "@" in text and ":" in text:
        text = _RUN_IN_TEXT.sub(_schemeless, text)
    if "=" in text and ("?" in text or "&" in text):
        text = _QUERY_IN_TEXT.sub(lambda m: f"{m[1]}{m[2]}={MASK}"
                                  if _secret_query_name(m[2]) and not m[3].startswith(MASK) else m[0], text)
    return text
