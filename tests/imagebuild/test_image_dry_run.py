"""``image render --dry-run`` and ``image build --dry-run``: the plan printed, nothing written, and a
bad input refused exactly as the real command refuses it.

"Nothing written" is checked by a snapshot (every path, its type, size and mtime, the directories'
own included, so an entry made and removed again shows) of the whole test directory: the output,
work and cache directories are all below it."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from nodeforge.imagebuild import build, package_base as pb, render
from nodeforge.pins import lockfile
from nodeforge.pins.cache import Cache, Downloader
from nodeforge.pins.lockfile import Arch, Component
from nodeforge.pins.sources import SOURCE_OF, Sources
from tests.imagebuild.test_build_preflight import _mirrors  # noqa: F401 - (autouse) the Debian mirrors from the environment
from tests.prereq import require, require_tools


def _snapshot(*roots: Path) -> dict[str, tuple | None]:
    out: dict[str, tuple | None] = {}
    for root in roots:
        if not root.exists():
            out[str(root)] = None
            continue
        paths = [root]
        for dirpath, dirnames, filenames in os.walk(root):
            paths += [Path(dirpath) / name for name in dirnames + filenames]
        for path in paths:
            st = path.lstat()
            out[str(path)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


# --- image render --dry-run ---------------------------------------------------------------------------

def test_render_dry_run_prints_the_tree_and_writes_nothing(run_cli, tmp_path):
    lock = lockfile.load()
    out = tmp_path / "r"
    before = _snapshot(tmp_path)
    code, stdout, err = run_cli("image", "render", "--k8s", "1.36", "--out", str(out), "--dry-run", "-o", "json")
    assert code == 0, err
    assert _snapshot(tmp_path) == before and not out.exists()
    doc = json.loads(stdout)
    assert doc["dry_run"] is True and doc["root"] == str(out)
    assert (doc["action"], doc["existing"]) == ("create", None)
    assert (doc["minor"], doc["kubernetes_version"], doc["arch"]) == ("1.36", str(lock.minor("1.36").version), "amd64")
    planned = {f["path"]: f for f in doc["files"]}
    assert {"pins.json", "nodeforge.env", render.MARKER, render.RECORD,
            "elements/kubelet/environment.d/10-kubelet", f"elements/{render.HARDENING_JSON.as_posix()}"} <= set(planned)
    assert not [p for p in planned if p.endswith(".j2")], "templates are listed by the name they are rendered to"

    # The real render writes exactly that: the same digest, files, types, sizes and modes.
    code, stdout, err = run_cli("image", "render", "--k8s", "1.36", "--out", str(out), "-o", "json")
    assert code == 0, err
    assert json.loads(stdout)["element_tree_digest"] == doc["element_tree_digest"]
    written = {}
    for path in out.rglob("*"):
        if not path.is_dir() or path.is_symlink():
            rel = path.relative_to(out).as_posix()
            written[rel] = {"path": rel, "type": "link" if path.is_symlink() else "file",
                            "mode": None if path.is_symlink() else f"{path.stat().st_mode & 0o7777:04o}",
                            "bytes": None if path.is_symlink() else path.stat().st_size,
                            **({"target": os.readlink(path)} if path.is_symlink() else {})}
    assert written == planned

    # A previous render: would be replaced; the dry run leaves it as it is.
    before = _snapshot(tmp_path)
    code, stdout, err = run_cli("image", "render", "--k8s", "1.36", "--out", str(out), "--dry-run")
    assert code == 0, err
    assert _snapshot(tmp_path) == before
    assert f"plan (dry run): replace {out} (now previous render)" in stdout
    assert doc["element_tree_digest"] in stdout and "elements/kubelet/environment.d/10-kubelet" in stdout


def test_render_dry_run_into_an_empty_directory_replaces_it(run_cli, tmp_path):
    (tmp_path / "r").mkdir()
    before = _snapshot(tmp_path)
    code, stdout, err = run_cli("image", "render", "--k8s", "1.35", "--out", str(tmp_path / "r"), "--dry-run",
                                "-o", "yaml")
    assert code == 0, err
    assert "action: replace\nexisting: empty directory\n" in stdout and "dry_run: true" in stdout
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("case", ["foreign directory", "unknown minor", "a file"])
def test_render_dry_run_fails_like_render(run_cli, tmp_path, case):
    out = tmp_path / "r"
    minor = "1.99" if case == "unknown minor" else "1.36"
    if case == "foreign directory":
        out.mkdir()
        (out / "precious").write_text("x")
    elif case == "a file":
        out.write_text("x")
    before = _snapshot(tmp_path)
    dry = run_cli("image", "render", "--k8s", minor, "--out", str(out), "--dry-run")
    assert _snapshot(tmp_path) == before
    real = run_cli("image", "render", "--k8s", minor, "--out", str(out))
    assert _snapshot(tmp_path) == before
    assert dry[0] == real[0] == 2
    assert dry[2] == real[2]
    assert {"foreign directory": "exists and is not a nodeforge render", "unknown minor": "1.99 is not pinned",
            "a file": "is a file"}[case] in dry[2]


# --- image build --dry-run ----------------------------------------------------------------------------

def _require_build_host(tmp_path: Path) -> None:
    """What the build's preflight checks of the host (the dry run checks the same)."""
    require(os.geteuid() == 0, "image build's preflight (and so its dry run) needs root")
    require_tools(*build.HOST_TOOLS, why="image build's preflight checks them")
    need = build.BuildRequest.min_free_shared
    require(shutil.disk_usage(tmp_path).free >= need,
            f"{tmp_path} has less than the {need >> 30} GiB free the build's preflight asks for")


