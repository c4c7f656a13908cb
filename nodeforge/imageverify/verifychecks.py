"""The checks of ``nodeforge image verify``: what to probe, and pass/fail.

Pure functions, no QEMU: :func:`probes` turns the expectations into the list
the guest collector (:mod:`.verify_guest`) answers, and :func:`evaluate` turns
its answers plus the offline facts read from the image file into checks.

Every check has an ``id``, a ``title``, ``passed``, ``expected`` and
``observed`` (``{item: value}``, same keys), ``items`` (one per thing compared,
each with its own verdict) and ``evidence`` (raw lines: command output, the
paths that matched, sizes). Check ids:

===========================  =====================================================
``artifact-<component>``     kubelet, kubeadm, kubectl, crictl, containerd, runc:
                             the version it prints == the pin, its file's sha256 ==
                             the pinned sha256 (for an archive, the sha256 of the
                             member inside the pinned archive, which the build
                             records in the manifest: :func:`recorded_sha256`)
``containerd-active``        ``containerd.service`` active
``kubelet-enabled``          ``kubelet.service`` enabled
``NF-HARD-NNN``              each control of the hardening profile, with every
                             check it lists (kinds in ``k8s-hardening/profile.yaml``)
``hardening-profile``        the profile inside the image is the build's profile,
                             with the expected controls
``rootfs-grown``             the root partition and filesystem grew to the disk
``manifest``                 ``/etc/nodeforge/manifest.json`` == the build
                             directory's ``manifest.json`` (sha256)
``boot``                     booted to multi-user (running or degraded) and reported
===========================  =====================================================
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from pathlib import Path
from typing import Any

from nodeforge.errors import NodeforgeError
from nodeforge.imagebuild.manifest import INSTALLED_FILES
from nodeforge.schema import loader

REPO = Path(__file__).resolve().parents[2]
# The repository's hardening profile (the one the image build renders, when it is the build's).
PROFILE = REPO / "elements" / "k8s-hardening" / "profile.yaml"
MANIFEST_IN_IMAGE = "/etc/nodeforge/manifest.json"
HARDENING_IN_IMAGE = "/etc/nodeforge/hardening.json"


@dataclasses.dataclass(frozen=True)
class ArtifactProbe:
    component: str
    path: str                   # installed file
    version_argv: tuple[str, ...]
    member: str | None = None   # the file inside the pinned archive (None: the artifact is the file)


def _artifact_probe(component: str, *version_args: str) -> ArtifactProbe:
    """The probe of ``component``'s installed file: where the image installs it and which file of
    the pinned artifact it is come from the build's table (the build records their digests)."""
    f = next(f for f in INSTALLED_FILES if f.component == component)
    return ArtifactProbe(component, f.path, (f.path, *version_args), member=f.member)


ARTIFACTS = (
    _artifact_probe("kubelet", "--version"),
    _artifact_probe("kubeadm", "version", "-o", "short"),
    _artifact_probe("kubectl", "version", "--client"),
    _artifact_probe("crictl", "--version"),
    _artifact_probe("containerd", "--version"),
    _artifact_probe("runc", "--version"),
)

# The manifest field where a build records each installed file's digest (nodeforge/imagebuild/manifest.py).
INSTALLED_FIELD = "installed_artifacts"


def recorded_sha256(manifest: dict, probe: ArtifactProbe) -> tuple[str | None, str]:
    """(sha256, where it comes from) of ``probe``'s installed file as the build recorded it in
    ``manifest`` (``installed_artifacts``, checked against the pin when the image was built), or
    (None, why not): a manifest written before builds recorded them, or one that records no such
    file, or another path or archive member than the check reads."""
    recorded = manifest.get(INSTALLED_FIELD)
    if not isinstance(recorded, dict):
        return None, (f"manifest.json has no {INSTALLED_FIELD}: built before builds recorded the installed "
                      "files' digests")
    rec = recorded.get(probe.component)
    if not isinstance(rec, dict) or not rec.get("sha256"):
        return None, f"manifest.json {INSTALLED_FIELD} records no {probe.component}"
    if (rec.get("path"), rec.get("member")) != (probe.path, probe.member):
        return None, (f"manifest.json {INSTALLED_FIELD} records {probe.component} as {rec.get('path')}"
                      + (f" (member {rec['member']})" if rec.get("member") else "")
                      + f"; the check reads {probe.path}" + (f" (member {probe.member})" if probe.member else ""))
    return rec["sha256"], f"recorded by the build in manifest.json ({INSTALLED_FIELD})"


