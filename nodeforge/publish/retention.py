"""The approved-image retention policy, ``manifests/image-retention.yaml``.

See the file itself for the meaning of each key; :func:`load` validates the
whole file against its declaration (:class:`RetentionDecl`, ``docs/schemas.md``)
and names the file, line and key of each problem.

Retention never deactivates or deletes an image that Magnum uses: when the
cloud has a container-infra endpoint, promote reads every cluster template
and cluster once (:func:`nodeforge.clients.container_infra.image_users`) and an image
beyond ``keep`` that a template (or a cluster through its template) uses is
only hidden, with the users named (:func:`magnum_hold`). A cloud without
Magnum is said so in the log, and retention proceeds as before.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from nodeforge.schema import Declared, Rule, register, validate, vocab
from nodeforge.schema import load as schema_load

DEFAULT_PATH = Path("manifests/image-retention.yaml")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
REPLACE_FREQUENCIES = ("yearly", "quarterly", "monthly", "weekly", "daily", "critical_bug", "never")


class Expire(str, enum.Enum):
    DEACTIVATE = "deactivate"
    DELETE = "delete"


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    visible: int = 1
    keep: int = 3
    expire: Expire = Expire.DEACTIVATE
    replace_frequency: str = "monthly"
    provided_until: str = "notice"

    @property
    def uuid_validity(self) -> str:
        return f"last-{self.keep}"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["expire"] = self.expire.value
        d["uuid_validity"] = self.uuid_validity
        return d


def _provided_until(value):
    # An unquoted YYYY-MM-DD is a YAML date: the same text, so it is taken as written.
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _until(value: str) -> str:
    if value not in ("none", "notice") and not _DATE.match(value):
        raise ValueError(f"expected none, notice or YYYY-MM-DD, got {value!r}")
    if value not in ("none", "notice"):
        vocab.check_date(value)          # 2020-02-30 has the shape and is no date
    return value


class MetadataDecl(Declared):
    """Image metadata (SCS image metadata standard) set on every published image."""

    replace_frequency: Literal[REPLACE_FREQUENCIES] = "monthly"
    provided_until: Annotated[str, BeforeValidator(_provided_until), AfterValidator(_until),
                              Rule("none, notice or YYYY-MM-DD")] = "notice"


class RetentionDecl(Declared):
    """How many approved images of a group stay listed, stay bootable, and what happens to older ones."""

    visible: Annotated[vocab.PositiveInt, Field(description="listed images per group")] = 1
    keep: Annotated[vocab.PositiveInt, Rule(">= visible"), Field(description="bootable images per group")] = 3
    expire: Literal["deactivate", "delete"] = "deactivate"
    metadata: MetadataDecl = MetadataDecl()


KIND = register("retention", RetentionDecl, title="Image retention policy", path="manifests/image-retention.yaml",
                description="Applied by `image promote` to the older approved images of a group "
                            "(see the file's comments and docs/publishing.md).")


def _checks(document, decl: RetentionDecl):
    if decl.keep < decl.visible:
        yield document.problem(("keep",), f"must be >= visible ({decl.visible}), got {decl.keep}")


def load(path: Path | str = DEFAULT_PATH) -> RetentionPolicy:
    path = Path(path)
    if not path.exists() and path == DEFAULT_PATH:
        return RetentionPolicy()
    document = schema_load(path, format="yaml", limits=KIND.limits)
    if document.data is None:
        document.data = {}
    decl = validate(document, RetentionDecl, checks=_checks)
    return RetentionPolicy(visible=decl.visible, keep=decl.keep, expire=Expire(decl.expire),
                           replace_frequency=decl.metadata.replace_frequency,
                           provided_until=decl.metadata.provided_until)


def magnum_hold(image_id: str, users: dict[str, list[str]] | None) -> str | None:
    """Why retention must not deactivate or delete ``image_id``: the Magnum templates and
    clusters that use it (``users``: :func:`nodeforge.clients.container_infra.image_users`; None when the
    cloud has no Magnum), or None when nothing does."""
    used = (users or {}).get(image_id)
    if not used:
        return None
    shown = ", ".join(used[:5]) + (f" and {len(used) - 5} more" if len(used) > 5 else "")
    return f"used by Magnum: {shown}"
