"""Declarations: strict types (YAML implicit typing never silently changes a value),
unknown keys named, every problem with file, line and key path, secrets flagged."""

from __future__ import annotations

import textwrap
from typing import Annotated, Literal

import pytest
from pydantic import Field

from nodeforge import cli
from nodeforge.errors import ConfigError
from nodeforge.schema import (SECRET, Declared, SchemaError, is_secret, load, load_file, register, secret_field,
                              secret_fields, validate, validate_data, vocab)


class DriverInfo(Declared):
    ipmi_address: vocab.Host
    ipmi_port: vocab.Port = 623
    ipmi_password: vocab.SecretRef | None = None
    ipmi_kg_key: Annotated[str | None, SECRET] = None


class Node(Declared):
    name: vocab.Name
    driver: Literal["ipmi", "redfish"] = "ipmi"
    macs: list[vocab.MacAddress] = []
    resource_class: vocab.ResourceClass | None = None
    traits: list[vocab.CustomTrait] = []
    driver_info: DriverInfo
    cpus: vocab.bounded(1, 4096, integer=True) = 1
    weight: vocab.bounded(0, 1) = 0.5
    enabled: bool = True


class Inventory(Declared):
    version: vocab.KubeMinor
    nodes: list[Node] = Field(min_length=1)
    token: str = secret_field(None)


def _check(text: str, tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SchemaError) as info:
        load_file(path, Inventory)
    return path, info.value


