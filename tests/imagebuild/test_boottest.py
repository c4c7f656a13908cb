"""nodeforge image verify: check evaluation, report framing, seeds, refusal; real boots (slow).

Fast tests need no QEMU. The slow ones read the test run's one build, booted
once per variant by the release pipeline's verify stage
(``tests/release_fixture.py``; the images are only ever opened read-only as
overlay backing files), judge that boot's own guest report again with one
value changed to show that exactly that check fails (no second full boot),
and time out a short boot of a copy.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from nodeforge import cli
from nodeforge.imageverify import builddir, imagefiles
from nodeforge.imageverify import boottest, verify_guest, verifychecks as vc
from nodeforge.pins.cache import Cache
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.verify_fixture import guest_for
from tests.prereq import require_tools

REPO = Path(__file__).resolve().parents[2]
PROFILE = yaml.safe_load((REPO / "elements/k8s-hardening/profile.yaml").read_text())
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
SHA = {c: hashlib.sha256(c.encode()).hexdigest() for c in ("kubelet", "kubeadm", "kubectl", "crictl",
                                                           "containerd", "runc", "manifest")}
VERSIONS = {"kubelet": "1.36.0", "kubeadm": "1.36.0", "kubectl": "1.36.0", "crictl": "1.36.0",
            "containerd": "2.3.4", "runc": "1.4.3"}
OUTPUTS = {"kubelet": "Kubernetes v1.36.0", "kubeadm": "v1.36.0", "kubectl": "Client Version: v1.36.0\n"
           "Kustomize Version: v5.7.1", "crictl": "crictl version v1.36.0",
           "containerd": "containerd github.com/containerd/containerd/v2 v2.3.4 0123abc",
           "runc": "runc version 1.4.3\ncommit: v1.4.3-0-g0\nspec: 1.2.1"}
GIB = 1 << 30


# --- a healthy system, as the collector would report it -----------------------------------

def expectations(controls=None) -> vc.Expectations:
    return vc.Expectations(
        variant="vm", artifacts={c: {"version": v, "sha256": SHA[c], "note": None} for c, v in VERSIONS.items()},
        controls=copy.deepcopy(controls or PROFILE["controls"]),
        hardening={"profile": PROFILE["profile"], "version": PROFILE["version"]}, controls_source="test",
        manifest_sha256=SHA["manifest"], disk_bytes=4 * GIB, image_root_partition_bytes=GIB + GIB // 2)


def healthy_guest(exp: vc.Expectations) -> dict:
    """Answer every probe the way a correct image does."""
    return guest_for(exp, outputs={c: OUTPUTS[c] for c in VERSIONS}, artifact_sha=SHA.__getitem__)


def healthy_image(exp: vc.Expectations) -> dict:
    globs, files = vc.image_paths(exp.controls)
    return {"globs": {g: [] for g in globs}, "files": {f: {"size": 0} for f in files},
            "hardening": {"profile": PROFILE["profile"], "version": PROFILE["version"],
                          "controls": copy.deepcopy(exp.controls)},
            "root_partition_bytes": exp.image_root_partition_bytes}


def failed_ids(checks) -> list[str]:
    return [c["id"] for c in checks if not c["passed"]]


# --- check evaluation ------------------------------------------------------------------

def test_healthy_system_passes_every_check_and_covers_every_control():
    exp = expectations()
    checks = vc.evaluate(exp, healthy_guest(exp), healthy_image(exp))
    assert failed_ids(checks) == []
    ids = [c["id"] for c in checks]
    assert [c["id"] for c in PROFILE["controls"]] == [i for i in ids if i.startswith("NF-HARD-")]
    assert {f"artifact-{c}" for c in VERSIONS} | {"containerd-active", "kubelet-enabled", "rootfs-grown",
                                                  "manifest", "hardening-profile", "boot"} <= set(ids)
    for c in checks:
        assert set(c) >= {"id", "title", "passed", "expected", "observed", "items", "evidence"}
        assert c["items"] and set(c["expected"]) == set(c["observed"])


def test_check_ids_are_the_ids_evaluate_returns():
    exp = expectations()
    checks = vc.evaluate(exp, healthy_guest(exp), healthy_image(exp))
    assert vc.check_ids([c["id"] for c in exp.controls]) == [c["id"] for c in checks]
    assert vc.check_ids([]) == [c["id"] for c in checks if not c["id"].startswith("NF-HARD-")]


@pytest.mark.parametrize("breakage, failing", [
    (lambda g, i: g["sysctls"].update({"net.ipv4.ip_forward": "0"}), "NF-HARD-003"),
    (lambda g, i: g["files"]["/usr/local/bin/kubelet"].update(sha256="0" * 64), "artifact-kubelet"),
    (lambda g, i: g["commands"]["containerd"].update(output="containerd github.com/x/v2 v2.3.5"),
     "artifact-containerd"),
    (lambda g, i: g["sshd"]["values"].update(permitrootlogin="yes"), "NF-HARD-006"),
    (lambda g, i: g["units"]["auditd.service"].update(ActiveState="failed"), "NF-HARD-007"),
    (lambda g, i: g["units"]["containerd.service"].update(ActiveState="failed"), "containerd-active"),
    (lambda g, i: g["units"]["kubelet.service"].update(UnitFileState="disabled"), "kubelet-enabled"),
    (lambda g, i: g.update(swaps=["/swapfile file 1048572 0 -2"]), "NF-HARD-001"),
    (lambda g, i: g["modules"].update(br_netfilter=False), "NF-HARD-002"),
    (lambda g, i: g["stat"]["/etc/shadow"].update(mode="0644"), "NF-HARD-009"),
    (lambda g, i: i["globs"].update({"/etc/ssh/ssh_host_*_key": ["/etc/ssh/ssh_host_rsa_key"]}), "NF-HARD-010"),
    (lambda g, i: g.update(machine_id="uninitialized\n"), "NF-HARD-011"),
    (lambda g, i: i["files"].update({"/etc/machine-id": {"size": 33}}), "NF-HARD-011"),
    (lambda g, i: i["globs"].update({"/var/lib/cloud/instance*": ["/var/lib/cloud/instance"]}), "NF-HARD-012"),
    (lambda g, i: i["globs"].update({"/var/log/*.log": ["/var/log/dpkg.log"]}), "NF-HARD-013"),
    (lambda g, i: g["globs"].update({"/usr/lib/modules/*/kernel/sound/**/*.ko*":
                                     ["/usr/lib/modules/6.1.0-1-amd64/kernel/sound/core/snd.ko"]}), "NF-HARD-014"),
    (lambda g, i: g["rootfs"].update(partition_bytes=GIB + GIB // 2, fs_bytes=GIB), "rootfs-grown"),
    (lambda g, i: g["files"][vc.MANIFEST_IN_IMAGE].update(sha256="1" * 64), "manifest"),
    (lambda g, i: i["hardening"]["controls"].pop(), "hardening-profile"),
    (lambda g, i: g.update(system_state="starting"), "boot"),
])
def test_one_breakage_fails_exactly_its_check(breakage, failing):
    exp = expectations()
    guest, image = healthy_guest(exp), healthy_image(exp)
    breakage(guest, image)
    assert failed_ids(vc.evaluate(exp, guest, image)) == [failing]


def test_unknown_archive_member_digest_fails_with_the_reason():
    exp = expectations()
    exp.artifacts["crictl"] = {"version": "1.36.0", "sha256": None, "note": "pinned archive not in the cache"}
    checks = {c["id"]: c for c in vc.evaluate(exp, healthy_guest(exp), healthy_image(exp))}
    assert not checks["artifact-crictl"]["passed"]
    assert "not in the cache" in checks["artifact-crictl"]["expected"]["sha256"]


def test_collector_error_fails_everything_it_did_not_report():
    exp = expectations()
    checks = vc.evaluate(exp, {"error": "no report within 600 s"}, healthy_image(exp))
    failed = failed_ids(checks)
    assert "boot" in failed and "manifest" in failed and "artifact-kubelet" in failed
    assert "hardening-profile" not in failed   # offline facts still hold


@pytest.mark.parametrize("out, want", [("Kubernetes v1.36.0", "1.36.0"), ("v1.36.0-rc.1", "1.36.0-rc.1"),
                                       ("containerd github.com/containerd/containerd/v2 v2.3.4 abc", "2.3.4"),
                                       ("runc version 1.4.3\ncommit: x", "1.4.3"), ("garbage", None)])
def test_parse_version(out, want):
    assert vc.parse_version(out) == want


def test_probes_cover_the_profile():
    exp = expectations()
    p = vc.probes(exp, probe_id="x")
    assert "net.ipv4.ip_forward" in p["sysctls"] and "br_netfilter" in p["modules"]
    assert "permitrootlogin" in p["sshd"] and "/etc/shadow" in p["stat"]
    assert "swap.target" in p["units"] and "kubelet.service" in p["units"]
    assert "/var/log/*.log" not in p["globs"]        # image scope only: never probed at boot
    assert "/etc/ssh/ssh_host_*_key" in p["globs"]    # keys generated at first boot
    globs, files = vc.image_paths(exp.controls)
    assert "/var/log/*.log" in globs and files == ["/etc/machine-id"]


def test_glob_in_listing():
    assert vc.glob_in_listing("/etc/ssh/ssh_host_*_key", ["ssh_host_rsa_key", "ssh_host_rsa_key.pub", "moduli"]) \
        == ["/etc/ssh/ssh_host_rsa_key"]
    assert vc.glob_in_listing("/var/lib/cloud/instance*", None) == []


# --- report framing (guest) and parsing (host) -----------------------------------------------

def test_report_round_trip_through_noise():
    report = {"format": 1, "system_state": "running", "x": "é" * 500}
    framed = verify_guest.frame(report)
    text = "login: \x1b[0m[  12.3] kernel noise\r\n" + framed + "\r\nlogin: "
    assert boottest.parse_report(text) == report
    assert boottest.parse_report(text[: len(text) // 2]) is None          # still arriving


def test_damaged_report_is_an_error():
    framed = verify_guest.frame({"a": 1, "b": "x" * 300})
    lines = framed.split("\r\n")
    lines[3] = lines[3][:-4] + "AAAA"
    with pytest.raises(boottest.ReportError, match="sha256"):
        boottest.parse_report("\r\n".join(lines))


def test_guest_collector_helpers_on_this_host(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    assert verify_guest.sha256(str(f)) == {"sha256": hashlib.sha256(b"abc").hexdigest(), "size": 3}
    assert "error" in verify_guest.sha256(str(tmp_path / "missing"))
    assert verify_guest.stat(str(f))["mode"] == "%04o" % (f.stat().st_mode & 0o7777)
    assert verify_guest.sysctl("kernel.ostype") == "Linux"
    r = verify_guest.rootfs()
    assert r["fs_bytes"] > 0


# --- seed -----------------------------------------------------------------------------------

def _iso_volume_id(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(16 * 2048)
        pvd = fh.read(2048)
    assert pvd[1:6] == b"CD001"
    return pvd[40:72].decode().strip()


def test_unit_states_come_from_one_systemctl_call_and_fall_back_one_by_one(monkeypatch):
    calls = []

    def show(argv, **kw):
        calls.append(argv)
        names = argv[argv.index("--") + 1:]
        blocks = {"a.service": "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled",
                  "b.service": "LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState="}
        if "short" in names and len(names) > 1:                 # a systemctl that answers fewer blocks
            return {"rc": 0, "output": blocks["a.service"] + "\n"}
        return {"rc": 0, "output": "\n\n".join(blocks.get(n, "LoadState=loaded") for n in names) + "\n"}

    monkeypatch.setattr(verify_guest, "run", show)
    got = verify_guest.units(["a.service", "b.service"])
    assert got == {"a.service": {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
                                 "UnitFileState": "enabled"},
                   "b.service": {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                                 "UnitFileState": ""}}
    assert len(calls) == 1 and calls[0][:2] == ["systemctl", "show"]
    calls.clear()
    assert verify_guest.units(["a.service", "short"])["short"] == {"LoadState": "loaded"}
    assert len(calls) == 3                                       # the batch, then one call per unit
    assert verify_guest.units([]) == {}


def test_user_data_writes_the_collector_and_probes():
    probes = {"id": "abc", "sysctls": ["net.ipv4.ip_forward"]}
    ud = boottest.user_data(probes)
    assert ud.startswith("#cloud-config\n")
    doc = yaml.safe_load(ud)
    files = {f["path"]: base64.b64decode(f["content"]) for f in doc["write_files"]}
    assert files["/run/nodeforge-verify/collect.py"] == boottest.GUEST_SCRIPT.read_bytes()
    assert json.loads(files["/run/nodeforge-verify/probes.json"]) == probes
    assert all(f["path"].startswith("/run/") for f in doc["write_files"])      # nothing persistent
    assert doc["ssh_deletekeys"] is False and doc["ssh_genkeytypes"] == []   # the image's own keys are kept
    # Started early (bootcmd, before write_files), outside the boot transaction, once the files are there.
    assert "runcmd" not in doc
    run = doc["bootcmd"][0]
    assert run[:2] == ["systemd-run", "--no-block"] and "--property=DefaultDependencies=no" in run
    assert run[-1].startswith("until [ -s /run/nodeforge-verify/ready ]") and "collect.py" in run[-1]
    assert [f["path"] for f in doc["write_files"]][-1] == "/run/nodeforge-verify/ready"   # written last


@pytest.mark.parametrize("variant, label, paths", [
    ("vm", "cidata", {"meta-data", "user-data"}),
    ("baremetal", "config-2", {"openstack/latest/meta_data.json", "openstack/latest/user_data"}),
])
def test_seed_iso(tmp_path, variant, label, paths):
    require_tools("genisoimage")
    got_label, files = boottest.seed_files(variant, {"id": "i-1"}, "i-1")
    assert got_label == label and set(files) == paths
    if variant == "baremetal":
        assert json.loads(files["openstack/latest/meta_data.json"])["uuid"] == "i-1"
    else:
        assert b"instance-id: i-1" in files["meta-data"]
    iso = boottest.make_seed(tmp_path / "seed.iso", label, files)
    assert _iso_volume_id(iso) == label
    assert iso.stat().st_size < 2 << 20


def test_qemu_argv_boots_the_overlay_never_the_image(tmp_path):
    common = dict(overlay=tmp_path / "o.qcow2", seed=tmp_path / "s.iso", console=tmp_path / "c.log",
                  report=tmp_path / "r", accel="tcg")
    vm = boottest.qemu_argv(variant="vm", **common)
    bm = boottest.qemu_argv(variant="baremetal", firmware=(Path("/code.fd"), tmp_path / "vars.fd"), **common)
    for argv in (vm, bm):
        assert f"file={tmp_path / 'o.qcow2'},format=qcow2,if=virtio,cache=unsafe" in argv
        assert f"file:{tmp_path / 'c.log'}" in argv and f"file:{tmp_path / 'r'}" in argv
        assert "q35,accel=tcg" in argv and "-no-reboot" in argv
    assert not any("pflash" in a for a in vm)
    assert "if=pflash,format=raw,unit=0,readonly=on,file=/code.fd" in bm
    assert f"if=pflash,format=raw,unit=1,file={tmp_path / 'vars.fd'}" in bm


# --- boot supervision without QEMU ---------------------------------------------------------

def test_hung_boot_ends_at_the_timeout_with_the_console_tail(tmp_path):
    console, report = tmp_path / "console.log", tmp_path / "report"
    argv = ["sh", "-c", f"printf 'GRUB loading\\r\\n\\033[0mBegin: Mounting root file system ...\\r\\n' > {console};"
                        "sleep 60"]
    t = time.monotonic()
    with pytest.raises(boottest.BootError) as err:
        boottest.boot(argv, console=console, report=report, timeout=2, variant="vm")
    assert time.monotonic() - t < 15
    msg = str(err.value)
    assert "no report within 2 s" in msg and "Begin: Mounting root file system ..." in msg
    assert "\x1b" not in msg


def test_report_ends_the_boot(tmp_path):
    console, report = tmp_path / "console.log", tmp_path / "report"
    framed = verify_guest.frame({"format": 1, "ok": True})
    script = tmp_path / "fake-qemu"
    script.write_text(f"#!/bin/sh\nsleep 1\ncat > {report} <<'EOF'\n{framed}\nEOF\nsleep 60\n")
    script.chmod(0o755)
    got, seconds = boottest.boot([str(script)], console=console, report=report, timeout=30, variant="vm")
    assert got == {"format": 1, "ok": True} and seconds < 15


def test_qemu_exiting_early_is_an_error(tmp_path):
    with pytest.raises(boottest.BootError, match="exited with 3 before the guest reported"):
        boottest.boot(["sh", "-c", "echo bad option >&2; exit 3"], console=tmp_path / "c", report=tmp_path / "r",
                      timeout=30, variant="baremetal")


# --- build directory: refusal and the verify.json the publisher reads -----------------------------

def test_checksum_mismatch_is_refused_before_booting(tmp_path, monkeypatch, capsys):
    d = make_build_dir(tmp_path, verify=None)
    image = next(d.glob("*.raw"))
    with open(image, "r+b") as fh:
        fh.seek(100)
        fh.write(b"tampered")
    booted = []
    monkeypatch.setattr(boottest, "boot", lambda *a, **k: booted.append(a))
    monkeypatch.setattr(boottest.accel_mod, "decide", lambda *a, **k: booted.append("accel") or pytest.fail("decided"))
    code = cli.main(["image", "verify", str(d), "--accel", "tcg"])
    err = capsys.readouterr().err
    assert code != 0 and booted == []
    assert image.name in err and "refusing to boot" in err
    assert not (d / "verify.json").exists()


def _result(variant: str, passed: bool, build: builddir.BuildDir, **kw) -> boottest.VariantResult:
    """What ``image verify`` returns for a variant: real checks (NF-HARD-003 fails unless ``passed``)."""
    from tests.imagebuild.verify_fixture import variant_result

    return variant_result(build, variant, passed=passed, **kw)


def test_verify_json_is_what_the_publisher_reads(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    b = builddir.load(d)
    assert b.variant("vm").verify is builddir.VerifyStatus.ABSENT
    boottest.write_report(d, b, [_result("vm", True, b)])
    b = builddir.load(d)
    assert b.variant("vm").verify is builddir.VerifyStatus.PASSED
    assert b.variant("baremetal").verify is builddir.VerifyStatus.ABSENT   # not verified yet
    assert "variants.baremetal missing" in b.variant("baremetal").verify_reason
    boottest.write_report(d, b, [_result("baremetal", False, b)])
    b = builddir.load(d)
    assert (b.variant("vm").verify, b.variant("baremetal").verify) == ("passed", "failed")
    assert "variants.baremetal did not pass: checks NF-HARD-003 failed" in b.variant("baremetal").verify_reason
    doc = json.loads((d / "verify.json").read_text())
    assert doc["schema"] == boottest.VERIFY_SCHEMA == "nodeforge-image-verify/2"
    assert (doc["build_id"], doc["manifest_sha256"]) == (b.build_id, b.manifest_sha256)
    vm = doc["variants"]["vm"]
    assert (vm["build_id"], vm["manifest_sha256"]) == (b.build_id, b.manifest_sha256)
    assert (vm["image_sha256"], vm["image_sha512"]) == (b.variant("vm").sha256, b.variant("vm").sha512)
    assert doc["variants"]["baremetal"]["summary"]["failed"] == ["NF-HARD-003"]
    assert boottest.read_report(d) == doc


def test_verify_json_for_other_image_bytes_does_not_count(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    b = builddir.load(d)
    boottest.write_report(d, b, [_result("vm", True, b, image_sha256="0" * 64)])
    vm = builddir.load(d).variant("vm")
    assert vm.verify is builddir.VerifyStatus.FAILED
    assert "verify.json: variants.vm.image_sha256 is for other image bytes" in vm.verify_reason


def test_write_report_replaces_an_old_schema_report_and_keeps_only_this_builds_sections(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    b = builddir.load(d)
    (d / "verify.json").write_text(json.dumps({"schema": "nodeforge-image-verify/1", "build_id": b.build_id,
                                               "manifest_sha256": b.manifest_sha256,
                                               "variants": {"baremetal": {"passed": True}}}))
    doc = boottest.write_report(d, b, [_result("vm", True, b)])
    assert set(doc["variants"]) == {"vm"} and doc["schema"] == "nodeforge-image-verify/2"
    other = make_build_dir(tmp_path, verify="passed")   # a valid report, of another build
    (d / "verify.json").write_bytes((other / "verify.json").read_bytes())
    assert set(boottest.write_report(d, b, [_result("vm", True, b)])["variants"]) == {"vm"}
    boottest.write_report(d, b, [_result("baremetal", True, b)])
    assert {v: i.verify.value for v, i in builddir.load(d).variants.items()} == {"vm": "passed",
                                                                                "baremetal": "passed"}


def test_write_report_refuses_to_write_what_the_readers_would_refuse(tmp_path):
    d = make_build_dir(tmp_path, verify=None)
    b = builddir.load(d)
    r = _result("vm", True, b)
    r.passed = True
    r.checks[3]["passed"] = False        # a verdict that its checks do not support
    with pytest.raises(boottest.verifyreport.VerifyReportError, match=r"checks\[3\]\.passed is false but its items"):
        boottest.write_report(d, b, [r])
    assert not (d / "verify.json").exists()


def test_cli_prints_the_report_and_exits_non_zero_on_a_failed_check(tmp_path, monkeypatch, capsys):
    d = make_build_dir(tmp_path, verify=None)
    seen = {}

    def fake_verify(req):
        seen["req"] = req
        b = builddir.load(req.build_dir)
        results = [_result("vm", True, b), _result("baremetal", False, b)]
        results = [r for r in results if r.variant in (req.variants or ("vm", "baremetal"))]
        boottest.write_report(req.build_dir, b, results)
        return results

    monkeypatch.setattr(boottest, "verify", fake_verify)
    code = cli.main(["image", "verify", str(d), "--accel", "tcg", "--timeout", "300", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 1 and "baremetal: NF-HARD-003" in err
    doc = json.loads(out)     # one document: the report, with the error beside its keys
    assert doc["variants"]["vm"]["passed"] is True and doc["variants"]["baremetal"]["passed"] is False
    assert doc["exit_code"] == 1 and "baremetal: NF-HARD-003" in doc["error"]
    assert seen["req"].timeout == 300 and seen["req"].accel == "tcg" and seen["req"].parallel    # the default
    assert cli.main(["image", "verify", str(d), "--sequential"]) == 1 and not seen["req"].parallel
    capsys.readouterr()
    code = cli.main(["image", "verify", str(d), "--variant", "vm", "--parallel"])
    out, _ = capsys.readouterr()
    assert code == 0 and "NF-HARD-003" in out and "baremetal" not in out   # table of the verified variant
    assert seen["req"].variants == ("vm",) and seen["req"].parallel


# --- --dry-run: the plan (boottest.plan), nothing booted or written -------------------------------

def _tree(root: Path) -> dict:
    """Every path under ``root`` with its size and mtime."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def no_boot(monkeypatch, tmp_path):
    """Host tools and OVMF as stand-ins (never run), and any boot or KVM probe a test failure;
    records the boots attempted."""
    booted = []
    code, vars_ = tmp_path / "ovmf" / "OVMF_CODE_4M.fd", tmp_path / "ovmf" / "OVMF_VARS_4M.fd"
    monkeypatch.setattr(boottest, "require_tools", lambda: {t: f"/nonexistent/bin/{t}" for t in boottest.TOOLS})
    monkeypatch.setattr(boottest, "ovmf", lambda: (code, vars_))
    monkeypatch.setattr(boottest, "boot", lambda *a, **k: booted.append(a) or pytest.fail("booted"))
    monkeypatch.setattr(boottest.accel_mod, "probe", lambda *a, **k: booted.append("kvm probe") or pytest.fail("probed"))
    monkeypatch.delenv(boottest.ENV_ACCEL, raising=False)
    return booted


