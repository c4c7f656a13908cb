"""``make demo``'s set-up: the fixture upstream and its own lockfile (never the
production one), a new patch of the demo minor on the mirror, the fallback
when the release servers are unreachable."""

from __future__ import annotations

import hashlib
from pathlib import Path

from nodeforge.demo import __main__ as demo
from nodeforge.demo.upstream_mirror import MirrorServer
from nodeforge.demo.fixtures import write_sources
from nodeforge.pins import lockfile as lf, release
from nodeforge.pins.cache import Cache, Downloader, DownloadSettings
from nodeforge.pins.sources import Sources
from nodeforge.pipeline.stages import PRODUCTION_LOCKFILE

REPO = Path(__file__).resolve().parents[2]


def test_fixture_setup_new_patch_own_lockfile(tmp_path):
    production = hashlib.sha256(PRODUCTION_LOCKFILE.read_bytes()).hexdigest()
    lock, up = demo.fixture_setup(tmp_path / "state")
    assert lock.is_relative_to(tmp_path) and lock.read_text().startswith("# fixture lockfile")
    with MirrorServer(up.root) as server:
        write_sources(lock, server)
        report = release.check(lf.load(lock), Sources.load(lock.parent / "sources.yaml"),
                               Downloader(Cache(tmp_path / "cache"), DownloadSettings(attempts=1)))
    moving = {m.minor: m.upstream for m in report.minors if m.status is release.Status.NEW_PATCH}
    assert moving == {demo.MINOR: "1.36.1"}         # exactly one minor for the demo pipeline
    # A bumped fixture lockfile survives a second set-up; the upstream is regenerated.
    lock.write_text(lock.read_text().replace("version: 1.36.0", "version: 1.36.1"))
    again, _ = demo.fixture_setup(tmp_path / "state")
    assert again == lock and "version: 1.36.1" in again.read_text()
    assert hashlib.sha256(PRODUCTION_LOCKFILE.read_bytes()).hexdigest() == production


def test_upstream_unreachable_is_said(monkeypatch):
    monkeypatch.setenv("NODEFORGE_DEMO_UPSTREAM", "fixture")
    assert demo.upstream_reachable() == "NODEFORGE_DEMO_UPSTREAM=fixture"
    monkeypatch.setenv("NODEFORGE_DEMO_UPSTREAM", "auto")
    assert "ConnectionError" in demo.upstream_reachable("http://127.0.0.1:9/release/stable.txt")


def test_old_import_path_still_works():
    from tests.demo.fixture_artifacts import make_demo
    from nodeforge.demo.fixtures import make_demo as moved
    assert make_demo is moved


def test_the_fixture_lockfile_builds_images_the_shipped_templates_choose(tmp_path):
    """The demo's images carry the production lockfile's ownership scope, and every shipped template
    (and the demo's flavors file) names that scope, so 'template apply' finds the demo's approved images
    (a path-derived scope of the fixture lockfile left both templates broken)."""
    from nodeforge.magnum import templates as tpl
    from nodeforge.compute import flavors as F

    lock, _ = demo.fixture_setup(tmp_path)
    scope = lf.load(lock).scope
    assert lf.load(lock).scope_source == "file" and scope == lf.load(PRODUCTION_LOCKFILE).scope
    shipped = tpl.load_all(demo.REPO / tpl.DEFAULT_DIR)
    assert set(demo.TEMPLATES) <= set(shipped)
    for name in demo.TEMPLATES:
        assert shipped[name].scope == scope, name
    assert F.load(demo.REPO / "manifests" / "flavors.yaml").scope == scope


def test_the_demo_baseline_profiles_load_and_only_the_compute_profile_has_a_baseline(tmp_path):
    """The demo's profiles file (the production profiles with its baseline on one profile) is one
    the profile loader accepts: every BIOS name and value judged against the registry beside it."""
    from nodeforge.ironic import profiles

    loaded = profiles.load(demo.baseline_profiles(tmp_path))
    production = profiles.load()
    assert [p.name for p in loaded.profiles] == [p.name for p in production.profiles]
    with_baseline = {p.name: p.baseline for p in loaded.profiles if p.baseline}
    assert list(with_baseline) == [demo.BASELINE_PROFILE]
    assert with_baseline["compute"].bios == {"ProcTurboMode": "Disabled", "NicBoot1": "Disabled"}
