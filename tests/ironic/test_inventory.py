"""Inventory parsing and whole-batch validation, on the data files of every format."""

from __future__ import annotations

import pytest

from nodeforge.errors import NodeforgeError
from nodeforge.ironic import inventory as inv
from nodeforge.ironic.inventory import BmcKind, CleanMode, Format


def test_nodeforge_yaml_normalised(data_dir, bmc_password):
    i = inv.load(data_dir / "nodeforge.yaml")
    assert i.format is Format.NODEFORGE
    nodes = i.by_name()
    rf = nodes["rf-node-001"]
    assert rf.driver == "redfish"
    assert rf.resource_class == "baremetal-compute"  # from defaults
    assert rf.macs == ["02:4e:46:00:01:00", "02:4e:46:00:01:01"]  # normalised
    assert rf.traits == ["CUSTOM_GPU", "CUSTOM_RACK_A1"]
    assert rf.cleaning.mode is CleanMode.NONE
    info = rf.driver_info(reveal=True)
    assert info == {"redfish_address": "https://127.0.0.1:8000",
                    "redfish_system_id": "/redfish/v1/Systems/749adaee-0a9e-5c5f-b8e4-fe28c0380191",
                    "redfish_username": "nf-redfish", "redfish_password": bmc_password,
                    "redfish_verify_ca": False}
    assert rf.driver_info()["redfish_password"] == "***"
    vm = nodes["rf-node-002"]
    assert vm.bmc.kind is BmcKind.REDFISH_VIRTUALMEDIA
    assert vm.all_interfaces()["boot_interface"] == "redfish-virtual-media"
    assert vm.bmc.password.reveal() == "file-secret-pw-42"  # file: relative to the inventory
    assert vm.inspect is True
    ipmi = nodes["ipmi-node-01"]
    assert ipmi.driver == "ipmi"
    assert ipmi.driver_info(reveal=True)["ipmi_port"] == 6230
    assert ipmi.all_interfaces() == {"management_interface": "ipmitool", "power_interface": "ipmitool"}
    assert ipmi.cleaning.mode is CleanMode.MANUAL and ipmi.cleaning.disable_ramdisk
    assert ipmi.cleaning.steps[0].step == "clear_job_queue"
    fake = nodes["fake-0001"]
    assert fake.driver == "fake-hardware" and fake.bmc.password is None
    assert fake.driver_info() == {}


def test_csv(data_dir, bmc_password):
    i = inv.load(data_dir / "nodes.csv")
    assert i.format is Format.CSV
    rf, ipmi = i.nodes
    assert rf.location.row == 1 and rf.location.line == 3
    assert rf.properties == {"cpu_arch": "x86_64", "memory_mb": 262144}
    assert rf.bmc.verify_ca is False
    assert rf.traits == ["CUSTOM_A"]
    assert ipmi.cleaning.mode is CleanMode.NONE
    assert ipmi.bmc.port == 6231


def test_ironicclient_format(data_dir, bmc_password):
    i = inv.load(data_dir / "ironicclient.yaml")
    assert i.format is Format.IRONICCLIENT
    a, b = i.nodes
    assert a.bmc.address == "ipmi://10.1.0.1:6230"
    assert a.driver_info(reveal=True)["ipmi_password"] == bmc_password
    assert a.driver_info()["deploy_kernel"] == "http://images/ipa.kernel"
    assert a.macs == ["52:54:00:aa:00:01"]
    assert b.bmc.kind is BmcKind.REDFISH_VIRTUALMEDIA
    assert b.driver_info()["redfish_system_id"] == "/redfish/v1/Systems/abc"
    assert b.bmc.verify_ca is False


def test_bifrost_format(data_dir, bmc_password):
    i = inv.load(data_dir / "bifrost.json")
    assert i.format is Format.BIFROST
    a, b = i.nodes
    assert a.name == "bf-node-1" and a.driver == "ipmi"
    assert a.properties == {"cpu_arch": "x86_64", "memory_mb": 8192, "local_gb": 100, "cpus": 4}
    assert a.driver_info(reveal=True)["ipmi_password"] == bmc_password
    assert b.bmc.kind is BmcKind.REDFISH and b.macs == ["52:54:00:bb:00:02"]
    assert a.location.line == 2 and b.location.line == 18