def test_verify_dry_run_prints_the_plan_and_writes_nothing(tmp_path, no_boot, capsys):
    crictl = hashlib.sha256(b"crictl archive").hexdigest()
    d = make_build_dir(tmp_path / "builds", verify=None, artifacts=[
        {"component": "kubelet", "version": "1.36.0", "arch": "amd64", "sha256": SHA["kubelet"]},
        {"component": "crictl", "version": "1.36.0", "arch": "amd64", "sha256": crictl},
        {"component": "containerd", "version": "2.3.4", "arch": "amd64", "sha256": SHA["containerd"]}],
        hardening={"profile": PROFILE["profile"], "version": PROFILE["version"]})
    cache, work = Cache(tmp_path / "cache"), tmp_path / "work"
    work.mkdir()
    # A damaged cache entry for the crictl archive: verify's lookup would re-hash and evict it.
    cache.path_for(crictl).parent.mkdir(parents=True)
    cache.path_for(crictl).write_bytes(b"not the crictl archive")
    before = {r: _tree(r) for r in (d, cache.root, work)}
    args = ["image", "verify", str(d), "--dry-run", "--cache-dir", str(cache.root), "--work-dir", str(work)]

    assert cli.main([*args, "-o", "json", "--accel", "tcg", "--timeout", "300"]) == 0
    doc = json.loads(capsys.readouterr().out)
    vm, bm = (builddir.load(d).variant(v) for v in ("vm", "baremetal"))
    assert doc["dry_run"] is True and doc["build_dir"] == str(d) and doc["report"] == str(d / "verify.json")
    assert [(v["variant"], v["image"], v["firmware"], v["seed"]) for v in doc["variants"]] == [
        ("vm", str(vm.path), "bios", "cidata"), ("baremetal", str(bm.path), "uefi", "config-2")]
    assert doc["variants"][1]["console_log"] == str(d / "verify-baremetal-console.log")
    assert (doc["accel"], doc["timeout"], doc["work_dir"]) == ("tcg", 300, str(work))
    assert doc["parallel"] is ((os.cpu_count() or 1) >= 2)      # side by side where there are two CPUs
    assert doc["firmware"] == {"code": str(tmp_path / "ovmf" / "OVMF_CODE_4M.fd"),
                               "vars": str(tmp_path / "ovmf" / "OVMF_VARS_4M.fd")}
    assert doc["checks"] == vc.check_ids([c["id"] for c in PROFILE["controls"]])
    assert doc["controls"] == [c["id"] for c in PROFILE["controls"]]
    assert doc["controls_source"] == "elements/k8s-hardening/profile.yaml"
    # A manifest without installed_artifacts (an older build): the members' digests come from the cache.
    older = "manifest.json has no installed_artifacts: built before builds recorded the installed files' digests"
    assert doc["archives"] == {
        "crictl": {"sha256": crictl, "member": "crictl", "source": "cache", "in_cache": True, "note": older},
        "containerd": {"sha256": SHA["containerd"], "member": "bin/containerd", "source": "cache", "in_cache": False,
                       "note": older}}

    assert cli.main([*args, "--variant", "baremetal", "--accel", "kvm"]) == 0
    out = capsys.readouterr().out
    assert "plan (dry run)" in out and bm.path.name in out and vm.path.name not in out
    assert "uefi" in out and "config-2" in out and "kvm" in out and "NF-HARD-013" in out
    assert "containerd: bin/containerd in the pinned archive" in out
    assert "not in the cache: artifact-containerd would fail" in out
    assert f"would write: {d / 'verify.json'}, verify-baremetal-console.log, verify-baremetal-guest.json" in out

    assert cli.main([*args, "--variant", "vm", "-o", "yaml", "--parallel"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["dry_run"] is True and [v["variant"] for v in doc["variants"]] == ["vm"] and not doc["parallel"]
    assert doc["firmware"] is None and doc["accel"] in ("tcg", "auto") and doc["accel_note"]

    # A build of another profile version: its controls are read from each image when verify runs.
    other = boottest.plan(boottest.VerifyRequest(build_dir=make_build_dir(tmp_path / "builds", verify=None),
                                                 accel="tcg", cache_dir=cache.root))
    assert other.controls is None
    assert other.checks == vc.check_ids(["(each control of /etc/nodeforge/hardening.json)"])
    assert other.controls_source.startswith("/etc/nodeforge/hardening.json in each image")

    assert {r: _tree(r) for r in (d, cache.root, work)} == before and no_boot == []


def test_verify_dry_run_fails_like_the_real_command_before_booting(tmp_path, no_boot, capsys):
    def both(*args: str) -> tuple[int, str]:
        results = []
        for extra in ((), ("--dry-run",)):
            code = cli.main(["image", "verify", *args, "--accel", "tcg", *extra])
            results.append((code, capsys.readouterr().err))
        assert results[0] == results[1]
        return results[1]

    d = make_build_dir(tmp_path, verify=None)
    image = next(d.glob("*.raw"))
    with open(image, "r+b") as fh:
        fh.seek(100)
        fh.write(b"tampered")
    before = _tree(d)
    code, err = both(str(d))
    assert code == 1 and f"{d}: {image.name} do(es) not match SHA256SUMS/SHA512SUMS; refusing to boot" in err
    vm_only = make_build_dir(tmp_path, variants=("vm",), verify=None)
    code, err = both(str(vm_only), "--variant", "baremetal")
    assert code == 2 and f"{vm_only}: no 'baremetal' image in this build (has: vm)" in err
    assert _tree(d) == before and not (vm_only / "verify.json").exists() and no_boot == []


def test_member_digest_from_the_pinned_archive(tmp_path):
    from tests.demo.fixture_artifacts import artifact_bytes
    from nodeforge.pins.lockfile import Arch, Component

    data = artifact_bytes(Component.CONTAINERD, "2.3.4", Arch.AMD64)
    sha = hashlib.sha256(data).hexdigest()
    cache = Cache(tmp_path / "cache")
    cache.path_for(sha).parent.mkdir(parents=True)
    cache.path_for(sha).write_bytes(data)
    manifest = {"artifacts": [{"component": "containerd", "version": "2.3.4", "sha256": sha},
                              {"component": "kubelet", "version": "1.36.0", "sha256": "ab" * 32},
                              {"component": "crictl", "version": "1.36.0", "sha256": "cd" * 32}]}
    exp = boottest.artifact_expectations(manifest, cache)
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("bin/containerd").read()
    assert exp["containerd"]["sha256"] == hashlib.sha256(member).hexdigest()
    assert exp["kubelet"] == {"version": "1.36.0", "sha256": "ab" * 32, "note": None, "source": "manifest"}
    assert exp["crictl"]["sha256"] is None and "prefetch" in exp["crictl"]["note"]


# --- offline reading of a GPT disk with an ext4 root ------------------------------------------

def test_image_facts_read_the_root_partition_without_mounting(tmp_path):
    require_tools("sgdisk", "mkfs.ext4", "debugfs")
    tree = tmp_path / "tree"
    for p in ("etc/ssh", "etc/nodeforge", "var/log", "var/lib/cloud"):
        (tree / p).mkdir(parents=True)
    (tree / "etc/machine-id").write_text("")
    (tree / "etc/ssh/ssh_host_ed25519_key").write_text("KEY")
    (tree / "etc/ssh/sshd_config").write_text("x")
    (tree / "var/log/dpkg.log").write_text("x")
    (tree / "etc/nodeforge/hardening.json").write_text(json.dumps({"profile": "p", "controls": []}))
    disk = tmp_path / "disk.raw"
    with open(disk, "wb") as fh:
        fh.truncate(64 << 20)
    sb = shutil.which("sgdisk", path=SBIN_PATH)
    subprocess.run([sb, "-n", "1:2048:+1M", "-t", "1:EF02", "-n", "2:0:+4M", "-t", "2:EF00", "-n", "3:0:0",
                    "-t", "3:8304", str(disk)], check=True, capture_output=True)
    offset, length = imagefiles.gpt_root_partition(disk)
    assert offset == (2048 + 2048 + 8192) * 512 and length > 40 << 20
    subprocess.run([shutil.which("mkfs.ext4", path=SBIN_PATH), "-q", "-d", str(tree), "-E", f"offset={offset}",
                    str(disk), f"{length // 1024}k"], check=True, capture_output=True)
    controls = [{"id": "NF-HARD-010", "checks": [{"kind": "absent", "path": "/etc/ssh/ssh_host_*_key",
                                                  "scope": "image"}]},
                {"id": "NF-HARD-011", "checks": [{"kind": "empty_file", "path": "/etc/machine-id"},
                                                 {"kind": "absent", "path": "/var/lib/dbus/machine-id",
                                                  "scope": "image"}]},
                {"id": "NF-HARD-013", "checks": [{"kind": "absent", "path": "/var/log/*.log", "scope": "image"},
                                                 {"kind": "absent", "path": "/tmp/in_target.d", "scope": "image"}]}]
    facts = imagefiles.image_facts(disk, controls, shutil.which("debugfs", path=SBIN_PATH))
    assert facts["globs"] == {"/etc/ssh/ssh_host_*_key": ["/etc/ssh/ssh_host_ed25519_key"],
                              "/var/lib/dbus/machine-id": [], "/var/log/*.log": ["/var/log/dpkg.log"],
                              "/tmp/in_target.d": []}
    assert facts["files"] == {"/etc/machine-id": {"size": 0}}
    assert facts["hardening"] == {"profile": "p", "controls": []}


# --- real boots (slow): the test run's one build, booted once per variant by the release pipeline ----

from tests.imagebuild.realbuild import linked_copy as _linked_copy, verify as _verify  # noqa: E402
from tests.release_fixture import ARTIFACT_CACHE  # noqa: E402


def _qemu_children() -> list[str]:
    """QEMUs this test process started and left running (other runs on the host are not ours)."""
    out = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "nodeforge-verify-"], capture_output=True,
                         text=True).stdout
    return out.split()


