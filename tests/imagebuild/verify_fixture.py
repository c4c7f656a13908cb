"""Boot-verification results for synthetic build directories, made the way
``nodeforge image verify`` makes them, minus the boot: the checks come from
``verifychecks.evaluate`` on a synthetic report of a healthy guest (and image
facts), the result is a ``boottest.VariantResult`` for the image's real
digests, and ``verify.json`` is written by ``boottest.write_report``. So a
"passed" synthetic build carries exactly what the product writes and the
strict reader (``verifyreport``) requires; nothing here writes JSON by hand.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path

import yaml

from nodeforge.imageverify import builddir
from nodeforge.imageverify import attest, boottest, verifychecks as vc, verifyreport

REPO = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((REPO / "elements/k8s-hardening/profile.yaml").read_text())
GIB = 1 << 30
COMPANIONS = {"containerd": "2.3.4", "runc": "1.4.3"}


def _versions(k8s: str) -> dict[str, str]:
    return {"kubelet": k8s, "kubeadm": k8s, "kubectl": k8s, "crictl": k8s, **COMPANIONS}


def _outputs(v: dict[str, str]) -> dict[str, str]:
    return {"kubelet": f"Kubernetes v{v['kubelet']}", "kubeadm": f"v{v['kubeadm']}",
            "kubectl": f"Client Version: v{v['kubectl']}\nKustomize Version: v5.7.1",
            "crictl": f"crictl version v{v['crictl']}",
            "containerd": f"containerd github.com/containerd/containerd/v2 v{v['containerd']} 0123abc",
            "runc": f"runc version {v['runc']}\ncommit: v{v['runc']}-0-g0\nspec: 1.2.1"}


def _sha(component: str) -> str:
    return hashlib.sha256(component.encode()).hexdigest()


def expectations(build: builddir.BuildDir, variant: str, controls=None) -> vc.Expectations:
    manifest = json.loads(build.manifest_path.read_text())
    return vc.Expectations(
        variant=variant,
        artifacts={c: {"version": v, "sha256": _sha(c), "note": None} for c, v in _versions(build.k8s_version).items()},
        controls=copy.deepcopy(PROFILE["controls"] if controls is None else controls),
        hardening=manifest.get("hardening") or {}, controls_source="test",
        manifest_sha256=build.manifest_sha256, disk_bytes=4 * GIB, image_root_partition_bytes=GIB + GIB // 2)


def healthy_guest(exp: vc.Expectations, k8s: str) -> dict:
    """Answer every probe the way a correct image does."""
    return guest_for(exp, outputs=_outputs(_versions(k8s)), artifact_sha=_sha)


def guest_for(exp: vc.Expectations, *, outputs: dict[str, str], artifact_sha) -> dict:
    """What a correct image's collector reports for ``exp``'s probes: each
    command prints ``outputs[command]``, each artifact has ``artifact_sha(component)``."""
    p = vc.probes(exp, probe_id="t")
    units = {u: {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "UnitFileState": "enabled"}
             for u in p["units"]}
    sysctls, sshd, stat, globs = {}, {}, {}, {g: [] for g in p["globs"]}
    for control in exp.controls:
        for c in control["checks"]:
            if c["kind"] == "service" and c["state"] == "masked":
                units[c["unit"]] = {"LoadState": "masked", "ActiveState": "inactive", "UnitFileState": "masked"}
            elif c["kind"] == "sysctl":
                sysctls[c["key"]] = c["value"]
            elif c["kind"] == "sshd":
                sshd[c["key"]] = c["value"]
            elif c["kind"] == "file_mode":
                stat[c["path"]] = {"mode": c["mode"], "owner": c["owner"], "group": c["group"]}
    globs["/etc/ssh/ssh_host_*_key"] = ["/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key"]
    files = {path: {"sha256": exp.manifest_sha256, "size": 100} for path in p["files"]}
    for a in vc.ARTIFACTS:
        files[a.path] = {"sha256": artifact_sha(a.component), "size": 10}
    return {
        "format": 1, "system_state": "running", "kernel": "6.1.0-test", "cmdline": "console=ttyS0",
        "commands": {c: {"rc": 0, "output": out} for c, out in outputs.items()},
        "files": files, "units": units, "sysctls": sysctls, "modules": {m: True for m in p["modules"]},
        "sshd": {"rc": 0, "values": sshd, "output": ""}, "stat": stat, "globs": globs, "swaps": [],
        "machine_id": "0123456789abcdef0123456789abcdef\n", "failed_units": "", "cloud_init": "status: done",
        "rootfs": {"disk_bytes": 4 * GIB, "partition_start_bytes": 130 << 20,
                   "partition_bytes": 4 * GIB - (130 << 20) - (1 << 20), "fs_bytes": int(3.7 * GIB),
                   "source": "/dev/vda3 ext4", "device": "vda3", "disk": "vda", "lsblk": "vda ..."},
    }


def healthy_image(exp: vc.Expectations) -> dict:
    globs, files = vc.image_paths(exp.controls)
    return {"globs": {g: [] for g in globs}, "files": {f: {"size": 0} for f in files},
            "hardening": {**exp.hardening, "controls": copy.deepcopy(exp.controls)},
            "root_partition_bytes": exp.image_root_partition_bytes}


def variant_result(build: builddir.BuildDir, variant: str, *, passed: bool = True, error: str | None = None,
                   image_sha256: str | None = None, image_sha512: str | None = None) -> boottest.VariantResult:
    """What ``image verify`` returns for ``variant`` of ``build``: every check passes, or with
    ``passed=False`` exactly NF-HARD-003 fails (net.ipv4.ip_forward is 0 in the guest). The
    digests are the image's unless given (a report for other bytes)."""
    image = build.variant(variant)
    exp = expectations(build, variant)
    guest = healthy_guest(exp, build.k8s_version)
    if not passed:
        guest["sysctls"]["net.ipv4.ip_forward"] = "0"
    if error:
        guest = {"error": error}
    checks = vc.evaluate(exp, guest, healthy_image(exp))
    return boottest.VariantResult(
        variant, all(c["passed"] for c in checks) and error is None, checks, image.path.name,
        image_sha256 or image.sha256, "tcg", "uefi" if variant == "baremetal" else "bios",
        f"verify-{variant}-console.log", {"offline": 1.5, "boot_to_verdict": 42.0, "total": 44.0}, error,
        image_sha512=image_sha512 or image.sha512)