def test_whole_batch_errors_name_line_node_and_field(data_dir, bmc_password):
    with pytest.raises(inv.InventoryError) as err:
        inv.load(data_dir / "invalid.yaml")
    # One problem shape: file:line: key.path: detail (the node by its index in the file).
    got = {(p.line, p.key) for p in err.value.problems}
    assert got == {
        (6, "nodes[1].name"),                  # 'bad mac' is not a name
        (10, "nodes[1].bmc.password"),         # plaintext refused
        (11, "nodes[1].macs[0]"),              # malformed MAC
        (14, "nodes[2].bmc.address"),          # same BMC as good-1 (ipmi default port 623)
        (16, "nodes[2].bmc.password"),         # env var not set
        (17, "nodes[2].macs"),                 # duplicate MAC
        (18, "nodes[2].colour"),               # unknown field
        (19, "nodes[3].name"),                 # duplicate name
        (21, "nodes[3].bmc.address"),          # unknown scheme
    }
    text = str(err.value)
    assert "hunter2-plaintext" not in text
    assert "invalid.yaml:10: nodes[1].bmc.password: plaintext secret refused" in text
    assert "invalid.yaml:19: nodes[3].name: duplicate name (first at " in text


def test_plaintext_allowed_explicitly(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("version: 1\nnodes:\n  - name: n1\n    bmc: {address: 'ipmi://10.0.0.1', username: u, "
                 "password: plain-pass-1}\n")
    with pytest.raises(inv.InventoryError):
        inv.load(p)
    node = inv.load(p, allow_plaintext=True).nodes[0]
    assert node.bmc.password.reveal() == "plain-pass-1"


def test_cleaning_policy_burn_in_and_full_erase(tmp_path):
    """``erase: full`` and ``burn_in`` become the agent's driver_info settings (the inventory's own
    driver_info wins) and the enrollment's manual cleaning; without the agent they are refused,
    naming the line and the field."""
    p = tmp_path / "inv.yaml"
    node = ("  - name: {name}\n    bmc: {{address: 'redfish://10.0.0.{i}/redfish/v1/Systems/1', username: u, "
            "password: p{i}-secret}}\n    cleaning: {cleaning}\n")
    p.write_text("version: 1\nnodes:\n" + node.format(name="n1", i=1, cleaning=(
        "{erase: full, burn_in: {cpu: 60, memory: 30}}")) +
        "    driver_info: {agent_burnin_vm_timeout: 45}\n")
    n1 = inv.load(p, allow_plaintext=True).nodes[0]
    assert n1.cleaning.mode is CleanMode.AUTOMATED and n1.cleaning.erase == "full"
    assert [s["step"] for s in n1.cleaning.enrollment_steps()] == ["burnin_cpu", "burnin_memory", "erase_devices"]
    info = n1.driver_info()
    assert (info["agent_burnin_cpu_timeout"], info["agent_burnin_vm_timeout"], info["agent_burnin_vm_vm-bytes"]) == (
        60, 45, "75%")
    assert n1.to_dict()["cleaning"]["burn_in"] == {"cpu": 60, "memory": 30}
    p.write_text("version: 1\nnodes:\n"
                 + node.format(name="n1", i=1, cleaning="{mode: none, erase: full}")
                 + node.format(name="n2", i=2, cleaning="{mode: manual, disable_ramdisk: true, burn_in: {cpu: 5}}")
                 + node.format(name="n3", i=3, cleaning="{burn_in: {network: 60, cpu: 0}}"))
    with pytest.raises(inv.InventoryError) as err:
        inv.load(p, allow_plaintext=True)
    text = str(err.value)
    assert "inv.yaml:5: nodes[0].cleaning: erase: full runs in the agent ramdisk: not with mode: none" in text
    assert "inv.yaml:8: nodes[1].cleaning: burn_in runs in the agent ramdisk: not with disable_ramdisk: true" in text
    assert "inv.yaml:11: nodes[2].cleaning.burn_in.network: key got the string 'network'" in text
    assert "inv.yaml:11: nodes[2].cleaning.burn_in.cpu: must be greater than or equal to 1" in text
    assert "secret" not in text


def test_csv_errors_name_row(tmp_path, bmc_password):
    p = tmp_path / "inv.csv"
    p.write_text("name,bmc_address,bmc_username,bmc_password,macs,colour\n"
                 "n1,ipmi://10.0.0.1,u,env:NF_TEST_BMC_PASSWORD,52:54:00:00:00:01,red\n"
                 "n2,ipmi://10.0.0.2,u,,52:54:00:00:00:02,\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(p)
    got = {(p.line, p.key) for p in err.value.problems}
    assert (1, "[0].colour") in got  # the header (row 0)
    assert (3, "[2].bmc_password") in got    # row 2, the column
    assert "inv.csv:3: [2].bmc_password: required for a real BMC" in str(err.value)


@pytest.mark.parametrize("url,kind,host,port,system", [
    ("ipmi://10.0.0.1", BmcKind.IPMI, "10.0.0.1", None, None),
    ("ipmi://[fd00::1]:6230", BmcKind.IPMI, "fd00::1", 6230, None),
    ("redfish://bmc.example.org/redfish/v1/Systems/1", BmcKind.REDFISH, "bmc.example.org", None,
     "/redfish/v1/Systems/1"),
    ("redfish+http://10.0.0.1:8000", BmcKind.REDFISH, "10.0.0.1", 8000, None),
    ("idrac-redfish://10.0.0.1", BmcKind.IDRAC_REDFISH, "10.0.0.1", None, None),
    ("redfish-virtualmedia://10.0.0.1", BmcKind.REDFISH_VIRTUALMEDIA, "10.0.0.1", None, None),
])
def test_bmc_urls(url, kind, host, port, system):
    k, h, p, _, s = inv.parse_bmc_url(url)
    assert (k, h, p, s) == (kind, host, port, system)


@pytest.mark.parametrize("url,message", [
    ("10.0.0.1", "not a BMC URL"),
    ("ssh://10.0.0.1", "unknown BMC scheme"),
    ("ipmi://", "missing host"),
    ("ipmi://10.0.0.1:99999", "invalid port"),
    ("ipmi://10.0.0.1/x", "no path"),
    ("redfish://10.0.0.1/v1/Systems/1", "must be /redfish/v1/Systems/<id>"),
    ("redfish://admin:s3cret-in-url@10.0.0.1", "credentials in the BMC URL"),
    ("ipmi://bad_host!", "invalid host"),
])
def test_bad_bmc_urls(url, message):
    with pytest.raises(ValueError) as err:
        inv.parse_bmc_url(url)
    assert message in str(err.value)
    assert "s3cret-in-url" not in str(err.value)


def test_bmc_key_matches_ironic_driver_info(data_dir, bmc_password):
    nodes = inv.load(data_dir / "nodeforge.yaml").by_name()
    key = inv.bmc_key(nodes["rf-node-001"].bmc)
    # what Ironic returns for the same node (password masked, trailing slash)
    ironic = {"redfish_address": "https://127.0.0.1:8000/", "redfish_password": "******",
              "redfish_system_id": "/redfish/v1/Systems/749adaee-0a9e-5c5f-b8e4-fe28c0380191"}
    assert inv.bmc_key_from_driver_info("redfish", ironic) == key
    assert inv.bmc_key(nodes["ipmi-node-01"].bmc) == "ipmi://127.0.0.1:6230"
    assert inv.bmc_key(nodes["fake-0001"].bmc) is None


def test_mac_normalisation():
    assert inv.normalize_mac("AA-BB-CC-DD-EE-FF") == "aa:bb:cc:dd:ee:ff"
    assert inv.normalize_mac("aabbccddeeff") == "aa:bb:cc:dd:ee:ff"
    assert inv.normalize_mac("aa:bb-cc:dd:ee:ff") is None
    assert inv.normalize_mac("aa:bb:cc:dd:ee") is None


def test_undetectable_format(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(inv.ConfigError, match="cannot tell the inventory format"):
        inv.load(p)


def test_scope_from_the_file_or_derived_from_its_path(tmp_path, data_dir, bmc_password):
    from nodeforge.ironic import constants as C

    i = inv.load(data_dir / "nodeforge.yaml")               # no scope: derived, on the inventory and its nodes
    assert i.scope_source == "derived" and i.scope == C.derive_scope(data_dir / "nodeforge.yaml")
    assert i.scope.startswith("nodeforge-") and {n.scope for n in i.nodes} == {i.scope}
    assert inv.load(data_dir / "nodes.csv").scope == C.derive_scope(data_dir / "nodes.csv") != i.scope
    f = tmp_path / "team.yaml"
    f.write_text("version: 1\nscope: rack-a1.team\nnodes:\n  - {name: n1, bmc: {address: 'fake://n1'}}\n")
    i = inv.load(f)
    assert (i.scope, i.scope_source, i.nodes[0].scope) == ("rack-a1.team", "file", "rack-a1.team")
    assert i.nodes[0].to_dict()["scope"] == "rack-a1.team"


@pytest.mark.parametrize("bad", ["Team", "_x", "a b", "x" * 64, "7", "{a: 1}"])
def test_invalid_scope_names_file_line_and_field(tmp_path, bad):
    f = tmp_path / "inv.yaml"
    f.write_text(f"version: 1\nnodes:\n  - {{name: n1, bmc: {{address: 'fake://n1'}}}}\nscope: {bad}\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(f)
    [issue] = err.value.problems
    assert (issue.file, issue.line, issue.key) == (str(f), 4, "scope")
    assert issue.detail.startswith("must be 1-63 characters of a-z 0-9 . _ -")
    assert f"{f}:4: scope: must be" in str(err.value)


# --- hostile and malformed input is a message and exit 2, never a traceback ---

def _validate_cli(capsys, *args):
    from nodeforge import cli

    capsys.readouterr()
    code = cli.main(["baremetal", "validate", *map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize("name,data,line", [
    ("inv.yaml", b"version: 1\nnodes:\n  - name: \xff\xfe\n", 3),
    ("inv.csv", b"name,bmc_address\nn\xe9,fake://n1\n", 2),
    ("inv.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", 1),
])
def test_non_utf8_or_binary_inventory_is_refused_naming_file_and_line(tmp_path, capsys, name, data, line):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(inv.ConfigError) as err:
        inv.load(p)
    assert str(err.value).startswith(f"{p}:{line}: ") and err.value.exit_code == 2
    code, _, stderr = _validate_cli(capsys, p)
    assert code == 2 and f"error: {p}:{line}: " in stderr


@pytest.mark.parametrize("name,text", [
    ("deep.yaml", "version: 1\nnodes: " + "[" * 20000 + "]" * 20000 + "\n"),
    ("deep.json", "[" * 20000 + "]" * 20000),
    ("deep-map.json", '{"a":' * 20000 + "1" + "}" * 20000),
])
def test_deeply_nested_inventory_is_refused(tmp_path, capsys, name, text):
    p = tmp_path / name
    p.write_text(text)
    code, _, stderr = _validate_cli(capsys, p)
    assert code == 2 and f"error: {p}:" in stderr and "nested more than 64 levels deep" in stderr


@pytest.mark.parametrize("text,what", [("- a\n- b\n", "a list"), ("just text\n", "a scalar"), ("", "empty")])
def test_bifrost_format_on_a_list_scalar_or_empty_file(tmp_path, capsys, text, what):
    p = tmp_path / "bifrost.yaml"
    p.write_text(text)
    code, _, stderr = _validate_cli(capsys, "--format", "bifrost", p)
    assert code == 2
    assert f"a Bifrost inventory is a mapping of node name to node; the file is {what}" in stderr


def test_bifrost_node_that_is_not_a_mapping(tmp_path, capsys):
    p = tmp_path / "bifrost.yaml"
    p.write_text("node-1: just a string\n")
    code, _, stderr = _validate_cli(capsys, "--format", "bifrost", p)
    assert code == 2 and f"{p}:1: node-1: a node must be a mapping" in stderr


def test_ipmi_port_0_is_refused_not_turned_into_623(tmp_path, bmc_password):
    y = tmp_path / "inv.yaml"
    y.write_text("version: 1\nnodes:\n  - name: n1\n    bmc:\n      address: ipmi://10.0.0.1:0\n"
                 "      username: u\n      password: env:NF_TEST_BMC_PASSWORD\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(y)
    [issue] = err.value.problems
    assert (issue.line, issue.key) == (5, "nodes[0].bmc.address") and "invalid port 0" in issue.detail
    c = tmp_path / "inv.csv"
    c.write_text("name,bmc_address,bmc_username,bmc_password\nn1,ipmi://10.0.0.1:0,u,env:NF_TEST_BMC_PASSWORD\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(c)
    [issue] = err.value.problems
    assert (issue.line, issue.key) == (2, "[1].bmc_address") and "invalid port 0" in issue.detail
    i = tmp_path / "ic.yaml"
    i.write_text("nodes:\n  - name: n1\n    driver: ipmi\n    driver_info:\n      ipmi_address: 10.0.0.1\n"
                 "      ipmi_port: 0\n      ipmi_username: u\n      ipmi_password: env:NF_TEST_BMC_PASSWORD\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(i)
    [issue] = err.value.problems
    assert (issue.line, issue.key) == (6, "nodes[0].driver_info.ipmi_port")
    assert "must be a port number 1-65535, got 0" in issue.detail


def test_csv_duplicate_column_header_is_refused(tmp_path, bmc_password):
    p = tmp_path / "inv.csv"
    p.write_text("name,bmc_address,bmc_username,bmc_password,bmc_address\n"
                 "n1,ipmi://10.0.0.1,u,env:NF_TEST_BMC_PASSWORD,ipmi://10.0.0.2\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(p)
    [issue] = err.value.problems
    assert (issue.line, issue.key) == (1, "[0].bmc_address")
    assert "column 'bmc_address' appears twice in the header" in issue.detail


@pytest.mark.parametrize("text", ["", "# only a comment\n", "name,bmc_address\n"])
def test_empty_csv_is_refused_no_nodes(tmp_path, capsys, text):
    p = tmp_path / "inv.csv"
    p.write_text(text)
    with pytest.raises(inv.InventoryError, match="no nodes"):
        inv.load(p)
    code, _, stderr = _validate_cli(capsys, p)
    assert code == 2 and "no nodes" in stderr


def test_csv_with_a_utf8_bom_is_read(tmp_path, bmc_password):
    p = tmp_path / "inv.csv"
    p.write_bytes("name,bmc_address,bmc_username,bmc_password\n"
                  "n1,ipmi://10.0.0.1,u,env:NF_TEST_BMC_PASSWORD\n".encode("utf-8-sig"))
    [node] = inv.load(p).nodes
    assert node.name == "n1" and node.bmc.port == 623


# Found by the hostile-input property tests (tests/hostile): each was a TypeError traceback, exit 1.
@pytest.mark.parametrize("text,fmt,expect", [
    ('{"n1": {"name": "n1", "driver": "redfish", "driver_info": {"redfish_address": "https://10.2.0.2", '
     '"redfish_username": "admin", "redfish_password": "env:NODEFORGE_SECRET_HOSTILE_PW"}, "nics": 5}}',
     "bifrost", "inv.json:1: n1.nics: expected a list, got the number 5"),
    ("nodes: [{name: n1, driver: [redfish], driver_info: {redfish_address: 'https://10.2.0.2', "
     "redfish_username: admin, redfish_password: 'env:NODEFORGE_SECRET_HOSTILE_PW'}}]\n",
     None, "inv.yaml:1: nodes[0].driver: expected a string, got a list"),
    ("nodes: [{name: n1, driver: ipmi, driver_info: {ipmi_address: 10.1.0.1, ipmi_username: admin, "
     "ipmi_password: 'env:NODEFORGE_SECRET_HOSTILE_PW'}, ports: -1}]\n", None,
     "nodes[0].ports: expected a list, got the number -1"),
])
def test_wrong_types_in_bulk_and_bifrost_files_are_named_not_a_traceback(tmp_path, monkeypatch, text, fmt, expect):
    monkeypatch.setenv("NODEFORGE_SECRET_HOSTILE_PW", "pw-hostile-1234567")
    path = tmp_path / ("inv.json" if text.startswith("{") else "inv.yaml")
    path.write_text(text)
    with pytest.raises(NodeforgeError) as err:
        inv.load(path, fmt=fmt)
    assert err.value.exit_code == 2
    assert expect in str(err.value) and "pw-hostile-1234567" not in str(err.value)


def test_a_csv_with_bare_carriage_returns_is_read_row_by_row(tmp_path):
    # Found by the hostile-input tests: the Bifrost-CSV sniffing raised csv.Error (a traceback, exit 1);
    # old Mac line endings are line endings, as they are to Python's csv module with newline="".
    path = tmp_path / "inv.csv"
    path.write_bytes(b"# inventory\rname,bmc_address,macs\rn1,ipmi://10.0.0.4,02:4e:46:00:04:00\r")
    with pytest.raises(NodeforgeError) as err:
        inv.load(path)
    assert err.value.exit_code == 2
    assert "inv.csv:3: [1].bmc_username: required for a real BMC" in str(err.value)


def test_secret_driver_info_fields_are_references_and_never_printed(tmp_path, monkeypatch):
    # ipmi_kg_key / snmp_*_key were taken inline and kept as plain values.
    monkeypatch.setenv("NODEFORGE_SECRET_KG_PW", "bmc-pw-7781")
    monkeypatch.setenv("NODEFORGE_SECRET_KG_KEY", "kg-key-value-5521")
    path = tmp_path / "inv.yaml"
    base = ("version: 1\nnodes:\n  - name: kg1\n    bmc: {address: 'ipmi://10.0.0.9', username: admin, "
            "password: 'env:NODEFORGE_SECRET_KG_PW'}\n    macs: ['02:00:00:00:00:09']\n")
    path.write_text(base + "    driver_info: {ipmi_kg_key: 'inline-kg-3301', "
                           "snmp_auth_key: 'env:NODEFORGE_SECRET_KG_KEY'}\n")
    with pytest.raises(NodeforgeError) as err:
        inv.load(path)
    text = str(err.value)
    assert "inv.yaml:6: nodes[0].driver_info.ipmi_kg_key: plaintext secret refused" in text
    assert "snmp_auth_key" not in text and "inline-kg-3301" not in text
    path.write_text(base + "    driver_info: {ipmi_kg_key: 'env:NODEFORGE_SECRET_KG_KEY'}\n")
    spec = inv.load(path).nodes[0]
    assert spec.driver_info()["ipmi_kg_key"] == "***" and "kg-key-value-5521" not in repr(spec.to_dict())
    assert spec.driver_info(reveal=True)["ipmi_kg_key"] == "kg-key-value-5521"
    # a changed kg key is a credential rotation; a node without secret extras keeps its old fingerprint
    rotated = spec.credential_fingerprint()
    monkeypatch.setenv("NODEFORGE_SECRET_KG_KEY", "kg-key-value-9999")
    assert inv.load(path).nodes[0].credential_fingerprint() != rotated
    path.write_text(base)
    plain = inv.load(path).nodes[0]
    assert plain.credential_fingerprint() == plain.bmc.credential_fingerprint()


def test_every_problem_at_once_each_naming_its_node(tmp_path, monkeypatch):
    """A schema error on one node does not hide a duplicate MAC between two others, nor the other
    way round: one run lists both, and each message names its node as well as the key path."""
    monkeypatch.setenv("NODEFORGE_SECRET_ALL_AT_ONCE", "pw-all-at-once-1")
    node = ("  - name: {name}\n    bmc: {{address: 'ipmi://127.0.0.1:{port}', username: admin, "
            "password: 'env:NODEFORGE_SECRET_ALL_AT_ONCE'}}\n    macs: ['{mac}']\n    resource_class: baremetal\n")
    text = ("version: 1\nnodes:\n" + node.format(name="alpha", port=6230, mac="52:54:00:00:00:01")
            + node.format(name="beta", port=6231, mac="52:54:00:00:00:01")
            + node.format(name="gamma", port=6232, mac="52:54:00:00:00:03") + "    bogus_key: 1\n")
    f = tmp_path / "inv.yaml"
    f.write_text(text)
    with pytest.raises(inv.InventoryError) as err:
        inv.load(f)
    lines = str(err.value).splitlines()
    assert any(line.startswith(f"{f}:9: nodes[1].macs: MAC 52:54:00:00:00:01 also belongs to node 'alpha'")
               and line.endswith("(node beta)") for line in lines), lines
    assert any(line.startswith(f"{f}:15: nodes[2].bogus_key: unknown key") and line.endswith("(node gamma)")
               for line in lines), lines
    assert "pw-all-at-once-1" not in str(err.value)
