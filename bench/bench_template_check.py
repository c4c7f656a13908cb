"""Benchmark: `nodeforge template check --live` over many templates and clusters in a real Magnum.

Starts a private local cloud (``--only container-infra,baremetal``: Keystone,
Glance, Nova, Placement, Ironic, RabbitMQ, Magnum API + conductor, Neutron;
ports shifted by OFFSET, state in a temporary directory, the service
virtualenvs symlinked) so no other cloud is disturbed, then creates through
Magnum's API:

* ``--templates`` (200) cluster templates over 4 approved images (1.33 ..
  1.36, so some are outside the maintained minors), a VM flavor and a
  bare-metal flavor without nodes (findings on purpose: the audit has work);
* ``--clusters`` (200) clusters, one per template (they end CREATE_FAILED
  here: no Cluster API management cluster; they keep their template).

Measured, ``--rounds`` times in alternating order:

1. nodeforge: ``python -m nodeforge.cli template check --live -o json`` as a
   process (start-up included). Goal: under 10 s. Its API calls come from its
   own count (``api_calls``: a response hook on the sessions).
2. the peer, what a naive script does: list the templates and the clusters
   once, then per template GET its image, GET each of its two flavors and
   their extra specs, and list the Ironic nodes for a bare-metal flavor's
   capacity. Run in this process (no start-up: in its favour), requests
   counted the same way. (Listing the clusters per template, as a script
   filtering by template would, is not measured: Magnum's cluster listing
   costs ~40 ms per cluster here, so 200 listings of 200 clusters take the
   better part of an hour.)
3. the floor: Magnum's own ``GET /v1/clusters/detail`` of all clusters and
   ``GET /v1/clustertemplates/detail``, timed alone: no audit can be faster
   than what it must read.

Printed: both sides' median seconds and API calls, and the ratio
(nodeforge / peer; < 1: nodeforge faster). The findings must be equal in
number of templates audited on both sides. Clean-up: clusters purged from
the private Magnum's database (``nodeforge.devcloud.magnum.purge_clusters``;
the API cannot delete them here), templates deleted, the cloud stopped.

Run: .venv/bin/python bench/bench_template_check.py [--templates 200] [--clusters 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import private_cloud  # bench/private_cloud.py (the script's own directory is on sys.path)

OFFSET = 18800   # every port below the ephemeral range (32768-), clear of the test clouds' and bench_enroll's offsets
ADMIN, SYSTEM = "nodeforge-dev", "nodeforge-dev-system"
GOAL_SECONDS = 10.0


def _db_locked(failure) -> bool:
    return failure.status == 500 and "database is locked" in failure.detail


def connect(root: Path, name: str):
    import openstack.config
    from openstack import connection

    conf = openstack.config.OpenStackConfig(config_files=[str(root / "clouds.yaml")], load_envvars=False)
    region = conf.get_one(name)
    assert region.config["auth"]["auth_url"].endswith(f":{5000 + OFFSET}/v3"), region.config["auth"]
    return connection.Connection(config=region)


def make_image(conn, version: str) -> dict:
    from nodeforge.publish import glance as g

    minor = ".".join(version.split(".")[:2])
    img = g.create_image(conn, {
        "name": f"bench-k8s-{version}", "disk_format": "raw", "container_format": "bare", "visibility": "public",
        "tags": [g.TAG, g.tag_k8s(minor), g.tag_variant("vm"), g.TAG_APPROVED], "os_distro": "debian",
        "os_version": "12", "kube_version": f"v{version}", f"{g.P}role": "image", f"{g.P}k8s_minor": minor,
        f"{g.P}variant": "vm", g.SCOPE: "bench"})
    resp = conn.image.put(f"/images/{img['id']}/file", data=b"\0" * 4096,
                          headers={"Content-Type": "application/octet-stream"})
    assert resp.status_code < 300, resp.text
    return g.get_image(conn, img["id"])


def make_flavor(conn, name: str, extra: dict | None = None) -> dict:
    from nodeforge.clients import compute as F

    f = F.call(conn, "POST", "/flavors", "create flavor",
                body={"flavor": {"name": name, "ram": 1024, "vcpus": 1, "disk": 10}})["flavor"]
    if extra:
        F.call(conn, "POST", f"/flavors/{f['id']}/os-extra_specs", "extra specs", body={"extra_specs": extra})
    return f


def stuck_clusters(paths, older_than: float) -> list[tuple[str, str]]:
    """(uuid, name) of this private cloud's clusters that have no node group ``older_than``
    seconds after their create (read from its own Magnum database, read-only)."""
    import contextlib
    import datetime
    import sqlite3

    from nodeforge.devcloud import magnum as dc_magnum

    cutoff = (datetime.datetime.utcnow() - datetime.timedelta(seconds=older_than)).strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.closing(sqlite3.connect(f"file:{dc_magnum.db_path(paths)}?mode=ro", uri=True)) as db:
        return db.execute("SELECT c.uuid, c.name FROM cluster c WHERE c.created_at < ? AND NOT EXISTS "
                          "(SELECT 1 FROM nodegroup n WHERE n.cluster_id = c.uuid)", (cutoff,)).fetchall()


def naive_audit(conn, bm_conn) -> tuple[int, int]:
    """What a per-template script does: (templates audited, problems found). It lists the
    templates and the clusters once (Magnum's cluster listing alone costs ~40 ms per cluster
    here: listing it per template would take the peer half an hour), then per template GETs
    its image, each of its two flavors and their extra specs, and lists the Ironic nodes for a
    bare-metal flavor's capacity."""
    from nodeforge.clients import compute as F
    from nodeforge.clients import container_infra as client

    problems = 0
    templates = client.read_templates(conn)
    clusters = client.read_clusters(conn)
    for t in templates:
        resp = conn.image.get(f"/images/{t['image_id']}")
        if resp.status_code != 200:
            problems += 1
        else:
            img = resp.json()
            if img.get("os_hidden") or "nodeforge-approved" not in (img.get("tags") or []):
                problems += 1
            if img.get("kube_version") != (t.get("labels") or {}).get("kube_tag"):
                problems += 1
        for field in ("master_flavor_id", "flavor_id"):
            flavor = F.call(conn, "GET", f"/flavors/{t[field]}", "flavor", missing_ok=True)
            specs = F.call(conn, "GET", f"/flavors/{t[field]}/os-extra_specs", "specs", missing_ok=True)
            if not flavor:
                problems += 1
            elif any(k.startswith("resources:CUSTOM_") for k in (specs or {}).get("extra_specs", {})):
                nodes = bm_conn.baremetal.get("/nodes/detail", microversion="1.70").json()["nodes"]
                if not any(n.get("provision_state") == "available" for n in nodes):
                    problems += 1
        mine = [c for c in clusters if c.get("cluster_template_id") == t["uuid"]]
        if mine and problems:
            problems += len(mine)
    return len(templates), problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", type=int, default=200)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep-cloud", action="store_true", help="do not stop the private cloud (debugging)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from nodeforge.devcloud import magnum as dc_magnum
    from nodeforge.devcloud.cloud import DevCloud
    from nodeforge.devcloud.paths import Paths
    from nodeforge.clients import container_infra as client
    from nodeforge.magnum.live import RequestCounter
    from nodeforge import transport

    DB_LOCKED = transport.API.replace(also=_db_locked)

    private = private_cloud.prepare("nf-bench-tcheck-", OFFSET)
    root, env = private.root, private.env
    cloud = DevCloud(Paths(root))
    cluster_ids: list[str] = []
    cluster_names: list[str] = []
    template_ids: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        t0 = time.monotonic()
        cloud.up(["container-infra", "baremetal"])
        say(f"private cloud up in {time.monotonic() - t0:.0f} s ({root}, offset {OFFSET})")
        conn = connect(root, ADMIN)
        images = [make_image(conn, v) for v in ("1.33.9", "1.34.11", "1.35.8", "1.36.4")]
        vm = make_flavor(conn, "bench.vm")
        bmf = make_flavor(conn, "bench.bm", {"resources:CUSTOM_BENCH": "1", "resources:VCPU": "0",
                                             "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"})

        def create_template(i: int) -> str:
            img = images[i % len(images)]
            body = {"name": f"bench-t{i:04d}", "coe": "kubernetes", "image_id": img["id"],
                    "master_flavor_id": vm["id"], "flavor_id": bmf["id"] if i % 2 else vm["id"],
                    "server_type": "vm", "driver": "k8s_cluster_api_debian", "network_driver": "calico",
                    "external_network_id": "public", "labels": {"kube_tag": img["kube_version"]}}
            # The private Magnum's SQLite answers 500 "database is locked" under load (set-up, not timed).
            return client._call(conn, "POST", "/clustertemplates", f"create cluster template {body['name']}",
                                body=body, expect=(201,), retry=DB_LOCKED)["uuid"]

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            template_ids = list(pool.map(create_template, range(args.templates)))
        say(f"{len(template_ids)} templates created in {time.monotonic() - t0:.0f} s")

        # Magnum's default quota is 20 clusters per project: raise it for the admin project (API).
        project_id = conn.current_project_id
        client._call(conn, "POST", "/quotas", "raise the cluster quota", expect=(201,),
                     body={"project_id": project_id, "resource": "Cluster", "hard_limit": args.clusters + 10})

        def create_cluster(i: int) -> str:
            cluster_names.append(f"bench-c{i:04d}")        # purged at the end even if the create fails
            return client.create_cluster(conn, {"name": f"bench-c{i:04d}", "master_count": 1, "node_count": 1,
                                                "cluster_template_id": template_ids[i % len(template_ids)]})["uuid"]

        t0 = time.monotonic()
        with ThreadPoolExecutor(2) as pool:       # the conductor's SQLite: fewer concurrent writers
            cluster_ids = list(pool.map(create_cluster, range(args.clusters)))
        # Until the conductor has made a cluster's node groups, Magnum refuses the whole cluster
        # listing (HTTP 400, master_count 0): wait until it lists every cluster. Their status does
        # not matter to the audit (CREATE_FAILED, or CREATE_IN_PROGRESS where the local Magnum's
        # SQLite refused the conductor's update under this load: "database is locked"). A cluster
        # whose create message the conductor lost that way never gets node groups and would break
        # the listing for good: after 60 s it is purged from this private cloud's database and
        # created again (counted and printed).
        deadline = time.monotonic() + 1800
        replaced = 0
        while True:
            try:
                listed = client.read_clusters(conn)
                if len(listed) >= len(cluster_ids):
                    break
            except client.MagnumError as exc:
                if "master_count" not in str(exc):
                    raise
                stuck = stuck_clusters(cloud.paths, older_than=60)
                if stuck:
                    dc_magnum.purge_clusters(cloud.paths, [u for u, _ in stuck])
                    for uuid_, name in stuck:
                        cluster_ids.remove(uuid_)
                        cluster_ids.append(create_cluster(int(name.rsplit("c", 1)[1])))
                    replaced += len(stuck)
            if time.monotonic() > deadline:
                raise SystemExit("Magnum did not list every cluster within 30 min")
            time.sleep(5)
        statuses: dict[str, int] = {}
        for c in listed:
            statuses[c.get("status")] = statuses.get(c.get("status"), 0) + 1
        say(f"{len(cluster_ids)} clusters created in {time.monotonic() - t0:.0f} s and listed by Magnum "
            f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}); {replaced} re-created after the "
            "local conductor lost their create (SQLite 'database is locked')")
        subprocess.run([sys.executable, "-m", "nodeforge.cli", "--help"], env=env, capture_output=True, check=True)

        nf_runs, peer_runs = [], []
        nf_calls = peer_calls = 0
        nf_audited = peer_audited = 0
        for rnd in range(args.rounds):
            order = ("nodeforge", "peer") if rnd % 2 == 0 else ("peer", "nodeforge")
            for side in order:
                if side == "nodeforge":
                    t0 = time.monotonic()
                    proc = subprocess.run([sys.executable, "-m", "nodeforge.cli", "--os-cloud", ADMIN, "template",
                                           "check", "--live", "--baremetal-cloud", SYSTEM, "-o", "json"],
                                          env=env, capture_output=True, text=True)
                    nf_runs.append(time.monotonic() - t0)
                    if proc.returncode not in (0, 3):
                        raise SystemExit(f"template check --live failed ({proc.returncode}): {proc.stderr[-2000:]}")
                    data = json.loads(proc.stdout)
                    nf_calls, nf_audited = data["api_calls"]["total"], data["counts"]["templates"]
                    findings = data["counts"]["findings"]
                else:
                    pconn, pbm = connect(root, ADMIN), connect(root, SYSTEM)
                    counter = RequestCounter().attach(pconn).attach(pbm)
                    t0 = time.monotonic()
                    peer_audited, _ = naive_audit(pconn, pbm)
                    peer_runs.append(time.monotonic() - t0)
                    peer_calls = counter.total
            say(f"round {rnd + 1} ({' then '.join(order)}): nodeforge {nf_runs[-1]:.2f} s, peer {peer_runs[-1]:.2f} s")
        fconn = connect(root, ADMIN)
        client.read_templates(fconn)
        floor = []
        for _ in range(args.rounds):
            t0 = time.monotonic()
            client.read_clusters(fconn)
            client.read_templates(fconn)
            floor.append(time.monotonic() - t0)
        nf_med, peer_med = statistics.median(nf_runs), statistics.median(peer_runs)
        assert nf_audited == peer_audited == len(template_ids), (nf_audited, peer_audited, len(template_ids))
        ok = nf_med < GOAL_SECONDS
        say(f"templates: {nf_audited}, clusters: {len(cluster_ids)}, findings: {findings}")
        say(f"nodeforge template check --live (process, start-up included): median {nf_med:.2f} s "
            f"(min {min(nf_runs):.2f}), {nf_calls} API calls")
        say(f"peer (per-template script, in-process): median {peer_med:.2f} s (min {min(peer_runs):.2f}), "
            f"{peer_calls} API calls")
        say(f"floor (Magnum's own cluster + template listings, in-process): median {statistics.median(floor):.2f} s")
        say(f"ratio nodeforge/peer: {nf_med / peer_med:.2f}x time, {nf_calls / max(peer_calls, 1):.3f}x API calls")
        say(f"goal: under {GOAL_SECONDS:.0f} s: {'met' if ok else 'NOT met'}; load average {os.getloadavg()[0]:.1f}")
        if not ok:
            say("FAILED: template check --live took longer than the goal")
        return 0 if ok else 1
    finally:
        try:
            if cluster_ids or cluster_names:
                dc_magnum.purge_clusters(cloud.paths, cluster_ids + cluster_names)
            conn = connect(root, ADMIN)
            for t in client.read_templates(conn):
                if t["name"].startswith("bench-t"):
                    client.delete_template(conn, t["uuid"])
        except Exception as exc:  # noqa: BLE001 - the cloud goes down anyway
            print(f"clean-up: {exc}", file=sys.stderr)
        if not args.keep_cloud:
            cloud.down()
            private.remove()


if __name__ == "__main__":
    sys.exit(main())
