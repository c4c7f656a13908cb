"""The canary on a machine: a real Ironic deploy of a real bare-metal image onto rf-vm-01 (QEMU under
TCG, UEFI, behind the Redfish emulator), with nodeforge's own agent ramdisk. Nothing stands in.

The hardware team's flow first: ``image agent-ramdisk --publish`` puts the ramdisk in Glance; an
inventory names those images as the node's deploy kernel and ramdisk, with virtual-media boot, the
agent's in-band inspection and automated cleaning; ``baremetal enroll`` takes the node from enroll to
``available`` (the agent boots once: fast-track keeps it up from inspection through cleaning to the
first deploy); ``baremetal classify`` puts it in the canary pool from what the agent reported.

Then two canaries of one build, each with ``image canary`` on the published image:

* the build as it was made and verified (in a full run by the release tests' verify stage): Ironic's agent writes it to the machine's disk, the
  machine boots that disk, cloud-init reads the config drive Ironic wrote, the image's own
  collector reports home, every check passes, the node is cleaned back to ``available``;
* the same build with one defect verify does not see: the image keeps the hostname baked into it
  (``preserve_hostname``) instead of the one the node's config drive gives. It passes
  ``image verify``; the canary fails naming ``CANARY-IDENTITY``, promote refuses it, and the node is
  ``available`` again.

The build is the newest finished one in the image cache (in a full run, the session's release
build, made meanwhile by the other worker; the cache lock waits for a build in progress), else the
demo build is made here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from nodeforge import cli
from nodeforge.devcloud import bmc, openstack
from nodeforge.imageverify import builddir
from nodeforge.publish import glance as g
from nodeforge.publish.retention import RetentionPolicy
from tests.image_fixture import build_demo_image, newest_cached_build
from tests.imagebuild.realbuild import ARTIFACT_CACHE, BOOT_TIMEOUT, linked_copy

pytestmark = [pytest.mark.slow, pytest.mark.devcloud]

RC = "baremetal-canary"              # manifests/hardware-profiles.yaml: profile 'canary'
GOLDEN = "golden-image"              # the broken image's baked hostname
# A hardware team's new-server policy, short: burn-in and a full-disk erase once at enrollment (the
# agent's manual cleaning), then automated cleaning (metadata) on every provide.
CLEANING = {"mode": "automated", "burn_in": {"cpu": 5, "memory": 5, "disk": 5}, "erase": "full"}
ENROLLMENT_STEPS = ("burnin_cpu", "burnin_memory", "burnin_disk", "erase_devices")


def _nf(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    try:
        doc = json.loads(out.out) if out.out.strip() else None
    except json.JSONDecodeError:
        doc = None
    return code, doc, out.out + out.err


def _run(*argv: str) -> str:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True).stdout.strip()


def _break_hostname(build: Path) -> None:
    """Bake a hostname into the bare-metal image and keep it (``preserve_hostname``), as a
    'golden image' step would; a new build id (in the build directory's manifest and the copy inside
    the image, which verify compares) and SUMS, so it is another build."""
    mf_path = build / builddir.MANIFEST
    manifest = json.loads(mf_path.read_text())
    manifest["build_id"] = manifest["build_id"].rsplit("-", 1)[0] + "-0badc0de"
    manifest["images"] = {"baremetal": manifest["images"]["baremetal"]}
    mf_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    image = build / manifest["images"]["baremetal"]
    # The root partition by its GPT name, mounted through a loop device at its offset (this host
    # has no udev to make partition nodes).
    table = json.loads(_run("sfdisk", "-J", str(image)))["partitiontable"]
    root = next(p for p in table["partitions"] if p.get("name") == "root")
    unit = table.get("sectorsize", 512)
    mnt = build / "mnt"
    mnt.mkdir()
    _run("mount", "-t", "ext4", "-o", f"loop,offset={root['start'] * unit},sizelimit={root['size'] * unit}",
         str(image), str(mnt))
    try:
        (mnt / "etc" / "hostname").write_text(GOLDEN + "\n")
        (mnt / "etc" / "cloud" / "cloud.cfg.d" / "99-golden-hostname.cfg").write_text("preserve_hostname: true\n")
        (mnt / "etc" / "nodeforge" / "manifest.json").write_bytes(mf_path.read_bytes())
    finally:
        _run("umount", str(mnt))
        mnt.rmdir()
    for algo, name in builddir.SUMS.items():
        digest = _run(f"{algo}sum", str(image)).split()[0]
        (build / name).write_text(f"{digest}  {image.name}\n")
    for stale in ("files.jsonl",):               # the per-file manifest describes the unbroken image
        (build / stale).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def machine(devcloud, tmp_path_factory):
    """rf-vm-01 enrolled with the agent and ``available`` in the canary pool; deleted afterwards."""
    tmp = tmp_path_factory.mktemp("canary-machine")
    conn = devcloud.system()
    admin = devcloud.admin()
    [system] = bmc.redfish_machines()
    tag = uuid.uuid4().hex[:6]
    name = f"nf-canary-{system.name}-{tag}"
    timings: dict[str, float] = {}
    out = tmp / "cli.json"

    def nf(*args: str) -> dict:                  # a module fixture has no capsys
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = cli.main(list(args))
        assert code == 0, f"nodeforge {' '.join(args)}: exit {code}\n{buf.getvalue()[-3000:]}"
        out.write_text(buf.getvalue())
        return json.loads(buf.getvalue()) if buf.getvalue().strip().startswith(("{", "[")) else {}

    agent = nf("--os-cloud", "nodeforge-dev", "image", "agent-ramdisk", "--publish", "-o", "json")
    secrets = tmp / "inventory"
    secrets.mkdir(mode=0o700)
    creds = bmc.credentials(devcloud.paths)
    (secrets / "redfish.pw").write_text(creds.redfish.password.reveal())
    os.chmod(secrets / "redfish.pw", 0o600)
    inventory = secrets / "machines.yaml"
    inventory.write_text(yaml.safe_dump({"version": 1, "scope": f"canary-{tag}", "nodes": [
        bmc.machine_inventory_entry(devcloud.paths, system, name=name, password_ref=f"file:{secrets / 'redfish.pw'}",
                                    deploy_images=agent["driver_info"], kernel_append=openstack.IRONIC_KERNEL_APPEND,
                                    cleaning=CLEANING)]},
        sort_keys=False))
    t0 = time.monotonic()
    report = nf("--os-cloud", "nodeforge-dev-system", "baremetal", "enroll", str(inventory), "--timeout", "1800",
                "-o", "json")
    timings["enroll"] = time.monotonic() - t0
    node = conn.baremetal.get_node(name)
    try:
        assert node.provision_state == "available", (node.provision_state, node.last_error, report)
        assert creds.redfish.password.reveal() not in out.read_text()
        nf("--os-cloud", "nodeforge-dev-system", "baremetal", "classify", "--node", name, "-o", "json")
        yield {"conn": conn, "admin": admin, "node": name, "id": node.id, "system": system, "tmp": tmp,
               "timings": timings, "agent": agent, "dir": bmc.machine_dir(devcloud.paths, system)}
    finally:
        node = conn.baremetal.get_node(node.id)
        if node.allocation_id:
            conn.baremetal.delete_allocation(node.allocation_id, ignore_missing=True)
        if node.provision_state in ("clean wait", "inspect wait", "wait call-back", "deploy wait"):
            conn.baremetal.set_node_provision_state(node, "abort")
            time.sleep(5)
        if not conn.baremetal.get_node(node.id).is_maintenance:
            conn.baremetal.set_node_maintenance(node.id, reason="test teardown")
        conn.baremetal.set_node_power_state(node.id, "power off", wait=True, timeout=120)
        conn.baremetal.delete_node(node.id, ignore_missing=True)


def _policy(tmp: Path) -> Path:
    p = tmp / "canary-policy.yaml"
    p.write_text(yaml.safe_dump({"version": 1, "resource_classes": [{"resource_class": RC, "required": True}],
                                 "timeouts": {"allocation": 120, "deploy": 1800, "first_boot": 900, "clean": 1800},
                                 "maintenance_after": 3}))
    return p


def _publish(admin, build: Path, scope: str) -> str:
    [result] = g.Publisher(admin, RetentionPolicy(), scope=scope).publish(builddir.load(build), ["baremetal"])
    return result.image_id


def _canary(capsys, build: Path, policy: Path) -> tuple[int, dict | None, str]:
    listen = openstack.canary_settings()
    return _nf(capsys, "--os-cloud", "nodeforge-dev", "image", "canary", str(build),
               "--baremetal-cloud", "nodeforge-dev-system", "--canary-policy", str(policy),
               "--listen", listen["NODEFORGE_CANARY_LISTEN"], "--advertise", listen["NODEFORGE_CANARY_ADVERTISE"],
               "--cache-dir", str(ARTIFACT_CACHE), "-o", "json")


def test_the_machine_is_inspected_by_the_agent_and_classified_into_the_canary_pool(machine):
    conn = machine["conn"]
    node = conn.baremetal.get_node(machine["id"])
    assert node.resource_class == RC and node.provision_state == "available"
    inventory = conn.baremetal.get_node_inventory(node.id)["inventory"]
    assert inventory["system_vendor"]["manufacturer"] == "QEMU"
    assert [d["size"] for d in inventory["disks"]] == [machine["system"].machine.disk_gib << 30]
    assert {i["mac_address"].lower() for i in inventory["interfaces"]} >= set(machine["system"].macs)
    # Fast-track: the agent that inspected and cleaned the machine is still up, and Ironic reaches it on
    # the machine's forward on loopback (ipa-advertise-host/-port), with the agent's own TLS.
    assert node.driver_internal_info.get("agent_url") == f"https://127.0.0.1:{machine['system'].machine.agent_port}"
    console = (machine["dir"] / "console.log").read_text(errors="replace")
    assert "ironic-python-agent[" in console and "erase_devices_metadata" in console
    # The enrollment's burn-in and full erase ran in that agent, in order, before automated cleaning.
    done = [m.group(1) for m in re.finditer(r"Clean step completed: .*?'step': '(\w+)'", console)]
    assert [s for s in done if s in ENROLLMENT_STEPS] == list(ENROLLMENT_STEPS), done
    assert done.index("erase_devices") < len(done) - 1 - done[::-1].index("erase_devices_metadata"), done
    assert "stress-ng" in console and "fio" in console
    assert node.driver_info.get("agent_burnin_cpu_timeout") == 5
    print(f"\nagent: enroll -> inspect -> clean -> available in {machine['timings']['enroll']:.0f} s")


def test_a_verified_image_deploys_boots_from_disk_and_passes(machine, tmp_path, capsys):
    src = newest_cached_build() or build_demo_image(tmp_path / "demo").path
    build = linked_copy(src, tmp_path / "build", with_verify=True)
    # In a full run the release tests' verify stage has booted this build already and left its
    # reports beside the cached copy (tests/release_fixture.py); else it is verified here.
    if builddir.load(build).variant("baremetal").verify is not builddir.VerifyStatus.PASSED:
        code, _, text = _nf(capsys, "image", "verify", str(build), "--variant", "baremetal",
                            "--timeout", str(BOOT_TIMEOUT), "--cache-dir", str(ARTIFACT_CACHE))
        assert code == 0, text[-3000:]
    scope = f"canary-{uuid.uuid4().hex[:6]}"
    image_id = _publish(machine["admin"], build, scope)
    try:
        policy = _policy(tmp_path)
        code, report, text = _canary(capsys, build, policy)
        assert code == 0, text[-4000:]
        [result] = report["results"]
        assert result["passed"] and result["node"] == machine["node"] and result["node_state"] == "available"
        ids = {c["id"] for c in result["checks"]}
        assert {"CANARY-BOOT", "CANARY-GROW", "CANARY-CONFIGDRIVE", "CANARY-IDENTITY", "CANARY-NETWORK"} <= ids
        assert all(c["passed"] for c in result["checks"])
        image = g.get_image(machine["admin"], image_id)
        assert image[g.canary_property(RC)].startswith("passed ")
        node = machine["conn"].baremetal.get_node(machine["id"])
        assert node.provision_state == "available" and not node.instance_id and not node.allocation_id
        assert not node.is_maintenance
        s = result["seconds"]
        print(f"\ncanary on {machine['node']}: deploy {s['deploy']:.0f} s, first boot {s['first_boot']:.0f} s, "
              f"cleaning {s['clean']:.0f} s")
    finally:
        g.delete_image(machine["admin"], image_id)


def test_an_image_that_ignores_the_config_drive_hostname_passes_verify_and_fails_the_canary(machine, tmp_path, capsys):
    src = newest_cached_build() or build_demo_image(tmp_path / "demo").path
    build = tmp_path / "broken"
    build.mkdir()
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith(("verify", "canary")) and not f.name.endswith(".qcow2"):
            subprocess.run(["cp", "--sparse=always", str(f), str(build / f.name)], check=True)
    _break_hostname(build)
    code, _, text = _nf(capsys, "image", "verify", str(build), "--timeout", str(BOOT_TIMEOUT),
                        "--cache-dir", str(ARTIFACT_CACHE))
    assert code == 0, text[-3000:]                      # verify does not see it
    admin = machine["admin"]
    image_id = _publish(admin, build, f"canary-{uuid.uuid4().hex[:6]}")
    try:
        code, _, text = _canary(capsys, build, _policy(tmp_path))
        assert code != 0 and "CANARY-IDENTITY" in text, text[-3000:]
        report = json.loads((build / "canary.json").read_text())
        [result] = report["results"]
        failed = [c for c in result["checks"] if not c["passed"]]
        assert [c["id"] for c in failed] == ["CANARY-IDENTITY"]
        assert GOLDEN in json.dumps(failed[0]["observed"])
        assert result["node_state"] == "available"
        node = machine["conn"].baremetal.get_node(machine["id"])
        assert node.provision_state == "available" and not node.allocation_id and not node.is_maintenance
        assert g.get_image(admin, image_id)[g.canary_property(RC)].startswith("failed ")
        # Promote refuses it: the policy asks for a pass in the canary class.
        code, _, text = _nf(capsys, "--os-cloud", "nodeforge-dev", "image", "promote", image_id,
                            "--canary-policy", str(_policy(tmp_path)))
        assert code != 0 and RC in text, text[-2000:]
        assert g.TAG_APPROVED not in (g.get_image(admin, image_id).get("tags") or [])
    finally:
        g.delete_image(admin, image_id)


# --- the hardware baseline through the agent: a RAID-1 root volume, its hints, a BIOS update -------

BIOS_NEW, BIOS_OLD = "2023.05", "2022.02"          # the update image's version is in its file name


def _firmware_images(devcloud, tag: str) -> tuple[Path, dict[str, tuple[str, str]]]:
    """Two BIOS update images on the local cloud's HTTP server (the emulated BMC takes the version
    from the name, as sushy-tools does; nodeforge fetches each and checks its sha256 first)."""
    import hashlib

    root = openstack.ironic_http_root(devcloud.paths) / f"nf-firmware-{tag}"
    root.mkdir(parents=True)
    images = {}
    for version in (BIOS_NEW, BIOS_OLD):
        data = os.urandom(4096)
        (root / f"ovmf-{version}.bin").write_bytes(data)
        images[version] = (f"http://{openstack.HOST}:{openstack.port(openstack.IRONIC_HTTP)}/{root.name}/"
                           f"ovmf-{version}.bin", hashlib.sha256(data).hexdigest())
    return root, images


def _baseline_profiles(tmp: Path, url: str, sha256: str) -> Path:
    """manifests/hardware-profiles.yaml with a baseline on the canary profile (the machine's class)."""
    from nodeforge.ironic import profiles as profiles_mod

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / profiles_mod.DEFAULT_PATH).read_text())
    [canary] = [p for p in data["profiles"] if p["resource_class"] == RC]
    canary["baseline"] = {"raid": [{"size_gb": "MAX", "raid_level": "1", "is_root_volume": True,
                                    "controller": "1", "physical_disks": ["Disk1", "Disk2"]}],
                          "root_device": {"size": ">= 9"},
                          "firmware": [{"component": "bios", "version": BIOS_NEW, "url": url, "sha256": sha256}]}
    path = tmp / "hardware-profiles.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _system_nf(capsys, *args: str) -> tuple[int, dict | None, str]:
    return _nf(capsys, "--os-cloud", "nodeforge-dev-system", "baremetal", *args)


