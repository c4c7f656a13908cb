"""Flavor sync against the local cloud's real Nova (microversion 2.86:
malformed extra specs refused by Nova), then a second run changes nothing;
drift needs --replace (same ID); unlisted flavors go only with --prune.
Every flavor is named with a per-run prefix and deleted at the end."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from nodeforge import cli
from nodeforge.compute import flavors as F

pytestmark = pytest.mark.devcloud


@pytest.fixture(scope="module")
def admin(devcloud):
    return devcloud.admin()


@pytest.fixture(scope="module")
def prefix(admin):
    p = f"nftest-{uuid.uuid4().hex[:6]}-"
    yield p
    for f in F.list_flavors(admin):
        if f["name"].startswith(p):
            F._call(admin, "DELETE", f"/flavors/{f['id']}", "cleanup", ok=(202, 204, 404))
    assert not [f for f in F.list_flavors(admin) if f["name"].startswith(p)]


def write(path, prefix, flavors):
    path.write_text(yaml.safe_dump({"version": 1, "flavors": [{**f, "name": prefix + f["name"]} for f in flavors]}))
    return path


def run(*args):
    return cli.main(["--os-cloud", "nodeforge-dev", *args])


def mine(admin, prefix):
    return {f["name"]: f for f in F.list_flavors(admin) if f["name"].startswith(prefix)}


def test_sync_creates_then_second_run_changes_nothing(admin, prefix, tmp_path, capsys):
    f = write(tmp_path / "flavors.yaml", prefix, [
        {"name": "a", "resource_class": "nftest-a", "required_traits": ["CUSTOM_NFTEST_A"], "vcpus": 4,
         "ram_mb": 4096, "disk_gb": 10, "description": "first"},
        {"name": "b", "resource_class": "nftest-b", "access": {"projects": ["nodeforge"]}}])
    assert run("flavor", "sync", "--flavors", str(f), "--dry-run") == 0
    assert not mine(admin, prefix)
    assert run("flavor", "sync", "--flavors", str(f)) == 0
    have = mine(admin, prefix)
    assert have[prefix + "a"]["extra_specs"] == {
        "resources:CUSTOM_NFTEST_A": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
        "resources:DISK_GB": "0", "trait:CUSTOM_NFTEST_A": "required", "nodeforge:managed": "true"}
    assert have[prefix + "b"]["os-flavor-access:is_public"] is False
    project = admin.identity.find_project("nodeforge")
    assert have[prefix + "b"]["projects"] == [project.id]
    capsys.readouterr()
    assert run("flavor", "sync", "--flavors", str(f), "-o", "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["no-op"] == 2 and sum(data["summary"].values()) == 2

    # In place: description and extra specs; immutable vcpus -> drift, then --replace keeps the ID.
    doc = yaml.safe_load(f.read_text())
    doc["flavors"][0].update(description="second", required_traits=["CUSTOM_NFTEST_B"])
    f.write_text(yaml.safe_dump(doc))
    assert run("flavor", "sync", "--flavors", str(f)) == 0
    a = mine(admin, prefix)[prefix + "a"]
    assert a["description"] == "second" and "trait:CUSTOM_NFTEST_A" not in a["extra_specs"]
    assert a["extra_specs"]["trait:CUSTOM_NFTEST_B"] == "required"
    doc["flavors"][0]["vcpus"] = 8
    f.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert run("flavor", "sync", "--flavors", str(f), "-o", "json") == 3
    out = json.loads(capsys.readouterr().out)
    [p] = [x for x in out["flavors"] if x["name"] == prefix + "a"]
    assert p["action"] == "drift" and p["changes"] == [{"field": "vcpus", "current": 4, "desired": 8,
                                                        "mutable": False}]
    assert mine(admin, prefix)[prefix + "a"]["vcpus"] == 4
    assert run("flavor", "sync", "--flavors", str(f), "--replace") == 0
    again = mine(admin, prefix)[prefix + "a"]
    assert again["vcpus"] == 8 and again["id"] == a["id"] and again["description"] == "second"

    # Unlisted managed flavor: reported, deleted only with --prune.
    doc["flavors"] = doc["flavors"][:1]
    f.write_text(yaml.safe_dump(doc))
    assert run("flavor", "sync", "--flavors", str(f)) == 3
    assert prefix + "b" in mine(admin, prefix)
    assert run("flavor", "sync", "--flavors", str(f), "--prune") == 0
    assert set(mine(admin, prefix)) == {prefix + "a"}


def test_nova_refuses_a_malformed_extra_spec_and_nothing_is_left(admin, prefix, tmp_path, capsys):
    f = write(tmp_path / "bad.yaml", prefix, [
        {"name": "bad", "resource_class": "nftest-bad", "extra_specs": {"trait:CUSTOM_NFTEST_X": "yes"}}])
    assert run("flavor", "sync", "--flavors", str(f), "-o", "json") == 3
    [result] = [r for r in json.loads(capsys.readouterr().out)["results"] if r["name"] == prefix + "bad"]
    assert not result["ok"] and "HTTP 400" in result["error"] and "trait:CUSTOM_NFTEST_X" in result["error"], result
    assert prefix + "bad" not in mine(admin, prefix)
