"""The shared vocabulary: one ``Annotated`` type per pattern nodeforge's input
files repeat, each with its rule in words (:class:`~nodeforge.schema.declare.Rule`,
shown in errors and in ``docs/schemas.md``).

The rules are the superset of what the feature modules checked by hand
(ironic/inventory/declare.py, ironic/profiles.py, compute/flavors.py, templates.py,
pins/lockfile.py, scope.py); each type's docstring-comment names the
service rule it follows. Every checker is also a plain function
(``check_*``, returning the value or raising ``ValueError`` with the message)
for code that validates outside a model.

URLs: :data:`HttpUrl` / :data:`BaseUrl` refuse credentials in the URL
(``user:pass@``) and a query that looks like a credential (``?token=``)
without echoing them: errors show the URL through :func:`redact_url`.
"""

from __future__ import annotations

import datetime
import ipaddress
import math
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from nodeforge.redact import redact_url, url_has_credentials
from nodeforge.schema.declare import SECRET, Rule

# --- checkers ---------------------------------------------------------------------


def shown(value) -> str:
    """``repr(value)``, cut to its first 60 characters when longer (a hostile 8 MB name is not
    printed back)."""
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:60]!r}... ({len(value)} characters)"
    return repr(value)


def _pattern(regex: str, rule: str, *, flags=0):
    compiled = re.compile(regex, flags)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"expected {rule}, got {shown(value)}")
        return value

    check.pattern = compiled  # type: ignore[attr-defined]
    check.rule = rule  # type: ignore[attr-defined]
    return check


def _type(check, rule: str, base=str):
    return Annotated[base, AfterValidator(check), Rule(rule)]


# Names -------------------------------------------------------------------------------
# Ironic node / port group names (Ironic: RFC 3986 unreserved characters, <= 255).
NAME_RULE = "1-255 characters of A-Z a-z 0-9 . _ ~ -"
_check_name_chars = _pattern(r"[A-Za-z0-9._~-]{1,255}", NAME_RULE)
_UUID_LIKE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")


def check_name(value: str) -> str:
    """A node or port group name as Ironic takes it: its characters, and not a UUID (Ironic refuses
    one: a name is looked up as a UUID first)."""
    _check_name_chars(value)
    if _UUID_LIKE.fullmatch(value):
        raise ValueError(f"{shown(value)} looks like a UUID; Ironic takes no UUID as a name (give it as "
                         "'uuid', or choose a name)")
    return value


check_name.pattern = _check_name_chars.pattern  # type: ignore[attr-defined]
check_name.rule = NAME_RULE  # type: ignore[attr-defined]
Name = _type(check_name, NAME_RULE)

# nodeforge's own identifiers: scopes, hardware profiles, hardening profiles (lower case, <= 63).
SLUG_RULE = "1-63 characters of a-z 0-9 . _ -, starting with a letter or digit"
check_slug = _pattern(r"[a-z0-9][a-z0-9._-]{0,62}", SLUG_RULE)
Slug = _type(check_slug, SLUG_RULE)
ScopeName = Slug

# Display names (Nova flavors, Magnum templates): may hold spaces, <= 255.
DISPLAY_NAME_RULE = "1-255 characters of A-Z a-z 0-9 . _ - and space, starting with a letter or digit"
check_display_name = _pattern(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,254}", DISPLAY_NAME_RULE)
DisplayName = _type(check_display_name, DISPLAY_NAME_RULE)

# Resource classes ---------------------------------------------------------------------
# Ironic's node resource_class (<= 80 characters); Nova reports it to Placement as
# CUSTOM_<upper case, other characters '_'> (placement_resource_class).
RESOURCE_CLASS_RULE = "1-80 characters of A-Z a-z 0-9 . _ - (Ironic's resource_class)"
check_resource_class = _pattern(r"[A-Za-z0-9._-]{1,80}", RESOURCE_CLASS_RULE)
ResourceClass = _type(check_resource_class, RESOURCE_CLASS_RULE)

PLACEMENT_CLASS_RULE = "CUSTOM_ followed by 1-248 characters of A-Z 0-9 _ (a Placement custom resource class)"
check_placement_class = _pattern(r"CUSTOM_[A-Z0-9_]{1,248}", PLACEMENT_CLASS_RULE)
PlacementResourceClass = _type(check_placement_class, PLACEMENT_CLASS_RULE)


