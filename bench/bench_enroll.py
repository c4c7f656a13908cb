"""Benchmark: `nodeforge baremetal enroll` against a runbook and against Ironic's own capacity.

Starts a private local cloud (Keystone + Ironic, ports shifted by
OFFSET, state in a temporary directory, the service virtualenvs symlinked)
so the session's cloud is never disturbed, and gives every measurement a
FRESH Ironic database (Ironic stopped, its SQLite file removed, schema
re-created, Ironic restarted). N ``fake-hardware`` nodes with one port each
go from one file (python-ironicclient's ``baremetal create`` format, which
nodeforge reads too) to ``available``:

1. nodeforge: ``python -m nodeforge.cli baremetal enroll FILE`` (defaults);
   then a no-change re-run of the same file (goal: < 10% of the first run).
2. raw API, no waiting (what the one Ironic process can do): every node and
   port POSTed, ``manage`` fired for all, one listing per 0.5 s until all are
   ``manageable``, ``provide`` fired for all, polled until all ``available``
   (16 threads; 409/503 retried after 0.5 s). Goal: nodeforge >= 0.9x.
2b. both again against a deliberately throttled Ironic (:class:`ThrottledIronic`:
   a proxy letting ``--throttle-slots`` (4) requests in at once, answering the
   rest 503 "No free conductor workers available" as a busy conductor does,
   and adding ``--throttle-latency`` (0.1 s) to each admitted one). Goals:
   nodeforge >= 0.8x, and no more failed calls (409 + 503: Ironic's log plus
   the proxy's refusals) than the raw API.
3. the runbook: ``baremetal create FILE`` (python-ironicclient), then node by
   node ``baremetal node manage --wait NODE`` and ``baremetal node provide
   --wait NODE``. Goal: nodeforge >= 5x faster. Each command is a process
   start (~2.5 s here with a warm bytecode cache); ``--wait`` polls every 2 s.
   ``--runbook-sample K`` runs the per-node loop on K nodes only and
   EXTRAPOLATES it linearly to N (printed as such); 0 = all N, for real.

Then pre-flight of ``--bmcs`` (200) emulated Redfish BMCs: the private cloud
runs its own sushy-tools emulator with that many systems (one HTTPS process,
one system per BMC URL: ``/redfish/v1/Systems/<uuid>``; started, idle, before
the first measurement so its port is held for the whole run); ``nodeforge
baremetal preflight FILE`` must check them all in < 60 s.

Every 409 and 503 Ironic answered during a measurement is counted from its
API log; nodeforge's own count of the ones it retried comes from its report.

Measurements 1 and 2 are repeated ``--rounds`` times (default 2), each on a
fresh database, their order alternating (round 1: nodeforge then the raw API;
round 2: the raw API then nodeforge; ...), so neither always runs first on a
just-started Ironic. Each side's min and median are printed; the ratio is the
median of the per-round ratios, and the runbook is compared with nodeforge's
median. Every goal prints "met" or "NOT met"; the script prints FAILED and
why, and exits 1, when any goal is missed (pre-flight: every BMC ok, < 60 s).

Child processes get a bytecode cache (``PYTHONPYCACHEPREFIX`` in a temporary
directory) because this machine sets PYTHONDONTWRITEBYTECODE=1: without it
every ``baremetal`` command would re-parse its imports (~4.5 s instead of
~2.5 s), which would flatter nodeforge.

Run: .venv/bin/python bench/bench_enroll.py [--nodes 500] [--rounds 2] [--runbook-sample 0] [--bmcs 200]
     [--nf-args "--concurrency 50"] [--port-offset 17700] [--no-runbook] [--throttle-slots 4]
     [--throttle-latency 0.1]

Every measurement line ends with the machine's load average (os.getloadavg()).

The ports the private cloud needs at ``--port-offset`` are checked first: one
in use (another local cloud) stops the bench at once, naming the ports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

import private_cloud  # bench/private_cloud.py (the script's own directory is on sys.path)

OFFSET = 17700   # every port below the ephemeral range (32768-), clear of the test clouds' offsets
SYSTEM_CLOUD = "nodeforge-dev-system"
API = "1.70"


def set_offset(offset: int) -> None:
    global OFFSET
    OFFSET = offset


def busy_ports(offset: int, proxy: bool = False) -> list[int]:
    """The ports the private cloud would use at ``offset`` (every service's, and the
    Redfish emulator's) that something already listens on."""
    import socket

    from nodeforge.devcloud import bmc, openstack

    busy = []
    wanted = {p + offset for p in openstack.PORTS.values()} | {bmc.REDFISH_PORT + offset}
    if proxy:
        wanted.add(PROXY_PORT + offset)
    for port in sorted(wanted):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the services bind: TIME_WAIT is no clash
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def fake_nodes(n: int) -> list[dict]:
    return [{"name": f"bench-{i:04d}", "driver": "fake-hardware", "resource_class": "baremetal-fake",
             "ports": [{"address": f"52:54:be:00:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}"}]} for i in range(n)]


PROXY_PORT = 6390   # + OFFSET: the throttling proxy in front of Ironic (ThrottledIronic)


class ThrottledIronic:
    """A deliberately throttled Ironic: an HTTP proxy in front of the private
    Ironic that lets at most ``slots`` requests in at once (the rest are
    answered 503 at once, in Ironic's own words: "No free conductor worker
    available", as a busy conductor does) and holds each admitted request
    ``latency`` seconds before forwarding it (a slow API). Both sides are
    pointed at it through ``baremetal_endpoint_override`` in a copy of
    clouds.yaml, and it counts what it refused, per measurement."""

    BODY = json.dumps({"error_message": json.dumps({
        "faultstring": "No free conductor workers available", "debuginfo": None,
        "faultcode": "Server"})}).encode()

    def __init__(self, port: int, upstream: int, *, slots: int, latency: float):
        import http.client
        import http.server
        import socketserver

        self.port, self.upstream, self.slots, self.latency = port, upstream, slots, latency
        self.inside = 0
        self.refused = 0
        self.forwarded = 0
        self.max_inside = 0
        lock = threading.Lock()
        local = threading.local()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with lock:
                    admitted = proxy.inside < proxy.slots
                    if admitted:
                        proxy.inside += 1
                        proxy.max_inside = max(proxy.max_inside, proxy.inside)
                    else:
                        proxy.refused += 1
                if not admitted:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(proxy.BODY)))
                    self.end_headers()
                    self.wfile.write(proxy.BODY)
                    return
                try:
                    time.sleep(proxy.latency)
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "host")}
                    for attempt in range(2):
                        conn = getattr(local, "conn", None)
                        if conn is None:
                            conn = local.conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=300)
                        try:
                            conn.request(self.command, self.path, body=body, headers=headers)
                            resp = conn.getresponse()
                            data = resp.read()
                            break
                        except (http.client.HTTPException, OSError):
                            conn.close()
                            local.conn = None
                            if attempt:
                                raise
                finally:
                    with lock:
                        proxy.inside -= 1
                        proxy.forwarded += 1
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        self.refused = self.forwarded = self.max_inside = 0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())