SERVICE_CHECKS = (("containerd-active", "containerd.service", "active"),
                  ("kubelet-enabled", "kubelet.service", "enabled"))
# Runtime items added to hardening controls whose titles promise them.
EXTRA_BOOT_ITEMS = {
    "NF-HARD-010": [{"kind": "present", "path": "/etc/ssh/ssh_host_*_key", "scope": "boot",
                     "what": "SSH host keys generated at first boot"}],
    "NF-HARD-011": [{"kind": "machine_id", "scope": "boot", "what": "machine-id generated at first boot"}],
}
_VERSION = re.compile(r"\bv?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.\-+]+)?)")
_MACHINE_ID = re.compile(r"^[0-9a-f]{32}$")
GROW_SLACK = 4 << 20          # the grown partition may end this close to the disk end (GPT backup, alignment)
FS_FILL = 0.90                # statvfs size / partition size after resize2fs (ext4 metadata overhead)


@dataclasses.dataclass
class Expectations:
    """Everything the checks compare against; built by :mod:`.boottest` from the build directory."""

    variant: str
    artifacts: dict[str, dict]          # component -> {version, sha256 (of the installed file or None), note}
    controls: list[dict]                # hardening controls (profile.yaml shape)
    hardening: dict                     # {profile, version} from the manifest
    controls_source: str                # where ``controls`` came from (evidence)
    manifest_sha256: str
    disk_bytes: int                     # virtual size of the overlay the guest boots from
    image_root_partition_bytes: int     # root partition size in the image file


def _item(what: str, expected: Any, observed: Any, passed: bool) -> dict:
    return {"what": what, "expected": expected, "observed": observed, "passed": bool(passed)}


def _check(check_id: str, title: str, items: list[dict], evidence: list[str] | None = None) -> dict:
    return {
        "id": check_id, "title": title, "passed": bool(items) and all(i["passed"] for i in items),
        "expected": {i["what"]: i["expected"] for i in items},
        "observed": {i["what"]: i["observed"] for i in items},
        "items": items, "evidence": [e for e in (evidence or []) if e],
    }


# --- probes ------------------------------------------------------------------------

def probes(exp: Expectations, *, probe_id: str, wait_seconds: int = 240) -> dict:
    """What the guest collects for these expectations (the ``probes.json`` it receives)."""
    p: dict[str, Any] = {"id": probe_id, "wait_seconds": wait_seconds, "wait_units": ["containerd.service"],
                         "commands": {}, "files": [MANIFEST_IN_IMAGE], "units": [], "sysctls": [], "modules": [],
                         "sshd": [], "stat": [], "globs": []}

    def add(key, value):
        if value not in p[key]:
            p[key].append(value)

    for a in ARTIFACTS:
        p["commands"][a.component] = list(a.version_argv)
        add("files", a.path)
    for _, unit, _ in SERVICE_CHECKS:
        add("units", unit)
    for control in exp.controls:
        for c in list(control.get("checks", [])) + EXTRA_BOOT_ITEMS.get(control.get("id"), []):
            kind, scope = c.get("kind"), _scope(c)
            if kind == "service":
                add("units", c["unit"])
            elif kind == "sysctl":
                add("sysctls", c["key"])
            elif kind == "module":
                add("modules", c["name"])
            elif kind == "sshd":
                add("sshd", str(c["key"]).lower())
            elif kind == "file_mode":
                add("stat", c["path"])
            elif kind in ("absent", "present") and scope in ("boot", "both"):
                add("globs", c["path"])
    return p


def _scope(c: dict) -> str:
    """image: the file system of the image file; boot: the running system; both."""
    if c.get("scope"):
        return str(c["scope"])
    return {"absent": "both", "empty_file": "image"}.get(c.get("kind"), "boot")


