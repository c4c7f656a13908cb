"""Benchmark: planning and applying a hardware baseline on a batch, against the same work by hand.

Starts a private local cloud (Keystone and Ironic, ports shifted by OFFSET, state in a temporary
directory, the service virtualenvs symlinked) and its own Redfish emulator with the largest batch's
systems (fake ones, no QEMU). Per batch size N (``--nodes``, default 20 and 100), on the emulated
systems 1..N:

0. set-up, not timed: two BIOS settings drifted at each BMC (``ProcTurboMode=Disabled``,
   ``NicBoot1=NetworkBoot``), then ``nodeforge baremetal enroll``
   of the N Redfish nodes, 20 at a time (no inspection, no cleaning) under a profile whose baseline wants
   ``ProcTurboMode: Enabled, NicBoot1: Disabled`` and a minimum BIOS firmware every node meets:
   Ironic caches the drifted settings at verify, so every node drifts in Ironic's view.
1. plan, in this process, ``--rounds`` times in alternating order:
   a. nodeforge: what ``baremetal baseline apply --dry-run`` does (one node listing, handed to
      ``nodeforge.ironic.audit.run`` over Ironic's view without outliers, ``baseline_apply.plan``);
      every node must be planned ``apply`` with the one BIOS step (both settings);
   b. the floor: the same nodes' state read through the API and nothing else: one node listing
      (``raid_config`` is a node field), then per node its BIOS settings (``/bios?detail=True``)
      and firmware components (``/firmware``), on as many threads as the audit uses (8).
   Goal: nodeforge's median <= 1.2x the floor's.
2. apply: nodeforge (``baseline_apply.run``: manage, ``bios.apply_configuration`` by manual
   cleaning with ``disable_ramdisk``, provide; one listing per 2 s) against the same change by
   hand with the plain CLI, a command per node as a runbook's loop does (``--hand-jobs`` at a
   time, like ``xargs -P``): ``openstack baremetal node manage NODE``, then once every node is
   manageable ``openstack baremetal node clean NODE --clean-steps STEPS --disable-ramdisk``
   (the steps nodeforge planned), then ``openstack baremetal node provide NODE``; between the
   phases one ``node list`` every 2 s, as nodeforge polls. After nodeforge's run (untimed) a
   second run must plan ``no-op`` for every node and write nothing. Before the hand run the BMCs
   are drifted again; after each run every BMC must hold both settings and every node be
   ``available``. Pace is nodes brought to the baseline per second (a node a side leaves failed,
   e.g. when the local Ironic's SQLite answers "database is locked" under load, or whose command
   the client gave up on, e.g. a clean refused beyond Ironic's ``max_concurrent_clean`` after the
   client's six attempts, is named and not counted; nodeforge's next run would resume it); goal: nodeforge >= 0.9x the hand pace.

The Redfish BIOS apply without the agent is checked by a periodic task of Ironic's conductor
(``[redfish] firmware_update_status_interval``), so both sides wait for the same clock.

    python bench/bench_baseline.py [--nodes 20,100] [--rounds 3] [--hand-jobs 8] [--port-offset 20900]
    python bench/bench_baseline.py --dry-run     # the profile, the inventory and the steps; no cloud

Every line ends with the load average. The script prints FAILED and exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import private_cloud  # noqa: E402  bench/private_cloud.py

OFFSET = 20900     # below the ephemeral range, clear of the test clouds' and the other benches' offsets
SYSTEM = "nodeforge-dev-system"
RC = "baremetal-bench"
SCOPE = "bench-baseline"
PLAN_GOAL, APPLY_GOAL = 1.2, 0.9
POLL = 2.0
ENROLL_CHUNK = 20
# Two BIOS settings drifted at every BMC before each side runs, and the baseline that sets them back.
DRIFTED = {"ProcTurboMode": "Disabled", "NicBoot1": "NetworkBoot"}
WANTED = {"ProcTurboMode": "Enabled", "NicBoot1": "Disabled"}
STEPS = [{"interface": "bios", "step": "apply_configuration",
          "args": {"settings": [{"name": k, "value": v} for k, v in sorted(WANTED.items())]}}]
SHA = "0" * 64


def say(line: str) -> None:
    print(f"{line}  [load {' '.join(f'{x:.1f}' for x in os.getloadavg())}]", flush=True)


def write_profiles(directory: Path) -> Path:
    shutil.copy(REPO / "docs" / "examples" / "bios-registry-qemu.yaml", directory / "registry.yaml")
    path = directory / "profiles.yaml"
    path.write_text(f"""version: 1