@pytest.fixture
def verified(verified_build):
    """Both variants of the test run's build, booted once each by the release
    pipeline's verify stage (tests/release_fixture.py), for every check below."""
    return verified_build


@pytest.mark.slow
@pytest.mark.devcloud
def test_both_variants_boot_and_every_check_passes(verified, built_image):
    d, results = verified
    assert set(results) == {"vm", "baremetal"}
    for variant, r in results.items():
        failed = {c["id"]: c["items"] for c in r.checks if not c["passed"]}
        assert failed == {}, f"{variant}: {json.dumps(failed, indent=1)[:3000]}"
        assert r.passed and r.error is None
        assert (d / f"verify-{variant}-console.log").stat().st_size > 0
        assert json.loads((d / f"verify-{variant}-guest.json").read_text())
    assert (results["vm"].firmware, results["baremetal"].firmware) == ("bios", "uefi")
    b = builddir.load(d)
    assert {v: b.variant(v).verify for v in b.variants} == {"vm": "passed", "baremetal": "passed"}
    ids = {c["id"] for c in results["vm"].checks}
    assert {c["id"] for c in PROFILE["controls"]} <= ids
    assert _qemu_children() == []


@pytest.mark.slow
@pytest.mark.devcloud
def test_the_built_images_are_never_written(verified, release_run):
    from nodeforge.imagebuild import checksums

    d, _ = verified
    assert checksums.verify_sums(d) == []
    # Each image file as it was before the boots: same inode, size and mtime.
    assert set(release_run.image_stat) == {p.name for p in (d / n for n in
                                            json.loads((d / "manifest.json").read_text())["images"].values())}
    assert release_run.image_stat == release_run.image_stat_after


