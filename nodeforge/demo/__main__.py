"""``make demo``: the main job, end to end, on the embedded local cloud.

1. the bare-metal batch: nodeforge's agent ramdisk built (cached by its inputs) and put in Glance;
   the emulated BMC batch (Redfish, out-of-band inspection) and the emulated machine behind a
   Redfish BMC (in-band inspection by the agent, automated cleaning) enrolled into Ironic and
   classified (the machine into the canary pool, ``baremetal-canary``);
2. the release pipeline for one minor (check -> bump -> prefetch -> render ->
   build -> verify -> publish -> canary -> promote), against the Kubernetes release
   servers when they answer, else against the local fixture mirror with its
   own fixture lockfile (said so, and labelled on every image); the canary deploys the
   bare-metal image onto the machine through Ironic, checks it from the deployed disk and
   cleans the node back to ``available`` before promote approves the image;
3. the bare-metal flavors synced;
4. the cluster templates applied to Magnum (``template apply``: versions
   ``k8s-1.36-baremetal-vN`` and ``k8s-1.36-vm-vN``, new only when their
   content changed), then every template and cluster in Magnum audited
   (``template check --live``, which must be clean);
5. the hardware baseline: two BIOS settings declared for the compute profile, applied to the
   batch through Ironic's cleaning (``baremetal baseline apply``), one changed at its BMC behind
   Ironic's back, found by ``baremetal audit`` reading the BMCs;
then the approved image IDs next to the Magnum template IDs, the canary's times, and where the
run report is.

State lives in ``.demo/`` (git-ignored); the run record in ``runs/``. A second
``make demo`` finds nothing new and reuses what is approved; a run that failed
is resumed from its failed stage. ``manifests/versions.yaml`` is never written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import requests
import yaml

from nodeforge import cli, log, schema
from nodeforge.cloud import connect
from nodeforge.errors import ExitCode
from nodeforge.devcloud import bmc, openstack as dc_openstack, signing_key
from nodeforge.devcloud.cloud import ADMIN_CLOUD, SYSTEM_CLOUD
from nodeforge.devcloud.paths import Paths
from nodeforge.demo.upstream_mirror import MirrorServer
from nodeforge.base.fs import atomic_write
from nodeforge.pins import lockfile as lf
from nodeforge.publish import catalog
from nodeforge.pipeline import Pipeline, PipelineConfig, PipelineFailed
from nodeforge.pipeline import runrecord as rr

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_PROBE = "https://dl.k8s.io/release/stable.txt"
MINOR = "1.36"
TEMPLATES = ("k8s-1.36-baremetal", "k8s-1.36-vm")
FIXTURE_LABEL = "local fixture mirror (nodeforge.demo): upstream release servers unreachable; stand-in binaries"
# The demo's bare-metal batch: emulated Redfish systems no test claims (tests use 2-4 and 12-36).
DEMO_SYSTEMS = (40, 41, 42, 43, 44)      # 40, 44: storage shape; 41-43: compute
NODE_PREFIX = "nfdemo-"
CANARY_CLASS = "baremetal-canary"        # manifests/hardware-profiles.yaml: profile 'canary' (the machine)


def say(text: str = "") -> None:
    print(text, flush=True)


def upstream_reachable(url: str = UPSTREAM_PROBE) -> str | None:
    """None if the release server answers; else why not."""
    mode = os.environ.get("NODEFORGE_DEMO_UPSTREAM", "auto")
    if mode == "fixture":
        return "NODEFORGE_DEMO_UPSTREAM=fixture"
    try:
        resp = requests.head(url, timeout=5, allow_redirects=True)
        return None if resp.ok else f"{url}: HTTP {resp.status_code}"
    except requests.RequestException as exc:
        return f"{url}: {type(exc).__name__}"


# --- 1. the pipeline ------------------------------------------------------------------------

def _latest_failed(runs: Path, lockfile: Path) -> str | None:
    for row in rr.list_runs(runs):
        if row["status"] in (rr.FAILED, rr.RUNNING):
            doc = rr.RunRecord.load(runs, row["run_id"])
            if doc.inputs.get("lockfile") == str(lockfile):
                return row["run_id"]
        elif row["status"] == rr.SUCCEEDED:
            return None
    return None


def _approved(conn, version: str) -> list[dict]:
    return catalog.list_catalog(conn, approved=True, k8s=version)


def run_pipeline(config: PipelineConfig, runs: Path) -> tuple[rr.RunRecord, list[dict]]:
    pipe = Pipeline(config, runs_dir=runs, say=lambda line: say(f"  {line}"))
    failed = _latest_failed(runs, config.lockfile)
    if failed:
        say(f"  an earlier demo run ({failed}) did not finish: resuming it from its failed stage")
        record = pipe.resume(failed)
    else:
        record = pipe.run()
    version = str(lf.load(config.lockfile).minor(MINOR).version)
    conn = config.connect()
    approved = _approved(conn, version)
    if record.status == "nothing-to-do" and not approved:
        say(f"  no approved image of {version} in this cloud yet: running the pipeline for {MINOR} by name")
        record = Pipeline(config, runs_dir=runs, say=lambda line: say(f"  {line}")).run([MINOR])
        approved = _approved(conn, version)
    return record, approved


def fixture_setup(state: Path) -> tuple[Path, "object"]:
    """The fixture upstream (regenerated, deterministic) with a new patch of MINOR on it;
    the fixture lockfile is created once (pinning the patch before) and then bumped by the pipeline.

    It names the ownership scope of manifests/versions.yaml (the platform team's), so the images it
    builds are the ones the shipped templates (``scope: platform``) choose."""
    from nodeforge.demo.fixtures import KUBERNETES, make_demo, publish_patch

    root = state / "fixture"
    lock = root / "manifests" / "versions.yaml"
    keep = lock.read_bytes() if lock.is_file() else None
    shutil.rmtree(root / "upstream", ignore_errors=True)
    up, lock = make_demo(root, KUBERNETES, scope=lf.load(REPO / "manifests" / "versions.yaml").scope)
    if keep is not None:
        lock.write_bytes(keep)            # the (possibly bumped) fixture lockfile survives re-runs
    major, minor_n, patch = KUBERNETES[MINOR].split(".")
    publish_patch(up, f"{major}.{minor_n}.{int(patch) + 1}")
    return lock, up


# --- 2.-4. bare metal, flavors, template --------------------------------------------------

def agent_deploy_images() -> dict[str, str]:
    """nodeforge's agent ramdisk, built once (cached by the digest of its pinned inputs) and in
    Glance (once per digest): the ``deploy_kernel``/``deploy_ramdisk`` image IDs for the machine."""
    from nodeforge.imagebuild import ramdisk
    from nodeforge.publish import agent_images

    p = ramdisk.plan()
    say(f"  agent ramdisk {p.digest[:12]}: {'cached' if p.cached else 'building (about 3 minutes)'}")
    record = ramdisk.build(p, log=lambda line: None)
    conn = connect(ADMIN_CLOUD)
    items = agent_images.apply(conn, record, agent_images.plan(conn, record, ramdisk.glance_files(p), ramdisk.SCOPE),
                               ramdisk.SCOPE)
    return agent_images.driver_info(items)


# A new server's cleaning policy (docs/inventory.md), kept short for the demo: a burn-in of CPU,
# memory and disk and a full-disk erase once at enrollment, then automated cleaning on every provide.
MACHINE_CLEANING = {"mode": "automated", "burn_in": {"cpu": 10, "memory": 10, "disk": 10}, "erase": "full"}


def batch_node_name(system) -> str:
    """The demo's node name of an emulated Redfish system of the batch (``nfdemo-compute-041``)."""
    return f"{NODE_PREFIX}{system.shape}-{system.index:03d}"


def machine_node_name(machine) -> str:
    """The demo's node name of the machine behind a Redfish BMC (``nfdemo-rf-vm-01``)."""
    return f"{NODE_PREFIX}{machine.name}"


def write_inventory(state: Path, paths: Paths, deploy_images: dict[str, str] | None) -> Path:
    """The emulated Redfish batch (no machine behind it: out-of-band inspection, cleaning 'none'),
    and, with ``deploy_images``, the machine behind a Redfish BMC as a hardware team enrolls a
    server with the agent (virtual media, in-band inspection, burn-in and full erase, automated
    cleaning)."""
    secrets = state / "baremetal"
    secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets, 0o700)
    creds = bmc.credentials(paths)
    pw = secrets / "redfish.pw"
    atomic_write(pw, creds.redfish.password.reveal(), mode=0o600)   # 0600 before the first byte
    systems = {s.index: s for s in bmc.redfish_systems()}
    nodes = []
    for i in DEMO_SYSTEMS:
        s = systems[i]
        nodes.append({"name": batch_node_name(s),
                      "bmc": {"address": f"redfish+https://127.0.0.1:{bmc.redfish_port()}/redfish/v1/Systems/{s.uuid}",
                              "username": creds.redfish.username, "password": f"file:{pw}",
                              "verify_ca": str(bmc.ca_bundle(paths))},
                      "macs": list(s.macs), "resource_class": None, "inspect": True, "cleaning": "none"})
    if deploy_images:
        [machine] = bmc.redfish_machines()
        nodes.append(bmc.machine_inventory_entry(paths, machine, name=machine_node_name(machine),
                                                 password_ref=f"file:{pw}", deploy_images=deploy_images,
                                                 kernel_append=dc_openstack.IRONIC_KERNEL_APPEND,
                                                 cleaning=MACHINE_CLEANING))
    inv = secrets / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "nodes": nodes}, sort_keys=False))
    return inv


