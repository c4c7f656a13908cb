"""Artifact sources: upstream URL layouts, mirror overrides, published checksum files."""

from __future__ import annotations

import pytest

from nodeforge.errors import ConfigError
from nodeforge.pins.lockfile import Arch, Component
from nodeforge.pins.sources import SourceName, Sources, parse_checksum_file


def test_upstream_layouts():
    s = Sources()
    assert s.artifact_url(Component.KUBELET, "1.36.4", Arch.ARM64) == \
        "https://dl.k8s.io/release/v1.36.4/bin/linux/arm64/kubelet"
    assert s.checksum_url(Component.KUBEADM, "1.36.4", Arch.AMD64) == \
        "https://dl.k8s.io/release/v1.36.4/bin/linux/amd64/kubeadm.sha256"
    assert s.marker_url("1.35") == "https://dl.k8s.io/release/stable-1.35.txt"
    assert s.marker_url() == "https://dl.k8s.io/release/stable.txt"
    assert s.artifact_url(Component.CRICTL, "1.36.0", Arch.AMD64) == \
        "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/crictl-v1.36.0-linux-amd64.tar.gz"
    assert s.artifact_url(Component.CNI_PLUGINS, "1.9.1", Arch.ARM64) == \
        "https://github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-arm64-v1.9.1.tgz"
    assert s.artifact_url(Component.CONTAINERD, "2.3.4", Arch.AMD64) == \
        "https://github.com/containerd/containerd/releases/download/v2.3.4/containerd-2.3.4-linux-amd64.tar.gz"
    assert s.checksum_url(Component.CONTAINERD, "2.3.4", Arch.AMD64) == \
        "https://github.com/containerd/containerd/releases/download/v2.3.4/containerd-2.3.4-linux-amd64.tar.gz.sha256sum"
    assert s.artifact_url(Component.RUNC, "1.4.3", Arch.ARM64) == \
        "https://github.com/opencontainers/runc/releases/download/v1.4.3/runc.arm64"
    assert s.checksum_url(Component.RUNC, "1.4.3", Arch.ARM64) == \
        "https://github.com/opencontainers/runc/releases/download/v1.4.3/runc.sha256sum"


def test_mirror_from_config_file_replaces_only_the_base(tmp_path):
    cfg = tmp_path / "sources.yaml"
    cfg.write_text("mirrors:\n  kubernetes: http://10.0.0.5:8080/k8s/\n  runc:\n")
    s = Sources.load(cfg, env={})
    assert s.artifact_url(Component.KUBECTL, "1.35.8", Arch.AMD64) == \
        "http://10.0.0.5:8080/k8s/release/v1.35.8/bin/linux/amd64/kubectl"
    assert s.marker_url("1.35") == "http://10.0.0.5:8080/k8s/release/stable-1.35.txt"
    assert s.base(SourceName.RUNC).startswith("https://github.com/opencontainers/runc/")
    assert s.to_dict()["kubernetes"]["mirror"] is True


def test_environment_wins_over_config_and_empty_means_upstream(tmp_path):
    cfg = tmp_path / "sources.yaml"
    cfg.write_text("mirrors:\n  kubernetes: http://a.invalid/k8s\n  containerd: http://a.invalid/ctr\n")
    s = Sources.load(cfg, env={"NODEFORGE_MIRROR_KUBERNETES": "https://b.invalid/k",
                               "NODEFORGE_MIRROR_CONTAINERD": ""})
    assert s.base(SourceName.KUBERNETES) == "https://b.invalid/k"
    assert s.base(SourceName.CONTAINERD) == "https://github.com/containerd/containerd/releases/download"


def test_committed_sources_config_sets_no_mirror():
    assert Sources.load(env={}).mirrors == {}


@pytest.mark.parametrize("text,match", [
    ("mirrors:\n  kubernetes: http://ok.invalid\n  kubelet: http://x.invalid\n", r"sources.yaml:3: mirrors.kubelet: unknown key \(allowed: kubernetes, crictl, cni_plugins, containerd, runc\)"),
    ("mirrors:\n  runc: ftp://x.invalid/runc\n", r"sources.yaml:2: mirrors.runc: expected an http\(s\) base URL"),
    ("mirrors:\n  runc: 8080\n", r"sources.yaml:2: mirrors.runc: expected a string, got the number 8080"),
    ("mirrors: [http://x.invalid]\n", r"sources.yaml:1: mirrors: expected a mapping, got a list"),
    ("mirror:\n  runc: http://x.invalid\n", r"sources.yaml:1: mirror: unknown key \(allowed: mirrors\)"),
])
def test_bad_config_names_file_line_and_key(tmp_path, text, match):
    cfg = tmp_path / "sources.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Sources.load(cfg, env={})


def test_bad_env_mirror_is_rejected():
    with pytest.raises(ConfigError, match="NODEFORGE_MIRROR_CRICTL"):
        Sources.load(None, env={"NODEFORGE_MIRROR_CRICTL": "not a url"})


HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize("text,name,expected", [
    (f"{HEX}\n", "kubelet", HEX),                                         # Kubernetes .sha256
    (f"{HEX}  containerd-2.3.4-linux-amd64.tar.gz\n", "containerd-2.3.4-linux-amd64.tar.gz", HEX),
    (f"{'1' * 64}  runc.amd64\n{HEX} *runc.arm64\n", "runc.arm64", HEX),  # one file, many assets
    (f"{'1' * 64}  runc.amd64\n", "runc.arm64", None),
    ("<html>not found</html>", "kubelet", None),
    (f"{HEX.upper()}\n", "kubelet", HEX),
])
def test_parse_checksum_file(text, name, expected):
    assert parse_checksum_file(text, name) == expected
