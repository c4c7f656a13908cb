"""The boot-verification report (``verify.json``): its schema, and the one
strict check every reader goes through.

``nodeforge image verify`` writes it (:func:`.boottest.write_report`);
``builddir.load`` judges it per variant, ``image publish`` refuses a variant
it does not pass, stores it in Glance next to the image, and ``image promote``
fetches it back and judges it again against the Glance image. All of them
call :func:`parse` and :func:`judge` here, nothing else decides what a pass is.

Schema ``nodeforge-image-verify/2`` (every field required, no other field
allowed, at any level)::

    {"schema": "nodeforge-image-verify/2",
     "build_id": str, "manifest_sha256": hex64,
     "variants": {"vm" | "baremetal": {
         "passed": bool,                 # == every check passed and error is null
         "build_id": str,                # == the top-level build_id
         "manifest_sha256": hex64,       # == the top-level manifest_sha256
         "image": file name, "image_sha256": hex64, "image_sha512": hex128,
         "verified_at": ISO 8601 with offset,
         "accel": "kvm" | "tcg", "firmware": "bios" | "uefi", "console_log": file name,
         "seconds": {"offline" | "boot_to_verdict" | "total": number >= 0},
         "summary": verifychecks.summary(checks),
         "error": str | null,
         "checks": [verifychecks check, ...]}}}   # non-empty, unique ids, REQUIRED_CHECKS present

A check is exactly ``{id, title, passed, expected, observed, items, evidence}``
as :func:`verifychecks._check` builds it (``passed`` == it has items and all
passed; ``expected``/``observed`` == the items' values by ``what``), an item
exactly ``{what, expected, observed, passed}``.

A variant **passes** only if the document is valid, its ``build_id`` and
``manifest_sha256`` are the build's, the variant's section is for the
image's bytes (``image_sha256``, and ``image_sha512`` where the reader knows
it) and says passed. Anything else is a refusal whose reason names the field.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re

from nodeforge.errors import NodeforgeError
from nodeforge.imageverify import verifychecks as vc
from nodeforge.schema.loader import strict_json

SCHEMA = "nodeforge-image-verify/2"
SOURCE = "verify.json"
# The variants a build has (builddir.VARIANT_FORMATS; a test keeps the two equal).
VARIANTS = ("baremetal", "vm")
TOP_FIELDS = ("schema", "build_id", "manifest_sha256", "variants")
SECTION_FIELDS = ("passed", "build_id", "manifest_sha256", "image", "image_sha256", "image_sha512",
                  "verified_at", "accel", "firmware", "console_log", "seconds", "summary", "error", "checks")
CHECK_FIELDS = ("id", "title", "passed", "expected", "observed", "items", "evidence")
ITEM_FIELDS = ("what", "expected", "observed", "passed")
SECONDS_KEYS = ("offline", "boot_to_verdict", "total")
ACCELS = ("kvm", "tcg")
FIRMWARES = ("bios", "uefi")
# What verifychecks.evaluate reports for every image, whatever the hardening profile.
REQUIRED_CHECKS = ("boot", *(f"artifact-{a.component}" for a in vc.ARTIFACTS),
                   *(check_id for check_id, _, _ in vc.SERVICE_CHECKS), "hardening-profile", "rootfs-grown",
                   "manifest")
MANIFEST_ITEM = f"sha256 {vc.MANIFEST_IN_IMAGE}"
_HEX = {64: re.compile(r"^[0-9a-f]{64}$"), 128: re.compile(r"^[0-9a-f]{128}$")}
_FILE_NAME = re.compile(r"^[^/\0]+$")
# A report is a few KiB; anything this large is not one (and is not parsed).
MAX_BYTES = 16 << 20


class VerifyReportError(NodeforgeError):
    message = "{source}: {detail}"


class VerifyStatus(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    ABSENT = "absent"


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: VerifyStatus
    reason: str          # why (for a pass: how many checks)

    @property
    def passed(self) -> bool:
        return self.status is VerifyStatus.PASSED


@dataclasses.dataclass(frozen=True)
class Binding:
    """What one variant's verdict must be bound to, and where those values came from."""

    variant: str
    build_id: str
    manifest_sha256: str
    image_sha256: str
    image_sha512: str | None = None   # None: this reader cannot know it (a Glance hashing with sha256)
    image_name: str | None = None     # None: this reader cannot know it (Glance)
    origin: str = "the build directory"


# --------------------------------------------------------------------------
# Structure

