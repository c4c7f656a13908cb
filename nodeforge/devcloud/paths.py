"""Where the local cloud keeps its state (default ``.devcloud/`` in the
checkout, or ``$NODEFORGE_DEVCLOUD_DIR``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


def default_root() -> Path:
    env = os.environ.get("NODEFORGE_DEVCLOUD_DIR")
    if env:
        return Path(env).resolve()
    # The checkout root (…/nodeforge/devcloud/paths.py -> three levels up)
    # when running from a source tree, else the working directory.
    here = Path(__file__).resolve().parents[2]
    base = here if (here / "pyproject.toml").exists() else Path.cwd()
    return base / ".devcloud"


def port_offset() -> int:
    """Shift every port of the local cloud (``NODEFORGE_DEVCLOUD_PORT_OFFSET``),
    so a second cloud can run beside the first, e.g. in tests."""
    return int(os.environ.get("NODEFORGE_DEVCLOUD_PORT_OFFSET", "0") or 0)


@dataclasses.dataclass(frozen=True)
class Paths:
    root: Path

    @classmethod
    def default(cls) -> "Paths":
        return cls(default_root())

    @property
    def venvs(self) -> Path:
        return self.root / "venvs"

    def venv(self, name: str) -> Path:
        return self.venvs / name

    def venv_bin(self, venv: str, exe: str) -> Path:
        return self.venv(venv) / "bin" / exe

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def clouds_yaml(self) -> Path:
        return self.root / "clouds.yaml"

    def ensure(self) -> "Paths":
        for p in (self.root, self.etc, self.data, self.log, self.run):
            p.mkdir(parents=True, exist_ok=True)
        return self
