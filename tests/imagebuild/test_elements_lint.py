"""The diskimage-builder elements: dib-lint clean, one README and element-deps
each, one owner per created path, and a complete element list.

The ownership check is static: the directories a phase script creates
(``install -d``, ``mkdir -p``), the files it installs (``install ... DEST``)
and the files of the data trees it copies onto ``/`` (``cp -r
/tmp/in_target.d/<tree>/. /``). A path may be created by one element only;
an element that puts something below another element's directory must depend
on that element (directly or through its dependencies).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodeforge.imagebuild import package_base as pb, package_lock, ramdisk, render
from nodeforge.pins import lockfile
from tests.prereq import require, require_tools

PHASE_DIRS_IN_CHROOT = ("install.d", "post-install.d", "pre-install.d", "finalise.d")
COPY_TREE = re.compile(r"^cp -r /tmp/in_target\.d/([\w.-]+)/\. /$")
ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(/[\w./-]*)$")


# --- dib-lint ---------------------------------------------------------------------------

def _dib_lint(elements: Path, tmp: Path) -> subprocess.CompletedProcess:
    """diskimage-builder's own linter over ``elements`` (it expects its repository layout and git)."""
    dib_lint = Path(sys.prefix) / "bin" / "dib-lint"
    require(dib_lint.exists(), f"dib-lint not installed ({dib_lint}; it comes with diskimage-builder)")
    require_tools("git", why="dib-lint runs git")
    repo = tmp / "lint"
    shutil.copytree(elements, repo / "diskimage_builder" / "elements", symlinks=True)
    (repo / "diskimage_builder" / "lib").mkdir()
    subprocess.run(["git", "init", "-q", "."], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.prefix) / "bin"), os.environ.get("PATH", "")])}
    return subprocess.run([str(dib_lint)], cwd=repo, capture_output=True, text=True, timeout=300, env=env)


def test_source_elements_pass_dib_lint(tmp_path):
    proc = _dib_lint(render.ELEMENTS_SRC, tmp_path)
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Checking diskimage_builder/elements/kubelet/install.d/50-kubelet" in proc.stdout


def test_rendered_elements_pass_dib_lint(tmp_path):
    r = render.render(lockfile.load(), "1.36", tmp_path / "r")
    proc = _dib_lint(r.elements, tmp_path)
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_dib_lint_catches_a_script_without_set_e(tmp_path):
    """The lint run above can fail: a phase script without ``set -e`` is reported."""
    src = tmp_path / "elements"
    shutil.copytree(render.ELEMENTS_SRC, src, symlinks=True)
    script = src / "kubectl" / "install.d" / "50-kubectl"
    script.write_text(script.read_text().replace("set -eu\n", "set -u\n"))
    proc = _dib_lint(src, tmp_path)
    assert proc.returncode != 0 and "50-kubectl is not set -e" in proc.stdout, proc.stdout[-3000:]


# --- README, element-deps, element list -------------------------------------------------

def _elements(src: Path) -> list[Path]:
    return sorted(p for p in src.iterdir() if p.is_dir())


