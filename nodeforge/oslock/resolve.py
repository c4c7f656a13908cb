"""Resolve the image's package set with real apt, fed only verified indexes.

The set is what diskimage-builder installs, in its two steps:

1. debootstrap ``--variant=minbase``: every ``Priority: required`` package of
   the release plus ``apt`` (``resolve.priorities`` / ``resolve.base`` in the
   lock), without recommends;
2. what diskimage-builder's ``debian-minimal`` root step installs next
   (``resolve.recommends``: systemd-sysv, busybox, sudo, gnupg2, python3),
   with recommends (apt's default at that point);
3. ``install-packages`` of every element's ``package-installs.yaml``
   (``resolve.install``), without recommends (dib's ``dpkg`` element turns
   them off before), on top of steps 1 and 2.

apt runs in a throwaway root (``APT_CONFIG`` pointing at a file that moves
``Dir`` there, so the host's apt configuration and state are never read or
touched) whose sources are ``file:`` copies of the already verified
``InRelease`` and ``Packages`` files; apt checks the same signature again
with the same keyring (``signed-by``), and nothing it resolves can come from
anywhere else. Every version apt picks is then looked up in the verified
records (name, version, architecture) for its sha256, size and file name;
``--simulate`` installs nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from nodeforge.base import runner
from nodeforge.errors import NodeforgeError
from nodeforge.oslock.archive import Indexes, Record

_INST = re.compile(r"^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) .*\[([^\]]+)\]\)")


class ResolveError(NodeforgeError):
    message = "package resolution: {detail}"


class _AptRoot:
    def __init__(self, indexes: Indexes, root: Path):
        self.indexes, self.root = indexes, root
        for d in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
                  "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg", "repo"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.status = root / "var/lib/dpkg/status"
        self.status.write_text("")
        arch = indexes.config.arch
        sources = []
        for i, s in enumerate(indexes.suites):
            base = root / "repo" / str(i) / "dists" / s.suite.name
            base.mkdir(parents=True)
            (base / "InRelease").write_bytes(s.inrelease)
            for name, data in s.packages.items():
                target = base / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            sources.append(f"deb [arch={arch} signed-by={indexes.config.keyring}] file:{root / 'repo' / str(i)} "
                           f"{s.suite.name} {' '.join(s.suite.components)}")
        (root / "etc/apt/sources.list").write_text("\n".join(sources) + "\n")
        self.conf = root / "apt.conf"
        self.conf.write_text("\n".join([
            f'Dir "{root}/";',
            f'Dir::State::status "{self.status}";',
            f'APT::Architecture "{arch}";',
            f'APT::Architectures {{ "{arch}"; }};',
            'APT::Sandbox::User "root";',
            'APT::Install-Recommends "true";',
            'Acquire::Languages "none";',
            'Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";',
            'Debug::NoLocking "true";',
            'Dpkg::Options:: "--force-unsafe-io";', ""]))

    def run(self, *args: str, what: str) -> str:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "APT_CONFIG": str(self.conf), "LC_ALL": "C.UTF-8",
               "DEBIAN_FRONTEND": "noninteractive"}
        proc = runner.run(["apt-get", "-q", *args], merge=False, check=False, env=env)
        if proc.returncode != 0:
            errors = [line for line in (proc.stderr + proc.stdout).splitlines()
                      if line.startswith(("E:", "W:")) or "but it is not" in line or "Depends:" in line]
            raise ResolveError(detail=f"{what} failed (apt-get exit {proc.returncode}): "
                                      + ("; ".join(errors[-12:]) or proc.stderr.strip()[-800:]))
        return proc.stdout

    def simulate(self, names: list[str], *, recommends: bool, what: str) -> list[tuple[str, str, str]]:
        if not names:
            return []
        out = self.run("install", "--simulate", "-y", "--no-install-recommends" if not recommends
                       else "--install-recommends", *names, what=what)
        picked = []
        for line in out.splitlines():
            m = _INST.match(line)
            if m:
                picked.append((m.group(1).split(":", 1)[0], m.group(2), m.group(3)))
        return picked

    def mark_installed(self, records: Iterable[Record]) -> None:
        """Write a dpkg status listing ``records`` as installed (their full index stanzas)."""
        stanzas = {}
        for s in self.indexes.suites:
            for para, rec in zip(s.stanzas, s.records):
                stanzas.setdefault((rec.name, rec.arch, rec.version), para)
        drop = ("Filename", "Size", "MD5sum", "SHA256", "Description-md5")
        chunks = []
        for r in records:
            out, skipping = [], False
            for line in stanzas[(r.name, r.arch, r.version)].splitlines():
                if line and line[0].isspace():      # continuation of the field before
                    if not skipping:
                        out.append(line)
                    continue
                key = line.partition(":")[0].strip()
                skipping = key in drop or key == "Package"
                if not skipping:
                    out.append(line)
            chunks.append(f"Package: {r.name}\nStatus: install ok installed\n" + "\n".join(out) + "\n")
        self.status.write_text("\n".join(chunks))


def required_names(indexes: Indexes, release: str, priorities: Iterable[str]) -> list[str]:
    """Packages of ``release`` (the suite debootstrap installs from) with one of ``priorities``."""
    wanted = set(priorities)
    names = set()
    for s in indexes.suites:
        if s.suite.name == release:
            names |= {r.name for r in s.records if r.priority in wanted}
    return sorted(names)


def resolve(indexes: Indexes, *, release: str, priorities: Iterable[str], base: Iterable[str],
            recommends: Iterable[str] = (), install: Iterable[str] = (),
            workdir: Path | None = None) -> list[Record]:
    """The package set, as verified records (sorted by name, arch)."""
    if runner.which("apt-get") is None:
        raise ResolveError(detail="apt-get not found (the apt package)")
    tmp = Path(tempfile.mkdtemp(prefix="nf-oslock-apt.", dir=workdir))
    try:
        root = _AptRoot(indexes, tmp)
        root.run("update", what="apt-get update of the verified indexes")
        stage1_names = sorted(set(required_names(indexes, release, priorities)) | set(base))
        if list(priorities) and not required_names(indexes, release, priorities):
            raise ResolveError(detail=f"suite {release} has no package of priority {', '.join(priorities)}")
        picked = root.simulate(stage1_names, recommends=False, what="resolving the base system (minbase)")
        stage1 = [_verified(indexes, *p) for p in picked]
        root.mark_installed(stage1)
        stage2 = [_verified(indexes, *p) for p in
                  root.simulate(sorted(set(recommends)), recommends=True, what="resolving the base installs")]
        root.mark_installed(stage1 + stage2)
        stage3 = [_verified(indexes, *p) for p in
                  root.simulate(sorted(set(install)), recommends=False, what="resolving the element packages")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {r.key: r for r in stage1 + stage2 + stage3}
    return sorted(out.values(), key=lambda r: r.key)


def _verified(indexes: Indexes, name: str, version: str, arch: str) -> Record:
    rec = indexes.find(name, arch, version)
    if rec is None:
        raise ResolveError(detail=f"apt picked {name} {version} ({arch}), which no verified index lists")
    return rec