def parse(data: bytes | str, source: str = SOURCE) -> dict:
    """The report in ``data``, strictly validated (not yet against any build).
    Raises :class:`VerifyReportError` naming the first bad field."""
    def fail(detail: str):
        raise VerifyReportError(source=source, detail=detail)

    if len(data) > MAX_BYTES:
        fail(f"larger than {MAX_BYTES >> 20} MiB: not a report written by 'nodeforge image verify'")
    try:
        doc, duplicates = strict_json(data)
    except RecursionError:
        fail("nested too deeply: not a report written by 'nodeforge image verify'")
    except (ValueError, UnicodeDecodeError) as exc:
        fail(f"not valid JSON ({exc}); a damaged or truncated report proves nothing")
    if duplicates:
        fail(f"{duplicates[0][:60]!r} appears twice in one object: a JSON reader may keep either value")
    if not isinstance(doc, dict):
        fail("not a JSON object")
    if "schema" not in doc:
        fail(f"schema is missing: not a report written by 'nodeforge image verify' (want '{SCHEMA}')")
    if doc["schema"] != SCHEMA:
        fail(f"schema is {json.dumps(doc['schema'])[:60]}, not '{SCHEMA}' (a report of an older nodeforge "
             "or another tool); run 'nodeforge image verify' again")
    _fields(doc, "", TOP_FIELDS, fail)
    _text(doc["build_id"], "build_id", fail)
    _hex(doc["manifest_sha256"], "manifest_sha256", 64, fail)
    variants = doc["variants"]
    if not isinstance(variants, dict):
        fail("variants is not a JSON object")
    if not variants:
        fail("variants is empty: no variant was verified")
    for name, section in variants.items():
        if name not in VARIANTS:
            fail(f"variants.{name} is not a variant ({', '.join(VARIANTS)})")
        _section(doc, name, section, fail)
    return doc