def _deps(element: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in (element / "element-deps").read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def test_every_element_has_a_readme_and_element_deps():
    dib_elements = package_lock.dib_elements_dir()
    require(dib_elements is not None, "diskimage-builder's elements directory not found")
    for element in _elements(render.ELEMENTS_SRC):
        readme = (element / "README.rst").read_text()
        assert readme.splitlines()[1] == element.name, f"{element.name}/README.rst: the title names the element"
        assert len(readme) > 200, f"{element.name}/README.rst says what the element does"
        deps = _deps(element)
        assert deps, f"{element.name}/element-deps is empty"
        assert deps == sorted(deps), f"{element.name}/element-deps is not sorted"
        for dep in deps:
            assert (render.ELEMENTS_SRC / dep).is_dir() or (dib_elements / dep).is_dir() \
                or (ramdisk.builder_elements() / dep).is_dir(), \
                f"{element.name}/element-deps: no element {dep}"
        # An element whose package-installs.yaml would otherwise be ignored.
        if (element / "package-installs.yaml").exists():
            assert "package-installs" in deps, f"{element.name} lists packages but not package-installs"


def test_every_script_is_an_executable_bash_phase_script():
    header = "#!/bin/bash\n"
    idiom = "if [ ${DIB_DEBUG_TRACE:-0} -gt 0 ]; then\n    set -x\nfi\nset -eu\nset -o pipefail\n"
    scripts = [p for p in render.ELEMENTS_SRC.glob("*/*.d/*") if p.parent.name != "environment.d"]
    assert len(scripts) >= 20
    for script in scripts:
        text = script.read_text()
        assert os.access(script, os.X_OK), script
        assert text.startswith(header) and idiom in text, script
    for env in render.ELEMENTS_SRC.glob("*/environment.d/*"):
        assert not os.access(env, os.X_OK), f"{env} is sourced, not run: not executable"


def test_element_list_is_closed_and_complete():
    names = set(render.NODEFORGE_ELEMENTS)
    # Every nodeforge element is built: on disk-image-create's list or pulled in by it, or it is the
    # agent ramdisk's (and then no node image element depends on it).
    assert names | set(render.RAMDISK_ELEMENTS) == {p.name for p in _elements(render.ELEMENTS_SRC)}, \
        "an element under elements/ is neither in render.DIB_ELEMENTS nor a dependency of one"
    assert not names & set(render.RAMDISK_ELEMENTS)
    assert set(render.DIB_ELEMENTS) <= names
    for name in render.NODEFORGE_ELEMENTS:
        for dep in _deps(render.ELEMENTS_SRC / name):
            assert dep in names or not (render.ELEMENTS_SRC / dep).is_dir(), (name, dep)
    # The meta element pulls in one element per pinned artifact.
    meta = set(render.element_closure(render.ELEMENTS_SRC, ["kubernetes-node"]))
    assert set(render.COMPONENT_ELEMENT.values()) <= meta
    assert not {"k8s-hardening", "image-hygiene", "nodeforge-vm", "nodeforge-baremetal"} & meta


def test_element_closure_follows_element_deps(tmp_path):
    for name, deps in (("a", "b\nmissing-dib-element\n"), ("b", "c # comment\n\n"), ("c", "a\n"), ("d", "c\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "element-deps").write_text(deps)
    assert render.element_closure(tmp_path, ["a"]) == ("a", "b", "c")
    assert render.element_closure(tmp_path, ["d", "a"]) == ("d", "c", "a", "b")
    assert render.element_closure(tmp_path, ["nope"]) == ()


def test_package_base_union_covers_every_element_in_the_graph():
    """build.py's package base takes the union over NODEFORGE_ELEMENTS: every package an element
    reachable from disk-image-create's list installs is in it."""
    union = pb.union_packages(render.ELEMENTS_SRC, list(render.NODEFORGE_ELEMENTS))
    reachable = render.element_closure(render.ELEMENTS_SRC, render.DIB_ELEMENTS)
    for name in reachable:
        for pkg in pb.union_packages(render.ELEMENTS_SRC, [name]):
            assert pkg in union, (name, pkg)
    # What the split elements install, unchanged from the bundled ones they replaced.
    assert set(union) == {
        "auditd", "ca-certificates", "cloud-guest-utils", "cloud-init", "conntrack", "dosfstools", "e2fsprogs",
        "ebtables", "ethtool", "firmware-linux-free", "grub-efi-amd64-bin", "grub-pc-bin", "iproute2", "iptables",
        "kmod", "openssh-server", "procps", "qemu-guest-agent", "socat"}


# --- one owner per created path ---------------------------------------------------------

def created_paths(src: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Absolute path -> [(element, kind, where)] for every path an element's
    in-chroot phase scripts create (kind ``dir`` or ``file``)."""
    out: dict[str, list[tuple[str, str, str]]] = {}

    def add(path: str, element: str, kind: str, where: str) -> None:
        path = os.path.normpath(path)
        entries = out.setdefault(path, [])
        if (element, kind) not in [(e, k) for e, k, _ in entries]:
            entries.append((element, kind, where))

    for element in _elements(src):
        for phase in PHASE_DIRS_IN_CHROOT:
            for script in sorted((element / phase).glob("*")):
                assigned: dict[str, str] = {}      # var=/absolute/path set earlier in the script
                for n, line in enumerate(script.read_text().splitlines(), 1):
                    where = f"{element.name}/{phase}/{script.name}:{n}"
                    line = line.split(" #", 1)[0].strip()
                    for var, value in assigned.items():
                        line = line.replace(f'"${var}"', value).replace(f"${{{var}}}", value)
                    assignment = ASSIGN.match(line)
                    if assignment:
                        assigned[assignment.group(1)] = assignment.group(2)
                        continue
                    copied = COPY_TREE.match(line)
                    if copied:
                        tree = element / copied.group(1)
                        for f in sorted(tree.rglob("*")):
                            if not f.is_dir():
                                rel = f.relative_to(tree).as_posix()
                                add("/" + (rel[:-3] if rel.endswith(".j2") else rel), element.name, "file", where)
                        continue
                    try:
                        argv = shlex.split(line)
                    except ValueError:
                        continue
                    if not argv:
                        continue
                    operands = [a for a in argv[1:] if a.startswith("/")]
                    if (argv[0] == "mkdir" and "-p" in argv) or (argv[0] == "install" and "-d" in argv):
                        for d in operands:
                            add(d, element.name, "dir", where)
                    elif argv[0] == "install" and operands and not argv[-1].startswith("$"):
                        dest = argv[-1]
                        if dest.endswith("/"):
                            continue        # into an existing directory: the file names come from the sources
                        add(dest, element.name, "file", where)
    return out


def ownership_problems(src: Path) -> list[str]:
    paths = created_paths(src)
    problems = []
    for path, entries in sorted(paths.items()):
        owners = sorted({e for e, _, _ in entries})
        if len(owners) > 1:
            problems.append(f"{path} is created by {len(owners)} elements: "
                            + ", ".join(f"{e} ({w})" for e, _, w in entries))
    dirs = {p: entries[0][0] for p, entries in paths.items() if any(k == "dir" for _, k, _ in entries)}
    for path, entries in sorted(paths.items()):
        for element, _, where in entries:
            parent = os.path.dirname(path)
            while parent not in ("/", ""):
                owner = dirs.get(parent)
                if owner and owner != element and owner not in render.element_closure(src, [element]):
                    problems.append(f"{where}: {path} is below {parent}, which {owner} creates; "
                                    f"{element} must depend on {owner}")
                parent = os.path.dirname(parent)
    return problems


def test_no_two_elements_create_the_same_path(tmp_path):
    rendered = render.render(lockfile.load(), "1.36", tmp_path / "r").elements   # with hardening.json
    paths = created_paths(rendered)
    # The check sees what the elements create (so a clean result means something).
    for path, owner in (("/var/lib/kubelet", "kubelet"), ("/etc/kubernetes/manifests", "kubelet"),
                        ("/opt/cni/bin", "cni-plugins"), ("/etc/cni/net.d", "cni-plugins"),
                        ("/usr/local/sbin/runc", "runc"), ("/etc/crictl.yaml", "crictl"),
                        ("/etc/nodeforge", "nodeforge-rootfs"),
                        ("/etc/nodeforge/hardening.json", "k8s-hardening"),
                        ("/etc/systemd/system/nodeforge-ssh-host-keys.service", "image-hygiene"),
                        ("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", "kubeadm"),
                        ("/usr/lib/nodeforge/variants/vm", "nodeforge-vm")):
        assert [e for e, _, _ in paths[path]] == [owner], (path, paths.get(path))
    assert ownership_problems(rendered) == []
    assert ownership_problems(render.ELEMENTS_SRC) == []


def test_a_second_creator_is_reported(tmp_path):
    src = tmp_path / "elements"
    shutil.copytree(render.ELEMENTS_SRC, src, symlinks=True)
    script = src / "k8s-hardening" / "install.d" / "60-k8s-hardening"
    script.write_text(script.read_text() + "install -d -m 0700 /var/lib/kubelet\n")
    problems = ownership_problems(src)
    assert any(p.startswith("/var/lib/kubelet is created by 2 elements: k8s-hardening (") and "kubelet (" in p
               for p in problems), problems
    # A path below another element's directory needs a dependency on that element.
    (src / "kubectl" / "kubectl-files" / "etc" / "kubernetes").mkdir(parents=True)
    (src / "kubectl" / "kubectl-files" / "etc" / "kubernetes" / "admin.conf").write_text("")
    script = src / "kubectl" / "install.d" / "50-kubectl"
    script.write_text(script.read_text() + "cp -r /tmp/in_target.d/kubectl-files/. /\n")
    problems = ownership_problems(src)
    assert any("/etc/kubernetes/admin.conf is below /etc/kubernetes, which kubelet creates; "
               "kubectl must depend on kubelet" in p for p in problems), problems


def test_element_data_directories_do_not_collide():
    """diskimage-builder merges every element subdirectory into one hooks dir."""
    seen: dict[str, str] = {}
    for element in _elements(render.ELEMENTS_SRC):
        for sub in element.iterdir():
            if sub.is_dir() and not sub.name.endswith(".d") and sub.name not in ("bin", "tests"):
                assert sub.name not in seen, f"{element.name}/{sub.name} collides with {seen[sub.name]}"
                seen[sub.name] = element.name


@pytest.mark.parametrize("name", sorted(render.COMPONENT_ELEMENT.values()))
def test_artifact_elements_stage_and_check_their_own_artifact(name):
    """Each artifact element stages one artifact (extra-data.d) and re-checks it in the chroot."""
    element = render.ELEMENTS_SRC / name
    comp = next(c for c, e in render.COMPONENT_ELEMENT.items() if e == name)
    var = f"DIB_{comp.value.upper()}_SHA256"
    staged = render.STAGED_NAME[comp]
    extra = "".join(p.read_text() for p in (element / "extra-data.d").glob("*"))
    assert f'nodeforge_stage_artifact {staged} "${var}"' in extra
    assert extra.count("nodeforge_stage_artifact ") == 1
    install = "".join(p.read_text() for p in (element / "install.d").glob("*"))
    assert f'echo "${var}  $src/{staged}" | sha256sum --check --quiet -' in install
    assert "nodeforge-rootfs" in _deps(element)     # the staging helper
