"""One problem shape for every input file: :class:`Problem` and :class:`SchemaError`."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from nodeforge.errors import ConfigError

KeyPath = tuple  # of str (mapping keys) and int (list indexes)


def keypath_str(keypath: Iterable) -> str:
    """``("nodes", 3, "driver_info", "ipmi_port")`` -> ``nodes[3].driver_info.ipmi_port``;
    a key holding a dot or a space is bracketed (``kubernetes["1.36"]``); the empty
    path is ``(top level)``."""
    out = ""
    for part in keypath:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            part = str(part)
            if not part or any(c in part for c in '.[]" '):
                out += '["' + part.replace('"', '\\"') + '"]'
            else:
                out += f".{part}" if out else part
    return out or "(top level)"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong in one file: ``file:line: key.path: detail``."""

    file: str
    line: int | None
    keypath: KeyPath
    detail: str

    @property
    def key(self) -> str:
        return keypath_str(self.keypath)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.detail}"

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "key": self.key,
                "keypath": [p if isinstance(p, int) else str(p) for p in self.keypath], "detail": self.detail}


class SchemaError(ConfigError):
    """Every problem found in one file (exit 2). ``str()`` is one
    ``file:line: key.path: detail`` line per problem; :meth:`to_dict` (and
    ``details``, which the CLI adds to the ``--output json`` error document)
    lists them as objects."""

    message = "{text}"

    def __init__(self, file, problems: Sequence[Problem], *, hint: str | None = None):
        self.file = str(file)
        self.problems = list(problems) or [Problem(self.file, None, (), "invalid")]
        text = "\n".join(str(p) for p in self.problems)
        super().__init__(path=self.file, detail=text, text=text, hint=hint)
        self.details = {"file": self.file, "problems": [p.to_dict() for p in self.problems]}

    def to_dict(self) -> dict:
        return {"error": str(self), "hint": self.hint, **self.details}
