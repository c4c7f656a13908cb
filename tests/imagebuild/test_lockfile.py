"""The lockfile: the committed pins, validation errors (line + key path), round-trip edits."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml

from nodeforge.errors import ConfigError
from nodeforge.pins import lockfile
from nodeforge.pins.lockfile import Arch, BaseOS, Component, MinorPins, Pin, Version
from tests.prereq import require

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "manifests" / "versions.yaml"
REFERENCE = Path(__file__).parent / "data" / "kubespray-checksums.yml"
SHARED_REFERENCE = REPO.parent / "shared" / "reference" / "kubespray-checksums.yml"
REFERENCE_KEY = {
    Component.KUBELET: "kubelet_checksums",
    Component.KUBEADM: "kubeadm_checksums",
    Component.KUBECTL: "kubectl_checksums",
    Component.CRICTL: "crictl_checksums",
    Component.CNI_PLUGINS: "cni_binary_checksums",
    Component.CONTAINERD: "containerd_archive_checksums",
    Component.RUNC: "runc_checksums",
}


def test_production_lockfile_pins_three_minors_for_both_arches():
    lock = lockfile.load(PRODUCTION)
    assert list(lock.minors) == ["1.34", "1.35", "1.36"]
    assert lock.architectures == (Arch.AMD64, Arch.ARM64)
    assert lock.base_os is BaseOS.DEBIAN_12
    assert lock.hardening.profile and lock.hardening.version
    for minor, entry in lock.minors.items():
        assert entry.version.minor_key == minor and not entry.version.is_prerelease
        assert set(entry.pins) == set(Component)
        assert entry.pins[Component.CRICTL].version.startswith(minor + ".")
        assert entry.pause_image.rsplit(":", 1)[0].endswith("/pause")
    assert len(lock.artifacts()) == 3 * 7 * 2


def test_every_pinned_checksum_equals_the_published_reference():
    reference = yaml.safe_load(REFERENCE.read_text())
    lock = lockfile.load(PRODUCTION)
    checked = 0
    for a in lock.artifacts():
        published = reference[REFERENCE_KEY[a.component]][a.arch.value].get(a.version)
        assert published == f"sha256:{a.sha256}", f"{a.minor} {a.name}"
        checked += 1
    assert checked == 42


def test_vendored_reference_is_the_shared_reference_verbatim():
    require(SHARED_REFERENCE.exists(), f"shared reference data ({SHARED_REFERENCE}) not beside the checkout")
    assert REFERENCE.read_bytes() == SHARED_REFERENCE.read_bytes()


def test_round_trip_is_byte_identical():
    lock = lockfile.load(PRODUCTION)
    assert lock.dumps() == PRODUCTION.read_text()


def test_with_minor_changes_only_differing_values_and_keeps_comments(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text(PRODUCTION.read_text())
    lock = lockfile.load(path)
    old = lock.minors["1.35"]
    new_kubelet = Pin(Component.KUBELET, "1.35.9", {Arch.AMD64: "a" * 64, Arch.ARM64: old.pins[Component.KUBELET].sha256[Arch.ARM64]})
    pins = {c: (Pin(c, "1.35.9", p.sha256) if c.is_kubernetes else p) for c, p in old.pins.items()}
    pins[Component.KUBELET] = new_kubelet
    updated = lock.with_minor(MinorPins("1.35", Version.parse("1.35.9"), old.pause_image, pins))
    updated.save()

    before, after = PRODUCTION.read_text().splitlines(), path.read_text().splitlines()
    changed = [line for line in difflib.unified_diff(before, after, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == [
        "-    version: 1.35.8",
        "+    version: 1.35.9",
        f"-        amd64: {old.pins[Component.KUBELET].sha256[Arch.AMD64]}",
        "+        amd64: " + "a" * 64,
    ]
    assert lockfile.load(path).minors["1.35"].pins[Component.KUBECTL].version == "1.35.9"


def test_with_minor_adds_a_new_minor_as_quoted_key(tmp_path):
    lock = lockfile.load(PRODUCTION)
    base = lock.minors["1.36"]
    pins = {c: (Pin(c, "1.37.0", {a: "b" * 64 for a in Arch}) if c.is_kubernetes else p) for c, p in base.pins.items()}
    updated = lock.with_minor(MinorPins("1.37", Version.parse("1.37.0"), base.pause_image, pins))
    assert list(updated.minors) == ["1.34", "1.35", "1.36", "1.37"]
    assert '\n  "1.37":\n    version: 1.37.0\n' in updated.dumps()
    assert updated.dumps().startswith(PRODUCTION.read_text())  # everything before is untouched


def _broken(tmp_path, old: str, new: str) -> ConfigError:
    text = PRODUCTION.read_text()
    assert old in text
    path = tmp_path / "versions.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        lockfile.load(path)
    return info.value


def _line(needle: str, tmp_path) -> int:
    for n, line in enumerate((tmp_path / "versions.yaml").read_text().splitlines(), 1):
        if needle in line:
            return n
    raise AssertionError(needle)


KUBELET_134_ARM = "f12879879481e9af46317c2c82a6dba7d59df78ed095e44e0399643df1c4c8ba"


@pytest.mark.parametrize("old,new,needle,keypath,detail", [
    (KUBELET_134_ARM, "f1287987948", "arm64: f1287987948",
     'kubernetes["1.34"].binaries.kubelet.arm64', "expected a sha256 digest"),
    (KUBELET_134_ARM, KUBELET_134_ARM.upper(), KUBELET_134_ARM.upper(),
     'kubernetes["1.34"].binaries.kubelet.arm64', "64 lowercase hex"),
    ('  "1.35":', "  1.30:", "1.30:", 'kubernetes["1.3"]', 'key the number 1.3 must be a string; quote it: "1.30"'),
    ("    version: 1.36.4", "    version: 1.36.5-rc.1", "1.36.5-rc.1",
     'kubernetes["1.36"].version', "pre-release 1.36.5-rc.1 cannot be pinned"),
    ("    version: 1.36.4", "    version: 1.35.4", "version: 1.35.4",
     'kubernetes["1.36"].version', "is not a 1.36 release"),
    ('  release: "12"', '  release: "11"', 'release: "11"', "base_os", "unsupported base OS debian 11"),
    ("  release: \"12\"", "  release: 12", "release: 12", "base_os.release", 'expected a string, got the number 12; quote it: "12"'),
    ("        version: 2.3.4\n", "        version: 2.3.4\n        extra: 1\n", "extra: 1",
     'kubernetes["1.34"].components.containerd.extra', "unknown key"),
    ("architectures: [amd64, arm64]", "architectures: [amd64, s390x]", "architectures:",
     "architectures[1]", "unknown architecture 's390x'"),
    ("    pause_image: registry.k8s.io/pause:3.10.1\n", "", '  "1.34":',
     'kubernetes["1.34"]', "missing key 'pause_image'"),
    ("    pause_image: registry.k8s.io/pause:3.10.1\n", "    pause_image: registry.k8s.io/pause\n",
     "pause_image: registry.k8s.io/pause", 'kubernetes["1.34"].pause_image', "needs a tag or an @sha256: digest"),
    ("    pause_image: registry.k8s.io/pause:3.10.1\n", "    pause_image: registry.k8s.io/pause:latest\n",
     "pause:latest", 'kubernetes["1.34"].pause_image', "the tag 'latest' moves"),
])
def test_malformed_lockfile_error_names_line_and_key_path(tmp_path, old, new, needle, keypath, detail):
    err = _broken(tmp_path, old, new)
    line = _line(needle, tmp_path)
    assert str(err).startswith(f"{tmp_path / 'versions.yaml'}:{line}: ")
    assert keypath in str(err)
    assert detail in str(err)
    assert err.exit_code == 2


def test_all_problems_are_reported_at_once(tmp_path):
    text = PRODUCTION.read_text().replace(KUBELET_134_ARM, "zz", 1).replace('release: "12"', 'release: "99"')
    path = tmp_path / "versions.yaml"
    path.write_text(text)
    with pytest.raises(lockfile.LockfileError) as info:
        lockfile.load(path)
    assert len(info.value.problems) == 2
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{path}:") for line in lines)
    assert info.value.to_dict()["problems"][0]["key"] == "base_os.release"


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "versions.yaml"
    lines = PRODUCTION.read_text().splitlines()
    lines[30] = lines[30] + " : : ["  # line 31
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"versions.yaml:31: invalid YAML: mapping values are not allowed here"):
        lockfile.load(path)


def test_duplicate_key_is_rejected_with_line(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text(PRODUCTION.read_text().replace("schema_version: 1\n", "schema_version: 1\nschema_version: 1\n"))
    with pytest.raises(ConfigError, match=r"versions.yaml:\d+: duplicate key 'schema_version'"):
        lockfile.load(path)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        lockfile.load(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text,expected", [
    ("v1.36.4", (1, 36, 4, None)),
    ("1.35.0-rc.1", (1, 35, 0, "rc.1")),
    ("v1.37.0-alpha.0\n", (1, 37, 0, "alpha.0")),
])
def test_version_parse(text, expected):
    v = Version.parse(text)
    assert (v.major, v.minor, v.patch, v.pre) == expected
    assert v.is_prerelease == (expected[3] is not None)


def test_version_order_puts_prerelease_before_release():
    order = ["1.35.9", "1.36.0-alpha.1", "1.36.0-rc.0", "1.36.0", "1.36.1", "1.36.10"]
    assert sorted(order, key=lambda s: Version.parse(s).sort_key()) == order
    with pytest.raises(ValueError):
        Version.parse("latest")


# --------------------------------------------------------------------------
# Ownership scope: the images built from the lockfile carry it

def test_scope_key_names_the_lockfiles_scope_and_survives_edits(tmp_path):
    path = tmp_path / "versions.yaml"
    assert "\nscope: platform\n" in PRODUCTION.read_text()
    path.write_text(PRODUCTION.read_text().replace("\nscope: platform\n", "\nscope: team-a\n", 1))
    lock = lockfile.load(path)
    assert (lock.scope, lock.scope_source) == ("team-a", "file")
    base = lock.minors["1.36"]
    pins = {c: (Pin(c, "1.37.0", {a: "b" * 64 for a in Arch}) if c.is_kubernetes else p) for c, p in base.pins.items()}
    updated = lock.with_minor(MinorPins("1.37", Version.parse("1.37.0"), base.pause_image, pins))
    assert updated.scope == "team-a" and "\nscope: team-a\n" in updated.dumps()


def test_without_scope_key_the_scope_is_derived_from_the_path(tmp_path):
    from nodeforge.ironic import constants as IC

    assert lockfile.load(PRODUCTION).scope == "platform"      # the production lockfile names its scope
    unscoped = PRODUCTION.read_text().replace("\nscope: platform\n", "\n", 1)
    a, b = tmp_path / "a" / "versions.yaml", tmp_path / "b" / "versions.yaml"
    for path in (a, b):
        path.parent.mkdir()
        path.write_text(unscoped)
    lock = lockfile.load(a)
    assert (lock.scope, lock.scope_source) == (IC.derive_scope(a), "derived")
    assert lock.scope.startswith("versions-")
    assert lockfile.load(b).scope == IC.derive_scope(b) != lock.scope   # another file, another scope


@pytest.mark.parametrize("value", ["Team-A", "'-x'", "a b", "1.5", "[a]"])
def test_bad_scope_names_file_line_and_key(tmp_path, value):
    err = _broken(tmp_path, "\nscope: platform\n", f"\nscope: {value}\n")
    line = _line("scope:", tmp_path)
    assert str(err).startswith(f"{tmp_path / 'versions.yaml'}:{line}: scope: must be 1-63 characters")
    assert err.exit_code == 2


def test_pause_image_with_a_digest_or_a_tag_and_digest_is_accepted(tmp_path):
    digest = "@sha256:" + "a" * 64
    for ref in (f"registry.k8s.io/pause{digest}", f"registry.k8s.io/pause:latest{digest}",
                "registry.example:5000/k8s/pause:3.10.1"):
        path = tmp_path / "versions.yaml"
        path.write_text(PRODUCTION.read_text().replace("pause_image: registry.k8s.io/pause:3.10.1",
                                                       f"pause_image: {ref}", 1))
        assert lockfile.load(path).minors["1.34"].pause_image == ref


@pytest.mark.parametrize("data,line,detail", [
    (b"schema_version: 1\narchitectures: [amd64]\nscope: caf\xe9\n", 3, "not UTF-8 text"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 3, "not a text file"),
    (b"schema_version: " + b"[" * 20000 + b"]" * 20000 + b"\n", 1, "nested more than 64 levels deep"),
])
def test_binary_non_utf8_or_deeply_nested_lockfile_is_a_usage_error(tmp_path, data, line, detail):
    from nodeforge import cli

    path = tmp_path / "versions.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        lockfile.load(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and detail in str(info.value)
    assert info.value.exit_code == 2
    assert cli.main(["image", "render", "--k8s", "1.36", "--out", str(tmp_path / "r"), "--lockfile", str(path)]) == 2
