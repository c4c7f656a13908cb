"""The canary's orchestration against the session cloud's real Ironic and Glance, on
fake-hardware nodes (Ironic's own fake deploy: ``active`` without a machine).

What is real: the allocation in nodeforge's name, the node selection Ironic is held to
(``candidate_nodes``), ``instance_info`` with a Glance image Ironic looks up, the deploy with a
JSON config drive Ironic turns into an ISO, undeploy with automated cleaning back to
``available``, the failure counter and maintenance, the phone-home listener over HTTP.

What stands in for the machine (a fake-hardware node has none): the test reads the config drive
nodeforge handed Ironic, as the node's cloud-init would, builds the report the collector would
send, and POSTs it to the URL the user-data names with the collector's own ``post``/``frame``.
The deploy of a real image onto an emulated machine is tests/canary/test_canary_machine.py's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
import uuid

import pytest

from nodeforge import cli
from nodeforge.canary import node_data, phonehome, run, select, stage
from nodeforge.canary.policy import CanaryClass, CanaryPolicy, Timeouts
from nodeforge.imageverify import verify_guest
from nodeforge.ironic.provisioner import SdkProvisioner
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance
from nodeforge.publish.retention import RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]


class RecordingProvisioner(SdkProvisioner):
    """The real provisioner; it also keeps the config drives it sent (the node's side reads them)."""

    def __init__(self, conn):
        super().__init__(conn)
        self.configdrives: list[dict] = []

    def set_provision_state(self, ident, verb, **kw):
        if kw.get("configdrive") is not None:
            self.configdrives.append(kw["configdrive"])
        return super().set_provision_state(ident, verb, **kw)


def _probes_of(configdrive: dict) -> dict:
    """probes.json out of the user-data, as the node's cloud-init writes it."""
    ud = configdrive["user_data"]
    lines = ud.splitlines()
    for i, line in enumerate(lines):
        if "path: /run/nodeforge-verify/probes.json" in line:
            content = next(ln for ln in lines[i:] if "content:" in ln).split("content:", 1)[1].strip()
            return json.loads(base64.b64decode(content))
    raise AssertionError("no probes.json in the user-data")


def _node_report(configdrive: dict, *, hostname: str | None = None) -> dict:
    meta, net = configdrive["meta_data"], configdrive["network_data"]
    mac = net["links"][0]["ethernet_mac_address"]
    ok = lambda out: {"rc": 0, "output": out}  # noqa: E731
    gib = 1 << 30
    return {"format": 1, "probes": meta["uuid"], "late_commands": {
        "hostname": ok(hostname or meta["hostname"]), "instance_id": ok(meta["uuid"]),
        "ip_link": ok(json.dumps([{"ifname": "enp0s2", "address": mac, "operstate": "UP"}])),
        "ip_addr": ok(json.dumps([{"ifname": "enp0s2", "addr_info": [{"family": "inet", "local": "10.0.2.15"}]}])),
        "efi_boot_current": ok("06 00"),
        "datasource": ok(json.dumps({"v1": {"datasource": "DataSourceConfigDrive [net,ver=2]", "errors": []}})),
        "config_drive": ok("/dev/vda4")},
        "rootfs": {"source": "/dev/vda3 ext4", "disk": "vda", "disk_bytes": 10 * gib, "partition_bytes": 10 * gib - (64 << 20)}}


def _act_as_node(prov: RecordingProvisioner, conn, node_id: str, **kw):
    """Wait for the deploy, then send the report the node would send."""
    def go():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if prov.configdrives and conn.baremetal.get_node(node_id).provision_state == "active":
                cd = prov.configdrives[-1]
                verify_guest.post(_probes_of(cd)["report_url"], verify_guest.frame(_node_report(cd, **kw)), attempts=3)
                return
            time.sleep(0.5)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def pool(devcloud):
    conn = devcloud.system()
    tag = uuid.uuid4().hex[:6]
    rc = f"canary-test-{tag}"
    glance = devcloud.admin()               # Glance is project-scoped; Ironic is the system's
    image = glance.image.create_image(name=f"canary-test-{tag}", disk_format="raw", container_format="bare",
                                    data=b"\0" * (1 << 20), visibility="public")
    nodes = []
    for i in range(2):
        n = conn.baremetal.create_node(name=f"canary-{tag}-{i}", driver="fake-hardware", resource_class=rc,
                                       deploy_interface="fake", boot_interface="fake")
        conn.baremetal.create_port(node_uuid=n.id, address=f"52:54:00:{int(tag[:2], 16):02x}:{int(tag[2:4], 16):02x}:{i:02x}")
        conn.baremetal.set_node_provision_state(n.id, "manage", wait=True, timeout=120)
        conn.baremetal.set_node_provision_state(n.id, "provide", wait=True, timeout=120)
        # Ironic allocates only nodes whose power state it knows (a fake node's comes with its first sync).
        conn.baremetal.set_node_power_state(n.id, "power off", wait=True, timeout=60)
        nodes.append(n.id)
    yield {"conn": conn, "admin": glance, "rc": rc, "image": image.id, "nodes": nodes, "scope": f"t{tag}"}
    for n in nodes:
        node = conn.baremetal.get_node(n)
        if node.is_maintenance:
            conn.baremetal.unset_node_maintenance(n)
        if node.provision_state == "active":
            conn.baremetal.set_node_provision_state(n, "deleted", wait=True, timeout=120)
        conn.baremetal.delete_node(n, ignore_missing=True)
    glance.image.delete_image(image.id, ignore_missing=True)


def _policy(rc: str, **kw) -> CanaryPolicy:
    return CanaryPolicy(classes=(CanaryClass(rc),), timeouts=Timeouts(allocation=60, deploy=120, first_boot=kw.pop("first_boot", 60),
                                                                     clean=120), source="test", **kw)


def _request(pool, policy):
    return run.Request(image_id=pool["image"], scope=pool["scope"], policy=policy, expectations=None, facts=None,
                       poll=1.0)


def _state(conn, node_id):
    n = conn.baremetal.get_node(node_id)
    return n.provision_state, n.allocation_id, n.instance_id, n.is_maintenance, (n.extra or {}).get(select.FAILURES_KEY)


def test_a_canary_that_reports_passes_and_gives_the_node_back(pool):
    conn = pool["conn"]
    prov = RecordingProvisioner(conn)
    policy = _policy(pool["rc"])
    [cp] = run.plan(prov, policy, pool["scope"])
    assert cp.allocation is None and len(cp.candidates) == 2 and cp.problem is None
    first = conn.baremetal.get_node(pool["nodes"][0]).name
    assert cp.candidates[0] == first
    with phonehome.Listener() as listener:
        _act_as_node(prov, conn, pool["nodes"][0])
        result = run.run_class(prov, _request(pool, policy), cp, listener)
    assert result.passed, result.reason
    assert result.node == first and result.node_state == "available"
    assert {c["id"] for c in result.checks} == {"CANARY-BOOT", "CANARY-GROW", "CANARY-CONFIGDRIVE", "CANARY-IDENTITY",
                                                 "CANARY-NETWORK"}
    assert set(result.seconds) == {"allocate", "deploy", "first_boot", "checks", "clean"}
    # Ironic really deployed what nodeforge asked for, with a config drive from its JSON form.
    cd = prov.configdrives[-1]
    assert cd["meta_data"]["hostname"] == node_data.hostname_for(first, pool["image"])
    # Back in the pool: available, no allocation, no instance, no maintenance, no failure counted.
    assert _state(conn, pool["nodes"][0]) == ("available", None, None, False, None)
    assert prov.get_allocation(select.allocation_name(pool["scope"], pool["rc"])) is None
    assert run.property_value(result).startswith("passed ")
    assert glance.canary_property("Baremetal-Canary.1") == "nodeforge_canary_baremetal_canary_1"


def test_a_wrong_report_fails_naming_the_check(pool):
    conn = pool["conn"]
    prov = RecordingProvisioner(conn)
    policy = _policy(pool["rc"])
    [cp] = run.plan(prov, policy, pool["scope"])
    with phonehome.Listener() as listener:
        _act_as_node(prov, conn, pool["nodes"][0], hostname="debian")
        result = run.run_class(prov, _request(pool, policy), cp, listener)
    assert not result.passed and "CANARY-IDENTITY" in result.reason and result.node_state == "available"
    node = conn.baremetal.get_node(pool["nodes"][0])
    assert (node.extra or {}).get(select.FAILURES_KEY) == "1" and not node.is_maintenance
    # The node that failed goes last among the candidates next time.
    [cp] = run.plan(prov, policy, pool["scope"])
    assert cp.candidates[-1] == node.name


def test_silence_fails_and_repeated_failures_put_the_node_in_maintenance(pool):
    conn = pool["conn"]
    prov = RecordingProvisioner(conn)
    policy = _policy(pool["rc"], first_boot=3, maintenance_after=2)
    with phonehome.Listener() as listener:
        [cp] = run.plan(prov, policy, pool["scope"])
        # Only the node that already failed once may be taken.
        cp = run.ClassPlan(cp.resource_class, True, None, [conn.baremetal.get_node(pool["nodes"][0]).name], [])
        result = run.run_class(prov, _request(pool, policy), cp, listener)
    assert not result.passed and "no report" in result.reason
    assert result.maintenance and result.node_state == "available"
    node = conn.baremetal.get_node(pool["nodes"][0])
    assert node.is_maintenance and "2 failed canary" in (node.maintenance_reason or "")
    assert node.allocation_id is None and node.instance_id is None
    # A node in maintenance, with an instance, or leased to another project is never a candidate.
    [cp] = run.plan(prov, policy, pool["scope"])
    assert node.name not in cp.candidates
    assert any(r.node == node.name and r.reason == "in maintenance" for r in cp.refused)
    conn.baremetal.unset_node_maintenance(pool["nodes"][0])
    conn.baremetal.update_node(pool["nodes"][0], extra={})


def test_a_killed_run_is_resumed_from_its_allocation(pool):
    """A run killed after deploying leaves its allocation and a deployed node: the next run
    takes the node back through cleaning, deploys again, and finishes."""
    conn = pool["conn"]
    prov = RecordingProvisioner(conn)
    policy = _policy(pool["rc"])
    name = select.allocation_name(pool["scope"], pool["rc"])
    target = conn.baremetal.get_node(pool["nodes"][1])
    alloc = prov.create_allocation({"name": name, "resource_class": pool["rc"], "candidate_nodes": [target.name]})
    deadline = time.monotonic() + 60
    while alloc.get("state") == "allocating" and time.monotonic() < deadline:
        time.sleep(0.5)
        alloc = prov.get_allocation(name)
    conn.baremetal.update_node(target.id, instance_info={"image_source": pool["image"]})
    conn.baremetal.set_node_provision_state(target.id, "active", wait=True, timeout=120)
    [cp] = run.plan(prov, policy, pool["scope"])
    assert cp.allocation is not None and cp.allocation["node_uuid"] == target.id
    with phonehome.Listener() as listener:
        _act_as_node(prov, conn, target.id)
        result = run.run_class(prov, _request(pool, policy), cp, listener)
    assert result.passed and result.resumed and result.node == target.name, result.reason
    assert _state(conn, target.id)[:3] == ("available", None, None)


def test_the_stage_records_the_verdict_beside_the_image_and_promote_reads_it(pool, tmp_path, capsys, monkeypatch):
    """``image canary``'s plan and apply over a published (synthetic) build: the dry run names the
    node, the run writes canary.json into the build and beside the image with the verdict
    property, and promote's check accepts it; a failed canary is recorded too, and refused."""
    conn, admin = pool["conn"], pool["admin"]
    build = make_build_dir(tmp_path, variants=("baremetal",))
    published = glance.Publisher(admin, RetentionPolicy(), scope=pool["scope"]).publish(builddir.load(build))
    try:
        [image] = [glance.get_image(admin, r.image_id) for r in published if r.variant == "baremetal"]
        policy_file = tmp_path / "canary-policy.yaml"
        policy_file.write_text(f"version: 1\nresource_classes:\n  - resource_class: {pool['rc']}\n"
                               "timeouts: {allocation: 60, deploy: 120, first_boot: 60, clean: 120}\n")
        monkeypatch.setenv("OS_CLOUD", "nodeforge-dev")
        capsys.readouterr()
        code = cli.main(["image", "canary", str(build), "--canary-policy", str(policy_file), "--baremetal-cloud",
                         "nodeforge-dev-system", "--dry-run", "-o", "json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        doc = json.loads(out)
        assert doc["image"] == image["id"] and doc["problems"] == []
        assert [(c["resource_class"], c["action"]) for c in doc["classes"]] == [(pool["rc"], "deploy")]
        assert not (build / stage.REPORT).exists()                     # a dry run writes nothing

        prov = RecordingProvisioner(conn)
        plan = stage.plan(admin, prov, build, _policy(pool["rc"]), scope=pool["scope"])
        publisher = glance.Publisher(admin, RetentionPolicy(), scope=pool["scope"])
        with_node = plan.classes[0].candidates[0]
        _act_as_node(prov, conn, conn.baremetal.get_node(with_node).id)
        report = stage.apply(prov, plan, publisher, poll=1.0, expected=(None, None))
        assert [(r["resource_class"], r["passed"]) for r in report["results"]] == [(pool["rc"], True)]
        assert json.loads((build / stage.REPORT).read_text())["image_id"] == image["id"]
        after = glance.get_image(admin, image["id"])
        assert after[glance.canary_property(pool["rc"])].startswith("passed ")
        catalog.check_canary(admin, after, [pool["rc"]])               # promote's check passes

        # Silence: the canary fails, the failure is recorded beside the image, and promote refuses it.
        plan = stage.plan(admin, prov, build, _policy(pool["rc"], first_boot=2), scope=pool["scope"])
        with pytest.raises(stage.CanaryFailed, match="no report"):
            stage.apply(prov, plan, publisher, poll=1.0, expected=(None, None))
        after = glance.get_image(admin, image["id"])
        assert after[glance.canary_property(pool["rc"])].startswith("failed ")
        with pytest.raises(catalog.PromoteRefused, match="no passing canary"):
            catalog.check_canary(admin, after, [pool["rc"]])
    finally:
        for img in glance.list_images(admin, **{f"{glance.P}build_id": build.name}):
            glance.delete_image(admin, img["id"])
        for n in pool["nodes"]:
            conn.baremetal.update_node(n, extra={})


def test_the_pipeline_stage_asks_nothing_without_a_policy_and_stops_the_run_when_a_class_has_no_node(
        pool, tmp_path, monkeypatch):
    """The pipeline's ``canary`` stage (between publish and promote): without a policy it says so
    and passes; with a policy whose class has no node it fails naming the class, and the
    pipeline's promote refuses the bare-metal image without a passing canary there."""
    from nodeforge.pipeline import runrecord as rr, stages

    admin = pool["admin"]
    build = make_build_dir(tmp_path, variants=("baremetal",))
    [result] = glance.Publisher(admin, RetentionPolicy(), scope=pool["scope"]).publish(builddir.load(build))
    monkeypatch.chdir(tmp_path)                      # no manifests/canary-policy.yaml here: no policy
    try:
        run = rr.RunRecord("t", tmp_path / "runs" / "t", {})
        for name, outputs in (("build", {"build_dir": str(build)}),
                              ("publish", {"images": {"baremetal": result.image_id}, "scope": pool["scope"]})):
            rec = run.stage(name, "1.36")
            rec.status, rec.outputs = rr.SUCCEEDED, outputs

        def ctx(config, stage):
            return stages.StageContext(config, run, stage, "1.36")

        lines: list[str] = []
        config = stages.PipelineConfig(os_cloud="nodeforge-dev", baremetal_cloud="nodeforge-dev-system")
        quiet = stages.canary(dataclasses.replace(ctx(config, "canary"), say=lines.append))
        assert quiet == {"asked": False, "summary": "no canary asked for"} and lines == ["canary 1.36: no canary asked for"]

        empty = f"canary-none-{uuid.uuid4().hex[:6]}"
        policy_file = tmp_path / "policy.yaml"
        policy_file.write_text(f"version: 1\nresource_classes:\n  - resource_class: {empty}\n")
        config = dataclasses.replace(config, canary_policy=policy_file)
        with pytest.raises(stages.StageFailed, match=f"{empty}: no node can be a canary"):
            stages.canary(ctx(config, "canary"))
        with pytest.raises(catalog.PromoteRefused, match=f"no passing canary deploy on {empty}"):
            stages.promote(ctx(config, "promote"))
        assert glance.TAG_APPROVED not in (glance.get_image(admin, result.image_id).get("tags") or [])
    finally:
        for img in glance.list_images(admin, **{f"{glance.P}build_id": build.name}):
            glance.delete_image(admin, img["id"])
