"""Rendering the element tree: determinism, pins in the output, profile checks."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from nodeforge.errors import ConfigError
from nodeforge.imagebuild import render
from nodeforge.pins import lockfile
from nodeforge.pins.lockfile import Arch


def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", oct(p.stat().st_mode & 0o7777))
            else:
                out[rel] = ("file", oct(p.stat().st_mode & 0o7777), p.read_bytes())
    return out


def test_render_twice_is_byte_identical(tmp_path):
    lock = lockfile.load()
    a = render.render(lock, "1.36", tmp_path / "a")
    b = render.render(lock, "1.36", tmp_path / "b")
    assert a.digest == b.digest
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    # Re-rendering into the same directory replaces it and gives the same tree.
    c = render.render(lock, "1.36", tmp_path / "a")
    assert c.digest == a.digest and _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")


def test_rendered_tree_carries_the_pins(tmp_path):
    lock = lockfile.load()
    pins = lock.minor("1.36")
    r = render.render(lock, "1.36", tmp_path / "r")
    env = (r.elements / "kubelet/environment.d/10-kubelet").read_text()
    assert f"DIB_KUBELET_VERSION=${{DIB_KUBELET_VERSION:-{pins.version}}}" in env
    assert pins.pins[lockfile.Component.KUBELET].sha256[Arch.AMD64] in env
    ctr = (r.elements / "containerd/environment.d/10-containerd").read_text()
    assert pins.pause_image in ctr
    # Each artifact's element carries its own pin and no other element's.
    for comp, element in render.COMPONENT_ELEMENT.items():
        env = (r.elements / element / "environment.d" / f"10-{element}").read_text()
        for other in lockfile.Component:
            sha = pins.pins[other].sha256[Arch.AMD64]
            assert (sha in env) == (other == comp), (element, other.value)
        var = f"DIB_{comp.value.upper()}"
        assert f"export {var}_SHA256=${{{var}_SHA256:-{pins.pins[comp].sha256[Arch.AMD64]}}}" in env
        assert f"export {var}_VERSION=${{{var}_VERSION:-{pins.pins[comp].version}}}" in env
    assert set(render.COMPONENT_ELEMENT) == set(lockfile.Component)
    # The meta element has nothing but its README and element-deps.
    assert sorted(p.name for p in (r.elements / "kubernetes-node").iterdir()) == ["README.rst", "element-deps"]
    assert not list(r.elements.rglob("*.j2")), "templates must not be copied as-is"
    data = json.loads(r.pins_file.read_text())
    assert {a["component"] for a in data["artifacts"]} == {c.value for c in lockfile.Component}
    assert "DIB_RELEASE=bookworm" in r.env_file.read_text()
    assert (f'export NODEFORGE_ELEMENTS="debian-minimal {" ".join(render.DIB_ELEMENTS)}"'
            in r.env_file.read_text().splitlines())
    # Scripts stay executable; every script has the standard DIB header.
    for script in r.elements.glob("*/*.d/*"):
        if script.parent.name == "environment.d":
            continue
        assert os.access(script, os.X_OK), script
        assert "if [ ${DIB_DEBUG_TRACE:-0} -gt 0 ]; then\n    set -x\nfi\nset -eu\nset -o pipefail" \
            in script.read_text(), script


def test_hardening_controls_rendered_with_ids(tmp_path):
    r = render.render(lockfile.load(), "1.36", tmp_path / "r")
    hardening = json.loads((r.elements / render.HARDENING_JSON).read_text())
    ids = [c["id"] for c in hardening["controls"]]
    assert ids[0] == "NF-HARD-001" and len(ids) == len(set(ids))
    sysctl = (r.elements / "k8s-hardening/k8s-hardening-files/etc/sysctl.d/90-nodeforge.conf").read_text()
    assert "net.ipv4.ip_forward = 1   # NF-HARD-003" in sysctl
    modules = (r.elements / "k8s-hardening/k8s-hardening-files/etc/modules-load.d/nodeforge.conf").read_text()
    assert "br_netfilter" in modules and "overlay" in modules


def test_digest_changes_with_the_pins(tmp_path):
    lock = lockfile.load()
    assert render.render(lock, "1.36", tmp_path / "a").digest != render.render(lock, "1.35", tmp_path / "b").digest


def test_unknown_minor(tmp_path):
    with pytest.raises(ConfigError, match="1.99 is not pinned"):
        render.render(lockfile.load(), "1.99", tmp_path / "r")


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "precious").write_text("x")
    with pytest.raises(render.RenderError, match="not a nodeforge render"):
        render.render(lockfile.load(), "1.36", tmp_path / "r")
    assert (tmp_path / "r" / "precious").exists()


def test_profile_must_match_the_lockfile(tmp_path):
    src = tmp_path / "elements"
    import shutil
    shutil.copytree(render.ELEMENTS_SRC, src, symlinks=True)
    profile = src / render.PROFILE
    text, n = re.subn(r'^version: .*$', 'version: "9.9"', profile.read_text(), count=1, flags=re.M)
    assert n == 1
    profile.write_text(text)
    with pytest.raises(ConfigError, match="does not match the lockfile"):
        render.render(lockfile.load(), "1.36", tmp_path / "r", src=src)


def test_render_cli(run_cli, tmp_path):
    code, out, err = run_cli("image", "render", "--k8s", "1.36", "--out", str(tmp_path / "r"), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["kubernetes_version"] == lockfile.load().minor("1.36").version.__str__()
    code, out, err = run_cli("image", "render", "--k8s", "1.99", "--out", str(tmp_path / "x"))
    assert code == 2 and "1.99 is not pinned" in err


def test_render_out_empty_is_a_usage_error(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)           # an empty current directory: "" must not mean "here"
    lock = str(lockfile.DEFAULT_PATH)
    code, out, err = run_cli("image", "render", "--k8s", "1.36", "--out", "", "--lockfile", lock)
    assert code == 2 and "Traceback" not in err
    assert "Invalid value for '--out': must name a directory, not an empty string" in err
    code, out, err = run_cli("image", "render", "--k8s", "1.36", "--out", ".", "--lockfile", lock)
    assert code == 2 and "is the current directory or one of its parents" in err
    assert list(tmp_path.iterdir()) == []


def test_render_into_a_foreign_directory_is_a_usage_error(run_cli, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "precious").write_text("x")
    code, _, err = run_cli("image", "render", "--k8s", "1.36", "--out", str(tmp_path / "r"))
    assert code == 2 and "exists and is not a nodeforge render" in err
    assert (tmp_path / "r" / "precious").read_text() == "x"


def test_the_staged_artifacts_are_typed_and_pins_json_holds_their_fields(fixture_lock, tmp_path):
    from nodeforge.pins.lockfile import Arch, Component, load as load_lock

    lock = load_lock(fixture_lock)
    pins = render.pins_for(lock, "1.36", Arch.AMD64)
    assert [p.component for p in pins] == list(Component)
    assert all(p.arch is Arch.AMD64 and len(p.sha256) == 64 for p in pins)
    kubelet = next(p for p in pins if p.component is Component.KUBELET)
    assert kubelet.sha256 == lock.minor("1.36").pins[Component.KUBELET].sha256[Arch.AMD64]
    assert kubelet.name == f"kubelet {kubelet.version} amd64"
    r = render.render(lock, "1.36", tmp_path / "r")
    doc = json.loads(r.pins_file.read_text())
    assert doc["artifacts"] == [p.to_dict() for p in pins]
    env = (r.elements / "kubelet" / "environment.d" / "10-kubelet").read_text()
    assert f"DIB_KUBELET_SHA256:-{kubelet.sha256}" in env
