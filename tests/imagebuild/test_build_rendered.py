"""``BuildRequest.rendered``: the build uses the element tree it is given (read back by
``render.load``), and refuses one that is not this lockfile's and these elements' render."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from nodeforge.imagebuild import build, render
from nodeforge.pins.lockfile import Arch, load
from tests.imagebuild.test_build_preflight import _mirrors, _req  # noqa: F401 - the same request and (autouse) mirrors


def test_load_reads_back_what_render_wrote(fixture_lock, tmp_path):
    lock = load(fixture_lock)
    r = render.render(lock, "1.36", tmp_path / "r")
    assert render.load(tmp_path / "r", lock, "1.36") == r
    assert render.load(tmp_path / "r", lock, "1.36").digest == render.tree_digest(r.elements)


def test_preflight_takes_the_given_tree(fixture_lock, tmp_path):
    r = render.render(load(fixture_lock), "1.36", tmp_path / "r")
    plan = build.preflight(_req(fixture_lock, tmp_path, rendered=tmp_path / "r"))
    assert plan.rendered == r
    assert build.preflight(_req(fixture_lock, tmp_path, out=tmp_path / "out" / "b2")).rendered is None


def test_a_changed_tree_is_refused(fixture_lock, tmp_path):
    r = render.render(load(fixture_lock), "1.36", tmp_path / "r")
    script = next(r.elements.glob("kubelet/*.d/*"))
    script.write_text(script.read_text() + "\necho tampered\n")
    with pytest.raises(render.StaleRenderError) as exc:
        build.preflight(_req(fixture_lock, tmp_path, rendered=tmp_path / "r"))
    assert str(tmp_path / "r") in str(exc.value) and "elements/ changed since it was rendered" in str(exc.value)
    assert exc.value.exit_code == 2 and "nodeforge image render --k8s 1.36" in exc.value.hint


def test_a_tree_of_another_lockfile_state_is_refused(fixture_lock, tmp_path):
    render.render(load(fixture_lock), "1.36", tmp_path / "r")
    fixture_lock.write_text(fixture_lock.read_text() + "# edited after the render\n")
    with pytest.raises(render.StaleRenderError, match=r"r: stale: rendered from a lockfile with sha256 .*versions"):
        build.preflight(_req(fixture_lock, tmp_path, rendered=tmp_path / "r"))


def test_a_tree_of_other_elements_is_refused(fixture_lock, tmp_path):
    src = tmp_path / "elements-src"
    shutil.copytree(render.ELEMENTS_SRC, src, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    lock = load(fixture_lock)
    render.render(lock, "1.36", tmp_path / "r", src=src)
    assert render.load(tmp_path / "r", lock, "1.36", src=src).minor == "1.36"
    (src / "kubelet" / "README.rst").write_text("changed\n")
    with pytest.raises(render.StaleRenderError, match=r"stale: .*elements-src changed since it was rendered"):
        render.load(tmp_path / "r", lock, "1.36", src=src)


def test_another_minor_or_arch_or_no_render_is_refused(fixture_lock, tmp_path):
    lock = load(fixture_lock)
    render.render(lock, "1.36", tmp_path / "r")
    other = next(m for m in lock.minors if m != "1.36")
    with pytest.raises(render.StaleRenderError, match=f"rendered for Kubernetes 1.36 amd64, not {other} amd64"):
        render.load(tmp_path / "r", lock, other)
    (tmp_path / "plain").mkdir()
    with pytest.raises(render.StaleRenderError, match="not a nodeforge render"):
        render.load(tmp_path / "plain", lock, "1.36")
    (tmp_path / "r" / render.RECORD).unlink()
    with pytest.raises(render.StaleRenderError, match="no render.json: rendered by an older nodeforge"):
        render.load(tmp_path / "r", lock, "1.36")


def test_cli_build_takes_rendered(fixture_lock, tmp_path, run_cli):
    """``image build --rendered DIR``: refused before anything is built when DIR is stale (exit 2)."""
    render.render(load(fixture_lock), "1.36", tmp_path / "r")
    (tmp_path / "r" / "elements" / "kubelet" / "README.rst").write_text("tampered\n")
    code, out, err = run_cli("image", "build", "--k8s", "1.36", "--lockfile", str(fixture_lock), "--rendered",
                             str(tmp_path / "r"), "--out", str(tmp_path / "out" / "b1"), "--work-dir", str(tmp_path))
    assert code == 2, err
    assert "changed since it was rendered" in err and not (tmp_path / "out" / "b1").exists()
