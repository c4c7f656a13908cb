"""``nodeforge release check|bump|prefetch`` end to end against the local upstream mirror."""

from __future__ import annotations

import difflib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import textwrap
import time


from nodeforge.demo.upstream_mirror import FaultKind, MirrorServer
from nodeforge.errors import ExitCode
from nodeforge.pins import lockfile
from nodeforge.pins.lockfile import Arch, Component
from nodeforge.pins.sources import SourceName



def _check(run_cli, lock):
    code, out, err = run_cli("release", "check", "--lockfile", str(lock), "--output", "json")
    return code, json.loads(out) if out.strip() else None, err


def _by_minor(report):
    return {m["minor"]: m for m in report["minors"]}


def _changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


# --- check --------------------------------------------------------------------------

def test_check_nothing_new_exits_0(run_cli, fixture_lock):
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.OK
    assert report["new_release"] is False
    assert report["latest"] == "1.36.0" and report["maintained"] == ["1.36", "1.35", "1.34"]
    assert {m: s["status"] for m, s in _by_minor(report).items()} == {
        "1.34": "up-to-date", "1.35": "up-to-date", "1.36": "up-to-date"}


def test_check_new_patch_exits_10(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.35.2")
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.NEW_RELEASE == 10
    minors = _by_minor(report)
    assert minors["1.35"] | {} == {"minor": "1.35", "pinned": "1.35.1", "upstream": "1.35.2", "status": "new-patch",
                                   "maintained": True, "ignored": None}
    assert minors["1.34"]["status"] == minors["1.36"]["status"] == "up-to-date"


def test_check_never_picks_a_prerelease(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.36.1-rc.0", marker=False)
    upstream.set_marker("1.36", "v1.36.1-rc.0")
    upstream.set_marker(None, "v1.37.0-alpha.1")
    upstream.set_marker("1.37", "v1.37.0-alpha.1")
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.OK
    minors = _by_minor(report)
    assert minors["1.36"]["status"] == "up-to-date" and minors["1.36"]["ignored"] == "v1.36.1-rc.0"
    assert "1.37" not in minors and report["latest"] is None


def test_check_reports_new_minor_and_minor_leaving_maintenance(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.37.0")
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.NEW_RELEASE
    minors = _by_minor(report)
    assert minors["1.37"]["status"] == "new-minor" and minors["1.37"]["upstream"] == "1.37.0"
    assert report["maintained"] == ["1.37", "1.36", "1.35"]
    assert report["left_maintained"] == ["1.34"] and minors["1.34"]["maintained"] is False


def test_check_with_stale_latest_marker_reports_no_minor_as_left(run_cli, fixture_lock, upstream):
    upstream.set_marker(None, "v1.35.1")  # a mirror whose stable.txt lags behind
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.OK and report["left_maintained"] == []


def test_check_table_output_for_humans(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.37.0")
    code, out, err = run_cli("release", "check", "--lockfile", str(fixture_lock))
    assert code == ExitCode.NEW_RELEASE
    assert "latest stable: 1.37.0" in out and "new-minor" in out
    assert "no longer maintained upstream: 1.34" in err


def test_check_retries_server_500_then_succeeds(run_cli, fixture_lock, upstream, mirror):
    upstream.add_kubernetes("1.34.4")
    mirror.inject("*/stable-1.34.txt", FaultKind.STATUS, times=2, status=500)
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.NEW_RELEASE
    assert _by_minor(report)["1.34"]["upstream"] == "1.34.4"
    assert mirror.count("*/stable-1.34.txt") == 3


def test_check_unreachable_server_is_a_clear_error(run_cli, fixture_lock, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("NODEFORGE_MIRROR_KUBERNETES", f"http://127.0.0.1:{port}/k8s")
    code, out, err = run_cli("release", "check", "--lockfile", str(fixture_lock), "-o", "json")
    assert code == ExitCode.FAILURE
    assert (f"error: cannot reach http://127.0.0.1:{port}/k8s/release/stable.txt after 3 attempts: "
            "Connection refused") in err
    assert "NODEFORGE_MIRROR_KUBERNETES" in err  # the hint says how to point elsewhere
    # with -o json stdout carries the error as a JSON document (README "Exit codes")
    doc = json.loads(out)
    assert doc["exit_code"] == ExitCode.FAILURE and "NODEFORGE_MIRROR_KUBERNETES" in doc["hint"]
    assert doc["error"].startswith(f"cannot reach http://127.0.0.1:{port}/k8s/release/stable.txt")


def test_check_rejects_a_malformed_lockfile_with_line(run_cli, fixture_lock):
    text = fixture_lock.read_text()
    fixture_lock.write_text(text.replace("    version: 1.35.1", "    version: one", 1))
    code, _, err = run_cli("release", "check", "--lockfile", str(fixture_lock))
    line = fixture_lock.read_text().splitlines().index("    version: one  # keep me") + 1
    assert code == ExitCode.USAGE
    assert f'versions.yaml:{line}: kubernetes["1.35"].version: expected a version' in err


# --- bump ---------------------------------------------------------------------------

def test_bump_pins_new_patch_changes_only_those_lines_and_prints_pr_diff(run_cli, fixture_lock, upstream):
    before = fixture_lock.read_text()
    old = lockfile.load(fixture_lock).minors["1.35"]
    upstream.add_kubernetes("1.35.2")
    code, out, _ = run_cli("release", "bump", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK
    after = fixture_lock.read_text()
    expected = ["-    version: 1.35.1  # keep me", "+    version: 1.35.2  # keep me"]
    for comp in lockfile.KUBERNETES_BINARIES:
        for arch in Arch:
            expected.append(f"-        {arch.value}: {old.pins[comp].sha256[arch]}")
    for comp in lockfile.KUBERNETES_BINARIES:
        for arch in Arch:
            expected.append(f"+        {arch.value}: {upstream.digests[(comp, '1.35.2', arch)]}")
    assert sorted(_changed_lines(before, after)) == sorted(expected)
    assert "# crictl comment" in after and after.startswith("# fixture lockfile\n")
    # The PR body names every changed artifact with old and new digests.
    assert "Kubernetes 1.35: 1.35.1 -> 1.35.2" in out
    for comp in lockfile.KUBERNETES_BINARIES:
        for arch in Arch:
            assert (f"| 1.35 | {comp.value} | {arch.value} | 1.35.1 -> 1.35.2 | `{old.pins[comp].sha256[arch]}` -> "
                    f"`{upstream.digests[(comp, '1.35.2', arch)]}` |") in out
    assert "Each of the 6 new artifacts was downloaded" in out
    assert run_cli("release", "check", "--lockfile", str(fixture_lock))[0] == ExitCode.OK


def test_bump_json_lists_changes(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.34.4")
    code, out, _ = run_cli("-o", "json", "release", "bump", "--lockfile", str(fixture_lock))
    report = json.loads(out)
    assert code == ExitCode.OK and report["written"] is True and report["verified"] == 6
    assert report["versions"] == {"1.34": {"old": "1.34.3", "new": "1.34.4"}}
    assert {(c["component"], c["arch"]) for c in report["changes"]} == {
        (c.value, a.value) for c in lockfile.KUBERNETES_BINARIES for a in Arch}


def test_bump_dry_run_writes_and_downloads_nothing(run_cli, fixture_lock, upstream, mirror):
    before = fixture_lock.read_text()
    upstream.add_kubernetes("1.36.1")
    code, out, _ = run_cli("release", "bump", "--dry-run", "--lockfile", str(fixture_lock), "-o", "json")
    report = json.loads(out)
    assert code == ExitCode.OK and report["written"] is False and len(report["changes"]) == 6
    assert fixture_lock.read_text() == before
    assert mirror.count("*/v1.36.1/bin/linux/*/kube???") == 0  # only the .sha256 files were read
    assert mirror.count("*/v1.36.1/bin/linux/*.sha256") == 6


def test_bump_with_wrong_published_checksum_writes_nothing(run_cli, fixture_lock, upstream):
    before = fixture_lock.read_text()
    upstream.add_kubernetes("1.35.2")
    wrong = "e" * 64
    upstream.publish_checksum(Component.KUBEADM, "1.35.2", Arch.ARM64, wrong)
    code, _, err = run_cli("release", "bump", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE
    actual = upstream.digests[(Component.KUBEADM, "1.35.2", Arch.ARM64)]
    assert "kubeadm 1.35.2 arm64: sha256 mismatch: the published checksum (" in err
    assert f"says {wrong}, downloaded bytes are {actual}" in err
    assert fixture_lock.read_text() == before


def test_bump_with_corrupted_download_writes_nothing(run_cli, fixture_lock, upstream, mirror):
    before = fixture_lock.read_text()
    upstream.add_kubernetes("1.36.1")
    mirror.inject("*/v1.36.1/bin/linux/amd64/kubelet", FaultKind.CORRUPT, times=None)
    code, _, err = run_cli("release", "bump", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE
    assert "kubelet 1.36.1 amd64: sha256 mismatch" in err
    assert upstream.digests[(Component.KUBELET, "1.36.1", Arch.AMD64)] in err
    assert fixture_lock.read_text() == before


def test_bump_retries_500_then_succeeds(run_cli, fixture_lock, upstream, mirror):
    upstream.add_kubernetes("1.36.1")
    mirror.inject("*/v1.36.1/bin/linux/arm64/kubectl", FaultKind.STATUS, times=1, status=502)
    mirror.inject("*/v1.36.1/bin/linux/amd64/kubeadm", FaultKind.DROP, times=1)
    code, _, _ = run_cli("release", "bump", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK
    assert str(lockfile.load(fixture_lock).minors["1.36"].version) == "1.36.1"
    assert mirror.count("*/v1.36.1/bin/linux/arm64/kubectl") == 2


def test_bump_adds_a_new_minor_with_its_crictl(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.37.0")
    upstream.add(Component.CRICTL, "1.37.0")
    upstream.add_kubernetes("1.35.2")
    code, out, _ = run_cli("release", "bump", "--minor", "1.37", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK
    lock = lockfile.load(fixture_lock)
    assert list(lock.minors) == ["1.34", "1.35", "1.36", "1.37"]
    new = lock.minors["1.37"]
    assert str(new.version) == "1.37.0" and new.pins[Component.CRICTL].version == "1.37.0"
    assert new.pins[Component.CRICTL].sha256[Arch.ARM64] == upstream.digests[(Component.CRICTL, "1.37.0", Arch.ARM64)]
    assert new.pins[Component.CONTAINERD] == lock.minors["1.36"].pins[Component.CONTAINERD]
    assert str(lock.minors["1.35"].version) == "1.35.1"  # --minor limits the bump
    assert "Kubernetes 1.37: new minor, 1.37.0" in out and "| 1.37 | runc | amd64 |" in out


def test_bump_new_minor_keeps_previous_crictl_when_none_published(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.37.0")
    assert run_cli("release", "bump", "--lockfile", str(fixture_lock))[0] == ExitCode.OK
    assert lockfile.load(fixture_lock).minors["1.37"].pins[Component.CRICTL].version == "1.36.0"


def test_bump_minor_with_only_a_prerelease_is_refused(run_cli, fixture_lock, upstream):
    upstream.add_kubernetes("1.37.0-rc.1", marker=False)
    upstream.set_marker("1.37", "v1.37.0-rc.1")
    code, _, err = run_cli("release", "bump", "--minor", "1.37", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE
    assert "upstream has no stable Kubernetes 1.37 release (only the pre-release v1.37.0-rc.1)" in err


def test_bump_with_nothing_new_leaves_the_file_alone(run_cli, fixture_lock):
    before = fixture_lock.read_text()
    mtime = fixture_lock.stat().st_mtime_ns
    code, out, _ = run_cli("release", "bump", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK and "up to date" in out
    assert fixture_lock.read_text() == before and fixture_lock.stat().st_mtime_ns == mtime


def test_bump_killed_mid_write_leaves_the_old_lockfile_intact(fixture_lock, upstream, tmp_path):
    """SIGKILL while the new lockfile is being written (its fsync stalls) keeps the old file."""
    before = fixture_lock.read_text()
    upstream.add_kubernetes("1.35.2")
    reached = tmp_path / "reached-fsync"
    script = textwrap.dedent(f"""
        import os, pathlib, sys, time
        real_fsync = os.fsync
        def stalling_fsync(fd):
            if ".versions.yaml." in os.readlink(f"/proc/self/fd/{{fd}}"):
                pathlib.Path({str(reached)!r}).write_text("x")
                time.sleep(600)
            real_fsync(fd)
        os.fsync = stalling_fsync
        from nodeforge.cli import main
        sys.exit(main(["release", "bump", "--lockfile", {str(fixture_lock)!r}]))
    """)
    env = dict(os.environ, NODEFORGE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not reached.exists():
            assert proc.poll() is None, "bump ended before writing the lockfile"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert fixture_lock.read_text() == before
    assert str(lockfile.load(fixture_lock).minors["1.35"].version) == "1.35.1"


# --- prefetch -----------------------------------------------------------------------

def test_prefetch_fills_the_cache_then_hits_it(run_cli, fixture_lock, tmp_path, mirror):
    code, out, _ = run_cli("release", "prefetch", "--lockfile", str(fixture_lock), "-o", "json")
    report = json.loads(out)
    assert code == ExitCode.OK
    # 3 minors x 3 binaries x 2 arches + crictl per minor x 2 + 3 shared companions x 2
    assert len(report["artifacts"]) == 18 + 6 + 6
    assert {a["status"] for a in report["artifacts"]} == {"downloaded"}
    cache = tmp_path / "cli-cache" / "sha256"
    for a in report["artifacts"]:
        assert (cache / a["sha256"][:2] / a["sha256"]).is_file()
    requests = len(mirror.requests)
    report = json.loads(run_cli("release", "prefetch", "--lockfile", str(fixture_lock), "-o", "json")[1])
    assert {a["status"] for a in report["artifacts"]} == {"cached"} and report["downloaded_bytes"] == 0
    assert len(mirror.requests) == requests


def test_prefetch_selects_minors_and_arches(run_cli, fixture_lock):
    code, out, _ = run_cli("release", "prefetch", "--minor", "1.34", "--arch", "arm64",
                           "--lockfile", str(fixture_lock), "-o", "json")
    arts = json.loads(out)["artifacts"]
    assert code == ExitCode.OK and len(arts) == 7
    assert {(a["minor"], a["arch"]) for a in arts} == {("1.34", "arm64")}


def test_prefetch_of_corrupted_artifact_fails_naming_it(run_cli, fixture_lock, mirror):
    mirror.inject("*/runc.arm64", FaultKind.CORRUPT, times=None)
    code, _, err = run_cli("release", "prefetch", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE and "runc 1.4.3 arm64: sha256 mismatch" in err


def test_prefetch_with_several_failures_is_a_partial_failure(run_cli, fixture_lock, mirror):
    mirror.inject("*/runc.*", FaultKind.STATUS, times=None, status=404)
    code, _, err = run_cli("release", "prefetch", "--lockfile", str(fixture_lock))
    assert code == ExitCode.PARTIAL and "error: 2 of 30 items failed" in err
    assert "runc.amd64: not found (HTTP 404)" in err and "runc.arm64: not found (HTTP 404)" in err


def test_prefetch_where_every_item_failed_is_a_failure_not_partial(run_cli, fixture_lock, mirror):
    mirror.inject("*", FaultKind.STATUS, times=None, status=404)
    code, _, err = run_cli("release", "prefetch", "--minor", "1.34", "--arch", "arm64", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE and "error: all 7 items failed" in err
    assert "not found (HTTP 404)" in err


def test_bump_with_a_bad_minor_option_is_a_usage_error(run_cli, fixture_lock, mirror):
    before = fixture_lock.read_text()
    for cmd in ("bump", "prefetch"):
        code, _, err = run_cli("release", cmd, "--minor", "1.36.1", "--lockfile", str(fixture_lock))
        assert code == ExitCode.USAGE
        assert "Invalid value for '--minor': '1.36.1' is not a Kubernetes minor (expected like 1.36)" in err
    assert mirror.requests == [] and fixture_lock.read_text() == before


def test_prefetch_bundle_directory_serves_as_a_mirror(run_cli, fixture_lock, tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    code, _, _ = run_cli("release", "prefetch", "--lockfile", str(fixture_lock), "--bundle", str(bundle))
    assert code == ExitCode.OK
    index = json.loads((bundle / "index.json").read_text())
    assert index["format"] == "nodeforge-bundle/1" and len(index["artifacts"]) == 30
    assert (bundle / "versions.yaml").read_text() == fixture_lock.read_text()
    containerd = [a for a in index["artifacts"] if a["component"] == "containerd" and a["arch"] == "amd64"]
    assert containerd == [{
        "component": "containerd", "version": "2.3.4", "arch": "amd64", "sha256": containerd[0]["sha256"],
        "minors": ["1.34", "1.35", "1.36"], "source": "containerd",
        "path": "containerd/v2.3.4/containerd-2.3.4-linux-amd64.tar.gz", "size": 4096}]
    check = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=bundle, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert len((bundle / "SHA256SUMS").read_text().splitlines()) == 30
    # An air-gapped host: fresh cache, every source pointed at the served bundle.
    with MirrorServer(bundle) as airgap:
        for name, value in airgap.mirror_env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("NODEFORGE_CACHE_DIR", str(tmp_path / "airgap-cache"))
        code, out, _ = run_cli("release", "prefetch", "--lockfile", str(bundle / "versions.yaml"), "-o", "json")
        assert code == ExitCode.OK
        assert {a["status"] for a in json.loads(out)["artifacts"]} == {"downloaded"}
        assert len(airgap.requests) == 30


def test_prefetch_bundle_tarball(run_cli, fixture_lock, tmp_path):
    target = tmp_path / "out" / "bundle.tar.gz"
    code, _, _ = run_cli("release", "prefetch", "--minor", "1.36", "--lockfile", str(fixture_lock),
                         "--bundle", str(target))
    assert code == ExitCode.OK
    with tarfile.open(target) as tar:
        names = set(tar.getnames())
        index = json.load(tar.extractfile("index.json"))
    assert {"index.json", "SHA256SUMS", "versions.yaml"} <= names
    assert {a["path"] for a in index["artifacts"]} <= names and len(index["artifacts"]) == 14
    assert "kubernetes/release/v1.36.0/bin/linux/arm64/kubelet" in names
    assert [p.name for p in target.parent.iterdir()] == ["bundle.tar.gz"]  # no temp file left


def _tree(root) -> dict | None:
    """Every path under ``root`` with its size and mtime (None: ``root`` does not exist)."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_prefetch_dry_run_lists_cached_and_missing_artifacts_and_writes_nothing(run_cli, fixture_lock, tmp_path,
                                                                                 mirror):
    code, out, _ = run_cli("release", "prefetch", "--minor", "1.34", "--arch", "arm64",
                           "--lockfile", str(fixture_lock), "-o", "json")
    assert code == ExitCode.OK
    have = {a["sha256"] for a in json.loads(out)["artifacts"]}
    assert len(have) == 7
    cache = tmp_path / "cli-cache"
    # A damaged entry: a real run would re-hash and evict it; the plan only sees that it exists.
    damaged = cache / "sha256" / sorted(have)[0][:2] / sorted(have)[0]
    damaged.write_bytes(b"x" * damaged.stat().st_size)
    before, requests = _tree(cache), len(mirror.requests)
    bundle = tmp_path / "out" / "bundle.tar.gz"

    code, out, err = run_cli("release", "prefetch", "--dry-run", "--bundle", str(bundle),
                             "--lockfile", str(fixture_lock), "-o", "json")
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["bundle"] == str(bundle) and doc["cache"] == str(cache)
    arts = doc["artifacts"]
    assert len(arts) == 30 and (doc["cached"], doc["would_download"]) == (7, 23)
    assert {a["sha256"] for a in arts if a["status"] == "cached"} == have
    assert all(a["in_cache"] and a["size"] > 0 for a in arts if a["status"] == "cached")
    missing = [a for a in arts if a["sha256"] not in have]
    assert {a["status"] for a in missing} == {"would download"} and not any(a["in_cache"] for a in missing)
    kubelet = next(a for a in missing if (a["component"], a["minor"], a["arch"]) == ("kubelet", "1.36", "amd64"))
    assert kubelet["url"] == f"{mirror.base_url(SourceName.KUBERNETES)}/release/v1.36.0/bin/linux/amd64/kubelet"

    code, out, _ = run_cli("release", "prefetch", "--dry-run", "--bundle", str(bundle), "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK
    assert "plan (dry run): 7 cached, 23 would download" in out and out.count("would download") == 24
    assert f"cache: {cache}\nbundle: would write {bundle}\n" in out

    assert _tree(cache) == before and damaged.read_bytes().startswith(b"xxxx")   # nothing evicted or added
    assert len(mirror.requests) == requests and not bundle.parent.exists()


def test_prefetch_dry_run_fails_like_the_real_run(run_cli, fixture_lock, tmp_path, mirror):
    def both(*args: str) -> str:
        real = run_cli("release", "prefetch", *args, "--lockfile", str(fixture_lock))
        dry = run_cli("release", "prefetch", "--dry-run", *args, "--lockfile", str(fixture_lock))
        assert dry[0] == real[0] == ExitCode.USAGE and dry[2] == real[2] and dry[1] == ""
        return dry[2]

    assert "Kubernetes 1.99 is not pinned (pinned: 1.34, 1.35, 1.36)" in both("--minor", "1.99")
    assert "'1.36.1' is not a Kubernetes minor" in both("--minor", "1.36.1")
    fixture_lock.write_text(fixture_lock.read_text().replace("    version: 1.35.1", "    version: one", 1))
    assert 'kubernetes["1.35"].version: expected a version' in both("--minor", "1.34")
    assert mirror.requests == [] and not (tmp_path / "cli-cache").exists()


# --- the OS package lock (nodeforge.oslock) against a local signed apt repository ----------

import pytest  # noqa: E402

from nodeforge.oslock import lock as oslock_lock, watch as oslock_watch  # noqa: E402
from tests.oslock.aptrepo import RELEASE as APT_RELEASE, lock_template  # noqa: E402
from tests.oslock.fixtures import apt_repo, other_key, signing_key  # noqa: E402,F401 - fixtures

APT_SECURITY = f"{APT_RELEASE}-security"


@pytest.fixture
def os_lock(fixture_lock, apt_repo):
    """The package lock beside the fixture lockfile (where release check finds it by default)."""
    template = lock_template(fixture_lock.parent / oslock_lock.FILENAME)
    lock, _ = oslock_watch.resolve_lock(template, oslock_watch.config_for(template, apt_repo.mirrors(),
                                                                           apt_repo.key.keyring))
    lock.save()
    return lock


def test_check_without_package_updates_exits_0_and_reports_the_lock(run_cli, fixture_lock, os_lock):
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.OK
    assert report["new_release"] is False and report["kubernetes_new_release"] is False
    assert report["packages"] == {"lock": str(os_lock.path), "packages": 3, "new_release": False, "security": 0,
                                  "updates": [], "gone": []}


def test_check_reports_a_security_update_and_exits_10(run_cli, fixture_lock, os_lock, apt_repo):
    apt_repo.add(APT_SECURITY, "nf-lib", "2.0-1+deb1u1")
    apt_repo.publish()
    code, report, _ = _check(run_cli, fixture_lock)
    assert code == ExitCode.NEW_RELEASE == 10
    assert report["kubernetes_new_release"] is False and report["new_release"] is True
    assert report["packages"]["updates"] == [{"name": "nf-lib", "arch": "amd64", "old_version": "2.0-1",
                                              "new_version": "2.0-1+deb1u1", "suite": APT_SECURITY,
                                              "security": True}]
    assert report["packages"]["security"] == 1
    code, out, _ = run_cli("release", "check", "--lockfile", str(fixture_lock))
    assert code == 10
    words = " ".join(out.split())       # the table title wraps at the table's width (a long lock path)
    assert "1 of 3 have a newer version, 1 from a security suite" in words and APT_SECURITY in out
    # --no-packages: the Kubernetes answer alone
    assert run_cli("release", "check", "--no-packages", "--lockfile", str(fixture_lock))[0] == ExitCode.OK


def test_bump_packages_moves_the_lock_and_prints_the_pr_markdown(run_cli, fixture_lock, os_lock, apt_repo):
    apt_repo.add(APT_SECURITY, "nf-lib", "2.0-1+deb1u1")
    apt_repo.publish()
    before = os_lock.path.read_text()
    code, out, _ = run_cli("release", "bump", "--packages", "--dry-run", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK and os_lock.path.read_text() == before
    assert "Dry run" in out
    versions_before = fixture_lock.read_text()
    code, out, _ = run_cli("release", "bump", "--packages", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK
    assert out.startswith("## OS package update\n")
    assert f"| nf-lib | amd64 | 2.0-1 | 2.0-1+deb1u1 | **{APT_SECURITY}** (security) |" in out
    assert fixture_lock.read_text() == versions_before       # the Kubernetes lockfile is not touched
    moved = oslock_lock.load(os_lock.path).by_key()[("nf-lib", "amd64")]
    assert (moved.version, moved.suite) == ("2.0-1+deb1u1", APT_SECURITY)
    assert _check(run_cli, fixture_lock)[0] == ExitCode.OK
    code, out, _ = run_cli("-o", "json", "release", "bump", "--packages", "--lockfile", str(fixture_lock))
    assert code == ExitCode.OK and json.loads(out)["changes"] == [] and json.loads(out)["written"] is False


def test_check_refuses_an_index_whose_signature_does_not_verify(run_cli, fixture_lock, os_lock, apt_repo,
                                                                other_key):
    forger = other_key                     # not in the archive keyring
    apt_repo.add(APT_SECURITY, "nf-lib", "2.0-1+evil1")
    apt_repo.key, real = forger, apt_repo.key
    apt_repo.publish()                     # signed, but not by the archive key
    code, _, err = run_cli("release", "check", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE
    assert f"refused InRelease {apt_repo.url}/debian" in err and "signature does not verify" in err
    code, _, err = run_cli("release", "bump", "--packages", "--lockfile", str(fixture_lock))
    assert code == ExitCode.FAILURE and "signature does not verify" in err
    assert oslock_lock.load(os_lock.path).packages == os_lock.packages
    apt_repo.key = real


def test_bump_packages_with_a_missing_lock_names_it(run_cli, fixture_lock):
    code, _, err = run_cli("release", "bump", "--packages", "--lockfile", str(fixture_lock))
    assert code == ExitCode.USAGE
    assert "os-packages.lock.yaml: package lock not found" in err and "release lock-packages" in err