@pytest.mark.slow
@pytest.mark.devcloud
def test_a_changed_sysctl_fails_exactly_that_check(verified):
    """The failure path without a second boot: the session boot's own guest
    report, judged again against the image (boottest.judge: the same offline
    reading and evaluation as a boot). As reported, every check passes; with
    net.ipv4.ip_forward reported as 0 (what a guest whose sysctl.d file says 0
    reports), exactly NF-HARD-003 fails, naming what it expected and saw."""
    d, results = verified
    guest = json.loads((d / "verify-vm-guest.json").read_text())
    again = boottest.judge(d, "vm", guest, cache_dir=ARTIFACT_CACHE)
    assert [c["id"] for c in again] == [c["id"] for c in results["vm"].checks]
    assert [c["id"] for c in again if not c["passed"]] == []
    assert guest["sysctls"]["net.ipv4.ip_forward"] == "1"
    guest["sysctls"]["net.ipv4.ip_forward"] = "0"
    checks = boottest.judge(d, "vm", guest, cache_dir=ARTIFACT_CACHE)
    failed = {c["id"]: [i for i in c["items"] if not i["passed"]] for c in checks if not c["passed"]}
    assert list(failed) == ["NF-HARD-003"]
    assert failed["NF-HARD-003"] == [{"what": "sysctl net.ipv4.ip_forward", "expected": "1", "observed": "0",
                                      "passed": False}]


