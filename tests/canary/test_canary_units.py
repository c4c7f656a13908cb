"""The canary's pieces without a cloud: the policy file, which nodes may be taken, the phone-home
listener over real HTTP (with the guest collector's own POST and frame), and the deploy-only checks
on a node's report."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from nodeforge.canary import node_data, phonehome, policy, select
from nodeforge.imageverify import verify_guest
from nodeforge.redact import MASK
from nodeforge.schema import SchemaError

# -- policy ------------------------------------------------------------------------------------


def test_policy_loads_and_names_every_bad_field(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("resource_classes:\n  - resource_class: baremetal-canary\n  - {resource_class: gpu, required: false}\n"
                    "timeouts: {deploy: 900}\nmaintenance_after: 3\n")
    p = policy.load(good)
    assert p.asked and p.required_classes() == ["baremetal-canary"]
    assert p.timeouts.deploy == 900 and p.timeouts.clean == 2400 and p.maintenance_after == 3
    assert "baremetal-canary" in p.describe() and str(good) in p.describe()

    bad = tmp_path / "bad.yaml"
    bad.write_text("resource_classes:\n  - resource_class: 'bad class!'\n  - {resource_class: x, required: 'no'}\n"
                   "timeouts: {deploy: 0}\nattempts: 9\nextra_key: 1\n")
    with pytest.raises(SchemaError) as err:
        policy.load(bad)
    text = str(err.value)
    for where in ("bad.yaml:2: resource_classes[0].resource_class", "resource_classes[1].required",
                  "bad.yaml:4: timeouts.deploy", "bad.yaml:5: attempts", "bad.yaml:6: extra_key: unknown key"):
        assert where in text, (where, text)

    twice = tmp_path / "twice.yaml"
    twice.write_text("resource_classes:\n  - resource_class: a\n  - resource_class: a\n")
    with pytest.raises(SchemaError, match=r"twice.yaml:3: resource_classes\[1\].resource_class: 'a' is listed twice"):
        policy.load(twice)


def test_no_policy_file_asks_for_no_canary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = policy.load()
    assert p is policy.NO_POLICY and not p.asked and "no canary asked for" in p.describe()
    with pytest.raises(Exception, match="file not found"):       # a file named on purpose must exist
        policy.load(tmp_path / "missing.yaml")


# -- selection ---------------------------------------------------------------------------------

def _node(name, **kw):
    base = {"uuid": f"uuid-{name}", "name": name, "resource_class": "rc", "provision_state": "available",
            "maintenance": False, "instance_uuid": None, "allocation_uuid": None, "lessee": None, "extra": {}}
    return {**base, **kw}


def test_only_free_nodes_of_the_class_are_candidates():
    nodes = [_node("a"), _node("b", extra={select.FAILURES_KEY: "1"}), _node("c", instance_uuid="i"),
             _node("d", allocation_uuid="x"), _node("e", lessee="other-project"), _node("f", maintenance=True),
             _node("g", provision_state="active"), _node("h", resource_class="other"), _node("i", lessee="ours")]
    ok, refused = select.candidates(nodes, "rc", lessee="ours")
    # fewest earlier failures first, then by name
    assert [n["name"] for n in ok] == ["a", "i", "b"]
    assert {r.node: r.reason for r in refused} == {
        "c": "has an instance", "d": "allocated", "e": "leased to another project", "f": "in maintenance",
        "g": "provision state 'active'"}
    assert select.allocation_name("platform", "baremetal canary/1") == "nodeforge-canary-platform-baremetal-canary-1"


# -- phone home --------------------------------------------------------------------------------

def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:       # the server answered before reading the body, and closed
        return -1


def test_phone_home_keeps_one_genuine_report_per_token_and_refuses_the_rest():
    report = {"format": 1, "probes": "p-1", "rootfs": {"disk": "vda"}}
    with phonehome.Listener() as listener:
        token = listener.expect()
        url = listener.url(token)
        assert token not in listener.public_url() and MASK in listener.public_url()
        # The guest collector's own POST and frame.
        assert verify_guest.post(url, verify_guest.frame(report), attempts=1).startswith("posted")
        assert listener.wait(token, 5) == report
        assert _post(url, verify_guest.frame(report).encode()) == 409                     # a second one
        assert _post(listener.url("forged-token"), verify_guest.frame(report).encode()) == 404
        other = listener.expect()
        assert _post(listener.url(other), b"NODEFORGE-VERIFY-BEGIN 1 00 3\nAAAA\nNODEFORGE-VERIFY-END\n") == 400
        assert _post(listener.url(other), b"x" * (phonehome.MAX_BODY + 1)) in (413, -1)   # never read
        assert verify_guest.post(listener.url("nope"), "x", attempts=3, delay=0).startswith("refused (HTTP 404)")
        assert listener.wait(other, 0.5) is None
        assert [r.status for r in listener.refused] == [409, 404, 400, 413, 404]


# -- deploy-only checks ------------------------------------------------------------------------

IDENTITY = node_data.NodeIdentity(instance_id="0b0c", hostname="canary-rf-vm-01-12345678", mac="52:54:00:aa:bb:01")


def _ok(output):
    return {"rc": 0, "output": output}


def _guest(**late):
    gib = 1 << 30
    base = {
        "hostname": _ok(IDENTITY.hostname + "\n"), "instance_id": _ok(IDENTITY.instance_id),
        "ip_link": _ok(json.dumps([{"ifname": "lo", "address": "00:00:00:00:00:00", "operstate": "UNKNOWN"},
                                   {"ifname": "enp0s2", "address": IDENTITY.mac, "operstate": "UP"}])),
        "ip_addr": _ok(json.dumps([{"ifname": "enp0s2", "addr_info": [{"family": "inet", "local": "10.0.2.15"}]}])),
        "efi_boot_current": _ok(" 06 00 00 00 01 00"),
        "datasource": _ok(json.dumps({"v1": {"datasource": "DataSourceConfigDrive [net,ver=2][source=/dev/vda4]",
                                             "errors": []}})),
        "config_drive": _ok("/dev/vda4"),
    }
    base.update(late)
    return {"late_commands": base,
            "rootfs": {"source": "/dev/vda3 ext4", "disk": "vda", "disk_bytes": 10 * gib,
                       "partition_bytes": 10 * gib - 200 * (1 << 20)}}


def test_deploy_checks_pass_on_a_good_report_and_name_what_is_wrong():
    checks = node_data.evaluate(IDENTITY, _guest())
    assert [c["id"] for c in checks if not c["passed"]] == [], checks
    cases = {
        "CANARY-BOOT": dict(efi_boot_current=_ok("none")),
        "CANARY-CONFIGDRIVE": dict(datasource=_ok(json.dumps({"v1": {"datasource": "DataSourceNoCloud", "errors": []}}))),
        "CANARY-IDENTITY": dict(hostname=_ok("debian")),
        "CANARY-NETWORK": dict(ip_addr=_ok("[]")),
    }
    for check_id, late in cases.items():
        failed = [c["id"] for c in node_data.evaluate(IDENTITY, _guest(**late)) if not c["passed"]]
        assert failed == [check_id], (check_id, failed)
    small = _guest()
    small["rootfs"]["partition_bytes"] = 3 << 30                 # growpart did not run
    assert [c["id"] for c in node_data.evaluate(IDENTITY, small) if not c["passed"]] == ["CANARY-GROW"]
    cd = _guest()
    cd["rootfs"].update(source="/dev/sr0 iso9660", disk="sr0")   # still running from virtual media
    assert "CANARY-BOOT" in [c["id"] for c in node_data.evaluate(IDENTITY, cd) if not c["passed"]]


def test_config_drive_carries_identity_network_and_the_collector():
    probes = {"id": "x", "report_url": "http://10.0.2.2:1/nodeforge/canary/t", "poweroff": False,
              "late_commands": node_data.LATE_COMMANDS}
    cd = node_data.config_drive(IDENTITY, probes)
    assert cd["meta_data"]["uuid"] == IDENTITY.instance_id and cd["meta_data"]["hostname"] == IDENTITY.hostname
    assert cd["network_data"]["links"][0]["ethernet_mac_address"] == IDENTITY.mac
    assert cd["network_data"]["networks"][0]["type"] == "ipv4_dhcp"
    assert cd["user_data"].startswith("#cloud-config") and "nodeforge-verify" in cd["user_data"]