class Bench:
    def __init__(self, root: Path, env: dict):
        from nodeforge.devcloud.cloud import DevCloud
        from nodeforge.devcloud.paths import Paths

        self.root = root
        self.env = env
        self.cloud = DevCloud(Paths(root))
        self.log = root / "log" / "ironic-app.log"
        self.clouds_file = self.cloud.paths.clouds_yaml
        self.proxy: ThrottledIronic | None = None

    def throttle(self, proxy: ThrottledIronic | None) -> None:
        """Point both sides at ``proxy`` (a clouds.yaml whose system cloud overrides the
        baremetal endpoint), or back at Ironic itself (None)."""
        self.proxy = proxy
        if proxy is None:
            self.clouds_file = self.cloud.paths.clouds_yaml
        else:
            conf = yaml.safe_load(self.cloud.paths.clouds_yaml.read_text())
            conf["clouds"][SYSTEM_CLOUD]["baremetal_endpoint_override"] = f"http://127.0.0.1:{proxy.port}/"
            self.clouds_file = self.root / "bench" / "clouds-throttled.yaml"
            self.clouds_file.write_text(yaml.safe_dump(conf))
            os.chmod(self.clouds_file, 0o600)
        self.env["OS_CLIENT_CONFIG_FILE"] = str(self.clouds_file)

    # -- the private cloud -------------------------------------------------
    def connect(self):
        import openstack.config
        from openstack import connection

        # load_envvars=False: an OS_CLIENT_CONFIG_FILE in the environment
        # (the session's cloud) would otherwise come before this file.
        conf = openstack.config.OpenStackConfig(config_files=[str(self.clouds_file)], load_envvars=False)
        region = conf.get_one(SYSTEM_CLOUD)
        assert region.config["auth"]["auth_url"].endswith(f":{5000 + OFFSET}/v3"), region.config["auth"]
        conn = connection.Connection(config=region)
        port = self.proxy.port if self.proxy else 6385 + OFFSET
        assert f":{port}" in conn.baremetal.get_endpoint(), conn.baremetal.get_endpoint()
        return conn

    def fresh_ironic(self) -> None:
        """Stop Ironic, drop its database, start it again on an empty schema."""
        self.cloud.supervisor.stop("ironic")
        data = self.cloud.paths.data
        for p in data.glob("ironic.sqlite*"):
            p.unlink()
        (data / "ironic-db.done").unlink(missing_ok=True)
        self.cloud.up(["ironic"])
        conn = self.connect()
        assert not list(conn.baremetal.nodes()), "Ironic database not fresh"
        if self.proxy:
            self.proxy.reset()

    def log_mark(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def statuses(self, since: int) -> dict[str, int]:
        """409/503 answers in Ironic's API log since ``since`` (bytes)."""
        with open(self.log, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        out = {"409": 0, "503": 0}
        for m in re.finditer(r" - (GET|POST|PUT|PATCH|DELETE) \S+ - (409|503) ", text):
            out[m.group(2)] += 1
        if self.proxy:
            out["503"] += self.proxy.refused      # answered by the throttle, never reached Ironic
        return out

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:6])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    # -- measurements --------------------------------------------------------
    def nodeforge_enroll(self, inv: Path, extra: list[str]) -> tuple[float, dict]:
        t0 = time.monotonic()
        proc = self.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", SYSTEM_CLOUD, "baremetal", "enroll",
                         str(inv), "-o", "json", *extra])
        seconds = time.monotonic() - t0
        data = json.loads(proc.stdout)
        assert data["failed"] == 0 and all(n["state"] == "available" for n in data["nodes"]), data["failed"]
        return seconds, data

    def raw_api(self, nodes: list[dict], threads: int = 16) -> tuple[float, dict]:
        conn = self.connect()
        bm = conn.baremetal
        retried = {"409": 0, "503": 0}
        lock = threading.Lock()

        def call(method: str, url: str, body=None):
            while True:
                # status_code_retries=0: keystoneauth's own retries of 409/503 (backoff up to 8 s)
                # off; the peer retries them itself, after 0.5 s, as documented above. A connection
                # reset (Ironic closing an idle kept-alive connection) is retried twice, as nodeforge does.
                resp = bm.request(url, method, json=body, microversion=API, raise_exc=False,
                                  status_code_retries=0, connect_retries=2)
                if resp.status_code in (409, 503) and "already exists" not in resp.text:
                    with lock:
                        retried[str(resp.status_code)] += 1
                    time.sleep(0.5)
                    continue
                if resp.status_code >= 400:
                    raise SystemExit(f"{method} {url}: {resp.status_code} {resp.text[:300]}")
                return resp.json() if resp.content else None

        def create(n: dict) -> str:
            body = {k: v for k, v in n.items() if k != "ports"}
            uuid = call("POST", "/nodes", body)["uuid"]
            for p in n["ports"]:
                call("POST", "/ports", {"node_uuid": uuid, "address": p["address"]})
            return uuid

        def wait_all(state: str, uuids: list[str]) -> None:
            want = set(uuids)
            while True:
                data = call("GET", "/nodes?fields=uuid,provision_state&limit=1000")
                if all(n["provision_state"] == state for n in data["nodes"] if n["uuid"] in want):
                    return
                bad = [n for n in data["nodes"] if n["uuid"] in want and "fail" in (n["provision_state"] or "")]
                if bad:
                    raise SystemExit(f"raw API: {len(bad)} nodes failed ({bad[0]})")
                time.sleep(0.5)

        t0 = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            uuids = list(pool.map(create, nodes))
            list(pool.map(lambda u: call("PUT", f"/nodes/{u}/states/provision", {"target": "manage"}), uuids))
            wait_all("manageable", uuids)
            list(pool.map(lambda u: call("PUT", f"/nodes/{u}/states/provision", {"target": "provide"}), uuids))
            wait_all("available", uuids)
        return time.monotonic() - t0, retried

    def runbook(self, inv: Path, names: list[str], sample: int) -> tuple[float, float, float, int]:
        """(create seconds, per-node loop seconds for the sample, total for N, sample size)."""
        bm = [str(Path(sys.executable).parent / "baremetal"), "--os-cloud", SYSTEM_CLOUD,
              "--os-auth-type", "password"]
        t0 = time.monotonic()
        self.run(bm + ["create", str(inv)])
        t_create = time.monotonic() - t0
        k = len(names) if sample <= 0 else min(sample, len(names))
        t1 = time.monotonic()
        for name in names[:k]:
            self.run(bm + ["node", "manage", "--wait", "600", name])
            self.run(bm + ["node", "provide", "--wait", "600", name])
        t_loop = time.monotonic() - t1
        conn = self.connect()
        states = {n.name: n.provision_state for n in conn.baremetal.nodes(fields=["name", "provision_state"])}
        assert all(states[n] == "available" for n in names[:k]), "runbook left nodes short of available"
        return t_create, t_loop, t_create + t_loop * len(names) / k, k

    def start_bmcs(self, count: int) -> None:
        """The Redfish emulator for the pre-flight, started before any measurement so
        its port is held from the start (a clash with another cloud fails at once,
        not after the enroll measurements); it sits idle until the pre-flight."""
        from nodeforge.devcloud import bmc

        spec = bmc.redfish_service(self.cloud.paths, count=count)
        assert f":{8000 + OFFSET}" in spec.url, spec.url
        self.cloud.supervisor.start(spec)
        self.cloud.supervisor.wait_healthy(spec)

    def preflight(self, tmp: Path, count: int) -> tuple[float, dict]:
        from nodeforge.devcloud import bmc
        from nodeforge.base.fs import atomic_write

        creds = bmc.credentials(self.cloud.paths)
        pw = tmp / "redfish.pw"
        atomic_write(pw, creds.redfish.password.reveal(), mode=0o600)   # 0600 before the first byte
        nodes = [{"name": f"bench-rf-{s.index:03d}",
                  "bmc": {"address": f"redfish+https://127.0.0.1:{bmc.redfish_port()}/redfish/v1/Systems/{s.uuid}",
                          "username": creds.redfish.username, "password": f"file:{pw}",
                          "verify_ca": str(bmc.ca_bundle(self.cloud.paths))},
                  "macs": list(s.macs), "cleaning": "none"} for s in bmc.redfish_systems(count)]
        inv = tmp / "bmcs.yaml"
        inv.write_text(yaml.safe_dump({"version": 1, "nodes": nodes}, sort_keys=False))
        t0 = time.monotonic()
        proc = self.run([sys.executable, "-m", "nodeforge.cli", "baremetal", "preflight", str(inv), "-o", "json"],
                        check=False)
        seconds = time.monotonic() - t0
        data = json.loads(proc.stdout)
        return seconds, data


