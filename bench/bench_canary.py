"""Benchmark: the canary on a machine, and nodeforge's deploy and undeploy against the same by hand.

Starts a private local cloud (Keystone, Glance, Barbican, Ironic and the BMC emulators; ports
shifted by OFFSET, state in a temporary directory), publishes the agent ramdisk to its Glance,
enrolls rf-vm-01 (the QEMU machine behind the Redfish emulator) with ``baremetal enroll``
(in-band inspection by the agent, automated cleaning: the agent boot is timed), verifies and
publishes the newest finished bare-metal build of the image cache (tests/image_fixture.py builds
the demo image when there is none), then per round:

A. nodeforge: one canary (``nodeforge.canary.run.run_class``: allocation, deploy with the config
   drive, the node's own report and checks, undeploy and cleaning back to ``available``); its
   ``deploy``, ``first_boot`` (active -> the node's report), ``checks`` and ``clean`` (undeploy ->
   ``available``) times;
B. by hand, as a runbook would: ``openstack baremetal node set --instance-info image_source=ID``,
   ``openstack baremetal node deploy NODE --config-drive FILE --wait 0`` (the same config drive) and
   ``openstack baremetal node undeploy NODE --wait 0``.

Ratio: nodeforge's deploy + clean over the hand deploy + undeploy (the in-guest wait, first boot
and checks, timed apart and left out: the hand run checks nothing). Goal <= 1.1x. Both run with
fast-track: the agent left up by the previous cleaning deploys, and each starts with Ironic's
master image cache emptied (each pays the conductor's download from Glance; a second deploy of
the same image would find it cached). The sides alternate: round 1 nodeforge first, round 2 by
hand first, and so on; the ratio is of each side's best round.

    python bench/bench_canary.py [--rounds 1] [--port-offset 19900]

About 12 minutes per round under TCG on this 2-core machine, plus about 5 for the set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import private_cloud  # noqa: E402  bench/private_cloud.py

OFFSET = 19900     # below the ephemeral range, clear of the test clouds' and the other benches' offsets
RC = "baremetal-canary"
ADMIN, SYSTEM = "nodeforge-dev", "nodeforge-dev-system"
GOAL = 1.1


def say(line: str) -> None:
    print(line, flush=True)


def nf(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "nodeforge.cli", *args, "-o", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"nodeforge {' '.join(args)}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def openstack(*args: str) -> float:
    t = time.monotonic()
    subprocess.run([str(Path(sys.executable).parent / "openstack"), "--os-cloud", SYSTEM, *args], check=True,
                   capture_output=True, text=True)
    return time.monotonic() - t


def bare_metal_build(tmp: Path) -> Path:
    from tests.image_fixture import build_demo_image, newest_cached_build
    from tests.imagebuild.realbuild import linked_copy

    src = newest_cached_build() or build_demo_image(tmp / "demo").path
    return linked_copy(src, tmp / "build")


def cold_image_cache(paths) -> None:
    """Empty Ironic's master image cache before each measured deploy, so each pays the conductor's
    download from Glance (1.8 GB here): else whichever deploy comes second finds the image cached
    (the 22 s between the two deploys of the first measurement)."""
    from nodeforge.devcloud import openstack as dco

    cache = dco.ironic_image_cache(paths)
    for entry in cache.iterdir() if cache.is_dir() else ():
        if entry.is_file():
            entry.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--port-offset", type=int, default=OFFSET)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    private = private_cloud.prepare("nf-bench-canary-", args.port_offset)
    from nodeforge.canary import node_data, run
    from nodeforge.canary.phonehome import Listener
    from nodeforge.canary.policy import CanaryClass, CanaryPolicy
    from nodeforge.devcloud import bmc, openstack as dco
    from nodeforge.devcloud.cloud import DevCloud
    from nodeforge.devcloud.paths import Paths
    from nodeforge.imageverify import builddir
    from nodeforge.ironic.provisioner import SdkProvisioner
    from nodeforge.publish import glance as g
    from nodeforge.publish.retention import RetentionPolicy
    from nodeforge.cloud import connect

    cloud = DevCloud(Paths(private.root))
    tmp = Path(tempfile.mkdtemp(prefix="nf-bench-canary-work-"))
    try:
        t = time.monotonic()
        cloud.up(["keystone", "image", "key-manager", "baremetal"])
        say(f"private cloud up in {time.monotonic() - t:.0f} s ({private.root})")
        agent = nf("--os-cloud", ADMIN, "image", "agent-ramdisk", "--publish")
        [system] = bmc.redfish_machines()
        secrets = tmp / "inv"
        secrets.mkdir(mode=0o700)
        (secrets / "pw").write_text(bmc.credentials(cloud.paths).redfish.password.reveal())
        os.chmod(secrets / "pw", 0o600)
        inv = secrets / "machines.yaml"
        inv.write_text(yaml.safe_dump({"version": 1, "scope": "bench-canary", "nodes": [bmc.machine_inventory_entry(
            cloud.paths, system, name="bench-rf-vm-01", password_ref=f"file:{secrets / 'pw'}",
            deploy_images=agent["driver_info"], kernel_append=dco.IRONIC_KERNEL_APPEND)]}))
        t = time.monotonic()
        nf("--os-cloud", SYSTEM, "baremetal", "enroll", str(inv))
        nf("--os-cloud", SYSTEM, "baremetal", "classify", "--node", "bench-rf-vm-01")
        say(f"agent: enroll -> in-band inspection -> cleaning -> available in {time.monotonic() - t:.0f} s "
            "(one agent boot, fast-track)")
        build = bare_metal_build(tmp)
        nf("image", "verify", str(build), "--variant", "baremetal")
        admin, system_conn = connect(ADMIN), connect(SYSTEM)
        [res] = g.Publisher(admin, RetentionPolicy(), scope="bench-canary").publish(builddir.load(build), ["baremetal"])
        image_id = res.image_id
        prov = SdkProvisioner(system_conn)
        policy = CanaryPolicy(classes=(CanaryClass(RC),), source="bench")
        node = system_conn.baremetal.get_node("bench-rf-vm-01")
        listen = dco.canary_settings()
        host, _, port = listen["NODEFORGE_CANARY_LISTEN"].rpartition(":")
        nf_runs, hand_runs = [], []
        with Listener(host, int(port), advertise=listen["NODEFORGE_CANARY_ADVERTISE"]) as listener:
            def nodeforge_side(r: int) -> bool:
                cold_image_cache(cloud.paths)
                req = run.Request(image_id=image_id, scope="bench-canary", policy=policy, expectations=None,
                                  facts=None, poll=2.0)
                [cp] = run.plan(prov, policy, "bench-canary")
                result = run.run_class(prov, req, cp, listener)
                s = result.seconds
                if not result.passed:
                    say(f"round {r + 1}: the canary FAILED: {result.reason}")
                    return False
                nf_runs.append(s["deploy"] + s["clean"])
                say(f"round {r + 1} nodeforge: deploy {s['deploy']:.0f} s, first boot {s['first_boot']:.0f} s, "
                    f"checks {s.get('checks', 0):.0f} s, clean {s['clean']:.0f} s")
                return True

            def hand_side(r: int) -> None:
                drive = tmp / "configdrive.json"
                ident = node_data.NodeIdentity(instance_id=f"hand-{r}", hostname=f"hand-{r}", mac=system.macs[0])
                cd = node_data.config_drive(ident, {"id": ident.instance_id, "report_url": listener.url(listener.expect()),
                                                    "poweroff": False, "late_commands": {}})
                drive.write_text(json.dumps(cd))      # the same shape as the canary's: Ironic builds the same ISO
                cold_image_cache(cloud.paths)
                openstack("baremetal", "node", "set", node.id, "--instance-info", f"image_source={image_id}")
                d = openstack("baremetal", "node", "deploy", node.id, "--config-drive", str(drive), "--wait", "0")
                u = openstack("baremetal", "node", "undeploy", node.id, "--wait", "0")
                hand_runs.append(d + u)
                say(f"round {r + 1} by hand: deploy --wait {d:.0f} s, undeploy --wait {u:.0f} s")

            for r in range(args.rounds):     # sides alternating: neither always deploys first after enrollment
                if r % 2:
                    hand_side(r)
                if not nodeforge_side(r):
                    return 1
                if not r % 2:
                    hand_side(r)
        ratio = min(nf_runs) / min(hand_runs)
        say(f"nodeforge deploy+clean {min(nf_runs):.0f} s vs by hand deploy+undeploy {min(hand_runs):.0f} s: "
            f"{ratio:.2f}x (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'})")
        return 0 if ratio <= GOAL else 1
    finally:
        try:
            c = connect(SYSTEM)
            for n in c.baremetal.nodes():
                c.baremetal.set_node_power_state(n.id, "power off", wait=True, timeout=120)
        except Exception as exc:  # noqa: BLE001 - the cloud goes down anyway
            say(f"(power off at the end: {exc})")
        cloud.down()
        private.remove()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    sys.exit(main())
