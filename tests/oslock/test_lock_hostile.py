"""Hostile or damaged package locks: always a ConfigError naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from nodeforge.errors import ConfigError
from nodeforge.oslock import lock as ol

PATH = Path("manifests/os-packages.lock.yaml")
VALID = ol.PackageLock(
    release="bookworm", architecture="amd64",
    suites={"bookworm": "main", "bookworm-security": "security"},
    resolve=ol.Resolve(install=("openssh-server",)),
    packages=(ol.LockedPackage("openssh-server", "1:9.2p1-2+deb12u5", "amd64", "bookworm-security", 1000,
                               "a" * 64, "pool/updates/main/o/openssh/openssh-server_9.2p1-2+deb12u5_amd64.deb"),
              ol.LockedPackage("adduser", "3.134", "all", "bookworm", 10, "b" * 64,
                               "pool/main/a/adduser/adduser_3.134_all.deb")),
    index_dates={"bookworm": "Sat, 11 Jul 2026 10:16:37 UTC", "bookworm-security": "Mon, 30 Nov 2026 00:22:33 UTC"},
).dumps()


def _load(text: str):
    try:
        return ol.loads(text, PATH)
    except ConfigError as exc:
        assert str(PATH) in str(exc)
        return None


def test_the_valid_lock_round_trips():
    lock = ol.loads(VALID, PATH)
    assert lock.dumps() == VALID and len(lock.packages) == 2


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(0, len(VALID) - 1), st.integers(0, 40), st.text(max_size=40))
def test_any_splice_of_the_lock_is_loaded_or_refused_cleanly(at, cut, insert):
    _load(VALID[:at] + insert + VALID[at + cut:])


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20))
def test_any_yaml_document_is_loaded_or_refused_cleanly(doc):
    import yaml
    _load(yaml.safe_dump(doc))
    _load(yaml.safe_dump({"schema_version": 1, "release": "x", "architecture": "amd64", "suites": {"x": "main"},
                          "packages": doc if isinstance(doc, list) else [doc]}))


def test_deep_nesting_is_refused_not_a_crash():
    assert _load("packages: " + "[" * 5000 + "]" * 5000) is None
