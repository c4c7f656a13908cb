"""The private local cloud a benchmark starts for itself (bench_enroll, bench_template_check).

State in a fresh temporary directory with the checkout's service virtualenvs
symlinked in, every port shifted by the bench's own offset (kept below the
kernel's ephemeral range and clear of the test clouds'), and the process's
client configuration pointed at it so nothing reads or changes another cloud.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path


@dataclasses.dataclass
class PrivateCloud:
    root: Path          # the cloud's state directory
    env: dict           # the environment for timed child processes (bytecode cached apart)
    pycache: Path

    def remove(self) -> None:
        shutil.rmtree(self.pycache, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


def prepare(prefix: str, offset: int) -> PrivateCloud:
    """Point this process at a new private cloud's state directory and ports (not started yet)."""
    from nodeforge.devcloud.paths import Paths

    root = Path(tempfile.mkdtemp(prefix=prefix))
    (root / "venvs").symlink_to(Paths.default().venvs.resolve())
    os.environ["NODEFORGE_DEVCLOUD_DIR"] = str(root)
    os.environ["NODEFORGE_DEVCLOUD_PORT_OFFSET"] = str(offset)
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(root / "clouds.yaml")
    os.environ.pop("OS_CLOUD", None)
    # Child processes compile their own bytecode once, apart from the checkout's (this machine
    # sets PYTHONDONTWRITEBYTECODE, which would make every timed start-up re-parse the imports).
    pycache = Path(tempfile.mkdtemp(prefix="nf-bench-pycache-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return PrivateCloud(root, env, pycache)
