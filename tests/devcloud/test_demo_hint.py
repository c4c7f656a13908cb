"""The hint ``make demo`` ends with works for every service the demo touched.

The demo prints ``eval "$(.venv/bin/nodeforge devcloud env)"`` and the
``openstack`` CLI to use. Here that hint, taken from the Makefile as ``make``
expands it, is followed in a shell against the session's own cloud: the CLI
lists images, flavors, bare-metal nodes and Magnum cluster templates
(``openstack coe ...`` needs python-magnumclient, Magnum's CLI plugin, in the
project's virtualenv).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from nodeforge.devcloud import neutron
from nodeforge.devcloud.cloud import ADMIN_CLOUD

ROOT = Path(__file__).resolve().parents[2]


def demo_hint() -> str:
    """The closing line of ``make demo``, as make expands it and the shell prints it."""
    recipe = subprocess.run(["make", "-n", "--no-print-directory", "demo"], cwd=ROOT, capture_output=True,
                            text=True, check=True, stdin=subprocess.DEVNULL, timeout=60).stdout
    echo = [line for line in recipe.splitlines() if line.startswith('echo "local cloud is up')]
    assert len(echo) == 1, recipe
    return subprocess.run(["bash", "-c", echo[0]], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def hint_commands() -> tuple[str, str]:
    """The hint's ``eval`` command and its ``openstack`` executable."""
    hint = demo_hint()
    exports = re.search(r'eval "\$\((.+?)\)"', hint)
    cli = re.search(r"'(\S+/openstack) coe cluster template list'", hint)
    assert exports and cli, hint
    return exports.group(1), cli.group(1)


def test_demo_hint_names_the_project_clis():
    exports, cli = hint_commands()
    assert exports == ".venv/bin/nodeforge devcloud env"
    assert cli == ".venv/bin/openstack"      # not on PATH unless the venv is activated
    assert (ROOT / cli).exists() and (ROOT / ".venv/bin/nodeforge").exists()


def test_devcloud_env_is_eval_safe(run, monkeypatch, tmp_path):
    state = tmp_path / "a cloud's dir"
    monkeypatch.setenv("NODEFORGE_DEVCLOUD_DIR", str(state))
    code, out, _ = run("devcloud", "env")
    assert code == 0
    got = subprocess.run(["bash", "-c", f'eval "$1"; printf "%s\\n" "$OS_CLIENT_CONFIG_FILE" "$OS_CLOUD"', "_", out],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout
    assert got.splitlines() == [str(state / "clouds.yaml"), ADMIN_CLOUD]


@pytest.mark.devcloud
@pytest.mark.slow   # four CLI start-ups side by side (CPU-bound, ~6 s each)
def test_demo_hint_answers_for_images_flavors_nodes_and_cluster_templates(devcloud):
    exports, cli = hint_commands()
    admin, system = devcloud.admin(), devcloud.system()
    tag = uuid.uuid4().hex[:8]
    image = admin.image.create_image(name=f"nftest-hint-{tag}", disk_format="raw", container_format="bare",
                                     data=io.BytesIO(b"\0" * 4096), os_distro="ubuntu", wait=True)
    flavor = admin.compute.create_flavor(name=f"nftest-hint-{tag}", ram=2048, vcpus=2, disk=10)
    # The project-scoped admin (the hint's cloud) sees the nodes its project owns.
    node = system.baremetal.create_node(name=f"nftest-hint-{tag}", driver="fake-hardware",
                                        owner=admin.current_project_id)
    magnum = devcloud.magnum()
    template = magnum.create_cluster_template(
        name=f"nftest-hint-{tag}", coe="kubernetes", server_type="vm", image_id=image.id,
        external_network_id=neutron.PUBLIC_NETWORK, fixed_network=neutron.PRIVATE_NETWORK,
        fixed_subnet=neutron.PRIVATE_SUBNET, flavor_id=flavor.name, master_flavor_id=flavor.name,
        network_driver="calico", labels={"kube_tag": "v1.31.1"})
    try:
        # The shell of a user who followed the hint: only what `devcloud env` exports points at a
        # cloud (the session's own, through NODEFORGE_DEVCLOUD_DIR/_PORT_OFFSET).
        env = {k: v for k, v in os.environ.items() if k not in ("OS_CLIENT_CONFIG_FILE", "OS_CLOUD")}
        commands = {"image": "image list", "flavor": "flavor list", "baremetal": "baremetal node list",
                    "coe": "coe cluster template list"}
        procs = {key: subprocess.Popen(
            ["bash", "-c", f'eval "$({exports})" && printf "%s %s\\n" "$OS_CLIENT_CONFIG_FILE" "$OS_CLOUD" >&2 '
                           f'&& exec {shlex.quote(cli)} {args} -f json'],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            for key, args in commands.items()}
        out = {}
        for key, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=180)
            assert proc.returncode == 0, f"openstack {commands[key]}: {stderr}"
            assert stderr.splitlines()[0] == f"{devcloud.paths.clouds_yaml} {ADMIN_CLOUD}", stderr
            out[key] = json.loads(stdout)
            assert isinstance(out[key], list), (key, out[key])
        assert image.id in {row["ID"] for row in out["image"]}
        assert flavor.id in {row["ID"] for row in out["flavor"]}
        # python-ironicclient and python-magnumclient name their id column "uuid" in JSON.
        assert node.id in {row["uuid"] for row in out["baremetal"]}
        assert template.id in {row["uuid"] for row in out["coe"]}
    finally:
        magnum.delete_cluster_template(template, ignore_missing=True)
        system.baremetal.delete_node(node, ignore_missing=True)
        admin.compute.delete_flavor(flavor, ignore_missing=True)
        admin.image.delete_image(image, ignore_missing=True)