profiles:
  - name: bench
    resource_class: {RC}
    match: {{cpu_arch: x86_64}}
    baseline:
      bios_registry: registry.yaml
      bios: {{ProcTurboMode: Enabled, NicBoot1: Disabled}}
      firmware:
        - {{component: bios, version: "2.0.1", match: minimum, url: "https://fw.example/bios.bin", sha256: "{SHA}"}}
""")
    return path


def write_inventory(directory: Path, systems, paths, prefix: str, part: int = 0) -> Path:
    from nodeforge.base.fs import atomic_write
    from nodeforge.devcloud import bmc

    creds = bmc.credentials(paths)
    pw = directory / "redfish.pw"
    atomic_write(pw, creds.redfish.password.reveal(), mode=0o600)   # 0600 before the first byte
    nodes = [{"name": f"{prefix}{s.index:03d}",
              "bmc": {"address": f"redfish+https://127.0.0.1:{bmc.redfish_port()}/redfish/v1/Systems/{s.uuid}",
                      "username": creds.redfish.username, "password": f"file:{pw}",
                      "verify_ca": str(bmc.ca_bundle(paths))},
              "macs": list(s.macs), "resource_class": RC, "cleaning": "none"} for s in systems]
    path = directory / f"{prefix}inventory-{part}.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "scope": SCOPE, "nodes": nodes}, sort_keys=False))
    return path


def busy_ports(offset: int) -> list[int]:
    from nodeforge.devcloud import bmc, openstack

    busy = []
    for port in sorted({p + offset for p in openstack.PORTS.values()} | {bmc.REDFISH_PORT + offset}):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


class Bench:
    def __init__(self, root: Path, env: dict, hand_jobs: int):
        from nodeforge.devcloud.cloud import DevCloud
        from nodeforge.devcloud.paths import Paths

        self.env = env
        self.cloud = DevCloud(Paths(root))
        self.hand_jobs = hand_jobs
        self.conn = None
        self.emulator = None

    def up(self, systems: int) -> None:
        import requests
        from nodeforge.devcloud import bmc

        self.cloud.up(["ironic"])
        spec = bmc.redfish_service(self.cloud.paths, count=systems, machines=[])
        assert f":{bmc.REDFISH_PORT + OFFSET}" in spec.url, spec.url
        self.cloud.supervisor.start(spec)
        self.cloud.supervisor.wait_healthy(spec)
        creds = bmc.credentials(self.cloud.paths)
        session = requests.Session()
        session.auth = (creds.redfish.username, creds.redfish.password.reveal())
        self.emulator = (session, bmc.redfish_endpoint(bmc.redfish_port()), str(bmc.ca_bundle(self.cloud.paths)))
        import openstack

        self.conn = openstack.connect(cloud=SYSTEM)      # the private cloud's clouds.yaml (private_cloud.prepare)
        assert f":{6385 + OFFSET}" in self.conn.baremetal.get_endpoint(), self.conn.baremetal.get_endpoint()

    def provisioner(self):
        from nodeforge.ironic.provisioner import SdkProvisioner

        return SdkProvisioner(self.conn)

    # -- the BMCs ------------------------------------------------------------
    def bmc(self, method: str, path: str, **kw):
        session, url, ca = self.emulator
        # verify per request: a session's own is overridden by REQUESTS_CA_BUNDLE from the environment
        r = session.request(method, url + path, timeout=30, verify=ca, **kw)
        if not r.ok:
            raise SystemExit(f"BMC {method} {path}: {r.status_code} {r.text[:300]}")
        return r

    def set_bios(self, systems, attributes: dict) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: self.bmc("PATCH", f"/redfish/v1/Systems/{s.uuid}/BIOS/Settings",
                                             json={"Attributes": attributes}), systems))

    def at_baseline(self, systems) -> int:
        """How many BMCs hold every setting of the baseline."""
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda s: self.bmc("GET", f"/redfish/v1/Systems/{s.uuid}/BIOS").json()
                                ["Attributes"], systems))
        return sum(all(a.get(k) == v for k, v in WANTED.items()) for a in got)

    # -- Ironic ----------------------------------------------------------------
    def nodeforge(self, *args: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM, *args, "-o", "json"],
                              env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"nodeforge {' '.join(args)}: exit {proc.returncode}\n{proc.stdout[-1500:]}"
                             f"\n{proc.stderr[-1500:]}")
        return json.loads(proc.stdout)

    def states(self, names: list[str]) -> dict[str, int]:
        wanted = set(names)
        got = [n["provision_state"] for n in self.provisioner().list_nodes(fields=["name", "provision_state"])
               if n["name"] in wanted]
        return {v: got.count(v) for v in sorted(set(got))}

    def wait_all(self, names: list[str], state: str, timeout: float = 1800.0) -> list[str]:
        """Until every node is ``state`` or in a failed state; the failed ones."""
        deadline = time.monotonic() + timeout
        wanted = set(names)
        while True:
            got = {n["name"]: n["provision_state"] or "" for n in
                   self.provisioner().list_nodes(fields=["name", "provision_state"]) if n["name"] in wanted}
            failed = sorted(k for k, v in got.items() if "fail" in v)
            if len(got) == len(wanted) and all(v == state or k in failed for k, v in got.items()):
                return failed
            if time.monotonic() > deadline:
                raise SystemExit(f"waiting for {len(names)} nodes to be {state}: {self.states(names)}")
            time.sleep(POLL)

    def delete(self, names: list[str]) -> None:
        for n in self.provisioner().list_nodes(fields=["uuid", "name", "provision_state"]):
            if n["name"] in set(names):
                try:
                    self.conn.baremetal.delete_node(n["uuid"])
                except Exception as exc:  # noqa: BLE001 - a node left behind is named, not fatal
                    say(f"{n['name']} ({n['provision_state']}) not deleted: {str(exc)[:200]}")

    # -- the measurements ------------------------------------------------------
    def nf_plan(self, profiles, names: list[str]) -> tuple[float, list]:
        from nodeforge.ironic import baseline_apply

        prov = self.provisioner()
        t0 = time.monotonic()
        plans = baseline_apply.plan_from_ironic(prov, profiles, scope=SCOPE)      # as `baseline apply` does
        seconds = time.monotonic() - t0
        applies = [p for p in plans if p.action == baseline_apply.APPLY and p.steps == STEPS]
        if len(applies) != len(names) or len(plans) != len(names):
            raise SystemExit(f"plan: {len(applies)} of {len(names)} nodes planned apply "
                             f"({[(p.name, p.action, p.detail) for p in plans if p not in applies][:3]})")
        return seconds, plans

    def floor(self, names: list[str]) -> float:
        prov = self.provisioner()
        t0 = time.monotonic()
        nodes = [n for n in prov.list_nodes() if n.get("extra", {}).get("nodeforge_scope") == SCOPE]

        def read(node: dict) -> tuple:
            return node.get("raid_config"), prov.get_bios(node["uuid"]), prov.get_firmware(node["uuid"])

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(read, nodes))
        seconds = time.monotonic() - t0
        if len(got) != len(names) or not all(bios and fw for _, bios, fw in got):
            raise SystemExit(f"floor: read {len(got)} of {len(names)} nodes, some without BIOS or firmware")
        return seconds

    def nf_apply(self, plans: list) -> tuple[float, list[str]]:
        """Seconds, and the nodes whose apply failed (named with why)."""
        from nodeforge.ironic import baseline_apply

        t0 = time.monotonic()
        baseline_apply.run(plans, self.provisioner(), timeout=1800, poll=POLL)
        seconds = time.monotonic() - t0
        return seconds, [f"{p.name}: {p.stage}: {(p.error or '')[:160]}" for p in plans
                         if p.action == baseline_apply.APPLY and not p.ok]

    def second_run(self, profiles) -> tuple[dict[str, int], int]:
        """What `baseline apply` does once more after a complete run: its actions, and its writes."""
        from nodeforge.ironic import baseline_apply

        prov = self.provisioner()
        plans = baseline_apply.plan_from_ironic(prov, profiles, scope=SCOPE)
        baseline_apply.run(plans, prov, timeout=60, poll=POLL)
        return dict(collections.Counter(p.action for p in plans)), prov.writes

    def hand(self, names: list[str]) -> tuple[float, list[str]]:
        """Seconds, and the nodes a phase left in a failed state (not retried, as a loop would not)."""
        cli = [str(Path(sys.executable).parent / "openstack"), "--os-cloud", SYSTEM, "baremetal", "node"]
        steps = json.dumps(STEPS)

        refused: dict[str, str] = {}

        def each(argv_of, which: list[str] = names) -> list[str]:
            """The nodes whose command failed (after the client's own retries): a runbook's loop
            goes on with the others."""
            def one(name: str) -> str | None:
                proc = subprocess.run(cli + argv_of(name), env=self.env, capture_output=True, text=True)
                if proc.returncode != 0:
                    lines = proc.stderr.strip().splitlines() or ["(no error output)"]
                    refused[name] = f"{argv_of(name)[0]} refused: {lines[-1][:160]}"
                    return name
                return None
            with ThreadPoolExecutor(self.hand_jobs) as pool:
                return [n for n in pool.map(one, which) if n]

        t0 = time.monotonic()
        failed = each(lambda n: ["manage", n])
        failed += self.wait_all([n for n in names if n not in failed], "manageable")
        ok = [n for n in names if n not in failed]
        failed += each(lambda n: ["clean", n, "--clean-steps", steps, "--disable-ramdisk"], ok)
        ok = [n for n in names if n not in failed]
        time.sleep(POLL)                      # the listing may still show the state before cleaning started
        failed += self.wait_all(ok, "manageable")
        ok = [n for n in names if n not in failed]
        failed += each(lambda n: ["provide", n], ok)
        failed += self.wait_all([n for n in names if n not in failed], "available")
        return time.monotonic() - t0, [f"{n}: {refused.get(n, 'left in a failed state')}" for n in failed]


def batch(bench: Bench, tmp: Path, profiles_path: Path, n: int, rounds: int, failed: list) -> dict:
    from nodeforge.devcloud import bmc
    from nodeforge.ironic import profiles as P

    systems = bmc.redfish_systems(n)
    prefix = f"bl{n}-"
    names = [f"{prefix}{s.index:03d}" for s in systems]
    bench.set_bios(systems, DRIFTED)
    t0 = time.monotonic()
    # In chunks: enroll gives each node 180 s to verify, which 100 Redfish nodes at once on two
    # loaded cores overran (Ironic reads every BMC's BIOS and firmware at verify).
    for k in range(0, n, ENROLL_CHUNK):
        bench.nodeforge("baremetal", "enroll", str(write_inventory(tmp, systems[k:k + ENROLL_CHUNK],
                                                                   bench.cloud.paths, prefix, k)))
    say(f"N={n}: enrolled (not timed: {time.monotonic() - t0:.0f} s); BMCs at the baseline: "
        f"{bench.at_baseline(systems)}")
    profiles = P.load(profiles_path)
    nf, fl, plans = [], [], None
    for r in range(rounds):
        for side in (("nf", "floor") if r % 2 == 0 else ("floor", "nf")):
            if side == "nf":
                seconds, plans = bench.nf_plan(profiles, names)
                nf.append(seconds)
            else:
                fl.append(bench.floor(names))
    plan_ratio = statistics.median(nf) / statistics.median(fl)
    ok = plan_ratio <= PLAN_GOAL
    failed += [] if ok else [f"N={n} plan {plan_ratio:.2f}x the floor"]
    say(f"N={n}: plan {statistics.median(nf):.2f} s (min {min(nf):.2f}), floor {statistics.median(fl):.2f} s "
        f"(min {min(fl):.2f}), {rounds} rounds: {plan_ratio:.2f}x, goal <= {PLAN_GOAL}x: {'met' if ok else 'NOT met'}")
    t_nf, nf_failed = bench.nf_apply(plans)
    after_nf = bench.at_baseline(systems)
    say(f"N={n}: apply nodeforge {t_nf:.1f} s ({n - len(nf_failed)} nodes); BMCs at the baseline {after_nf}")
    again, writes = bench.second_run(profiles)       # untimed: the audit clean, nothing written
    if again != {"no-op": n - len(nf_failed)} or writes:
        failed.append(f"N={n}: a second run planned {again} and wrote {writes} times")
    say(f"N={n}: second run: {again}, {writes} writes")
    bench.set_bios(systems, DRIFTED)
    t_hand, hand_failed = bench.hand(names)
    after_hand = bench.at_baseline(systems)
    done_nf, done_hand = n - len(nf_failed), n - len(hand_failed)
    if after_nf < done_nf or after_hand < done_hand:
        raise SystemExit(f"N={n}: BMCs after nodeforge {after_nf} ({done_nf} done), after the hand run "
                         f"{after_hand} ({done_hand} done)")
    for who, bad in (("nodeforge", nf_failed), ("by hand", hand_failed)):
        if bad:
            if who == "nodeforge":                 # the peer's losses are its own: shown, not a failure here
                failed.append(f"N={n} {who}: {len(bad)} node(s) failed")
            say(f"N={n}: {who}: {len(bad)} node(s) failed (not counted in its pace), e.g. {bad[0]}")
    pace = (done_nf / t_nf) / (done_hand / t_hand) if done_nf and done_hand else 0.0
    ok = pace >= APPLY_GOAL
    failed += [] if ok else [f"N={n} apply pace {pace:.2f}x the hand run's"]
    say(f"N={n}: apply nodeforge {t_nf:.1f} s ({done_nf} nodes, {done_nf / t_nf:.3f} nodes/s), by hand "
        f"{t_hand:.1f} s ({done_hand} nodes, {done_hand / t_hand:.3f} nodes/s, {bench.hand_jobs} commands at a "
        f"time): pace {pace:.2f}x, goal >= {APPLY_GOAL}x: {'met' if ok else 'NOT met'}; BMCs at the baseline "
        f"after nodeforge {after_nf}, after the hand run {after_hand}")
    bench.delete(names)
    return {"n": n, "plan": statistics.median(nf), "floor": statistics.median(fl), "plan_ratio": plan_ratio,
            "apply": t_nf, "applied": done_nf, "hand": t_hand, "hand_done": done_hand, "pace": pace}


def main() -> int:
    global OFFSET
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="20,100", help="batch sizes, comma-separated (default 20,100)")
    ap.add_argument("--rounds", type=int, default=3, help="plan and floor measurements each (default 3)")
    ap.add_argument("--hand-jobs", type=int, default=8, help="hand CLI commands run at a time (default 8)")
    ap.add_argument("--port-offset", type=int, default=OFFSET, help=f"private cloud's port offset ({OFFSET})")
    ap.add_argument("--dry-run", action="store_true", help="write the profile and an inventory, print the plan")
    args = ap.parse_args()
    sizes = [int(x) for x in args.nodes.split(",") if x.strip()]
    if not sizes or min(sizes) < 1 or args.rounds < 1 or args.hand_jobs < 1:
        ap.error("--nodes, --rounds and --hand-jobs must be positive")
    OFFSET = args.port_offset
    if args.dry_run:
        import tempfile

        from nodeforge.ironic import profiles as P

        tmp = Path(tempfile.mkdtemp(prefix="nf-bench-baseline-"))
        P.load(write_profiles(tmp))
        print(f"would start a private cloud (Keystone, Ironic, a Redfish emulator of {max(sizes)} systems) at "
              f"offset {OFFSET}; batches {sizes}; profile {tmp / 'profiles.yaml'} (loaded); steps {json.dumps(STEPS)}")
        shutil.rmtree(tmp)
        return 0
    busy = busy_ports(OFFSET)
    if busy:
        ap.error(f"port offset {OFFSET}: port(s) {', '.join(map(str, busy))} in use; pick another --port-offset")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    private = private_cloud.prepare("nf-bench-baseline-", OFFSET)
    tmp = private.root / "bench"
    tmp.mkdir()
    bench = Bench(private.root, private.env, args.hand_jobs)
    failed: list[str] = []
    try:
        bench.up(max(sizes))
        profiles_path = write_profiles(tmp)
        subprocess.run([str(Path(sys.executable).parent / "openstack"), "--help"], env=private.env,
                       capture_output=True)             # the CLI's bytecode cache, outside the timings
        say(f"Ironic all-in-one on {os.cpu_count()} CPUs shared with other work; batches {sizes}")
        results = [batch(bench, tmp, profiles_path, n, args.rounds, failed) for n in sizes]
        print(json.dumps(results), flush=True)
    finally:
        bench.cloud.down()
        private.remove()
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
