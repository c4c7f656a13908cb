"""The image's ``.pyc`` files stay valid through the time clamp, as timestamp ``.pyc`` files.

Two things in a reproducible build (:mod:`.reproducible`) would leave a node's
Python compiling or hashing its sources at every boot:

* the clamp sets every file's modification time to ``min(mtime, epoch)``. A
  timestamp ``.pyc`` records its source's mtime and size, so each one whose
  source is newer than the epoch (the stdlib's, compiled by ``py3compile``
  when the package was installed) no longer matches after the clamp, and
  Python compiles the module again at every import until it may write the
  ``.pyc`` (at the node's first boot: 145 files, cloud-init's first stage
  10-13 s slower under TCG, measured 2026-12-02);
* with ``SOURCE_DATE_EPOCH`` set, ``py_compile`` writes *checked-hash*
  ``.pyc`` files (PEP 552), and every import then reads its whole source and
  hashes it before it may use the ``.pyc``.

:func:`restamp` runs in the image's own Python (``chroot``) just before the
clamp and rewrites the 16-byte header of each ``.pyc`` that matches its source
*now* to the timestamp header that source will have *after* the clamp (flags
0, the clamped mtime, the size). The code after the header is left as
compiled, and the ``.pyc``'s own times are kept (the clamp then sets them):

* a checked-hash ``.pyc`` is converted only when its recorded hash is the one
  Python computes for the source (``importlib.util.source_hash``), and a
  timestamp one is re-dated only when its mtime and size are the source's,
  so no stale ``.pyc`` is ever made to look fresh;
* the recorded time is the clamped one, the same in every build from the
  same inputs, so the image stays reproducible;
* a node's Python checks ``.pyc`` files as Debian's do (``stat``, no read),
  and an edited source still invalidates its ``.pyc``. Package upgrades are
  unchanged: dpkg's ``py3clean``/``py3compile`` replace a package's
  ``.pyc`` files.

``.pyc`` files of another Python version (another magic number), with no
source beside them, unchecked-hash ones, and ones that do not match their
source are left alone and counted.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from nodeforge.base import runner

# Runs under the image's python3 (stdlib only; -I -S -B: no site, no environment, writes no bytecode).
# argv: the epoch (seconds), then the directories to walk (inside the root it runs in).
SCRIPT = r'''
import importlib.util, json, os, sys
magic = importlib.util.MAGIC_NUMBER
epoch_ns = int(sys.argv[1]) * 1000000000
M = 0xFFFFFFFF
counts = {"converted": 0, "retimed": 0, "timestamp": 0, "unchecked_hash": 0, "other_python": 0,
          "no_source": 0, "stale": 0}
for top in sys.argv[2:]:
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
            flags = int.from_bytes(head[4:8], "little")
            if flags == 0b01:                                  # unchecked hash: never validated
                counts["unchecked_hash"] += 1
                continue
            src = os.path.join(os.path.dirname(d), name.split(".", 1)[0] + ".py")
            try:
                st = os.stat(src)
                if flags == 0b11:
                    with open(src, "rb") as fh:
                        source = fh.read()
            except OSError:
                counts["no_source"] += 1
                continue
            if flags == 0b11:
                if importlib.util.source_hash(source) != head[8:16]:
                    counts["stale"] += 1
                    continue
                kind = "converted"
            elif flags == 0:
                if (int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")) != (
                        int(st.st_mtime) & M, st.st_size & M):
                    counts["stale"] += 1
                    continue
                if st.st_mtime_ns <= epoch_ns:                 # valid now and after the clamp
                    counts["timestamp"] += 1
                    continue
                kind = "retimed"
            else:
                counts["stale"] += 1                           # flags Python does not know
                continue
            clamped = min(st.st_mtime_ns, epoch_ns) // 1000000000     # what reproducible.clamp_times sets
            own = os.lstat(pyc)
            with open(pyc, "r+b") as fh:
                fh.write(magic + (0).to_bytes(4, "little") + (clamped & M).to_bytes(4, "little")
                         + (st.st_size & M).to_bytes(4, "little"))
            os.utime(pyc, ns=(own.st_atime_ns, own.st_mtime_ns))
            counts[kind] += 1
print(json.dumps(counts))
'''

PYTHON = "/usr/bin/python3"
TOPS = ("/usr", "/opt", "/etc")


@dataclasses.dataclass(frozen=True)
class PycCounts:
    converted: int          # checked-hash, matching their source: now timestamp-based
    retimed: int            # timestamp, matching their source, whose source the clamp re-dates
    timestamp: int          # timestamp, matching their source before and after the clamp
    unchecked_hash: int
    other_python: int
    no_source: int
    stale: int              # not matching their source: left alone (Python recompiles them)

    def summary(self) -> str:
        return (f"{self.converted} checked-hash .pyc made timestamp-based, {self.retimed} timestamp .pyc "
                f"re-dated to their clamped sources; left: {self.timestamp} already valid, {self.stale} not "
                f"matching their source, {self.no_source} without a source, {self.unchecked_hash} unchecked-hash, "
                f"{self.other_python} of another Python")


def restamp(root: Path, epoch: int, *, chroot: bool = True, python: str = PYTHON,
            tops: tuple[str, ...] = TOPS) -> PycCounts | None:
    """Give each ``.pyc`` under ``root`` that matches its source the timestamp header that source has once
    :func:`.reproducible.clamp_times` ran with ``epoch`` (see the module); call it just before the clamp.

    ``chroot=False`` runs ``python`` on the host against ``root``'s directories
    (tests, with the host's Python). Returns None when the tree has no
    ``python``."""
    if chroot and not (root / python.lstrip("/")).exists():
        return None
    present = [t for t in tops if (root / t.lstrip("/")).is_dir()]
    interpreter = ["chroot", str(root), python] if chroot else [python]
    dirs = present if chroot else [str(root / t.lstrip("/")) for t in present]
    argv = [*interpreter, "-I", "-S", "-B", "-c", SCRIPT, str(int(epoch)), *dirs]
    out = runner.run(argv, timeout=1800, what="restamp the image's .pyc headers").stdout
    return PycCounts(**json.loads(out.strip().splitlines()[-1]))