def test_a_valid_file_becomes_an_instance_with_normalised_values(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text('version: "1.36"\nnodes:\n  - name: n1\n    macs: [AA-BB-CC-DD-EE-FF]\n'
                    '    driver_info: {ipmi_address: 10.0.0.1, ipmi_password: "env:PW"}\n')
    document, inv = load_file(path, Inventory)
    assert inv.nodes[0].macs == ["aa:bb:cc:dd:ee:ff"] and inv.nodes[0].driver_info.ipmi_port == 623
    assert document.line(("nodes", 0, "driver_info")) == 5


@pytest.mark.parametrize("text,line,key,detail", [
    # YAML implicit typing: the number 1.3, not "1.30"
    ('version: 1.30\nnodes: [{name: a, driver_info: {ipmi_address: h}}]\n', 1, "version",
     'expected a string, got the number 1.3; quote it: "1.30"'),
    # a port is an integer, never 0, never a string
    ('version: "1.36"\nnodes:\n  - name: a\n    driver_info:\n      ipmi_address: h\n      ipmi_port: 0\n', 6,
     "nodes[0].driver_info.ipmi_port", "expected a port number 1-65535, got 0"),
    ('version: "1.36"\nnodes:\n  - name: a\n    driver_info:\n      ipmi_address: h\n      ipmi_port: "623"\n', 6,
     "nodes[0].driver_info.ipmi_port", "expected an integer, got the string '623'"),
    # yes/on are strings in YAML 1.2: a boolean field says so
    ('version: "1.36"\nnodes:\n  - name: a\n    enabled: yes\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].enabled", "expected true or false, got the string 'yes'"),
    ('version: "1.36"\nnodes:\n  - name: on\n    driver_info: {ipmi_address: h}\n', None, None, None),
    # unknown key named, with the allowed ones
    ('version: "1.36"\nnodes:\n  - name: a\n    drvier: ipmi\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].drvier", "unknown key (allowed: name, driver, macs, resource_class, traits, driver_info, cpus,"),
    ('version: "1.36"\nnodes:\n  - name: a\n', 3, "nodes[0].driver_info", "missing key 'driver_info'"),
    ('version: "1.36"\nnodes:\n  - name: a\n    driver: ilo\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].driver", "got the string 'ilo', expected 'ipmi' or 'redfish'"),
    ('version: "1.36"\nnodes:\n  - name: a\n    cpus: .inf\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].cpus", "a number out of range (more than 64 bits, or infinite / not a number)"),
    ('version: "1.36"\nnodes:\n  - name: a\n    weight: .nan\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].weight", "a number out of range (more than 64 bits, or infinite / not a number)"),
    ('version: "1.36"\nnodes:\n  - name: a\n    weight: 2\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].weight", "expected a finite number >= 0 <= 1, got 2"),
    ('version: "1.36"\nnodes:\n  - name: a\n    traits: [HW_CPU_X86_AVX2]\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].traits[0]", "expected CUSTOM_ followed by"),
    ('version: "1.36"\nnodes:\n  - name: a\n    macs: [aa:bb:cc]\n    driver_info: {ipmi_address: h}\n', 4,
     "nodes[0].macs[0]", "expected a MAC address"),
    ('version: "1.36"\nnodes: []\n', 2, "nodes", "list should have at least 1 item"),
    ('version: "1.36"\nnodes:\n  - name: a\n    driver_info: {ipmi_address: "-bad-"}\n', 4,
     "nodes[0].driver_info.ipmi_address", "expected an IP address or a host name"),
    ('- a\n', 1, "(top level)", "expected a mapping, got a list"),
])
def test_problem_names_file_line_key_and_what_to_write(tmp_path, text, line, key, detail):
    if detail is None:                      # accepted: the string "on" is a name
        path = tmp_path / "inv.yaml"
        path.write_text(text)
        assert load_file(path, Inventory)[1].nodes[0].name == "on"
        return
    path, err = _check(text, tmp_path)
    assert err.exit_code == 2
    first = err.problems[0]
    assert (first.line, first.key) == (line, key), str(err)
    assert detail in first.detail, str(err)
    assert str(err).splitlines()[0] == f"{path}:{line}: {key}: {first.detail}"


def test_every_problem_of_the_file_is_reported_at_once_in_line_order(tmp_path):
    _, err = _check("""\
        version: 1.30
        nodes:
          - name: "bad name"
            driver_info: {ipmi_address: h, ipmi_port: 70000}
          - name: ok
            extra: 1
            driver_info: {ipmi_address: h}
        """, tmp_path)
    assert [(p.line, p.key) for p in err.problems] == [
        (1, "version"), (3, "nodes[0].name"), (4, "nodes[0].driver_info.ipmi_port"), (6, "nodes[1].extra")]


def test_secret_values_are_never_echoed(tmp_path):
    _, err = _check("""\
        version: "1.36"
        nodes:
          - name: a
            driver_info: {ipmi_address: h, ipmi_password: hunter2-inline-pw}
        """, tmp_path)
    assert "hunter2-inline-pw" not in str(err) and "hunter2-inline-pw" not in repr(err.to_dict())
    assert "the value is not shown" in str(err)


def test_secret_fields_are_declared_once_and_found():
    assert is_secret(DriverInfo.model_fields["ipmi_password"]) and is_secret(DriverInfo.model_fields["ipmi_kg_key"])
    assert not is_secret(DriverInfo.model_fields["ipmi_address"])
    assert sorted(secret_fields(Inventory)) == [("nodes", "*", "driver_info", "ipmi_kg_key"),
                                                ("nodes", "*", "driver_info", "ipmi_password"), ("token",)]


def test_keys_that_yaml_reads_as_numbers_are_refused_with_quote_it(tmp_path):
    class Pins(Declared):
        kubernetes: dict[vocab.KubeMinor, vocab.ReleaseVersion]

    path = tmp_path / "p.yaml"
    path.write_text('kubernetes:\n  "1.36": 1.36.4\n  1.30: 1.30.1\n')
    with pytest.raises(SchemaError) as info:
        load_file(path, Pins)
    assert str(info.value) == f'{path}:3: kubernetes["1.3"]: key the number 1.3 must be a string; quote it: "1.30"'


def test_validate_data_labels_problems_without_a_line():
    with pytest.raises(SchemaError) as info:
        validate_data("NODEFORGE_X", {"version": "x"}, Inventory)
    assert str(info.value).splitlines()[0].startswith("NODEFORGE_X: version: expected a Kubernetes minor")


def test_checks_add_rules_across_entries(tmp_path):
    doc = load(tmp_path / "f.yaml", 'version: "1.36"\nnodes:\n  - {name: a, driver_info: {ipmi_address: h}}\n'
                                    '  - {name: a, driver_info: {ipmi_address: h}}\n')

    def unique(document, inv):
        seen = set()
        for i, node in enumerate(inv.nodes):
            if node.name in seen:
                yield document.problem(("nodes", i, "name"), f"duplicate node name {node.name!r}")
            seen.add(node.name)

    with pytest.raises(SchemaError, match=r"f.yaml:4: nodes\[1\].name: duplicate node name 'a'"):
        validate(doc, Inventory, checks=unique)


def test_registered_kind_limits_apply_in_load_file(tmp_path):
    from nodeforge.schema import Limits

    class Small(Declared):
        a: str

    register("test-small-kind", Small, title="Test small", limits=Limits(max_bytes=10))
    path = tmp_path / "s.yaml"
    path.write_text("a: " + "x" * 20 + "\n")
    with pytest.raises(ConfigError, match="larger than 10 bytes"):
        load_file(path, Small)


def test_a_schema_error_through_the_cli_is_exit_2_with_problems_in_json(tmp_path, capsys):
    import json

    path = tmp_path / "versions.yaml"
    path.write_text("schema_version: 1\narchitectures: [amd64]\nbase_os: {distro: debian, release: 12}\n")
    code = cli.main(["release", "check", "--no-packages", "--lockfile", str(path), "--output", "json"])
    out = capsys.readouterr().out
    assert code == 2
    doc = json.loads(out)
    assert {"file", "problems"} <= set(doc)
    by_key = {p["key"]: p for p in doc["problems"]}
    assert by_key["base_os.release"]["line"] == 3 and "quote it" in by_key["base_os.release"]["detail"]
    assert by_key["hardening"]["detail"] == "missing key 'hardening'"


@pytest.mark.parametrize("value", ["12345678901", "[k1, k2]", "true", "a-Secret-kg-key-0x"])
def test_a_bad_value_of_a_secret_field_is_never_echoed(tmp_path, value):
    class Strict(Declared):
        kg_key: Annotated[vocab.Sha256 | None, SECRET] = None
        password: vocab.SecretRef | None = None

    path = tmp_path / "s.yaml"
    path.write_text(f"kg_key: {value}\npassword: {value}\n")
    with pytest.raises(SchemaError) as info:
        load_file(path, Strict)
    text = str(info.value) + repr(info.value.to_dict())
    for shown in (value, value.strip("[]"), "12345678901"):
        assert shown not in text, text
    assert [p.key for p in info.value.problems] == ["kg_key", "password"]
    assert all("not shown" in p.detail for p in info.value.problems)