def canary_policy(state: Path) -> Path:
    """The demo's canary policy: a pass on the machine's class before promote (docs/canary.md)."""
    path = state / "canary-policy.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "resource_classes": [{"resource_class": CANARY_CLASS}],
                                    "timeouts": {"allocation": 120, "deploy": 2400, "first_boot": 1200,
                                                 "clean": 2400}, "attempts": 1}, sort_keys=False))
    return path


def enroll_batch(state: Path, paths: Paths, report: Path) -> int:
    """Step 1: the agent in Glance, the batch and the machine enrolled and classified."""
    deploy_images = agent_deploy_images()
    inv = write_inventory(state, paths, deploy_images)
    rc = nf("--os-cloud", SYSTEM_CLOUD, "baremetal", "enroll", str(inv), "--concurrency", "5", "--timeout", "2400",
            "--report", str(report))
    return rc or nf("--os-cloud", SYSTEM_CLOUD, "baremetal", "classify", "--node", f"{NODE_PREFIX}*")


def rest_machine(timeout: float = 300) -> None:
    """Power the machine off at the end: fast-track leaves the agent that cleaned it running (on a
    real server that is free; here it is a QEMU process taking most of a core until the local cloud
    stops). The next deploy boots the agent again."""
    from nodeforge.clients.baremetal import BaremetalClient, IronicError

    ironic = BaremetalClient(connect(SYSTEM_CLOUD))
    [machine] = bmc.redfish_machines()
    try:
        node = ironic.get_node(machine_node_name(machine))
    except IronicError:
        return
    if node.get("provision_state") != "available" or node.get("power_state") != "power on":
        return
    ironic.set_power_state(node["uuid"], "power off")
    deadline = time.monotonic() + timeout
    while ironic.get_node(node["uuid"]).get("power_state") != "power off" and time.monotonic() < deadline:
        time.sleep(2)
    say(f"  {node['name']}: powered off (its agent was left running by cleaning, for a fast-track deploy)")


