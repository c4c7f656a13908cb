"""The shared vocabulary: each pattern accepts what the services accept and
refuses the rest with its rule in words (credentials never echoed)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from nodeforge.schema import Declared, SchemaError, validate_data, vocab

CASES = [
    (vocab.Name, ["node-01", "a.b_c~d", "x" * 255], ["", "a b", "x" * 256, "nöde", "a/b"]),
    (vocab.Slug, ["platform", "team-a.1", "0x"], ["Team", "-x", "a b", "x" * 64, ""]),
    (vocab.DisplayName, ["Large bm", "m1.small"], [" lead", "", "a|b"]),
    (vocab.ResourceClass, ["baremetal-compute", "BM.Gold_1"], ["a b", "x" * 81, ""]),
    (vocab.PlacementResourceClass, ["CUSTOM_BAREMETAL_GOLD"], ["CUSTOM_", "custom_x", "BAREMETAL"]),
    (vocab.Trait, ["HW_CPU_X86_AVX2", "CUSTOM_GPU"], ["hw_cpu", "A-B", ""]),
    (vocab.CustomTrait, ["CUSTOM_RACK_A1"], ["HW_CPU_X86_AVX2", "CUSTOM_", "CUSTOM_a"]),
    (vocab.IPAddress, ["10.0.0.1", "fe80::1"], ["10.0.0.256", "host", ""]),
    (vocab.Hostname, ["bmc-1.example.org", "localhost", "a.b."], ["-a.b", "a..b", "a_b", "x" * 64 + ".org"]),
    (vocab.Host, ["10.0.0.1", "[fe80::1]", "bmc.example.org"], ["bad host", ""]),
    (vocab.SemVer, ["1.36.4", "v1.2.3", "1.0.0-rc.1"], ["1.36", "1.2.3+b", "x"]),
    (vocab.ReleaseVersion, ["1.36.4", "v0.1.0"], ["1.0.0-rc.1", "1.2"]),
    (vocab.VersionTag, ["v1.30.1", "v1.2.3-rc.0+build.5"], ["1.30.1", "v1.2"]),
    (vocab.KubeMinor, ["1.36", "1.100"], ["1.3.0", "2.1", "1."]),
    (vocab.DottedVersion, ["1", "1.1.0"], ["1.", "v1"]),
    (vocab.Sha256, ["a" * 64], ["A" * 64, "a" * 63, "g" * 64]),
    (vocab.Sha512, ["0" * 128], ["0" * 64]),
    (vocab.DateString, ["2027-01-31"], ["27-1-31"]),
    (vocab.HttpUrl, ["https://m.example/x?a=1", "http://10.0.0.1:8080/"],
     ["ftp://m/x", "https://", "https://u:p@m/x", "https://m/x?token=abc", "https://m:99999/x"]),
    (vocab.BaseUrl, ["https://m.example/k8s/"], ["https://m.example/k8s?x=1", "https://m.example/#f"]),
    (vocab.SecretRef, ["env:BMC_PW", "file:secrets/bmc.pw", "fernet:gAAAAAB-x_y="], ["hunter2", "env:", "env:1X"]),
]


@pytest.mark.parametrize("typ,good,bad", CASES, ids=[str(i) for i in range(len(CASES))])
def test_vocabulary_accepts_and_refuses(typ, good, bad):
    adapter = TypeAdapter(typ)
    for value in good:
        adapter.validate_python(value, strict=True)
    for value in bad:
        with pytest.raises(ValidationError) as info:
            adapter.validate_python(value, strict=True)
        assert "expected " in str(info.value)


def test_mac_addresses_are_normalised_the_way_ironic_stores_them():
    adapter = TypeAdapter(vocab.MacAddress)
    for raw in ("02:4E:46:00:01:00", "02-4e-46-00-01-00", "024e46000100"):
        assert adapter.validate_python(raw) == "02:4e:46:00:01:00"
    for raw in ("02:4e:46:00:01", "02:4e-46:00:01:00", "zz:4e:46:00:01:00"):
        with pytest.raises(ValidationError, match="expected a MAC address"):
            adapter.validate_python(raw)


def test_ports_and_bounded_numbers_are_strict_and_finite():
    port = TypeAdapter(vocab.Port)
    assert port.validate_python(623, strict=True) == 623
    for bad in (0, 65536, -1, True, "623", 623.0):
        with pytest.raises(ValidationError):
            port.validate_python(bad, strict=True)
    ratio = TypeAdapter(vocab.bounded(0, 1))
    assert ratio.validate_python(1, strict=True) == 1
    for bad in (float("nan"), float("inf"), 1.5, -0.1):
        with pytest.raises(ValidationError, match=r"expected a finite number >= 0 <= 1"):
            ratio.validate_python(bad, strict=True)
    with pytest.raises(ValidationError, match="finite"):
        TypeAdapter(vocab.FiniteFloat).validate_python(float("-inf"))


def test_placement_resource_class_follows_novas_rule():
    assert vocab.placement_resource_class("baremetal-compute") == "CUSTOM_BAREMETAL_COMPUTE"
    assert vocab.placement_resource_class("BM.Gold_1") == "CUSTOM_BM_GOLD_1"
    vocab.check_placement_class(vocab.placement_resource_class("x" * 80))


class _Mirror(Declared):
    url: vocab.BaseUrl
    password: vocab.SecretRef | None = None


@pytest.mark.parametrize("url", ["https://nfuser:Pa55w0rd-x@m.example/k8s", "https://m.example/k8s?token=T0k3n-x",
                                 "https://m.example/k8s?X-Amz-Signature=T0k3n-x&b=1"])
def test_url_credentials_are_refused_and_never_echoed(url):
    with pytest.raises(ValidationError) as info:          # even pydantic's own message hides the input
        _Mirror.model_validate({"url": url})
    with pytest.raises(SchemaError) as err:
        validate_data("NODEFORGE_MIRROR_X", {"url": url}, _Mirror)
    for text in (str(info.value), str(err.value), repr(err.value.to_dict())):
        assert "Pa55w0rd-x" not in text and "T0k3n-x" not in text and "nfuser" not in text
    assert "netrc" in str(err.value) and "***" in str(err.value)


def test_secret_ref_refusal_never_echoes_the_value():
    with pytest.raises(ValidationError) as info:
        _Mirror.model_validate({"url": "https://m.example", "password": "inline-Secret-123"})
    with pytest.raises(SchemaError) as err:
        validate_data("f.yaml", {"url": "https://m.example", "password": "inline-Secret-123"}, _Mirror)
    assert "inline-Secret-123" not in str(info.value) and "inline-Secret-123" not in str(err.value)


def test_patterns_repeated_in_feature_modules_are_covered_by_the_vocabulary():
    """The vocabulary is the superset of the hand-written patterns it replaces."""
    import re

    from nodeforge import scope

    assert scope.SCOPE_PATTERN.pattern.strip("^$") == vocab.check_slug.pattern.pattern
    for value in ("platform", "a.b-c_d", "x" * 63):
        assert bool(scope.SCOPE_PATTERN.match(value)) == bool(vocab.check_slug.pattern.fullmatch(value))
    inventory_name = re.compile(r"^[A-Za-z0-9._~-]{1,255}$")
    for value in ("node-01", "a b", "x" * 256, "a~b"):
        assert bool(inventory_name.match(value)) == bool(vocab.check_name.pattern.fullmatch(value))
