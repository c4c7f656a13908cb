"""The approved-image retention policy, ``manifests/image-retention.yaml``.

See the file itself for the meaning of each key; :func:`load` validates the
whole file and names the key and line of each problem.

Retention never deactivates or deletes an image that Magnum uses: when the
cloud has a container-infra endpoint, promote reads every cluster template
and cluster once (:func:`nodeforge.magnum.live.image_users`) and an image
beyond ``keep`` that a template (or a cluster through its template) uses is
only hidden, with the users named (:func:`magnum_hold`). A cloud without
Magnum is said so in the log, and retention proceeds as before.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path

from nodeforge.errors import ConfigError
from nodeforge.imagebuild import yamlfile

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


def load(path: Path | str = DEFAULT_PATH) -> RetentionPolicy:
    path = Path(path)
    if not path.exists() and path == DEFAULT_PATH:
        return RetentionPolicy()
    doc = yamlfile.load(path) or {}
    problems = []

    def where(node, key) -> str:
        try:
            return f"line {node.lc.key(key)[0] + 1}: "
        except Exception:  # noqa: BLE001 - plain dicts have no line info
            return ""

    if not isinstance(doc, dict):
        raise ConfigError(path=str(path), detail="must be a mapping")
    unknown = set(doc) - {"visible", "keep", "expire", "metadata"}
    problems += [f"{where(doc, k)}unknown key '{k}'" for k in sorted(unknown)]
    visible, keep = doc.get("visible", 1), doc.get("keep", 3)
    for key, value in (("visible", visible), ("keep", keep)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{where(doc, key)}'{key}' must be an integer >= 1")
    if not problems and keep < visible:
        problems.append(f"{where(doc, 'keep')}'keep' ({keep}) must be >= 'visible' ({visible})")
    expire = str(doc.get("expire", "deactivate"))
    if expire not in {e.value for e in Expire}:
        problems.append(f"{where(doc, 'expire')}'expire' must be deactivate or delete, not '{expire}'")
    meta = doc.get("metadata") or {}
    freq = str(meta.get("replace_frequency", "monthly"))
    if freq not in REPLACE_FREQUENCIES:
        problems.append(f"{where(meta, 'replace_frequency')}'metadata.replace_frequency' must be one of "
                        f"{', '.join(REPLACE_FREQUENCIES)}")
    until = str(meta.get("provided_until", "notice"))
    if until not in ("none", "notice") and not _DATE.match(until):
        problems.append(f"{where(meta, 'provided_until')}'metadata.provided_until' must be none, notice or YYYY-MM-DD")
    if problems:
        raise ConfigError(path=str(path), detail="; ".join(problems))
    return RetentionPolicy(visible=visible, keep=keep, expire=Expire(expire), replace_frequency=freq,
                           provided_until=until)


def magnum_hold(image_id: str, users: dict[str, list[str]] | None) -> str | None:
    """Why retention must not deactivate or delete ``image_id``: the Magnum templates and
    clusters that use it (``users``: :func:`nodeforge.magnum.live.image_users`; None when the
    cloud has no Magnum), or None when nothing does."""
    used = (users or {}).get(image_id)
    if not used:
        return None
    shown = ", ".join(used[:5]) + (f" and {len(used) - 5} more" if len(used) > 5 else "")
    return f"used by Magnum: {shown}"