@pytest.mark.slow
@pytest.mark.devcloud
def test_a_hung_boot_ends_at_the_timeout_with_the_console_tail(built_image, tmp_path):
    d = _linked_copy(built_image.path, tmp_path / "hung")
    with pytest.raises(boottest.BootError) as err:
        _verify(d, variants=("vm",), timeout=20, accel="tcg")
    msg = str(err.value)
    assert "no report within 20 s" in msg and "--- console (last" in msg
    assert len(msg.split("---\n", 1)[1].strip()) > 0         # what the console showed before the timeout
    assert builddir.load(d).variant("vm").verify is builddir.VerifyStatus.FAILED
    assert (d / "verify-vm-console.log").is_file() and _qemu_children() == []


@pytest.mark.parametrize("cpus, parallel, smp", [(1, False, 1), (2, True, 1), (4, True, 2)])
def test_the_variants_boot_side_by_side_where_there_are_two_cpus(tmp_path, no_boot, monkeypatch, cpus, parallel,
                                                                  smp):
    """The default layout, by measurement (docs/boot-verification.md): side by side, the CPUs shared
    out, on two CPUs or more; one after the other, with up to two vCPUs, when asked or on one CPU."""
    monkeypatch.setattr(boottest.os, "cpu_count", lambda: cpus)
    d = make_build_dir(tmp_path / "builds", verify=None)
    p = boottest.plan(boottest.VerifyRequest(build_dir=d, accel="tcg"))
    assert (p.parallel, p.smp) == (parallel, smp)
    one = boottest.plan(boottest.VerifyRequest(build_dir=d, accel="tcg", parallel=False))
    assert (one.parallel, one.smp) == (False, min(2, cpus))
    alone = boottest.plan(boottest.VerifyRequest(build_dir=d, accel="tcg", variants=("vm",)))
    assert (alone.parallel, alone.smp) == (False, min(2, cpus))