def write_verify(build_dir: Path, verify: str, variants=None) -> dict:
    """``verify.json`` for ``build_dir`` through the product's writer: ``verify`` is passed or
    failed for every variant (or those in ``variants``)."""
    build = builddir.load(build_dir)
    names = variants or sorted(build.variants)
    return boottest.write_report(build_dir, build, [variant_result(build, v, passed=verify == "passed")
                                                   for v in names])


def signed_envelope(data: bytes, key=None) -> bytes:
    """``data`` as a verify report attested by ``key`` (default: the session's verifier key), the
    way a verifier holding the key would sign it, whatever it holds: the statement nodeforge
    makes when ``data`` is a report it can parse, else one that merely carries the bytes (a
    careless or hostile key holder). For tests of what readers do with a *signed* bad report."""
    from nodeforge.base import dsse

    try:
        stmt = attest.statement(data, verifyreport.parse(data))
    except verifyreport.VerifyReportError:
        stmt = {"_type": attest.STATEMENT_TYPE, "subject": [], "predicateType": attest.PREDICATE_TYPE,
                "predicate": {"configuration": [{"name": verifyreport.SOURCE,
                                                 "content": base64.b64encode(data).decode()}]}}
    payload = dsse.payload_bytes(stmt)
    key = attest.load_key() if key is None else key
    return dsse.dumps(dsse.envelope(payload, [dsse.sign(key, payload)]))


def write_signed(build_dir: Path, data: bytes, key=None) -> None:
    """``verify.json`` = ``data`` and its attestation by ``key`` (see :func:`signed_envelope`)."""
    (Path(build_dir) / builddir.VERIFY).write_bytes(data)
    (Path(build_dir) / attest.ENVELOPE).write_bytes(signed_envelope(data, key))