def say_canary(record: rr.RunRecord) -> None:
    stage = record.find("canary", MINOR)
    out = (stage.outputs or {}) if stage else {}
    if not out.get("asked"):
        say(f"  canary: {out.get('summary') or 'not run in this pipeline run'}")
        return
    for rc, v in sorted((out.get("classes") or {}).items()):
        s = v.get("seconds") or {}
        times = ", ".join(f"{k.replace('_', ' ')} {s[k]:.0f}s" for k in ("allocate", "deploy", "first_boot", "checks",
                                                                       "clean") if k in s)
        say(f"  canary {rc}: {'passed' if v.get('passed') else 'FAILED'} on {v.get('node')}: {times} "
            "(deploy by the agent that cleaned the node, fast-track; cleaning includes the agent's boot)")


def nf(*args: str) -> int:
    return cli.main(list(args))


def release_inputs(state: Path) -> tuple[Path, str | None, MirrorServer | None]:
    """(the demo's lockfile, the fixture label or None, the fixture mirror to stop or None): the
    Kubernetes release servers when they answer, else the local fixture mirror."""
    why = upstream_reachable()
    if why is None:
        lock = state / "upstream" / "manifests" / "versions.yaml"
        if not lock.is_file():   # a copy: the demo never writes the production lockfile
            lock.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / "manifests" / "versions.yaml", lock)
            shutil.copyfile(REPO / "manifests" / "sources.yaml", lock.parent / "sources.yaml")
        say(f"  upstream release servers answer: real artifacts; demo lockfile {lock} (a copy of manifests/versions.yaml)")
        return lock, None, None
    lock, up = fixture_setup(state)
    server = MirrorServer(up.root).start()
    from nodeforge.demo.fixtures import write_sources

    write_sources(lock, server)
    say(f"  upstream release servers unreachable ({why}):")
    say(f"  using the LOCAL FIXTURE MIRROR {server.url} (stand-in binaries of the real shape)")
    say(f"  with its own FIXTURE LOCKFILE {lock}; manifests/versions.yaml is not touched;")
    say("  images are labelled nodeforge_fixture=true")
    return lock, FIXTURE_LABEL, server


