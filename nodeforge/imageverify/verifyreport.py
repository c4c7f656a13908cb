"""The boot-verification report (``verify.json``): its schema, and the one
strict check every reader goes through.

``nodeforge image verify`` writes it (:func:`.boottest.write_report`);
``builddir.load`` judges it per variant, ``image publish`` refuses a variant
it does not pass, stores it in Glance next to the image, and ``image promote``
fetches it back and judges it again against the Glance image. All of them
call :func:`parse` and :func:`judge` here, nothing else decides what a pass is.

Schema ``nodeforge-image-verify/2``, declared once below (:class:`VerifyReport`;
``docs/schemas.md``) with the rules across fields in :func:`parse` (every field
required, no other field allowed, at any level)::

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
         "checks": [verifychecks check, ...],   # non-empty, unique ids, REQUIRED_CHECKS present
         # How the boot went (absent from reports written before they existed):
         "accel_reason": str,            # why this accelerator (forced, probed, cached, fallen back)
         "fallback": null | {"from": "kvm", "reason": str, "stage": stage, "seconds": number,
                             "console_tail": [str, ...]},   # the stalled KVM boot replaced by this one
         "timeline": {stage: seconds since QEMU started}}}} # bootwatch.STAGES first seen

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
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field

from nodeforge import schema
from nodeforge.errors import ConfigError, NodeforgeError
from nodeforge.imageverify import verifychecks as vc
from nodeforge.imageverify.bootwatch import STAGES
from nodeforge.schema import Declared, Document, Rule, SchemaError, vocab
from nodeforge.schema.loader import strict_json

SCHEMA = "nodeforge-image-verify/2"
SOURCE = "verify.json"
# The variants a build has (builddir.VARIANT_FORMATS; a test keeps the two equal).
VARIANTS = ("baremetal", "vm")
TOP_FIELDS = ("schema", "build_id", "manifest_sha256", "variants")
SECTION_FIELDS = ("passed", "build_id", "manifest_sha256", "image", "image_sha256", "image_sha512",
                  "verified_at", "accel", "firmware", "console_log", "seconds", "summary", "error", "checks",
                  "accel_reason", "fallback", "timeline")
# Fields added to schema /2 later: optional, so reports written before them stay readable.
LATER_FIELDS = ("accel_reason", "fallback", "timeline")
CHECK_FIELDS = ("id", "title", "passed", "expected", "observed", "items", "evidence")
ITEM_FIELDS = ("what", "expected", "observed", "passed")
SECONDS_KEYS = ("offline", "boot_to_verdict", "total")
ACCELS = ("kvm", "tcg")
FIRMWARES = ("bios", "uefi")
# What verifychecks.evaluate reports for every image, whatever the hardening profile.
REQUIRED_CHECKS = tuple(vc.check_ids([]))
MANIFEST_ITEM = f"sha256 {vc.MANIFEST_IN_IMAGE}"
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
# Structure: declared once (docs/schemas.md), then what ties the fields together

def _iso_time(value: str) -> str:
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError("not an ISO 8601 time with an offset")
    return value


def _file_name_check(value: str) -> str:
    if not _FILE_NAME.match(value) or value in (".", ".."):
        raise ValueError("not a file name")
    return value


FileName = Annotated[str, AfterValidator(_file_name_check), Rule("a file name (no /)")]
_NonEmpty = Annotated[str, Field(min_length=1)]


class VerifyItem(Declared):
    """One thing a check compared."""

    what: str
    expected: Any
    observed: Any
    passed: bool


class VerifyCheck(Declared):
    """One check (``verifychecks._check``): passed == it has items and all passed;
    expected/observed == the items' values by ``what``."""

    id: _NonEmpty
    title: str
    passed: bool
    expected: dict[str, Any]
    observed: dict[str, Any]
    items: list[VerifyItem]
    evidence: list[str]


class VerifyFallback(Declared):
    """A KVM boot that stalled, replaced by a TCG boot of the same variant."""

    from_: Literal["kvm"] = Field(alias="from")
    reason: str
    stage: Literal[STAGES]  # type: ignore[valid-type]
    seconds: vocab.bounded(0)  # type: ignore[valid-type]
    console_tail: list[str]


