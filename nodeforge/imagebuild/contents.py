"""The per-file manifest of a root filesystem (``files.jsonl``) and its comparison.

One JSON object per line, sorted by path, keys sorted, no spaces: every
entry of the tree (the root ``/`` included) with

* ``path`` (absolute, as in the booted system), ``type`` (``file``, ``dir``,
  ``symlink``, ``char``, ``block``, ``fifo``, ``socket``);
* ``mode`` (the permission bits with setuid/setgid/sticky, octal string),
  ``uid``/``gid`` (numeric: what the filesystem stores), ``mtime`` (seconds);
* files: ``size``, ``sha256``, and ``links`` when hard-linked (more than one
  name); symlinks: ``target``; devices: ``rdev`` (``major:minor``);
* ``xattrs`` when the entry has extended attributes (file capabilities,
  ACLs): ``{name: hex value}``.

It is computed in one pass over the finalised tree (:func:`scan`), each
regular file read once; the bytes are canonical (:func:`dumps`), so two trees
with the same content have the same file digest, which ``manifest.json``
records (``files``). :func:`diff` compares two of them: added, removed and
changed paths, with the fields that changed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

from nodeforge.base import fs
from nodeforge.errors import ConfigError

SCHEMA = "nodeforge-file-manifest/1"
FILENAME = "files.jsonl"
# A root filesystem's manifest is about 5 MB (25,000 files); a line is one file's entry.
MAX_BYTES = 64 << 20
MAX_LINE = 64 << 10
CHUNK = 1 << 20
_TYPES = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"), (stat.S_ISCHR, "char"),
          (stat.S_ISBLK, "block"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"))


class FileManifestError(ConfigError):
    """A per-file manifest that is not one (exit 2, ``file:line: detail``)."""


def _type(mode: int) -> str:
    for test, name in _TYPES:
        if test(mode):
            return name
    return "unknown"


def _sha256(path: str) -> str:
    """The file hasher of nodeforge (:func:`fs.digest_file`), in 1 MiB blocks (most files are small)."""
    return fs.digest_file(path, ("sha256",), chunk=CHUNK)["sha256"]


def _xattrs(path: str) -> dict[str, str]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    out = {}
    for name in sorted(names):
        try:
            out[name] = os.getxattr(path, name, follow_symlinks=False).hex()
        except OSError:
            continue
    return out


def _walk(root: str, exclude: frozenset[str]) -> Iterator[tuple[str, str, os.stat_result]]:
    """(absolute path in the image, path on disk, lstat) for every entry, depth first, without
    following symlinks or crossing into other filesystems."""
    top = os.lstat(root)
    yield "/", root, top
    stack = [("", root)]
    while stack:
        rel, disk = stack.pop()
        with os.scandir(disk) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            image_path = f"{rel}/{e.name}"
            if image_path in exclude:
                continue
            st = e.stat(follow_symlinks=False)
            yield image_path, e.path, st
            if stat.S_ISDIR(st.st_mode) and st.st_dev == top.st_dev:
                stack.append((image_path, e.path))


def scan(root: Path, *, exclude: Iterable[str] = (), workers: int = 2) -> list[dict]:
    """Every entry of the tree at ``root`` (see the module), sorted by path. ``exclude``: image paths
    (``/etc/x``) left out, with everything below them. Regular files are hashed on ``workers``
    threads (hashlib releases the GIL), each read once."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise FileManifestError(path=root, detail="not a directory")
    entries: list[dict] = []
    hashes: dict[int, concurrent.futures.Future] = {}
    seen_inodes: dict[tuple[int, int], int] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for image_path, disk_path, st in _walk(root, frozenset(exclude)):
            kind = _type(st.st_mode)
            entry = {"path": image_path, "type": kind, "mode": f"{stat.S_IMODE(st.st_mode):04o}",
                     "uid": st.st_uid, "gid": st.st_gid, "mtime": int(st.st_mtime)}
            if kind == "file":
                entry["size"] = st.st_size
                if st.st_nlink > 1:
                    entry["links"] = st.st_nlink
                key = (st.st_dev, st.st_ino)
                if key in seen_inodes:          # a hard link: the content was hashed once
                    hashes[len(entries)] = hashes[seen_inodes[key]]
                else:
                    seen_inodes[key] = len(entries)
                    hashes[len(entries)] = pool.submit(_sha256, disk_path)
            elif kind == "symlink":
                entry["target"] = os.readlink(disk_path)
            elif kind in ("char", "block"):
                entry["rdev"] = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            xattrs = _xattrs(disk_path)
            if xattrs:
                entry["xattrs"] = xattrs
            entries.append(entry)
        for index, fut in hashes.items():
            entries[index]["sha256"] = fut.result()
    entries.sort(key=lambda e: e["path"])
    return entries


