"""Timestamp ``.pyc`` files in the image (what a Debian system has), checked against their sources.

With ``SOURCE_DATE_EPOCH`` set (:mod:`.reproducible`), ``py_compile`` writes
*checked-hash* ``.pyc`` files (PEP 552): reproducible, but every import then
reads its whole source file and hashes it before it may use the ``.pyc``. In
a node that is all of cloud-init's four stages and every Python tool, on
every start. (Measured under TCG, the vm image's verification boot was not
measurably faster with this step: 84-94 s against 91-96 s without it.)

:func:`to_timestamp` rewrites the 16-byte header of each checked-hash
``.pyc`` in the tree as a timestamp header: flags 0, the source's modification
time and size. The code after the header is left as compiled. It runs in the
image's own Python (``chroot``), after the tree's times are clamped, so:

* a ``.pyc`` is converted only when its recorded hash is the one that Python
  computes for the source as it is now (``importlib.util.source_hash``), so
  no stale ``.pyc`` is ever made to look fresh;
* the recorded time is the clamped one, the same in every build from the
  same inputs, so the image stays reproducible;
* a node's Python checks ``.pyc`` files as Debian's do (``stat``, no read),
  and an edited source still invalidates its ``.pyc``. Package upgrades are
  unchanged: dpkg's ``py3clean``/``py3compile`` replace a package's
  ``.pyc`` files.

``.pyc`` files of another Python version (another magic number), with no
source beside them, or already timestamp-based are left alone and counted.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from nodeforge.base import runner

# Runs under the image's python3 (stdlib only; -I -S -B: no site, no environment, writes no bytecode).
# argv: the directories to walk (inside the root it runs in).
SCRIPT = r'''
import importlib.util, json, os, sys
magic = importlib.util.MAGIC_NUMBER
counts = {"converted": 0, "timestamp": 0, "other_python": 0, "no_source": 0, "stale": 0}
for top in sys.argv[1:]:
    for d, dirs, files in os.walk(top):
        dirs.sort()
        if os.path.basename(d) != "__pycache__":
            continue
        for name in sorted(files):
            if not name.endswith(".pyc"):
                continue
            pyc = os.path.join(d, name)
            with open(pyc, "rb") as fh:
                head = fh.read(16)
            if len(head) < 16 or head[:4] != magic:
                counts["other_python"] += 1
                continue
            if int.from_bytes(head[4:8], "little") != 0b11:     # not a checked-hash pyc
                counts["timestamp"] += 1
                continue
            src = os.path.join(os.path.dirname(d), name.split(".", 1)[0] + ".py")
            try:
                with open(src, "rb") as fh:
                    source = fh.read()
                st = os.stat(src)
            except OSError:
                counts["no_source"] += 1
                continue
            if importlib.util.source_hash(source) != head[8:16]:
                counts["stale"] += 1
                continue
            own = os.lstat(pyc)
            with open(pyc, "r+b") as fh:
                fh.write(magic + (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                         + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
            os.utime(pyc, ns=(own.st_atime_ns, own.st_mtime_ns))
            counts["converted"] += 1
print(json.dumps(counts))
'''

PYTHON = "/usr/bin/python3"
TOPS = ("/usr", "/opt", "/etc")


@dataclasses.dataclass(frozen=True)
class PycCounts:
    converted: int
    timestamp: int
    other_python: int
    no_source: int
    stale: int

    def summary(self) -> str:
        return (f"{self.converted} checked-hash .pyc made timestamp-based; left: {self.timestamp} already "
                f"timestamp, {self.stale} not matching their source, {self.no_source} without a source, "
                f"{self.other_python} of another Python")


def to_timestamp(root: Path, *, chroot: bool = True, python: str = PYTHON,
                 tops: tuple[str, ...] = TOPS) -> PycCounts | None:
    """Convert the checked-hash ``.pyc`` files under ``root`` (see the module).

    ``chroot=False`` runs ``python`` on the host against ``root``'s directories
    (tests, with the host's Python). Returns None when the tree has no
    ``python``."""
    if chroot:
        if not (root / python.lstrip("/")).exists():
            return None
        argv = ["chroot", str(root), python, "-I", "-S", "-B", "-c", SCRIPT,
                *(t for t in tops if (root / t.lstrip("/")).is_dir())]
    else:
        argv = [python, "-I", "-S", "-B", "-c", SCRIPT,
                *(str(root / t.lstrip("/")) for t in tops if (root / t.lstrip("/")).is_dir())]
    out = runner.run(argv, timeout=1800, what="rewrite the image's checked-hash .pyc headers").stdout
    return PycCounts(**json.loads(out.strip().splitlines()[-1]))
