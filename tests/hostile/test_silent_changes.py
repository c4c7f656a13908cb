"""Inputs whose meaning nodeforge used to change without a word: each is now refused, naming the
file, line and field (exit 2), or kept exactly as written."""

from __future__ import annotations

import json

import pytest

from tests.hostile.conftest import check, run_cli

BMC = '{address: "ipmi://10.0.0.1", username: u, password: "env:NODEFORGE_SECRET_SC"}'
RF = 'address: "redfish://10.0.0.1/redfish/v1/Systems/1", username: u, password: "env:NODEFORGE_SECRET_SC"'
IPMI_INFO = 'ipmi_address: 10.0.0.1, ipmi_username: u, ipmi_password: "env:NODEFORGE_SECRET_SC"'

REFUSED = {
    # case: (file name, text, "file:line: key.path" expected, words)
    "case-only-duplicate-name": ("inv.yaml", f"version: 1\nnodes:\n- name: Node-A\n  bmc: {BMC}\n- name: node-a\n"
                                 f"  bmc: {BMC.replace('10.0.0.1', '10.0.0.2')}\n", ":5: nodes[1].name", "only by case"),
    "uuid-like-name": ("inv.yaml", f"version: 1\nnodes:\n- name: 3f2504e0-4f89-11d3-9a0c-0305e82c3301\n  bmc: {BMC}\n",
                       ":3: nodes[0].name", "looks like a UUID"),
    "redfish-system-dotdot": ("inv.yaml", "version: 1\nnodes:\n- name: a\n  bmc: {" + RF.replace("Systems/1", "Systems/..")
                              + "}\n", ":4: nodes[0].bmc.address", "cannot be '.' or '..'"),
    "verify-ca-empty": ("inv.yaml", "version: 1\nnodes:\n- name: a\n  bmc: {" + RF + ', verify_ca: ""}\n',
                        ":4: nodes[0].bmc.verify_ca", "empty"),
    "verify-ca-device": ("inv.yaml", "version: 1\nnodes:\n- name: a\n  bmc: {" + RF + ", verify_ca: /dev/zero}\n",
                         ":4: nodes[0].bmc.verify_ca", "not a device"),
    "bifrost-number-key": ("inv.yaml", "1.30:\n  driver: ipmi\n  driver_info: {" + IPMI_INFO + "}\n",
                           ":1: ", 'quote it ("1.30")'),
    "bifrost-boolean-key": ("inv.yaml", "true:\n  driver: ipmi\n  driver_info: {" + IPMI_INFO + "}\n",
                            ":1: ", 'quote it ("true")'),
    "bulk-driver-overridden": ("inv.yaml", "nodes:\n- name: a\n  driver: redfish\n  driver_info: {" + IPMI_INFO + "}\n",
                               ":4: nodes[0].driver_info.ipmi_address", "driver is 'redfish'"),
    "bulk-two-bmcs": ("inv.yaml", "nodes:\n- name: a\n  driver: ipmi\n  driver_info: {" + IPMI_INFO
                      + ", redfish_address: 'https://10.0.0.9'}\n", ":4: nodes[0].driver_info.redfish_address",
                      "both ipmi_address and redfish_address"),
    "huge-number": ("inv.yaml", f"version: 1\nnodes:\n- name: a\n  bmc: {BMC}\n  properties: {{memory_mb: {10 ** 30}}}\n",
                    ":5: nodes[0].properties.memory_mb", "a number out of range"),
    "json-nan": ("inv.json", json.dumps({"version": 1, "nodes": [{"name": "a", "bmc": {
        "address": "ipmi://10.0.0.1", "username": "u", "password": "env:NODEFORGE_SECRET_SC"},
        "properties": {"cpus": float("nan")}}]}), ":1: nodes[0].properties.cpus", "a number out of range"),
}