def dumps(entries: Iterable[dict]) -> str:
    """The canonical text: one compact JSON object per line, keys sorted, sorted by path."""
    return "".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n"
                   for e in sorted(entries, key=lambda e: e["path"]))


def write(path: Path, entries: list[dict]) -> dict:
    """Write ``entries`` to ``path``; returns what ``manifest.json`` records of it."""
    text = dumps(entries).encode("utf-8", "surrogateescape")
    Path(path).write_bytes(text)
    return summary(Path(path).name, text, entries)


def summary(name: str, text: bytes, entries: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for e in entries:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    return {"path": name, "schema": SCHEMA, "sha256": hashlib.sha256(text).hexdigest(), "entries": len(entries),
            "types": dict(sorted(counts.items())), "bytes": sum(e.get("size", 0) for e in entries)}


def loads(text: str, origin: str = FILENAME) -> list[dict]:
    """Entries from a per-file manifest's text; a line that is not an entry is named."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise FileManifestError(path=f"{origin}:{number}", detail=f"a line longer than {MAX_LINE} characters: "
                                                                      "not a file entry")
        try:
            entry = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            raise FileManifestError(path=f"{origin}:{number}",
                                    detail=f"not JSON ({getattr(exc, 'msg', exc)})") from None
        except RecursionError:
            raise FileManifestError(path=f"{origin}:{number}", detail="not a file entry (nested too deep)") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or \
                not isinstance(entry.get("type"), str):
            raise FileManifestError(path=f"{origin}:{number}", detail="not a file entry (needs 'path' and 'type')")
        out.append(entry)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_bytes(path: Path) -> bytes:
    """A per-file manifest's bytes: a regular file of at most :data:`MAX_BYTES` (the one bounded reader)."""
    from nodeforge.schema import loader

    return loader.read_bytes(path, loader.Limits(max_bytes=MAX_BYTES))


def load(path: Path) -> list[dict]:
    path = Path(path)
    return loads(read_bytes(path).decode("utf-8", "surrogateescape"), str(path))


@dataclasses.dataclass
class FilesDiff:
    added: list[str]
    removed: list[str]
    changed: list[dict]            # {"path", "fields": {field: [old, new]}}

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_dict(self, limit: int | None = None) -> dict:
        def cut(items):
            return items if limit is None else items[:limit]
        return {"identical": self.identical,
                "counts": {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed)},
                "added": cut(self.added), "removed": cut(self.removed), "changed": cut(self.changed)}


def diff(a: Iterable[dict], b: Iterable[dict]) -> FilesDiff:
    """What changed from ``a`` to ``b`` (entries as :func:`scan` or :func:`load` give them)."""
    old = {e["path"]: e for e in a}
    new = {e["path"]: e for e in b}
    changed = []
    for path in sorted(old.keys() & new.keys()):
        x, y = old[path], new[path]
        if x != y:
            fields = {k: [x.get(k), y.get(k)] for k in sorted(x.keys() | y.keys()) if x.get(k) != y.get(k)}
            changed.append({"path": path, "fields": fields})
    return FilesDiff(added=sorted(new.keys() - old.keys()), removed=sorted(old.keys() - new.keys()),
                     changed=changed)