def pacing_summary(report: dict) -> str:
    p = report.get("pacing") or {}
    return (f"in flight {p.get('min_limit')}-{p.get('max_limit')}, {p.get('calls')} calls, "
            f"congested {p.get('congested') or {}}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500, help="fake-hardware nodes per measurement (default 500)")
    ap.add_argument("--runbook-sample", type=int, default=0,
                    help="run the runbook's node-by-node loop on K nodes and extrapolate to N (0: all N)")
    ap.add_argument("--bmcs", type=int, default=200, help="emulated Redfish BMCs for pre-flight (0: skip)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="nodeforge and raw-API measurements each, order alternating per round (default 2; "
                         "0: only the throttled ones)")
    ap.add_argument("--nf-args", default="", help="extra 'baremetal enroll' options, e.g. '--concurrency 50'")
    ap.add_argument("--no-runbook", action="store_true", help="skip the runbook measurement")
    ap.add_argument("--throttle-slots", type=int, default=4,
                    help="throttled Ironic: requests let in at once, the rest answered 503 (default 4; 0: skip)")
    ap.add_argument("--throttle-latency", type=float, default=0.1,
                    help="throttled Ironic: seconds added to every admitted request (default 0.1)")
    ap.add_argument("--port-offset", type=int, default=OFFSET,
                    help=f"port offset of the private cloud (default {OFFSET}); every port it needs must be free")
    args = ap.parse_args()
    if args.rounds < 0:
        ap.error("--rounds must be at least 0 (0: only the throttled measurement)")
    busy = busy_ports(args.port_offset, proxy=args.throttle_slots > 0)
    if busy:
        ap.error(f"port offset {args.port_offset}: 127.0.0.1 port(s) {', '.join(map(str, busy))} already in use "
                 "(another local cloud?); pick another --port-offset")
    set_offset(args.port_offset)
    nf_args = args.nf_args.split()
    # SIGTERM (e.g. a time limit) still runs the clean-up below: the private cloud goes down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    private = private_cloud.prepare("nf-bench-enroll-", OFFSET)
    root, env = private.root, private.env
    tmp = root / "bench"
    tmp.mkdir()
    nodes = fake_nodes(args.nodes)
    inv = tmp / "nodes.yaml"
    inv.write_text(yaml.safe_dump({"nodes": nodes}, sort_keys=False))
    names = [n["name"] for n in nodes]
    bench = Bench(root, env)

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        bench.cloud.up(["ironic"])
        bench.connect()
        if args.bmcs:
            bench.start_bmcs(args.bmcs)
        # Warm both CLIs' bytecode caches outside the timings.
        bench.run([sys.executable, "-m", "nodeforge.cli", "--help"])
        bench.run([str(Path(sys.executable).parent / "baremetal"), "--os-cloud", SYSTEM_CLOUD,
                   "--os-auth-type", "password", "driver", "list"])

        n = args.nodes
        say(f"fake-hardware nodes: {n} (one port each), fresh Ironic database per measurement, "
            f"Ironic 39 all-in-one on {os.cpu_count()} CPUs shared with other work; {load()}")
        failed: list[str] = []

        def goal(ok: bool, what: str) -> str:
            if not ok:
                failed.append(what)
            return "met" if ok else "NOT met"

        # 1.+2. nodeforge (then the no-change re-run) and the raw API, each on a fresh
        # database, in alternating order round by round (AB BA ...).
        nf_runs: list[float] = []
        raw_runs: list[float] = []
        rerun_pct: list[float] = []
        fresh = True      # the database 'up' just created is empty
        for r in range(args.rounds):
            order = ("nodeforge", "raw") if r % 2 == 0 else ("raw", "nodeforge")
            say(f"round {r + 1} of {args.rounds}: {' then '.join(order)}")
            for side in order:
                if not fresh:
                    bench.fresh_ironic()
                fresh = False
                mark = bench.log_mark()
                if side == "nodeforge":
                    nf, data = bench.nodeforge_enroll(inv, nf_args)
                    nf_seen = bench.statuses(mark)
                    nf_runs.append(nf)
                    say(f"nodeforge baremetal enroll {' '.join(nf_args) or '(defaults)'}: {nf:7.1f} s  "
                        f"{n / nf:6.2f} nodes/s  writes {data['writes']}, Ironic answered 409: {nf_seen['409']}, "
                        f"503: {nf_seen['503']}; nodeforge retried {data.get('retried') or {}}; "
                        f"pacing {pacing_summary(data)}; {data['seconds']:.1f} s after start-up and sign-in; "
                        f"{load()}")
                    mark = bench.log_mark()
                    again, data2 = bench.nodeforge_enroll(inv, nf_args)
                    assert data2["writes"] == 0, data2["writes"]
                    again_seen = bench.statuses(mark)
                    rerun_pct.append(100 * again / nf)
                    say(f"  no-change re-run:                {again:7.1f} s  ({rerun_pct[-1]:.1f}% of the first run, "
                        f"goal < 10%; writes {data2['writes']}, 409: {again_seen['409']}, 503: {again_seen['503']})")
                else:
                    raw, raw_retried = bench.raw_api(nodes)
                    raw_seen = bench.statuses(mark)
                    raw_runs.append(raw)
                    say(f"raw API, no waiting (16 threads):  {raw:7.1f} s  {n / raw:6.2f} nodes/s  "
                        f"409: {raw_seen['409']}, 503: {raw_seen['503']} (retried {raw_retried}); {load()}")
            say(f"  round {r + 1} throughput nodeforge / raw API: {raw_runs[-1] / nf_runs[-1]:6.2f}x")
        if nf_runs:
            nf = statistics.median(nf_runs)
            ratio = statistics.median(r / f for r, f in zip(raw_runs, nf_runs))
            say(f"nodeforge: min {min(nf_runs):.1f} s, median {nf:.1f} s; raw API: min {min(raw_runs):.1f} s, "
                f"median {statistics.median(raw_runs):.1f} s ({args.rounds} each)")
            worst_rerun = max(rerun_pct)
            say(f"no-change re-run, worst of {len(rerun_pct)}: {worst_rerun:.1f}% of its first run "
                f"(goal < 10%: {goal(worst_rerun < 10, f'no-change re-run {worst_rerun:.1f}% >= 10%')})")
            say(f"throughput nodeforge / raw API:    {ratio:6.2f}x median of per-round ratios "
                f"(goal >= 0.9x: {goal(ratio >= 0.9, f'nodeforge/raw API {ratio:.2f}x < 0.9x')})")

        # 2b. both sides again against a throttled Ironic (fresh database each).
        if args.throttle_slots > 0:
            proxy = ThrottledIronic(PROXY_PORT + OFFSET, 6385 + OFFSET, slots=args.throttle_slots,
                                    latency=args.throttle_latency)
            try:
                bench.throttle(proxy)
                say(f"throttled Ironic: at most {args.throttle_slots} requests in at once (the rest answered 503 "
                    f"'No free conductor workers'), +{args.throttle_latency:.2f} s per admitted request")
                seen = {}
                times = {}
                for side in ("raw", "nodeforge"):
                    bench.fresh_ironic()
                    mark = bench.log_mark()
                    if side == "nodeforge":
                        times[side], data = bench.nodeforge_enroll(inv, nf_args)
                        extra = f"nodeforge retried {data.get('retried') or {}}; pacing {pacing_summary(data)}"
                    else:
                        times[side], raw_retried = bench.raw_api(nodes)
                        extra = f"retried {raw_retried}"
                    seen[side] = bench.statuses(mark)
                    say(f"  throttled, {side:9}: {times[side]:7.1f} s  {n / times[side]:6.2f} nodes/s  "
                        f"failed calls 409: {seen[side]['409']}, 503: {seen[side]['503']} "
                        f"(most inside at once {proxy.max_inside}); {extra}; {load()}")
                t_ratio = times["raw"] / times["nodeforge"]
                nf_failed, raw_failed = sum(seen["nodeforge"].values()), sum(seen["raw"].values())
                say(f"throttled throughput nodeforge / raw API: {t_ratio:6.2f}x (goal >= 0.8x: "
                    f"{goal(t_ratio >= 0.8, f'throttled nodeforge/raw API {t_ratio:.2f}x < 0.8x')}); failed calls "
                    f"nodeforge {nf_failed}, raw API {raw_failed} (goal: no more than the raw API: "
                    f"{goal(nf_failed <= raw_failed, f'throttled: nodeforge {nf_failed} failed calls > raw {raw_failed}')})")
            finally:
                bench.throttle(None)
                proxy.close()

        # 3. the runbook.
        if args.no_runbook or not nf_runs:
            say("runbook: skipped (--no-runbook or --rounds 0)")
        else:
            bench.fresh_ironic()
            mark = bench.log_mark()
            t_create, t_loop, t_runbook, k = bench.runbook(inv, names, args.runbook_sample)
            rb_seen = bench.statuses(mark)
            if k == n:
                say(f"runbook (baremetal create + manage/provide --wait node by node): {t_runbook:7.1f} s measured "
                    f"(create {t_create:.1f} s, loop {t_loop:.1f} s); 409: {rb_seen['409']}, 503: {rb_seen['503']}")
            else:
                say(f"runbook (baremetal create + manage/provide --wait node by node): {t_runbook:7.1f} s "
                    f"EXTRAPOLATED: 'baremetal create' of all {n} nodes measured ({t_create:.1f} s), the per-node "
                    f"loop measured on {k} nodes ({t_loop:.1f} s, {t_loop / k:.2f} s/node) and scaled x{n / k:.1f}; "
                    f"409: {rb_seen['409']}, 503: {rb_seen['503']} (measured part)")
            speedup = t_runbook / nf
            say(f"speed-up nodeforge (median) vs runbook: {speedup:6.2f}x (goal >= 5x: "
                f"{goal(speedup >= 5, f'speed-up vs runbook {speedup:.2f}x < 5x')})"
                + ("" if k == n else " [runbook part extrapolated]"))

        # 4. pre-flight of many Redfish BMCs.
        if args.bmcs:
            seconds, pf = bench.preflight(tmp, args.bmcs)
            ok = seconds < 60 and pf["failed"] == 0 and pf["ok"] == args.bmcs
            verdict = goal(ok, f"pre-flight {seconds:.1f} s, {pf['ok']} of {args.bmcs} BMCs ok")
            say(f"pre-flight of {args.bmcs} emulated Redfish BMCs (one sushy-tools process, one system per BMC "
                f"URL): {seconds:.1f} s, {pf['ok']} ok, {pf['failed']} failed (goal: all ok in < 60 s: {verdict})")
        for why in failed:
            say(f"FAILED: {why}")
        status = 1 if failed else 0
    finally:
        bench.cloud.down()
        private.remove()
    return status


if __name__ == "__main__":
    sys.exit(main())