def placement_resource_class(resource_class: str) -> str:
    """The Placement class Nova's Ironic driver reports for an Ironic resource
    class: upper case, every non-alphanumeric character ``_``, prefixed ``CUSTOM_``
    (``baremetal-compute`` -> ``CUSTOM_BAREMETAL_COMPUTE``)."""
    return "CUSTOM_" + re.sub(r"[^A-Z0-9]", "_", resource_class.upper())


# Traits (os-traits / Placement): standard traits are upper case A-Z 0-9 _; custom ones CUSTOM_.
TRAIT_RULE = "1-255 characters of A-Z 0-9 _ (a Placement trait)"
check_trait = _pattern(r"[A-Z0-9_]{1,255}", TRAIT_RULE)
Trait = _type(check_trait, TRAIT_RULE)
CUSTOM_TRAIT_RULE = "CUSTOM_ followed by 1-248 characters of A-Z 0-9 _ (a custom Placement trait)"
check_custom_trait = _pattern(r"CUSTOM_[A-Z0-9_]{1,248}", CUSTOM_TRAIT_RULE)
CustomTrait = _type(check_custom_trait, CUSTOM_TRAIT_RULE)

# Network ------------------------------------------------------------------------------
MAC_RULE = "a MAC address of 6 hex octets, separated by ':' or '-' or not at all (stored as aa:bb:cc:dd:ee:ff)"
_MAC = re.compile(r"[0-9a-f]{2}([:-]?)[0-9a-f]{2}(\1[0-9a-f]{2}){4}", re.I)


def check_mac(value: str) -> str:
    """Normalised to lower case, colon-separated (how Ironic stores port addresses)."""
    if not _MAC.fullmatch(value):
        raise ValueError(f"expected {MAC_RULE}, got {shown(value)}")
    digits = re.sub(r"[:-]", "", value).lower()
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))


MacAddress = _type(check_mac, MAC_RULE)

IP_RULE = "an IPv4 or IPv6 address"


def check_ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"expected {IP_RULE}, got {shown(value)}") from None


IPAddress = _type(check_ip, IP_RULE)

HOSTNAME_RULE = "a host name (RFC 1123 labels of a-z 0-9 -, at most 253 characters)"
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_hostname(value: str) -> str:
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"expected {HOSTNAME_RULE}, got {shown(value)}")
    return value


Hostname = _type(check_hostname, HOSTNAME_RULE)
HOST_RULE = "an IP address or a host name"


def check_host(value: str) -> str:
    try:
        return check_ip(value.strip("[]"))
    except ValueError:
        pass
    try:
        return check_hostname(value)
    except ValueError:
        raise ValueError(f"expected {HOST_RULE}, got {shown(value)}") from None


Host = _type(check_host, HOST_RULE)

PORT_RULE = "a port number 1-65535"


def check_port(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"expected {PORT_RULE}, got {value!r}")
    return value


Port = Annotated[int, AfterValidator(check_port), Rule(PORT_RULE)]

# URLs ---------------------------------------------------------------------------------
URL_RULE = "an http(s) URL without credentials"
BASE_URL_RULE = "an http(s) base URL without credentials, query or fragment"
CREDENTIALS_ADVICE = ("credentials never go in a URL; put them in ~/.netrc (machine <host> login <user> "
                      "password <password>), which the downloader honours")


def check_url(value: str, *, base: bool = False) -> str:
    """An http(s) URL with a host; credentials refused (the message shows the URL
    redacted). ``base``: no query or fragment either (a base URL paths are appended to)."""
    rule = BASE_URL_RULE if base else URL_RULE
    shown = redact_url(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"expected {rule}, got {shown!r}") from None
    if url_has_credentials(value):
        raise ValueError(f"expected {rule}: it holds credentials ({shown}); {CREDENTIALS_ADVICE}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected {rule}, got {shown!r}")
    if base and (parts.query or parts.fragment):
        raise ValueError(f"expected {rule}, got {shown!r}")
    return value


def check_base_url(value: str) -> str:
    return check_url(value, base=True).rstrip("/")


HttpUrl = _type(check_url, URL_RULE)
BaseUrl = _type(check_base_url, BASE_URL_RULE + " (a trailing / is dropped)")

