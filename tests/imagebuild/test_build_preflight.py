"""`image build` preflight: bad input fails fast, naming the problem and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.errors import MissingToolError
from nodeforge.imagebuild import build
from nodeforge.pins.cache import Cache
from nodeforge.pins.lockfile import Arch, Component, load


@pytest.fixture(autouse=True)
def _mirrors(monkeypatch):
    monkeypatch.setenv(build.ENV_DEBIAN_MIRROR, "http://debian.invalid/debian")
    monkeypatch.setenv(build.ENV_DEBIAN_SECURITY_MIRROR, "http://debian.invalid/debian-security")


def _req(fixture_lock, tmp_path, **kw):
    kw.setdefault("cache_dir", tmp_path / "cache")
    kw.setdefault("out", tmp_path / "out" / "b1")
    kw.setdefault("work_dir", tmp_path)
    kw.setdefault("min_free_work", 1)
    kw.setdefault("min_free_out", 1)
    kw.setdefault("min_free_shared", 1)
    return build.BuildRequest(minor=kw.pop("minor", "1.36"), lockfile_path=fixture_lock, **kw)


def test_ok_fetches_missing_artifacts_from_the_mirror(fixture_lock, tmp_path):
    plan = build.preflight(_req(fixture_lock, tmp_path))
    assert {a.component for a in plan.artifacts} == set(Component)
    for art in plan.artifacts:
        assert plan.cache.lookup(art.sha256) is not None
        assert art.manifest_entry() == {k: v for k, v in art.to_dict().items() if k != "file"}
    assert plan.mirrors == {"main": "http://debian.invalid/debian", "security": "http://debian.invalid/debian-security"}


def test_unknown_minor(fixture_lock, tmp_path):
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path, minor="1.99"))
    assert "Kubernetes 1.99 is not pinned" in str(exc.value)
    assert "release bump --minor 1.99" in exc.value.hint


def test_unknown_variant(fixture_lock, tmp_path):
    with pytest.raises(build.PreflightError, match="unknown variant container"):
        build.preflight(_req(fixture_lock, tmp_path, variants=("vm", "container")))


def test_missing_artifact_offline(fixture_lock, tmp_path):
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path, offline=True))
    assert "kubelet 1.36.0 amd64" in str(exc.value) and "missing or corrupt" in str(exc.value)
    assert "nodeforge release prefetch --minor 1.36" in exc.value.hint


def test_corrupt_cached_artifact_offline(fixture_lock, tmp_path):
    build.preflight(_req(fixture_lock, tmp_path))              # fills the cache
    pin = load(fixture_lock).minor("1.36").pins[Component.RUNC]
    cached = Cache(tmp_path / "cache").path_for(pin.sha256[Arch.AMD64])
    cached.write_bytes(b"bit rot")
    with pytest.raises(build.PreflightError, match="runc 1.4.3 amd64 .* missing or corrupt"):
        build.preflight(_req(fixture_lock, tmp_path, offline=True))
    assert not cached.exists()  # evicted


def test_corrupt_cached_artifact_is_refetched_online(fixture_lock, tmp_path):
    build.preflight(_req(fixture_lock, tmp_path))
    pin = load(fixture_lock).minor("1.36").pins[Component.RUNC]
    cached = Cache(tmp_path / "cache").path_for(pin.sha256[Arch.AMD64])
    cached.write_bytes(b"bit rot")
    build.preflight(_req(fixture_lock, tmp_path))
    assert Cache(tmp_path / "cache").lookup(pin.sha256[Arch.AMD64]) is not None


def test_unreachable_artifact_source(fixture_lock, tmp_path, monkeypatch):
    monkeypatch.setenv("NODEFORGE_MIRROR_KUBERNETES", "http://127.0.0.1:9")
    monkeypatch.setenv("NODEFORGE_DOWNLOAD_RETRIES", "1")
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path))
    assert "kubelet 1.36.0 amd64 is not in the artifact cache" in str(exc.value)
    assert "NODEFORGE_MIRROR_KUBERNETES" in exc.value.hint


def test_missing_host_tool(fixture_lock, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "HOST_TOOLS", ("mkfs.ext4", "mcopy-not-installed"))
    with pytest.raises(MissingToolError, match="mcopy-not-installed"):
        build.preflight(_req(fixture_lock, tmp_path))


def test_missing_host_tool_names_the_package(fixture_lock, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(build, "HOST_TOOLS", ("mdir",))
    monkeypatch.setattr("nodeforge.base.runner.shutil.which", lambda tool, path=None: None)
    with pytest.raises(MissingToolError) as exc:
        build.preflight(_req(fixture_lock, tmp_path))
    assert "'mdir'" in str(exc.value) and "'mtools'" in str(exc.value) and "make setup" in str(exc.value)


def test_too_little_disk(fixture_lock, tmp_path):
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path, min_free_work=1 << 60))
    assert "work directory" in str(exc.value) and "GiB free" in str(exc.value)
    assert "--work-dir" in exc.value.hint


def test_work_and_output_on_one_filesystem_need_their_shared_peak(fixture_lock, tmp_path):
    """Each directory has enough on its own, but both are on one filesystem: their shared need counts
    (and it is checked at all only when they do share one)."""
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path, min_free_shared=1 << 60))
    assert "the filesystem holding the work and output directories" in str(exc.value)
    assert f"({tmp_path})" in str(exc.value) and "GiB free" in str(exc.value)
    assert "--work-dir" in exc.value.hint and "--out" in exc.value.hint
    apart = Path("/dev/shm")
    if apart.is_dir() and apart.stat().st_dev != tmp_path.stat().st_dev:
        plan = build.preflight(_req(fixture_lock, tmp_path, work_dir=apart / f"nf-{tmp_path.name}",
                                    min_free_shared=1 << 60))
        assert plan.work_root == apart / f"nf-{tmp_path.name}"


def test_existing_output_directory(fixture_lock, tmp_path):
    (tmp_path / "out" / "b1").mkdir(parents=True)
    with pytest.raises(build.PreflightError, match="already exists"):
        build.preflight(_req(fixture_lock, tmp_path))


def test_preflight_runs_before_anything_is_built(fixture_lock, tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(build, "_build", lambda *a, **k: called.append(1))
    with pytest.raises(build.PreflightError):
        build.build(_req(fixture_lock, tmp_path, minor="1.99"))
    assert not called and not (tmp_path / "out").exists()


def test_debian_mirrors_from_host_apt_sources(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
                      "Components: main\n\nTypes: deb\nURIs: http://mirror.invalid/debian-security\n"
                      "Suites: bookworm-security\nComponents: main\n")
    assert build.debian_mirrors({}, (deb822,)) == {"main": "http://mirror.invalid/debian",
                                                   "security": "http://mirror.invalid/debian-security"}
    legacy = tmp_path / "sources.list"
    legacy.write_text("# comment\ndeb [arch=amd64] http://m.invalid/debian bookworm main\n"
                      "deb http://s.invalid/debian-security bookworm-security main\n")
    assert build.debian_mirrors({}, (legacy,)) == {"main": "http://m.invalid/debian",
                                                   "security": "http://s.invalid/debian-security"}
    env = {build.ENV_DEBIAN_MIRROR: "http://env.invalid/debian"}
    assert build.debian_mirrors(env, (legacy,))["main"] == "http://env.invalid/debian"
    with pytest.raises(build.PreflightError) as exc:
        build.debian_mirrors({}, (tmp_path / "none",))
    assert build.ENV_DEBIAN_MIRROR in exc.value.hint


def test_build_cli_unknown_minor(run_cli):
    code, out, err = run_cli("image", "build", "--k8s", "1.99")
    assert code == 1 and "Kubernetes 1.99 is not pinned" in err and "release bump" in err


def test_failed_build_leaves_no_output_under_the_final_name(fixture_lock, tmp_path, monkeypatch):
    def half_done(plan, work, stage, logf, build_time, seconds):
        (stage / "nodeforge-k8s-1.36.0-vm.qcow2").write_bytes(b"half an image")
        logf.step("assemble the vm disk")
        raise build.BuildError(detail="disk-image-create exited 1")

    monkeypatch.setattr(build, "_build", half_done)
    req = _req(fixture_lock, tmp_path)
    with pytest.raises(build.BuildError):
        build.build(req)
    out = tmp_path / "out"
    assert not (out / "b1").exists()
    assert [p.name for p in out.iterdir()] == ["b1.failed.log"]   # no staging leftovers
    assert "assemble the vm disk" in (out / "b1.failed.log").read_text()
    assert not list(tmp_path.glob("nodeforge-build.*")), "scratch directory removed"


def test_work_and_output_directories_may_not_exist_yet(fixture_lock, tmp_path):
    plan = build.preflight(_req(fixture_lock, tmp_path, work_dir=tmp_path / "not" / "yet",
                                out=tmp_path / "new" / "deeper" / "b1"))
    assert plan.work_root == tmp_path / "not" / "yet"


def test_needs_root(fixture_lock, tmp_path, monkeypatch):
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    with pytest.raises(build.PreflightError) as exc:
        build.preflight(_req(fixture_lock, tmp_path))
    assert "must run as root" in str(exc.value) and "sudo" in exc.value.hint
