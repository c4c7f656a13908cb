"""python-ironicclient's full bulk format and Bifrost's formats: parsing, the
errors for what nodeforge cannot map (each named with file:line and key path),
and plan/apply against the in-memory provisioner (real Ironic:
test_bulk_format_devcloud.py)."""

from __future__ import annotations

import json
import textwrap

import jsonschema
import pytest
import yaml
from ironicclient.v1 import create_resources

from nodeforge.ironic import enroll
from nodeforge.ironic import inventory as inv
from nodeforge.ironic.inventory import CleanMode, Format
from tests.support.ironic import FakeProvisioner


def load_text(tmp_path, text: str, name: str = "resources.yaml", **kw):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return inv.load(p, **kw)


def issues_of(tmp_path, text: str, name: str = "resources.yaml") -> set[tuple]:
    with pytest.raises(inv.InventoryError) as err:
        load_text(tmp_path, text, name)
    return {(p.line, p.key) for p in err.value.problems}, err.value


def test_full_bulk_file(data_dir, bmc_password):
    i = inv.load(data_dir / "ironicclient-bulk.yaml")
    assert i.format is Format.IRONICCLIENT
    assert [c.description for c in i.chassis] == ["rack-a1 chassis", "rack-b2 chassis (empty)"]
    assert i.chassis[0].extra == {"rack": "a1"} and i.chassis[0].location.line == 5
    assert all(c.scope == i.scope for c in i.chassis)
    n1, n2, ipmi = i.nodes
    assert n1.chassis == n2.chassis == "description:rack-a1 chassis" and ipmi.chassis is None
    assert n1.traits == ["CUSTOM_RACK_A1"] and n1.extra == {"asset": "1001"}
    assert n1.ironic == {"conductor_group": "group-a"}
    [bond] = n1.portgroups
    assert bond.key == "bulk-a1-n1-bond0"
    assert bond.fields == {"name": "bulk-a1-n1-bond0", "address": "52:56:00:00:01:00", "mode": "802.3ad",
                           "properties": {"miimon": "100", "xmit_hash_policy": "layer3+4"},
                           "standalone_ports_supported": False, "extra": {"lacp": "fast"}}
    ports = {p.address: p for p in n1.ports}
    assert set(ports) == set(n1.macs) == {"52:56:00:00:01:01", "52:56:00:00:01:02", "52:56:00:00:01:03"}
    assert ports["52:56:00:00:01:01"].portgroup == "bulk-a1-n1-bond0"
    assert ports["52:56:00:00:01:01"].fields == {
        "pxe_enabled": False, "physical_network": "physnet1",
        "local_link_connection": {"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "Eth1/1", "switch_info": "tor-a1"}}
    assert ports["52:56:00:00:01:01"].location.line == 23
    assert ports["52:56:00:00:01:03"].portgroup is None
    assert ports["52:56:00:00:01:03"].fields == {"pxe_enabled": True, "extra": {"role": "provisioning"}}
    assert n2.cleaning.mode is CleanMode.NONE              # automated_clean: false
    assert ipmi.driver_info(reveal=True)["ipmi_password"] == bmc_password
    assert ipmi.portgroups[0].fields == {"name": "bulk-ipmi-1-bond0", "mode": "active-backup"}


def test_json_reads_like_yaml(data_dir, tmp_path, bmc_password):
    doc = yaml.safe_load((data_dir / "ironicclient-bulk.yaml").read_text())
    j = tmp_path / "resources.json"
    j.write_text(json.dumps(doc, indent=2))
    a, b = inv.load(data_dir / "ironicclient-bulk.yaml"), inv.load(j)
    strip = lambda n: {k: v for k, v in n.to_dict().items() if k not in ("location", "scope", "ports",  # noqa: E731
                                                                         "portgroups")}
    assert [strip(n) for n in a.nodes] == [strip(n) for n in b.nodes]
    assert [[p.fields for p in n.ports] for n in a.nodes] == [[p.fields for p in n.ports] for n in b.nodes]
    assert b.nodes[0].ports[1].location.line > 1       # JSON keeps line numbers too


def test_top_level_follows_ironicclients_schema(tmp_path):
    """What create_resources' JSON schema refuses at the top level, nodeforge refuses too."""
    bad = [{"nodes": [], "ports": []}, {"portgroups": []}, {"nodes": {"name": "x"}}, {"chassis": "x"},
           {"nodes": ["x"]}]
    for doc in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, create_resources._CREATE_SCHEMA)
        p = tmp_path / "r.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(inv.InventoryError):
            inv.load(p, fmt="ironicclient")
    ok = {"chassis": [{"description": "only a chassis"}]}
    jsonschema.validate(ok, create_resources._CREATE_SCHEMA)
    p = tmp_path / "c.json"
    p.write_text(json.dumps(ok))
    i = inv.load(p)
    assert i.nodes == [] and [c.description for c in i.chassis] == ["only a chassis"]


def test_every_unmappable_field_is_named_with_line_and_path(tmp_path, bmc_password):
    got, err = issues_of(tmp_path, """\
        chassis:
          - extra: {rack: a1}
            colour: red
          - description: twice
          - description: twice
        nodes:
          - name: n1
            driver: fake-hardware
            shard: [s1]
            colour: blue
            ports:
              - address: "52:56:00:00:09:01"
                name: "eth 0"
                colour: green
              - address: "nope"
              - address: "52:56:00:00:09:02"
                node_uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d0001
                local_link_connection: {switch_id: "0a:1b:2c:3d:4e:5f", vtep: x}
            portgroups:
              - mode: active-backup
              - name: n1-bond0
                category: 7
                ports:
                  - address: "52:56:00:00:09:03"
                    portgroup_uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d0002
        portgroups: []
        """)
    assert got == {
        (3, "chassis[0].colour"),                        # unknown chassis field
        (2, "chassis[0]"),                               # neither uuid nor description
        (5, "chassis[2].description"),                   # same description twice
        (9, "nodes[0].shard"),                           # not text
        (10, "nodes[0].colour"),                         # unknown node field
        (13, "nodes[0].ports[0].name"),                  # not a name
        (14, "nodes[0].ports[0].colour"),                # unknown port field
        (15, "nodes[0].ports[1].address"),               # malformed MAC
        (17, "nodes[0].ports[2].node_uuid"),             # not the node's uuid
        (18, "nodes[0].ports[2].local_link_connection.vtep"),    # unknown key
        (20, "nodes[0].portgroups[0]"),                  # no name, address or uuid
        (22, "nodes[0].portgroups[1].category"),         # not text
        (25, "nodes[0].portgroups[1].ports[0].portgroup_uuid"),   # not its group's uuid
        (26, "portgroups"),                              # top level: only chassis and nodes
    }
    text = str(err)
    assert "resources.yaml:10: nodes[0].colour: unknown key (allowed: " in text
    assert "resources.yaml:13: nodes[0].ports[0].name: expected 1-255 characters" in text
    assert "resources.yaml:2: chassis[0]: a chassis needs a uuid or a description" in text


def test_names_and_uuids_unique_like_ironic(tmp_path):
    text = """\
        nodes:
          - name: n1
            driver: fake-hardware
            uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d0001
            portgroups: [{name: bond0}]
          - name: n2
            driver: fake-hardware
            uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d0001
            portgroups: [{name: bond0}]
          - name: n3
            driver: fake-hardware
            ports: [{address: "52:56:00:00:09:01", pxe_enabled: "yes"}]
        """
    got, _ = issues_of(tmp_path, text)
    assert got == {(12, "nodes[2].ports[0].pxe_enabled")}      # declarations first: "yes" is not a boolean
    got, _ = issues_of(tmp_path, text.replace('"yes"', "true"))
    assert got == {(8, "nodes[1].uuid"), (9, "nodes[1].portgroups")}    # then uniqueness across nodes


def test_secrets_in_driver_info_as_for_every_format(tmp_path):
    got, err = issues_of(tmp_path, """\
        nodes:
          - name: n1
            driver: ipmi
            driver_info: {ipmi_address: 10.0.0.1, ipmi_username: u, ipmi_password: Inline-Pw-123}
        """)
    assert got == {(4, "nodes[0].driver_info.ipmi_password")}
    assert "Inline-Pw-123" not in str(err)


def apply(inventory, prov):
    plan = enroll.plan(inventory, prov)
    return plan, enroll.apply(plan, prov)


def test_enroll_creates_everything_then_rerun_writes_nothing(data_dir, bmc_password):
    i = inv.load(data_dir / "ironicclient-bulk.yaml")
    prov = FakeProvisioner()
    plan, results = apply(i, prov)
    assert all(r.ok for r in results), results
    assert [c.action for c in plan.chassis] == [enroll.Action.CREATE] * 2
    chassis = {c["description"]: c for c in prov.list_chassis()}
    assert chassis["rack-a1 chassis"]["extra"] == {"rack": "a1", "nodeforge_scope": i.scope}
    nodes = {n["name"]: n for n in prov.list_nodes()}
    assert nodes["bulk-a1-n1"]["chassis_uuid"] == nodes["bulk-a1-n2"]["chassis_uuid"] == \
        chassis["rack-a1 chassis"]["uuid"]
    assert nodes["bulk-ipmi-1"].get("chassis_uuid") is None
    assert nodes["bulk-a1-n1"]["conductor_group"] == "group-a"
    [bond] = [g for g in prov.list_portgroups() if g["name"] == "bulk-a1-n1-bond0"]
    assert bond["node_uuid"] == nodes["bulk-a1-n1"]["uuid"] and bond["mode"] == "802.3ad"
    ports = {p["address"]: p for p in prov.list_ports()}
    assert len(ports) == 5
    assert ports["52:56:00:00:01:01"]["portgroup_uuid"] == ports["52:56:00:00:01:02"]["portgroup_uuid"] == \
        bond["uuid"]
    assert ports["52:56:00:00:01:01"]["local_link_connection"]["port_id"] == "Eth1/1"
    assert ports["52:56:00:00:01:03"]["portgroup_uuid"] is None
    assert ports["52:56:00:00:01:03"]["extra"] == {"role": "provisioning"}
    prov.writes = 0
    plan, results = apply(i, prov)
    assert prov.writes == 0
    assert plan.counts()["no-op"] == 3 and {c.action for c in plan.chassis} == {enroll.Action.NOOP}


def test_drift_in_ports_groups_and_chassis_is_planned_and_repaired(data_dir, bmc_password):
    i = inv.load(data_dir / "ironicclient-bulk.yaml")
    prov = FakeProvisioner()
    apply(i, prov)
    port = next(p for p in prov.ports.values() if p["address"] == "52:56:00:00:01:02")
    port["portgroup_uuid"], port["pxe_enabled"] = None, True
    group = next(g for g in prov.list_portgroups() if g["name"] == "bulk-a1-n1-bond0")
    prov.patch_portgroup(group["uuid"], [{"op": "add", "path": "/mode", "value": "balance-rr"}])
    chassis = next(c for c in prov.list_chassis() if c["description"] == "rack-a1 chassis")
    prov.patch_chassis(chassis["uuid"], [{"op": "remove", "path": "/extra/rack"}])
    prov.writes = 0
    plan = enroll.plan(i, prov)
    [n1] = [p for p in plan.nodes if p.spec.name == "bulk-a1-n1"]
    assert n1.action is enroll.Action.UPDATE
    fields = {c.field for c in n1.changes}
    assert {"port 52:56:00:00:01:02.portgroup_uuid", "port 52:56:00:00:01:02.pxe_enabled",
            "portgroup bulk-a1-n1-bond0.mode"} <= fields
    assert [c.action for c in plan.chassis] == [enroll.Action.UPDATE, enroll.Action.NOOP]
    # Ironic honours a port's new portgroup_uuid only when it is the patch's first op.
    [(_, port_patch)] = [(u, pt) for u, pt in n1.bulk.ports_patch if u == port["uuid"]]
    assert port_patch[0]["path"] == "/portgroup_uuid" and len(port_patch) == 2
    json.dumps(plan.to_dict())                       # the dry run's JSON
    assert all(r.ok for r in enroll.apply(plan, prov))
    assert prov.writes == 3
    assert prov.ports[port["uuid"]]["portgroup_uuid"] == group["uuid"]
    prov.writes = 0
    apply(i, prov)
    assert prov.writes == 0


def test_chassis_match_key_and_scope(tmp_path):
    text = """\
        chassis:
          - description: rack-x
            nodes: [{name: cx-1, driver: fake-hardware}]
          - uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d00c1
            description: by uuid
        """
    i = load_text(tmp_path, text)
    prov = FakeProvisioner()
    # Another scope's chassis with the same description is not ours: a new one is made.
    theirs = prov.create_chassis({"description": "rack-x", "extra": {"nodeforge_scope": "someone-else"}})
    plan, results = apply(i, prov)
    assert [c.action for c in plan.chassis] == [enroll.Action.CREATE, enroll.Action.CREATE]
    mine = [c for c in prov.list_chassis() if c["description"] == "rack-x" and c["uuid"] != theirs["uuid"]]
    assert len(mine) == 1 and prov.list_nodes()[0]["chassis_uuid"] == mine[0]["uuid"]
    assert any(c["uuid"] == "7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d00c1" for c in prov.list_chassis())
    # A chassis given by uuid that another scope owns is an error; its nodes are not touched.
    i2 = load_text(tmp_path, """\
        chassis:
          - uuid: 7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d00c1
            nodes: [{name: cx-2, driver: fake-hardware}]
        """, name="other.yaml")
    plan2 = enroll.plan(i2, prov)
    assert plan2.chassis[0].action is enroll.Action.ERROR and "belongs to scope" in plan2.chassis[0].error
    assert plan2.nodes[0].action is enroll.Action.ERROR and "its chassis" in plan2.nodes[0].error


def test_port_group_of_another_node_is_an_error(tmp_path):
    i = load_text(tmp_path, """\
        nodes:
          - name: pg-1
            driver: fake-hardware
            portgroups: [{name: shared-bond}]
        """)
    prov = FakeProvisioner()
    other = prov.create_node({"name": "pg-other", "driver": "fake-hardware"})
    prov.create_portgroup({"name": "shared-bond", "node_uuid": other["uuid"]})
    node = prov.create_node({"name": "pg-1", "driver": "fake-hardware"})
    plan = enroll.plan(i, prov)
    assert plan.nodes[0].action is enroll.Action.ERROR
    assert "shared-bond already belongs to Ironic node pg-other" in plan.nodes[0].error
    assert node["uuid"]


# --------------------------------------------------------------------------- Bifrost

def test_bifrost_yaml_reads_like_json(data_dir, tmp_path, bmc_password):
    doc = json.loads((data_dir / "bifrost.json").read_text())
    y = tmp_path / "bifrost.yaml"
    y.write_text(yaml.safe_dump(doc, sort_keys=False))
    a, b = inv.load(data_dir / "bifrost.json"), inv.load(y, fmt="bifrost")
    assert b.format is Format.BIFROST
    strip = lambda n: {k: v for k, v in n.to_dict().items() if k not in ("location", "scope")}  # noqa: E731
    assert [strip(n) for n in a.nodes] == [strip(n) for n in b.nodes]
    # uuid is enrolled (Bifrost creates the node with it); deploy-time keys are named in warnings.
    assert a.nodes[0].ironic == {"uuid": "00000000-0000-0000-0000-000000000001"}
    assert {(w.line, w.key) for w in a.warnings} == {(15, "bf-node-1.ipv4_address"), (16, "bf-node-1.host_groups")}


def test_bifrost_legacy_csv(tmp_path, bmc_password):
    p = tmp_path / "baremetal.csv"
    p.write_text("# Bifrost's legacy CSV: no header\n"
                 "00:01:02:03:04:05,root,env:NF_TEST_BMC_PASSWORD,192.168.122.1,1,8192,512,NA,NA,"
                 "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa,bm-100,192.168.2.100,,,,,ipmi,,\n"
                 "00:01:02:03:04:06,root,env:NF_TEST_BMC_PASSWORD,192.168.122.2,2,4096,100,NA,NA,,bm-101,,0,7,,,"
                 "agent_ipmitool\n")
    i = inv.load(p)
    assert i.format is Format.BIFROST
    a, b = i.nodes
    assert a.name == "bm-100" and a.macs == ["00:01:02:03:04:05"] and a.driver == "ipmi"
    assert a.properties == {"cpus": 1, "memory_mb": 8192, "local_gb": 512, "cpu_arch": "x86_64"}
    assert a.ironic == {"uuid": "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"}
    assert a.driver_info(reveal=True)["ipmi_password"] == bmc_password
    assert str(a.location) == f"{p}:2: row 1"
    assert b.driver_info()["ipmi_bridging"] == "single" and b.driver_info()["ipmi_target_address"] == "7"
    assert [(w.line, w.key) for w in i.warnings] == [(2, "[1].ipv4_address")]


def test_bifrost_csv_errors_name_row(tmp_path):
    p = tmp_path / "baremetal.csv"
    p.write_text("00:01:02:03:04:05,root,Plain-Pw-1,192.168.122.1,1,8192,512,NA,NA,,bm-1\n"
                 "00:01:02:03:04:06,root\n"
                 "00:01:02:03:04:07,root,x,192.168.122.3,1,8192,512,NA,NA,,bm-3,,,,,,ilo\n")
    with pytest.raises(inv.InventoryError) as err:
        inv.load(p)
    got = {(p.line, p.key) for p in err.value.problems}
    assert got == {(1, "[1].password"), (2, "[2]"), (3, "[3].driver")}     # row N is [N]
    assert "Plain-Pw-1" not in str(err.value)


def test_fields_of_a_newer_ironic_api_are_enrolled_at_their_version(tmp_path):
    text = """\
        nodes:
          - name: nw-1
            driver: fake-hardware
            shard: shard-1
            disable_power_off: false
            portgroups:
              - name: nw-1-bond0
                physical_network: physnet1
                category: storage
                ports: [{address: "52:56:00:00:0a:01", name: nw-1-eth0, description: left, vendor: acme,
                         category: data}]
        """
    i = load_text(tmp_path, text)
    [n] = i.nodes
    assert n.ironic_newer == {"shard": "shard-1", "disable_power_off": False}
    assert n.ports[0].fields == {"name": "nw-1-eth0", "description": "left", "vendor": "acme", "category": "data"}
    assert inv.api_version_for("node", n.ironic_newer) == "1.95"
    assert inv.api_version_for("port", n.ports[0].fields) == "1.101"
    assert inv.api_version_for("portgroup", n.portgroups[0].fields) == "1.103"
    assert inv.api_version_for("port", ["address", "pxe_enabled"]) == "1.70"

    class Recording(FakeProvisioner):
        versions: list = []

        def patch_node_at(self, ident, patch, microversion):
            self.versions.append(("node", microversion))
            return super().patch_node_at(ident, patch, microversion)

        def create_port_body(self, body, microversion=None):
            self.versions.append(("port", microversion))
            return super().create_port_body(body, microversion)

        def create_portgroup(self, body, microversion=None):
            self.versions.append(("portgroup", microversion))
            return super().create_portgroup(body, microversion)

    prov = Recording()
    plan, results = apply(i, prov)
    assert all(r.ok for r in results)
    assert sorted(prov.versions) == [("node", "1.95"), ("port", "1.101"), ("portgroup", "1.103")]
    node = prov.list_nodes()[0]
    assert node["shard"] == "shard-1" and node["disable_power_off"] is False
    assert prov.list_ports()[0]["name"] == "nw-1-eth0"
    prov.writes = 0
    apply(i, prov)
    assert prov.writes == 0


# --------------------------------------------------------------------------- hostile variations

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                     st.text(max_size=12), st.just("52:56:00:00:01:01"), st.just("7b1ed4f6-6a49-4f4c-9f80-3e1b0a0d0001"))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=8)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_anywhere_in_a_bulk_file_is_a_clear_error_or_valid(data, data_dir, tmp_path, bmc_password):
    """Replace one value (or add one key) anywhere in the bulk example: the
    reader either accepts the file or raises a ConfigError (exit 2) naming it; never another
    exception, and never the password in the message."""
    doc = yaml.safe_load((data_dir / "ironicclient-bulk.yaml").read_text())
    paths = list(_paths(doc))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(_VALUES)
    if not path:
        doc = value
    else:
        target = doc
        for k in path[:-1]:
            target = target[k]
        if data.draw(st.booleans()) and isinstance(target[path[-1]], dict):
            target[path[-1]][data.draw(st.text(min_size=1, max_size=8))] = value
        else:
            target[path[-1]] = value
    p = tmp_path / "fuzz.json"
    p.write_text(json.dumps(doc, default=str))
    try:
        i = inv.load(p, fmt="ironicclient")
    except inv.ConfigError as exc:      # an InventoryError, or the loader's refusal (NaN/Infinity)
        assert exc.exit_code == 2 and str(p) in str(exc)
        assert bmc_password not in str(exc)
        assert all(problem.file == str(p) for problem in getattr(exc, "problems", []))
    else:
        json.dumps([n.to_dict() for n in i.nodes], default=str)
        prov = FakeProvisioner()
        enroll.apply(enroll.plan(i, prov), prov)