def image_paths(controls: list[dict]) -> tuple[list[str], list[str]]:
    """(globs, files) to read from the image file offline for the image-scope checks."""
    globs, files = [], []
    for control in controls:
        for c in control.get("checks", []):
            if _scope(c) in ("image", "both"):
                if c.get("kind") == "absent" and c["path"] not in globs:
                    globs.append(c["path"])
                elif c.get("kind") == "empty_file" and c["path"] not in files:
                    files.append(c["path"])
    return globs, files


# --- evaluation ----------------------------------------------------------------------

def parse_version(output: str) -> str | None:
    m = _VERSION.search(output or "")
    return m.group(1) if m else None


def evaluate(exp: Expectations, guest: dict, image: dict) -> list[dict]:
    """Checks from the guest report and the offline image facts
    (``image``: ``{"globs": {pattern: [paths]}, "files": {path: {"size": n} | None},
    "hardening": parsed hardening.json | None, "hardening_error": str}``)."""
    checks = [_boot(guest)]
    checks += [_artifact(a, exp.artifacts.get(a.component), guest) for a in ARTIFACTS]
    for check_id, unit, state in SERVICE_CHECKS:
        observed = _unit_state(guest, unit, state)
        item = _item(f"{unit} {state}", True, observed, observed is True)
        checks.append(_check(check_id, f"{unit} {state}", [item],
                             [f"{unit}: {json.dumps(guest.get('units', {}).get(unit), sort_keys=True)}"]))
    checks.append(_hardening_profile(exp, image))
    for control in exp.controls:
        checks.append(_control(control, guest, image))
    checks.append(_rootfs(exp, guest))
    checks.append(_manifest(exp, guest))
    return checks


def check_ids(control_ids: list[str]) -> list[str]:
    """The ids :func:`evaluate` returns, in its order, for the controls with ``control_ids``."""
    return ["boot", *(f"artifact-{a.component}" for a in ARTIFACTS), *(check_id for check_id, _, _ in SERVICE_CHECKS),
            "hardening-profile", *control_ids, "rootfs-grown", "manifest"]


def _boot(guest: dict) -> dict:
    state = guest.get("system_state")
    items = [_item("report from the booted system", "received", "received" if not guest.get("error") else
                   f"collector error: {guest['error']}", not guest.get("error")),
             _item("systemd state", "running or degraded", state, state in ("running", "degraded"))]
    evidence = [f"kernel {guest.get('kernel')}", f"cmdline {guest.get('cmdline')}",
                f"uptime at report {guest.get('uptime_seconds')} s"]
    failed = (guest.get("failed_units") or "").strip()
    if failed:
        evidence.append("failed units: " + "; ".join(" ".join(line.split()[:1]) for line in failed.splitlines()))
    ci = (guest.get("cloud_init") or "").strip()
    if ci:
        evidence.append("cloud-init: " + " | ".join(line.strip() for line in ci.splitlines() if line.strip())[:300])
    return _check("boot", "booted to multi-user and reported over the serial port", items, evidence)


def _artifact(a: ArtifactProbe, want: dict | None, guest: dict) -> dict:
    title = f"{a.component}: pinned version and sha256"
    if want is None:
        return _check(f"artifact-{a.component}", title,
                      [_item("pin", "in the build manifest", "missing", False)])
    cmd = guest.get("commands", {}).get(a.component) or {}
    out = cmd.get("output", "")
    version = parse_version(out) if cmd.get("rc") == 0 else None
    f = guest.get("files", {}).get(a.path) or {}
    observed_sha = f.get("sha256") or f"unreadable: {f.get('error', 'not reported')}"
    expected_sha = want.get("sha256")
    items = [_item("version", want["version"], version if version else f"rc={cmd.get('rc')}: {out.strip()[:120]}",
                   version == str(want["version"]).lstrip("v")),
             _item("sha256", expected_sha or f"unknown ({want.get('note')})", observed_sha,
                   bool(expected_sha) and observed_sha == expected_sha)]
    evidence = [f"$ {' '.join(a.version_argv)}  # rc={cmd.get('rc')}", (out.strip().splitlines() or [""])[0][:200],
                f"sha256 {a.path}", want.get("note")]
    return _check(f"artifact-{a.component}", title, items, evidence)