# Versions and digests ---------------------------------------------------------------------
SEMVER_RULE = "a version MAJOR.MINOR.PATCH[-PRE] (a leading v accepted), quoted if YAML would read a number"
check_semver = _pattern(r"v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?", SEMVER_RULE)
SemVer = _type(check_semver, SEMVER_RULE)
RELEASE_RULE = "a release version MAJOR.MINOR.PATCH (a leading v accepted, no pre-release)"
check_release = _pattern(r"v?\d+\.\d+\.\d+", RELEASE_RULE)
ReleaseVersion = _type(check_release, RELEASE_RULE)
TAG_RULE = "a version tag vMAJOR.MINOR.PATCH[-PRE][+BUILD] (a container image or release tag)"
check_version_tag = _pattern(r"v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?", TAG_RULE)
VersionTag = _type(check_version_tag, TAG_RULE)
KUBE_MINOR_RULE = 'a Kubernetes minor like "1.36" (quoted: unquoted 1.30 reads as the number 1.3)'
check_kube_minor = _pattern(r"1\.\d+", KUBE_MINOR_RULE)
KubeMinor = _type(check_kube_minor, KUBE_MINOR_RULE)
DOTTED_VERSION_RULE = "a version of dot-separated numbers like 1.1.0"
check_dotted_version = _pattern(r"\d+(\.\d+)*", DOTTED_VERSION_RULE)
DottedVersion = _type(check_dotted_version, DOTTED_VERSION_RULE)

SHA256_RULE = "a sha256 digest (64 lowercase hex characters)"
check_sha256 = _pattern(r"[0-9a-f]{64}", SHA256_RULE)
Sha256 = _type(check_sha256, SHA256_RULE)
SHA512_RULE = "a sha512 digest (128 lowercase hex characters)"
check_sha512 = _pattern(r"[0-9a-f]{128}", SHA512_RULE)
Sha512 = _type(check_sha512, SHA512_RULE)

def check_file_name(value: str) -> str:
    from nodeforge.base.fs import plain_name_problem

    problem = plain_name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


FILE_NAME_RULE = "a file name in the same directory (no '/', '..' or NUL)"
FileName = Annotated[str, AfterValidator(check_file_name), Rule(FILE_NAME_RULE)]


# Numbers ------------------------------------------------------------------------------------


def check_finite(value: float) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return value


FiniteFloat = Annotated[float, AfterValidator(check_finite), Rule("a finite number")]


def bounded(low: float | None = None, high: float | None = None, *, integer: bool = False):
    """A finite number (or ``integer``) within ``[low, high]``."""
    base = int if integer else float
    what = "an integer" if integer else "a finite number"
    rule = what + (f" >= {low}" if low is not None else "") + (f" <= {high}" if high is not None else "")

    def check(value):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected {rule}, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"expected {rule}, got {value!r}")
        return value

    return Annotated[base, AfterValidator(check), Rule(rule)]


PositiveInt = bounded(1, integer=True)
NonNegativeInt = bounded(0, integer=True)

# Secrets --------------------------------------------------------------------------------------
SECRET_REF_RULE = ("a reference to a secret: env:VAR (an environment variable on the allow-list), file:PATH "
                   "(a one-line file in the inventory's directory or the secrets directory) or fernet:TOKEN "
                   "(encrypted with a key held outside the file)")
_SECRET_REF = re.compile(r"(env:[A-Za-z_][A-Za-z0-9_]*|file:.+|fernet:[A-Za-z0-9_=-]+)", re.S)


def check_secret_ref(value: str) -> str:
    if not _SECRET_REF.fullmatch(value):
        # Never echo the value: it may be the secret itself, written inline.
        raise ValueError(f"expected {SECRET_REF_RULE}; the value is not shown (a secret written inline?)")
    return value


SecretRef = Annotated[str, AfterValidator(check_secret_ref), Rule(SECRET_REF_RULE), SECRET]

# Free text of bounded length (descriptions, reasons).


def text(max_length: int = 255):
    return Annotated[str, Field(max_length=max_length), Rule(f"text of at most {max_length} characters")]


DATE_RULE = "a date YYYY-MM-DD (quoted: unquoted, YAML reads a date)"
_check_date_shape = _pattern(r"\d{4}-\d{2}-\d{2}", DATE_RULE)


def check_date(value: str) -> str:
    """A calendar date (2020-02-30 has the shape and is no date)."""
    _check_date_shape(value)
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{shown(value)} is not a date in the calendar") from None
    return value


check_date.rule = DATE_RULE  # type: ignore[attr-defined]
DateString = _type(check_date, DATE_RULE)