class VerifySection(Declared):
    """One variant's verdict, bound to the build and the image's bytes."""

    passed: bool = Field(description="== every check passed and error is null")
    build_id: str = Field(description="== the top-level build_id")
    manifest_sha256: vocab.Sha256 = Field(description="== the top-level manifest_sha256")
    image: FileName
    image_sha256: vocab.Sha256
    image_sha512: vocab.Sha512
    verified_at: Annotated[str, AfterValidator(_iso_time), Rule("an ISO 8601 time with an offset")]
    accel: Literal[ACCELS]  # type: ignore[valid-type]
    firmware: Literal[FIRMWARES]  # type: ignore[valid-type]
    console_log: FileName
    seconds: dict[Literal[SECONDS_KEYS], vocab.bounded(0)]  # type: ignore[valid-type]
    summary: dict[str, Any] = Field(description="== verifychecks.summary(checks)")
    error: Optional[_NonEmpty]
    checks: list[VerifyCheck] = Field(description=f"non-empty, unique ids, these present: {', '.join(REQUIRED_CHECKS)}")
    accel_reason: Optional[str] = Field(None, description="why this accelerator (absent in older reports)")
    fallback: Optional[VerifyFallback] = Field(None, description="the stalled KVM boot this one replaced")
    timeline: Optional[dict[Literal[STAGES], vocab.bounded(0)]] = Field(  # type: ignore[valid-type]
        None, description="boot stage -> seconds since QEMU started, when first seen on the console")


class VerifyReport(Declared):
    """``verify.json``, written by ``nodeforge image verify``; every field required."""

    schema_: Literal[SCHEMA] = Field(alias="schema")  # type: ignore[valid-type]
    build_id: Annotated[str, Field(min_length=1, pattern=r"\S")]
    manifest_sha256: vocab.Sha256
    variants: dict[str, VerifySection] = Field(description=f"variant ({', '.join(VARIANTS)}) -> its verdict")


KIND = schema.register("verify-report", VerifyReport, title="Boot-verification report", path="BUILD/verify.json",
                       formats=("json",), limits=schema.Limits(max_bytes=MAX_BYTES),
                       description="Machine-written; judged by every reader (image publish, promote, the "
                                   "pipeline's verify stage).")


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
    try:
        schema.check_tree(source, doc)
        schema.validate(Document(source, "data", doc, doc), VerifyReport)
    except SchemaError as exc:
        fail("; ".join(f"{p.key}: {p.detail}" for p in exc.problems[:3]))
    except ConfigError as exc:
        fail(exc.detail if hasattr(exc, "detail") else str(exc))
    if not doc["variants"]:
        fail("variants is empty: no variant was verified")
    for name, section in doc["variants"].items():
        if name not in VARIANTS:
            fail(f"variants.{name[:60]} is not a variant ({', '.join(VARIANTS)})")
        _section(doc, name, section, fail)
    return doc


def _section(doc: dict, variant: str, section: dict, fail) -> None:
    at = f"variants.{variant}"
    for key in ("build_id", "manifest_sha256"):
        if section[key] != doc[key]:
            fail(f"{at}.{key} {json.dumps(section[key])[:80]} is not the report's {key} "
                 f"{json.dumps(doc[key])[:80]}")
    checks, error = section["checks"], section["error"]
    if not checks:
        fail(f"{at}.checks is empty: a verdict without checks proves nothing")
    seen: set[str] = set()
    for i, check in enumerate(checks):
        _check(check, f"{at}.checks[{i}]", fail)
        if check["id"] in seen:
            fail(f"{at}.checks lists '{check['id'][:60]}' twice")
        seen.add(check["id"])
    missing = [c for c in REQUIRED_CHECKS if c not in seen]
    if missing:
        fail(f"{at}.checks has no {', '.join(repr(c) for c in missing)} check(s) (every boot verification "
             f"has: {', '.join(REQUIRED_CHECKS)})")
    manifest_check = next(c for c in checks if c["id"] == "manifest")
    if manifest_check["expected"].get(MANIFEST_ITEM) != section["manifest_sha256"]:
        fail(f"{at}.checks[manifest] compared the image with another manifest than manifest_sha256")
    failed = [c["id"] for c in checks if not c["passed"]]
    earned = not failed and error is None
    if section["passed"] and not earned:
        why = f"checks {', '.join(failed)} failed" if failed else f"error is set ({error[:200]})"
        fail(f"{at}.passed is true but {why}")
    if not section["passed"] and earned:
        fail(f"{at}.passed is false but every check passed and there is no error")
    if section["summary"] != vc.summary(checks):
        fail(f"{at}.summary does not match its checks")


def _check(check: dict, at: str, fail) -> None:
    of = f"(check '{check['id'][:60]}')"
    items = check["items"]
    if not items:
        fail(f"{at}.items is not a non-empty list {of}: a check without items proves nothing")
    if check["passed"] != all(i["passed"] for i in items):
        fail(f"{at}.passed is {json.dumps(check['passed'])} but its items say otherwise {of}")
    for key in ("expected", "observed"):
        if check[key] != {i["what"]: i[key] for i in items}:
            fail(f"{at}.{key} does not match its items {of}")


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