def _unit_state(guest: dict, unit: str, state: str):
    """True if ``unit`` is in ``state``, else what it is."""
    u = guest.get("units", {}).get(unit)
    if not isinstance(u, dict) or not u:
        return "not reported"
    load, active, file_state = u.get("LoadState"), u.get("ActiveState"), u.get("UnitFileState")
    if state == "active":
        ok = active == "active"
    elif state == "enabled":
        ok = file_state in ("enabled", "enabled-runtime", "alias")
    elif state == "masked":
        ok = load == "masked" or file_state in ("masked", "masked-runtime")
    elif state == "inactive-or-absent":
        ok = load == "not-found" or active != "active"
    else:
        return f"unknown state '{state}'"
    return True if ok else f"load={load} active={active} file={file_state}"


def _control(control: dict, guest: dict, image: dict) -> dict:
    items, evidence = [], []
    for c in list(control.get("checks", [])) + EXTRA_BOOT_ITEMS.get(control.get("id"), []):
        kind, scope = c.get("kind"), _scope(c)
        if kind == "no_swap":
            swaps = guest.get("swaps")
            items.append(_item("no active swap", [], swaps, swaps == []))
        elif kind == "module":
            loaded = guest.get("modules", {}).get(c["name"])
            items.append(_item(f"module {c['name']}", "loaded", "loaded" if loaded else "not loaded", loaded is True))
        elif kind == "sysctl":
            v = guest.get("sysctls", {}).get(c["key"])
            v = " ".join(v.split()) if isinstance(v, str) else (v or {}).get("error", "not reported")
            items.append(_item(f"sysctl {c['key']}", str(c["value"]), v, v == str(c["value"])))
        elif kind == "sshd":
            sshd = guest.get("sshd") or {}
            key = str(c["key"]).lower()
            v = (sshd.get("values") or {}).get(key)
            if v is None:
                v = f"not printed by sshd -T (rc={sshd.get('rc')})"
                if sshd.get("output"):
                    evidence.append("sshd -T: " + sshd["output"].strip()[-200:])
            items.append(_item(f"sshd {key}", str(c["value"]), v, str(v).lower() == str(c["value"]).lower()))
        elif kind == "service":
            observed = _unit_state(guest, c["unit"], c["state"])
            items.append(_item(f"{c['unit']} {c['state']}", True, observed, observed is True))
        elif kind == "file_mode":
            st = guest.get("stat", {}).get(c["path"]) or {"error": "not reported"}
            want = {"mode": str(c["mode"]), "owner": c["owner"], "group": c["group"]}
            got = {k: st.get(k) for k in want} if "error" not in st else st["error"]
            items.append(_item(f"mode {c['path']}", f"{want['mode']} {want['owner']}:{want['group']}",
                               f"{got['mode']} {got['owner']}:{got['group']}" if isinstance(got, dict) else got,
                               got == want))
        elif kind == "absent":
            if scope in ("image", "both"):
                found = image.get("globs", {}).get(c["path"])
                items.append(_item(f"absent in image: {c['path']}", [], found if found is not None else "not read",
                                   found == []))
                if found:
                    evidence.append(f"in the image: {', '.join(found[:5])}")
            if scope in ("boot", "both"):
                found = guest.get("globs", {}).get(c["path"])
                items.append(_item(f"absent at boot: {c['path']}", [], found if found is not None else "not reported",
                                   found == []))
        elif kind == "present":
            found = guest.get("globs", {}).get(c["path"])
            items.append(_item(c.get("what") or f"present at boot: {c['path']}", f"matches {c['path']}",
                               found if found is not None else "not reported", bool(found)))
        elif kind == "empty_file":
            meta = image.get("files", {}).get(c["path"])
            observed = "missing" if meta is None else f"{meta['size']} bytes"
            items.append(_item(f"empty in image: {c['path']}", "0 bytes", observed,
                               meta is not None and meta.get("size") == 0))
        elif kind == "machine_id":
            mid = guest.get("machine_id")
            mid = mid.strip() if isinstance(mid, str) else f"unreadable: {mid}"
            items.append(_item(c["what"], "32 hex digits", mid, bool(_MACHINE_ID.match(mid))))
        else:
            items.append(_item(f"{kind}", "a known check kind", f"unknown kind '{kind}'", False))
    return _check(control["id"], control.get("title", ""), items, evidence)