def test_the_agent_builds_the_raid_1_root_volume_sets_its_hints_and_updates_the_bios(machine, devcloud, tmp_path,
                                                                                   capsys):
    """At the BMC, behind Ironic's back, the mirror the OS disk lives on is deleted and an older BIOS
    flashed; the audit (the BMC's own view) finds both and the missing root device hints; one apply
    brings all three back through one manual cleaning with the agent up (Redfish RAID and firmware
    steps need it in Ironic 39); both views are clean afterwards and a second apply writes nothing."""
    from tests.ironic.test_audit_devcloud import Emulator

    tag = uuid.uuid4().hex[:6]
    root, images = _firmware_images(devcloud, tag)
    profiles = _baseline_profiles(tmp_path, *images[BIOS_NEW])
    inventory = machine["tmp"] / "inventory" / "machines.yaml"
    emu, system = Emulator(devcloud.paths), machine["system"]
    base = f"/redfish/v1/Systems/{system.uuid}"
    bios_before = emu("GET", base).json()["BiosVersion"]
    select = ["--profiles", str(profiles), "--node", machine["node"]]
    emu("DELETE", base + "/Storage/1/Volumes/1")
    emu("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        json={"ImageURI": images[BIOS_OLD][0], "Targets": [base]})
    try:
        code, doc, text = _system_nf(capsys, "audit", *select, "--inventory", str(inventory), "-o", "json")
        assert code == 11, text[-3000:]
        [found] = doc["nodes"]
        assert (found["source"], [i["item"] for i in found["items"]]) == \
            ("bmc", ["raid", "firmware.bios", "root_device"]), found
        apply = ["baseline", "apply", *select, "--inventory", str(inventory), "-o", "json"]
        code, doc, text = _system_nf(capsys, *apply, "--dry-run")
        [plan] = doc["nodes"]
        assert code == 0 and (plan["action"], plan["agent"], plan["pending"]) == ("apply", True, []), text[-3000:]
        assert [f"{s['interface']}.{s['step']}" for s in plan["steps"]] == [
            "raid.delete_configuration", "raid.create_configuration", "firmware.update"]
        t0 = time.monotonic()
        code, doc, text = _system_nf(capsys, *apply, "--timeout", "1500")
        took = time.monotonic() - t0
        [done] = doc["nodes"]
        assert code == 0 and (done["ok"], done["stage"]) == (True, "done"), text[-4000:]
        node = machine["conn"].baremetal.get_node(machine["id"])
        assert node.provision_state == "available" and "nodeforge_baseline" not in (node.extra or {})
        assert node.properties["root_device"] == {"size": ">= 9"}
        assert [(d["raid_level"], d["size_gb"]) for d in node.raid_config["logical_disks"]] == \
            [("1", system.machine.disk_gib)]
        [vol] = [emu("GET", m["@odata.id"]).json()
                 for m in emu("GET", base + "/Storage/1/Volumes").json()["Members"]]
        assert vol["RAIDType"] == "RAID1" and len(vol["Links"]["Drives"]) == 2
        assert emu("GET", base).json()["BiosVersion"] == BIOS_NEW
        # Clean in both views (Ironic's: the RAID it recorded, the firmware it cached at the update).
        for view in (["--inventory", str(inventory)], []):
            code, doc, text = _system_nf(capsys, "audit", *select, *view, "-o", "json")
            assert code == 0 and doc["nodes"][0]["status"] == "ok", text[-3000:]
        code, doc, text = _system_nf(capsys, *apply)
        assert code == 0 and doc["writes"] == 0 and [n["action"] for n in doc["nodes"]] == ["no-op"], text[-3000:]
        print(f"\nbaseline through the agent on {machine['node']}: RAID-1, hints, BIOS {BIOS_OLD} -> {BIOS_NEW} "
              f"in {took:.0f} s")
    finally:
        if not emu("GET", base + "/Storage/1/Volumes").json()["Members"]:
            drives = [{"@odata.id": f"{base}/Storage/1/Drives/{d.id}"} for d in system.disks]
            emu("POST", base + "/Storage/1/Volumes", json={"Name": "os-mirror", "RAIDType": "RAID1",
                                                            "Links": {"Drives": drives}})
        emu("POST", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            json={"ImageURI": f"http://{openstack.HOST}/ovmf-{bios_before.split()[-1]}.bin", "Targets": [base]})
        for f in root.iterdir():
            f.unlink()
        root.rmdir()