def release(state: Path, paths: Paths, runs: Path, canary: Path | None
            ) -> tuple[PipelineConfig, str | None, rr.RunRecord, list[dict]]:
    """Step 2: the release pipeline (with the canary stage when ``canary`` names a policy)."""
    lock, label, server = release_inputs(state)
    publishing = signing_key.ensure(paths, connect(ADMIN_CLOUD))
    say(f"  publishing key {publishing.key} (certificate {publishing.cert_id} in Barbican): images and "
        "provenance are signed; verify reports are signed with the verifier key")
    config = PipelineConfig(lockfile=lock, cache_dir=REPO / ".cache" / "artifacts", os_cloud=ADMIN_CLOUD,
                            fixture=label, work_dir=Path(os.environ.get("NODEFORGE_WORK_DIR") or "/var/tmp"),
                            sign_key=publishing.key, sign_cert_id=publishing.cert_id, canary_policy=canary,
                            baremetal_cloud=SYSTEM_CLOUD if canary else None)
    try:
        record, approved = run_pipeline(config, runs)
    finally:
        if server is not None:
            server.stop()
    say(f"  pipeline run {record.run_id}: {record.status}" + (f" ({record.message})" if record.message else ""))
    return config, label, record, approved


def templates_step(run_dir: Path) -> int:
    """Steps 3 and 4; the live audit is also written as JSON beside the run record (``--report``:
    the HTML report's audit page), from the same reads the table shows."""
    say("\n== 3/4 sync the bare-metal flavors")
    code = nf("--os-cloud", ADMIN_CLOUD, "flavor", "sync")
    say(f"\n== 4/4 apply the cluster templates {', '.join(TEMPLATES)} to Magnum, then audit Magnum")
    code = code or nf("--os-cloud", ADMIN_CLOUD, "template", "apply", *TEMPLATES, "--baremetal-cloud", SYSTEM_CLOUD)
    return code or nf("--os-cloud", ADMIN_CLOUD, "template", "check", "--live", "--baremetal-cloud", SYSTEM_CLOUD,
                      "--report", str(run_dir / "template-audit.json"))


# The baseline the demo declares for one profile (docs/baseline.md): two BIOS settings every
# compute node must have (steady clocks; no network boot from the first NIC: they boot from their
# disk), judged against the emulated machines' registry.
DEMO_BASELINE = {"bios_registry": "bios-registry-qemu.yaml",
                 "bios": {"ProcTurboMode": "Disabled", "NicBoot1": "Disabled"}}
BASELINE_PROFILE = "compute"