@pytest.fixture
def env(no_cloud_env):
    return {**no_cloud_env, "NODEFORGE_SECRET_SC": "sc-secret-value-1"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_change_of_meaning_is_refused_by_name(case, tmp_path, env):
    name, text, where, words = REFUSED[case]
    path = tmp_path / name
    path.write_text(text)
    for args in (["baremetal", "validate", path], ["-o", "json", "baremetal", "validate", path]):
        run = run_cli(args, env=env)
        check(run, codes=(2,), json_out="-o" in args, secrets={"sc-secret-value-1": "sc-secret-value-1"},
              note=f"({case})")
        out = run.out + run.err
        assert words in out, f"{case}: {words!r} not in\n{out}"
        if "-o" not in args:
            assert f"{path}{where}" in out, f"{case}: {path}{where!r} not in\n{out}"


def test_leading_zeros_in_a_csv_name_are_kept(tmp_path, env):
    path = tmp_path / "inv.csv"
    path.write_text("name,bmc_address,bmc_username,bmc_password\n000123,ipmi://10.0.0.1,u,env:NODEFORGE_SECRET_SC\n")
    run = run_cli(["-o", "json", "baremetal", "validate", path], env=env)
    check(run, codes=(0,), json_out=True)
    assert [n["name"] for n in json.loads(run.out)["nodes"]] == ["000123"]


REFUSED_ELSEWHERE = {
    # case: (file name, text, command (file path appended where {f} is), "file:line: key.path", words)
    "profile-min-above-max": ("p.yaml", "version: 1\nprofiles:\n  - name: a\n    resource_class: x\n    match:\n"
                              "      cpu_count: {min: 8, max: 4}\n", ["baremetal", "classify", "--profiles", "{f}",
                                                                      "--dry-run"],
                              ":6: profiles[0].match.cpu_count.min", "above max 4"),
    "retention-date-not-in-calendar": ("r.yaml", "visible: 1\nkeep: 3\nexpire: deactivate\nmetadata:\n"
                                       "  provided_until: '2020-02-30'\n",
                                       ["image", "promote", "--retention", "{f}", "--dry-run", "some-image"],
                                       ":5: metadata.provided_until", "not a date in the calendar"),
    "lone-surrogate": ("inv.yaml", f'version: 1\nnodes:\n- name: a\n  description: "x\\ud800"\n  bmc: {BMC}\n',
                       ["baremetal", "validate", "{f}"], ":4: nodes[0].description", "lone surrogate"),
    "bifrost-csv-too-many-cells": ("inv.csv", "10.0.0.1," + ",".join(["x"] * 20) + "\n",
                                   ["baremetal", "validate", "{f}", "--format", "bifrost"], ":1: [1]",
                                   "at most 19"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_ELSEWHERE))
def test_other_files_refuse_a_change_of_meaning_by_name(case, tmp_path, env):
    name, text, command, where, words = REFUSED_ELSEWHERE[case]
    path = tmp_path / name
    path.write_text(text)
    run = run_cli([str(path) if a == "{f}" else a for a in command], env=env)
    check(run, codes=(2,), note=f"({case})")
    assert f"{path}{where}" in run.err and words in run.err, f"{case}: {path}{where} / {words!r} not in\n{run.err}"


def test_a_package_lock_version_is_a_debian_version(tmp_path):
    """A version is written into apt preferences: a newline in it would be a second preferences line."""
    import re

    from nodeforge.oslock import lock
    from nodeforge.schema import SchemaError
    from tests.hostile.conftest import REPO

    text = (REPO / "manifests/os-packages.lock.yaml").read_text()
    head, packages = text.split("packages:", 1)
    m = re.search(r'version: "?([^",}]+)"?', packages)
    bad = head + "packages:" + packages.replace(m.group(0), f'version: "{m.group(1)}\\nPin: origin evil"', 1)
    with pytest.raises(SchemaError, match=r"x.lock.yaml:\d+: packages\[0\].version: expected a Debian version"):
        lock.loads(bad, tmp_path / "x.lock.yaml")
    assert lock.loads(text, tmp_path / "x.lock.yaml").packages


def test_a_large_yaml_file_gets_the_same_number_check(tmp_path, env):
    """A YAML file of 32 KiB or more has its tree built from libyaml's events (schema/fastyaml.py):
    the number and surrogate checks apply to it as to a small one."""
    lines = ["version: 1", "nodes:"]
    for i in range(600):
        memory = "99999999999999999999999" if i == 500 else "1024"
        lines += [f"  - name: node-{i:04d}", f"    bmc: {{address: 'ipmi://10.0.{i // 250}.{i % 250 + 1}', username: u, "
                                             "password: 'env:NODEFORGE_SECRET_SC'}",
                  f"    properties: {{cpus: 4, memory_mb: {memory}}}"]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 32 << 10
    run = run_cli(["baremetal", "validate", path], env=env)
    check(run, codes=(2,))
    assert f"{path}:1505: nodes[500].properties.memory_mb: a number out of range" in run.err, run.err