def _hardening_profile(exp: Expectations, image: dict) -> dict:
    doc = image.get("hardening")
    if not isinstance(doc, dict):
        return _check("hardening-profile", "the image carries the build's hardening profile",
                      [_item(HARDENING_IN_IMAGE, "readable JSON", image.get("hardening_error") or "missing", False)])
    want_ids = [c["id"] for c in exp.controls]
    got_ids = [c.get("id") for c in doc.get("controls", []) if isinstance(c, dict)]
    items = [_item("profile", exp.hardening.get("profile"), doc.get("profile"),
                   doc.get("profile") == exp.hardening.get("profile")),
             _item("version", str(exp.hardening.get("version")), str(doc.get("version")),
                   str(doc.get("version")) == str(exp.hardening.get("version"))),
             _item("controls", want_ids, got_ids, got_ids == want_ids),
             _item("checks", "as in the profile", "same" if doc.get("controls") == exp.controls else "differ",
                   doc.get("controls") == exp.controls)]
    return _check("hardening-profile", "the image carries the build's hardening profile", items,
                  [f"controls from {exp.controls_source}"])


def _rootfs(exp: Expectations, guest: dict) -> dict:
    r = guest.get("rootfs") or {}
    disk, part, start, fs = (r.get("disk_bytes"), r.get("partition_bytes"), r.get("partition_start_bytes"),
                             r.get("fs_bytes"))
    tail = disk - (start + part) if None not in (disk, part, start) else None
    items = [
        _item("disk bytes", exp.disk_bytes, disk, disk == exp.disk_bytes),
        _item("root partition bytes", f"> {exp.image_root_partition_bytes} (in the image)", part,
              part is not None and part > exp.image_root_partition_bytes),
        _item("bytes after the root partition", f"<= {GROW_SLACK}", tail, tail is not None and 0 <= tail <= GROW_SLACK),
        _item("filesystem bytes", f">= {FS_FILL:.0%} of the partition", fs,
              None not in (fs, part) and fs >= FS_FILL * part),
    ]
    evidence = [f"root {r.get('source')} on {r.get('device')} (disk {r.get('disk')})"]
    evidence += [line for line in (r.get("lsblk") or "").splitlines()]
    return _check("rootfs-grown", "root filesystem grew to the disk", items, evidence)


def _manifest(exp: Expectations, guest: dict) -> dict:
    f = guest.get("files", {}).get(MANIFEST_IN_IMAGE) or {}
    got = f.get("sha256") or f"unreadable: {f.get('error', 'not reported')}"
    return _check("manifest", "the manifest inside the image is the build directory's",
                  [_item(f"sha256 {MANIFEST_IN_IMAGE}", exp.manifest_sha256, got, got == exp.manifest_sha256)])


# --- offline helpers ------------------------------------------------------------------

def glob_in_listing(pattern: str, listing: list[str] | None) -> list[str] | None:
    """Paths matching ``pattern`` (glob in the last component only) given the
    names in its directory (None: the directory does not exist -> no match)."""
    directory, _, name = pattern.rpartition("/")
    if listing is None:
        return []
    return sorted(f"{directory}/{n}" for n in listing if fnmatch.fnmatchcase(n, name) and n not in (".", ".."))


def summary(checks: list[dict]) -> dict:
    failed = [c["id"] for c in checks if not c["passed"]]
    return {"checks": len(checks), "passed": len(checks) - len(failed), "failed": failed}


def repository_controls(manifest: dict, profile_path: Path = PROFILE) -> tuple[list, str] | None:
    """(controls, where from) of the repository's profile when it is the build's profile and
    version (``manifest.json`` ``hardening``), else None."""
    want = manifest.get("hardening") or {}
    try:
        repo = loader.load(profile_path).data
    except (OSError, ValueError, NodeforgeError):
        repo = None
    if isinstance(repo, dict) and (repo.get("profile"), str(repo.get("version"))) == \
            (want.get("profile"), str(want.get("version"))):
        shown = profile_path.relative_to(REPO) if profile_path.is_relative_to(REPO) else profile_path
        return repo["controls"], str(shown)
    return None