def _build_args(fixture_lock: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["image", "build", "--k8s", "1.36", "--lockfile", str(fixture_lock), "--out", str(tmp_path / "out" / "b1"),
            "--work-dir", str(tmp_path / "work"), "--cache-dir", str(tmp_path / "cache"),
            "--dib-cache", str(tmp_path / "dib"), *extra]


def test_build_dry_run_prints_the_plan_and_writes_nothing(fixture_lock, tmp_path, run_cli):
    _require_build_host(tmp_path)
    lock = lockfile.load(fixture_lock)
    version = str(lock.minor("1.36").version)
    sources = Sources.load(fixture_lock.parent / "sources.yaml")
    pins = {p.component: p for p in render.pins_for(lock, "1.36", Arch.AMD64)}
    cache = Cache(tmp_path / "cache")
    have = (Component.KUBELET, Component.RUNC, Component.CONTAINERD)
    for comp in have:
        pin = pins[comp]
        Downloader(cache).fetch(sources.artifact_url(comp, pin.version, Arch.AMD64), pin.sha256, artifact=pin.name)
    # A damaged cache entry: the dry run only looks at it (the real preflight re-hashes and replaces it).
    cache.path_for(pins[Component.RUNC].sha256).write_bytes(b"bit rot")
    (tmp_path / "work").mkdir()
    (tmp_path / "dib").mkdir()

    before = _snapshot(tmp_path)
    code, stdout, err = run_cli(*_build_args(fixture_lock, tmp_path, "--dry-run", "-o", "json"))
    assert code == 0, err
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "out").exists()
    doc = json.loads(stdout)
    assert doc["dry_run"] is True
    assert (doc["out"], doc["work_dir"], doc["dib_cache"], doc["artifact_cache"]) == (
        str(tmp_path / "out" / "b1"), str(tmp_path / "work"), str(tmp_path / "dib"), str(tmp_path / "cache"))
    assert (doc["kubernetes"], doc["arch"], doc["variants"]) == (version, "amd64", ["vm", "baremetal"])
    assert doc["images"] == {"vm": f"nodeforge-k8s-{version}-vm.qcow2",
                             "baremetal": f"nodeforge-k8s-{version}-baremetal.raw"}
    assert set(doc["images"].values()) | {"SHA256SUMS", "manifest.json", "build.log"} <= set(doc["outputs"])
    arts = {a["component"]: a for a in doc["artifacts"]}
    assert set(arts) == {c.value for c in Component}
    for comp, pin in pins.items():
        a = arts[comp.value]
        assert (a["name"], a["sha256"], a["path"]) == (pin.name, pin.sha256, str(cache.path_for(pin.sha256)))
        if comp in have:
            assert (a["cached"], a["action"], a["url"]) == (True, "cached", None), comp
        else:
            assert (a["cached"], a["action"]) == (False, "download"), comp
            assert a["url"] == sources.artifact_url(comp, pin.version, Arch.AMD64)
            assert a["url"].startswith(sources.base(SOURCE_OF[comp]))
    base = doc["package_base"]
    assert (base["cached"], base["action"]) == (False, "build") and len(base["key"]) == 64
    assert base["path"] == str(tmp_path / "dib" / "package-base" / base["key"])

    # The table: one row per directory, artifact, the package base and each image.
    code, table, err = run_cli(*_build_args(fixture_lock, tmp_path, "--variant", "vm", "--dry-run"))
    assert code == 0, err
    assert _snapshot(tmp_path) == before
    assert "plan (dry run): image build, Kubernetes" in table
    assert f"{len(have)} artifact(s) cached, {len(pins) - len(have)} to download; package base build" in table
    kubeadm = pins[Component.KUBEADM]
    for row in (f"artifact {kubeadm.name}", sources.artifact_url(Component.KUBEADM, kubeadm.version, Arch.AMD64),
                f"package base {base['key'][:16]}", f"nodeforge-k8s-{version}-vm.qcow2", "render into the work"):
        assert row in table, row
    assert "baremetal.raw" not in table

    # The package base cached (an entry that looks whole; it is not re-hashed, so not evicted either).
    entry = tmp_path / "dib" / "package-base" / base["key"]
    entry.mkdir(parents=True)
    (entry / pb.TARBALL).write_bytes(b"not really a tarball")
    (entry / pb.META).write_text(json.dumps({"key": base["key"], "size": len(b"not really a tarball")}))
    before = _snapshot(tmp_path)
    code, stdout, err = run_cli(*_build_args(fixture_lock, tmp_path, "--dry-run", "-o", "json"))
    assert code == 0, err
    assert json.loads(stdout)["package_base"] == {**base, "cached": True, "action": "reuse"}
    code, stdout, err = run_cli(*_build_args(fixture_lock, tmp_path, "--rebuild-package-base", "--dry-run", "-o",
                                             "json"))
    assert code == 0, err
    assert json.loads(stdout)["package_base"]["action"] == "rebuild"
    assert _snapshot(tmp_path) == before

    # The key is the one the build computes from the tree it renders and the element it writes.
    req = build.BuildRequest(minor="1.36", lockfile_path=fixture_lock, out=tmp_path / "out" / "b1",
                             work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", dib_cache=tmp_path / "dib")
    bp = build.plan(req)
    rendered = render.render(bp.plan.lock, "1.36", tmp_path / "check" / "render")
    elements = pb.write_element(tmp_path / "check" / "base", pb.union_packages(
        rendered.elements, list(render.NODEFORGE_ELEMENTS)), rendered.elements, os_lock=bp.plan.os_lock)
    assert build.package_base_spec(bp.plan, rendered, elements).key() == base["key"]
    # And the real preflight starts from the same plan: it fetches what the dry run said it would.
    plan = build.preflight(req)
    assert [a.sha256 for a in plan.artifacts] == [a["sha256"] for a in doc["artifacts"]]
    assert all(cache.lookup(a.sha256) is not None for a in plan.artifacts)
    assert not (tmp_path / "out").exists()


def test_build_dry_run_with_a_rendered_tree(fixture_lock, tmp_path, run_cli):
    _require_build_host(tmp_path)
    rendered = render.render(lockfile.load(fixture_lock), "1.36", tmp_path / "r")
    before = _snapshot(tmp_path)
    code, stdout, err = run_cli(*_build_args(fixture_lock, tmp_path, "--rendered", str(rendered.root), "--offline",
                                             "--dry-run", "-o", "json"))
    # Offline with an empty cache: refused like the real build's preflight ...
    assert code == 1 and "missing or corrupt in the artifact cache" in err
    code, stdout, err = run_cli(*_build_args(fixture_lock, tmp_path, "--rendered", str(rendered.root), "--dry-run",
                                             "-o", "json"))
    assert code == 0, err
    assert _snapshot(tmp_path) == before
    doc = json.loads(stdout)
    assert doc["rendered"] == str(rendered.root) and all(a["action"] == "download" for a in doc["artifacts"])
    # ... the same package base as from the tree the build would render itself.
    code, own, err = run_cli(*_build_args(fixture_lock, tmp_path, "--dry-run", "-o", "json"))
    assert code == 0, err
    assert json.loads(own)["package_base"]["key"] == doc["package_base"]["key"]


@pytest.mark.parametrize("case", ["unknown minor", "output directory exists", "offline, not cached",
                                  "stale rendered tree", "unknown variant"])
def test_build_dry_run_fails_like_the_real_build(fixture_lock, tmp_path, run_cli, case):
    """The dry run and the real command, on the same bad input: the same exit code and error, and
    nothing written by either (the real build fails in its preflight)."""
    if case in ("output directory exists", "offline, not cached"):   # checked after the host
        _require_build_host(tmp_path)
    extra: list[str] = []
    args = _build_args(fixture_lock, tmp_path)
    if case == "unknown minor":
        args[args.index("1.36")] = "1.99"
    elif case == "output directory exists":
        (tmp_path / "out" / "b1").mkdir(parents=True)
    elif case == "offline, not cached":
        extra = ["--offline"]
    elif case == "stale rendered tree":
        render.render(lockfile.load(fixture_lock), "1.36", tmp_path / "r")
        (tmp_path / "r" / "elements" / "kubelet" / "README.rst").write_text("tampered\n")
        extra = ["--rendered", str(tmp_path / "r")]
    elif case == "unknown variant":
        extra = ["--variant", "vm,container"]
    before = _snapshot(tmp_path)
    dry = run_cli(*args, *extra, "--dry-run")
    assert _snapshot(tmp_path) == before
    real = run_cli(*args, *extra)
    assert _snapshot(tmp_path) == before
    assert dry[0] == real[0] == {"unknown minor": 1, "output directory exists": 1, "offline, not cached": 1,
                                 "stale rendered tree": 2, "unknown variant": 2}[case]
    assert dry[2] == real[2]
    assert {"unknown minor": "Kubernetes 1.99 is not pinned", "output directory exists": "already exists",
            "offline, not cached": "missing or corrupt in the artifact cache",
            "stale rendered tree": "changed since it was rendered",
            "unknown variant": "expected a comma-separated list"}[case] in dry[2]


# --- the pieces: in memory, what is written -------------------------------------------------------------

def test_the_element_in_memory_has_the_digest_of_the_written_one(tmp_path):
    from tests.imagebuild.test_package_base_mirrors import _lock

    packages = pb.union_packages(render.ELEMENTS_SRC, list(render.NODEFORGE_ELEMENTS))
    for name, os_lock in (("plain", None), ("locked", _lock(tmp_path))):
        written = pb.write_element(tmp_path / name, packages, render.ELEMENTS_SRC, os_lock=os_lock)
        assert render.entries_digest(pb.element_entries(packages, render.ELEMENTS_SRC, os_lock=os_lock)) \
            == render.tree_digest(written), name
    assert render.tree_digest(tmp_path / "plain") != render.tree_digest(tmp_path / "locked")


def test_a_render_in_memory_reads_like_the_written_one(tmp_path):
    lock = lockfile.load()
    t = render.tree(lock, "1.36")
    r = render.render(lock, "1.36", tmp_path / "r")
    assert t.digest == r.digest == render.tree_digest(r.elements)
    assert pb.union_packages(t.element_files(), list(render.NODEFORGE_ELEMENTS)) \
        == pb.union_packages(r.elements, list(render.NODEFORGE_ELEMENTS))
    assert t.read("nodeforge.env") == r.env_file.read_bytes() and t.read("no-such-file") is None


def test_present_never_re_hashes_or_evicts(tmp_path):
    cache = pb.BaseCache(tmp_path / "bases")
    assert not cache.present("k" * 64) and not (tmp_path / "bases").exists()
    entry = cache.path("k" * 64)
    entry.mkdir(parents=True)
    (entry / pb.TARBALL).write_bytes(b"12345")
    (entry / pb.META).write_text(json.dumps({"key": "k" * 64, "size": 5, "sha256": "0" * 64}))
    assert cache.present("k" * 64) and entry.exists()
    (entry / pb.META).write_text(json.dumps({"key": "k" * 64, "size": 6}))
    assert not cache.present("k" * 64) and entry.exists()
    assert cache.lookup("k" * 64) is None and not entry.exists()    # lookup re-hashes and evicts