def baseline_profiles(state: Path) -> Path:
    """The production profiles (manifests/hardware-profiles.yaml, which classified the batch) with
    the demo's baseline on the compute profile, written beside the demo's state with the registry
    it is judged against."""
    from nodeforge.ironic import profiles as profiles_mod

    data = schema.load(profiles_mod.DEFAULT_PATH).data
    for profile in data["profiles"]:
        if profile["name"] == BASELINE_PROFILE:
            profile["baseline"] = DEMO_BASELINE
    shutil.copyfile(REPO / "docs" / "examples" / "bios-registry-qemu.yaml", state / "bios-registry-qemu.yaml")
    path = state / "hardware-profiles.yaml"
    path.write_text("# the demo's copy of manifests/hardware-profiles.yaml with a baseline for the compute "
                    "profile\n" + yaml.safe_dump(data, sort_keys=False))
    return path


def drift_behind_ironic(paths: Paths, system) -> None:
    """What an operator at a BMC's console does, unseen by Ironic: one compute node's turbo mode
    switched back on, straight on the emulated BMC."""
    creds = bmc.credentials(paths)
    url = f"{bmc.redfish_endpoint(bmc.redfish_port())}/redfish/v1/Systems/{system.uuid}/BIOS/Settings"
    r = requests.patch(url, json={"Attributes": {"ProcTurboMode": "Enabled"}}, timeout=30,
                       auth=(creds.redfish.username, creds.redfish.password.reveal()), verify=str(bmc.ca_bundle(paths)))
    r.raise_for_status()


def hardware_step(state: Path, paths: Paths, inventory: Path, run_dir: Path) -> int:
    """The hardware baseline (docs/baseline.md): the compute profile's BIOS settings applied to the
    batch through Ironic's cleaning, one node's setting changed behind Ironic's back, and the audit
    (reading the BMCs themselves, ``--inventory``) finds it; the audit is written beside the run
    record for the report's hardware page. 1 when the apply failed or the audit missed the change."""
    say("\n== hardware baseline: the compute profile's BIOS settings applied to the batch (baremetal baseline "
        "apply), one changed behind Ironic's back at its BMC, then the audit (baremetal audit)")
    profiles = baseline_profiles(state)
    select = ("--profiles", str(profiles), "--node", f"{NODE_PREFIX}*")
    code = nf("--os-cloud", SYSTEM_CLOUD, "baremetal", "baseline", "apply", *select, "--timeout", "900")
    if code:
        return code
    system = {s.index: s for s in bmc.redfish_systems()}[DEMO_SYSTEMS[1]]       # a compute-shaped one
    drifted = batch_node_name(system)
    drift_behind_ironic(paths, system)
    say(f"  {drifted}: ProcTurboMode set back to Enabled at its BMC (Ironic was not told)")
    report = run_dir / "hardware-audit.json"
    code = nf("--os-cloud", SYSTEM_CLOUD, "baremetal", "audit", *select, "--inventory", str(inventory),
              "--report", str(report))
    doc = schema.read_json(report)
    found = [n for n in (doc.get("nodes", []) if isinstance(doc, dict) else []) if n.get("status") == "drift"]
    if code != int(ExitCode.DRIFT) or [n.get("name") for n in found] != [drifted]:
        say(f"  the audit did not find exactly that change (exit {code}; drift on {[n.get('name') for n in found]})")
        return 1
    say(f"  the audit found it: {drifted} bios.ProcTurboMode Enabled, wanted Disabled (exit {code}: drift); "
        "the next 'baremetal baseline apply' sets it back")
    return 0


