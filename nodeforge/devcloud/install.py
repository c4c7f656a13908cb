"""Install the local cloud's virtualenvs from the committed constraints files.

Each virtualenv is separate from nodeforge's own (OpenStack services pin
library versions nodeforge need not share). ``uv`` installs them in seconds;
a stamp (hash of the constraints file) makes a second run a no-op.

Bytecode is compiled at install time: machines here export
PYTHONDONTWRITEBYTECODE=1, and without .pyc files every service start
re-parses its whole dependency tree (keystone-manage: ~12 s instead of ~2 s).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
from importlib import resources
from pathlib import Path

from nodeforge.base import runner
from nodeforge.devcloud.paths import Paths
from nodeforge.errors import NodeforgeError

LOG = logging.getLogger(__name__)

# venv name -> constraints file in nodeforge/devcloud/constraints/
VENVS = {
    "openstack": "openstack.txt",
    "bmc": "bmc.txt",
    "magnum": "magnum.txt",
    "neutron": "neutron.txt",
}


class InstallError(NodeforgeError):
    message = "installing the '{venv}' virtualenv failed: {detail}"


def constraints_path(name: str) -> Path:
    return Path(str(resources.files("nodeforge.devcloud") / "constraints" / VENVS[name]))


def _uv() -> str:
    candidate = Path(sys.executable).with_name("uv")
    if candidate.exists():
        return str(candidate)
    found = runner.which("uv")
    if not found:
        raise InstallError(venv="-", detail="'uv' not found; run 'make setup' (it is a dev dependency)")
    return found


def requirements(constraints: Path) -> list[str]:
    """Every pinned line of a constraints file (it is a full freeze)."""
    reqs = []
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.append(line)
    return reqs


def install(paths: Paths, names=None, force: bool = False) -> list[dict]:
    paths.venvs.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names or VENVS:
        cfile = constraints_path(name)
        digest = hashlib.sha256(cfile.read_bytes()).hexdigest()[:16]
        venv = paths.venv(name)
        stamp = venv / ".nodeforge-stamp"
        if not force and stamp.exists() and stamp.read_text().strip() == digest:
            results.append({"venv": name, "action": "up-to-date", "path": str(venv)})
            continue
        uv = _uv()
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        if venv.exists():
            # Rebuild from scratch so nothing outside the constraints lingers.
            shutil.rmtree(venv)
        failed = functools.partial(InstallError, venv=name)
        if not (venv / "bin" / "python").exists():
            runner.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], env=env, error=failed)
        env["VIRTUAL_ENV"] = str(venv)
        runner.run([uv, "pip", "install", "-q", "--compile-bytecode", "-r", str(cfile)], env=env, error=failed)
        stamp.write_text(digest + "\n")
        results.append({"venv": name, "action": "installed", "path": str(venv)})
        LOG.info("installed virtualenv %s", venv)
    return results