def _section(doc: dict, variant: str, section, fail) -> None:
    at = f"variants.{variant}"
    _fields(section, at, SECTION_FIELDS, fail)
    for key in ("build_id", "manifest_sha256"):
        if section[key] != doc[key]:
            fail(f"{at}.{key} {json.dumps(section[key])[:80]} is not the report's {key} "
                 f"{json.dumps(doc[key])[:80]}")
    _file_name(section["image"], f"{at}.image", fail)
    _hex(section["image_sha256"], f"{at}.image_sha256", 64, fail)
    _hex(section["image_sha512"], f"{at}.image_sha512", 128, fail)
    when = section["verified_at"]
    try:
        parsed = datetime.datetime.fromisoformat(when) if isinstance(when, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        fail(f"{at}.verified_at is not an ISO 8601 time with an offset")
    if section["accel"] not in ACCELS:
        fail(f"{at}.accel is not one of {', '.join(ACCELS)}")
    if section["firmware"] not in FIRMWARES:
        fail(f"{at}.firmware is not one of {', '.join(FIRMWARES)}")
    _file_name(section["console_log"], f"{at}.console_log", fail)
    seconds = section["seconds"]
    if not isinstance(seconds, dict):
        fail(f"{at}.seconds is not a JSON object")
    for key, value in seconds.items():
        if key not in SECONDS_KEYS:
            fail(f"{at}.seconds.{key} is not a field of {SCHEMA} ({', '.join(SECONDS_KEYS)})")
        if not _number(value) or value < 0:
            fail(f"{at}.seconds.{key} is not a number of seconds")
    error = section["error"]
    if error is not None and not (isinstance(error, str) and error):
        fail(f"{at}.error is neither null nor a message")
    checks = section["checks"]
    if not isinstance(checks, list):
        fail(f"{at}.checks is not a list")
    if not checks:
        fail(f"{at}.checks is empty: a verdict without checks proves nothing")
    seen: set[str] = set()
    for i, check in enumerate(checks):
        _check(check, f"{at}.checks[{i}]", fail)
        if check["id"] in seen:
            fail(f"{at}.checks lists '{check['id']}' twice")
        seen.add(check["id"])
    missing = [c for c in REQUIRED_CHECKS if c not in seen]
    if missing:
        fail(f"{at}.checks has no {', '.join(repr(c) for c in missing)} check(s) (every boot verification "
             f"has: {', '.join(REQUIRED_CHECKS)})")
    manifest_check = next(c for c in checks if c["id"] == "manifest")
    if manifest_check["expected"].get(MANIFEST_ITEM) != section["manifest_sha256"]:
        fail(f"{at}.checks[manifest] compared the image with another manifest than manifest_sha256")
    if not isinstance(section["passed"], bool):
        fail(f"{at}.passed is not true or false")
    failed = [c["id"] for c in checks if not c["passed"]]
    earned = not failed and error is None
    if section["passed"] and not earned:
        why = f"checks {', '.join(failed)} failed" if failed else f"error is set ({error[:200]})"
        fail(f"{at}.passed is true but {why}")
    if not section["passed"] and earned:
        fail(f"{at}.passed is false but every check passed and there is no error")
    if section["summary"] != vc.summary(checks):
        fail(f"{at}.summary does not match its checks")


def _check(check, at: str, fail) -> None:
    _fields(check, at, CHECK_FIELDS, fail)
    if not isinstance(check["id"], str) or not check["id"]:
        fail(f"{at}.id is not a check id")
    of = f"(check '{check['id'][:60]}')"
    if not isinstance(check["title"], str):
        fail(f"{at}.title is not a string {of}")
    if not isinstance(check["passed"], bool):
        fail(f"{at}.passed is not true or false {of}")
    items = check["items"]
    if not isinstance(items, list) or not items:
        fail(f"{at}.items is not a non-empty list {of}: a check without items proves nothing")
    for j, item in enumerate(items):
        _fields(item, f"{at}.items[{j}]", ITEM_FIELDS, fail)
        if not isinstance(item["what"], str) or not isinstance(item["passed"], bool):
            fail(f"{at}.items[{j}] has no string 'what' and boolean 'passed' {of}")
    if check["passed"] != all(i["passed"] for i in items):
        fail(f"{at}.passed is {json.dumps(check['passed'])} but its items say otherwise {of}")
    for key in ("expected", "observed"):
        if check[key] != {i["what"]: i[key] for i in items}:
            fail(f"{at}.{key} does not match its items {of}")
    evidence = check["evidence"]
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        fail(f"{at}.evidence is not a list of strings {of}")


def _fields(node, at: str, fields: tuple[str, ...], fail) -> None:
    where = at or "the report"
    if not isinstance(node, dict):
        fail(f"{where} is not a JSON object")
    missing = [k for k in fields if k not in node]
    if missing:
        fail(f"{', '.join(_join(at, k) for k in missing)} missing")
    extra = sorted(k for k in node if k not in fields)
    if extra:
        fail(f"{', '.join(_join(at, str(k)[:60]) for k in extra[:5])}: not a field of {SCHEMA} (unknown field)")


def _join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _text(value, at: str, fail) -> None:
    if not isinstance(value, str) or not value.strip():
        fail(f"{at} is not a non-empty string")


def _hex(value, at: str, length: int, fail) -> None:
    if not isinstance(value, str) or not _HEX[length].match(value):
        fail(f"{at} is not {length} lower-case hex digits")


def _file_name(value, at: str, fail) -> None:
    if not isinstance(value, str) or not _FILE_NAME.match(value) or value in (".", ".."):
        fail(f"{at} is not a file name")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


# --------------------------------------------------------------------------
# Verdicts

def judge(data: bytes | str | None, bindings: list[Binding], source: str = SOURCE) -> dict[str, Verdict]:
    """``{variant: Verdict}`` for each binding: absent without a report or
    without a section for the variant, failed with the reason for an invalid
    report, one bound to anything else, or one that says failed."""
    if data is None:
        return {b.variant: Verdict(VerifyStatus.ABSENT, f"no {SOURCE}: not verified "
                                                        "(run 'nodeforge image verify')") for b in bindings}
    try:
        doc = parse(data, source)
    except VerifyReportError as exc:
        return {b.variant: Verdict(VerifyStatus.FAILED, str(exc)) for b in bindings}
    return {b.variant: judge_doc(doc, b, source) for b in bindings}


def judge_doc(doc: dict, b: Binding, source: str = SOURCE) -> Verdict:
    """The verdict of a :func:`parse`-d report for one variant."""
    def refused(detail: str) -> Verdict:
        return Verdict(VerifyStatus.FAILED, f"{source}: {detail}")

    if doc["build_id"] != b.build_id:
        return refused(f"build_id {json.dumps(doc['build_id'])[:80]} is another build's "
                       f"({b.origin} is build {b.build_id})")
    if doc["manifest_sha256"] != b.manifest_sha256:
        return refused(f"manifest_sha256 is another manifest's (report {doc['manifest_sha256'][:16]}..., "
                       f"{b.origin} {b.manifest_sha256[:16]}...)")
    section = doc["variants"].get(b.variant)
    if section is None:
        return Verdict(VerifyStatus.ABSENT, f"{source}: variants.{b.variant} missing: this variant was not "
                                            "verified (run 'nodeforge image verify')")
    at = f"variants.{b.variant}"
    if section["image_sha256"] != b.image_sha256:
        return refused(f"{at}.image_sha256 is for other image bytes (report {section['image_sha256'][:16]}..., "
                       f"{b.origin} {b.image_sha256[:16]}...)")
    if b.image_sha512 is not None and section["image_sha512"] != b.image_sha512:
        return refused(f"{at}.image_sha512 is for other image bytes (report {section['image_sha512'][:16]}..., "
                       f"{b.origin} {b.image_sha512[:16]}...)")
    if b.image_name is not None and section["image"] != b.image_name:
        return refused(f"{at}.image is {json.dumps(section['image'])[:80]}, not {b.image_name}")
    checks = section["checks"]
    if not section["passed"]:
        failed = [c["id"] for c in checks if not c["passed"]]
        why = [f"checks {', '.join(failed)} failed"] if failed else []
        if section["error"]:
            why.append(f"error: {section['error'][:200]}")
        return refused(f"{at} did not pass: {'; '.join(why)}")
    return Verdict(VerifyStatus.PASSED, f"{len(checks)} of {len(checks)} checks passed "
                                        f"({section['verified_at']})")