def say_result(record: rr.RunRecord, approved: list[dict], templates: list[dict], label: str | None) -> int:
    """The approved images beside the Magnum templates that use them, how verify booted, the canary and
    the latency; 1 when an image or a template is missing."""
    code = 0
    say("\n== result")
    if label:
        say(f"  FIXTURE BUILD: artifacts from the {label}")
    for img in approved:
        using = [t for t in templates if t.get("image_id") == img["id"]]
        say(f"  approved image: Kubernetes {img['k8s']} {img['variant']}: {img['id']}"
            + "".join(f"  <- Magnum template {t['name']}: {t['uuid']}" for t in using))
    for t in templates:
        if not any(t.get("image_id") == img["id"] for img in approved):
            say(f"  Magnum template {t['name']}: {t['uuid']} (image {t.get('image_id')})")
    if not approved:
        say("  no approved image")
        code = 1
    verified = record.find("verify", MINOR)
    for variant, a in sorted(((verified.outputs or {}).get("accel") or {}).items() if verified else []):
        say(f"  boot verification {variant}: under {a['accel']} ({a['why']})")
    say_canary(record)
    lat = record.latency.get(MINOR) if record.latency else None
    if lat and lat.get("latency_seconds") is not None:
        say(f"  patch latency {lat['version']}: {lat['latency_seconds']:.0f}s (release on the mirror -> approved image)")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodeforge.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, default=REPO / ".demo")
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs")
    parser.add_argument("--skip-baremetal", action="store_true", help="Only the release pipeline (no canary).")
    args = parser.parse_args(argv)
    log.setup(0)
    state = args.state_dir
    state.mkdir(parents=True, exist_ok=True)
    paths = Paths.default()
    # The demo's own local cloud, whatever the environment points at (openstacksdk reads
    # OS_CLIENT_CONFIG_FILE before any other clouds.yaml); the canary's phone-home on this cloud.
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(paths.clouds_yaml)
    os.environ.pop("OS_CLOUD", None)
    code, canary, enrolled = 0, None, state / "enroll-report.json"
    if not args.skip_baremetal:
        say("== 1/4 bare metal: the agent ramdisk in Glance; the emulated BMC batch (out-of-band inspection) "
            "and the emulated machine (in-band inspection and cleaning by the agent) enrolled and classified")
        os.environ.update(dc_openstack.canary_settings())
        code = enroll_batch(state, paths, enrolled)
        canary = canary_policy(state)
    say(f"\n== 2/4 release pipeline for Kubernetes {MINOR}" + (" (canary on the machine before promote)"
                                                              if canary else ""))
    try:
        config, label, record, approved = release(state, paths, args.runs_dir, canary)
    except PipelineFailed as exc:
        say(f"error: {exc}")
        if exc.hint:
            say(f"hint: {exc.hint}")
        return int(exc.exit_code)
    if enrolled.is_file():          # the batch's report beside the run record (the HTML report's rack)
        shutil.copyfile(enrolled, record.root / "enroll-report.json")
    templates = []
    if not args.skip_baremetal:
        code = code or templates_step(record.root)
        code = code or hardware_step(state, paths, state / "baremetal" / "inventory.yaml", record.root)
        templates = applied_templates(config.connect())
        rest_machine()
        if not templates:
            say(f"  no current Magnum template of {', '.join(TEMPLATES)}")
            code = code or 1
    code = say_result(record, approved, templates, label) or code
    say_reports(record, config.connect())
    if record.status == "nothing-to-do":
        built = _latest_succeeded(args.runs_dir, config.lockfile)
        if built:
            say(f"  the run that built and approved them: {built.summary_path}")
    return code


def say_reports(record: rr.RunRecord, conn=None) -> None:
    """The run's summary, its record, and its HTML report (written here: the run, the batch when it
    was enrolled, and the image catalog as the demo left it; docs/reports.md)."""
    from nodeforge.commands.pipeline import write_report

    say(f"  report: {record.summary_path}  (record: {record.json_path})")
    index = write_report(record.root, conn, ADMIN_CLOUD)
    if index is not None:
        say(f"  HTML report: {index}")


def applied_templates(conn) -> list[dict]:
    """The current (not hidden) Magnum versions of the demo's templates, made by their files' scopes."""
    from nodeforge.magnum import templates as tpl
    from nodeforge.clients import container_infra as mc
    from nodeforge.magnum import apply as ap

    declared = tpl.load_all(REPO / tpl.DEFAULT_DIR)
    owners = [(declared[name].ownership_scope, name) for name in TEMPLATES]
    return [t for t in mc.read_templates(conn)
            if not t.get("hidden") and any(ap.owned(t, scope, name) for scope, name in owners)]


def _latest_succeeded(runs: Path, lockfile: Path) -> rr.RunRecord | None:
    for row in rr.list_runs(runs):
        if row["status"] == rr.SUCCEEDED:
            run = rr.RunRecord.load(runs, row["run_id"])
            if run.inputs.get("lockfile") == str(lockfile):
                return run
    return None


if __name__ == "__main__":
    sys.exit(main())
