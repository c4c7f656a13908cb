"""Flavor sync against the local cloud's real Nova (microversion 2.86:
malformed extra specs refused by Nova), then a second run changes nothing;
drift needs --replace (same ID); unlisted flavors go only with --prune.

Ownership scopes: two flavors files with different scopes synced into the
same Nova see only their own flavors (no ``unlisted`` for the other's, each
``--prune`` deletes only its own), a name owned by the other scope is refused
before any write, a file without ``scope:`` marks its flavors with the scope
derived from its path, and a legacy flavor (``nodeforge:managed=true``, no
scope) is reported and left alone.

Each test names its flavors (and scopes) with its own random prefix, so
nothing another test or an earlier run left in Nova changes its outcome, and
deletes them at the end; a failed clean-up fails the test."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from nodeforge import cli
from nodeforge.compute import flavors as F
from nodeforge.clients import compute as nova
from nodeforge.ironic import constants as C

pytestmark = pytest.mark.devcloud


@pytest.fixture(scope="module")
def admin(devcloud):
    return devcloud.admin()


@pytest.fixture
def prefix(admin):
    """A per-test prefix for flavor names and scopes; every flavor with it is
    deleted afterwards, and the test errors if one is left."""
    p = f"nftest-{uuid.uuid4().hex[:6]}-"
    yield p
    failures = []
    for f in F.list_flavors(admin):
        if f["name"].startswith(p):
            try:
                nova.call(admin, "DELETE", f"/flavors/{f['id']}", "cleanup", missing_ok=True)
            except F.NovaError as exc:
                failures.append(f"{f['name']}: {exc}")
    left = sorted(f["name"] for f in F.list_flavors(admin) if f["name"].startswith(p))
    if failures or left:
        raise RuntimeError(f"flavor clean-up failed: {failures}; still in Nova: {left}")


def write(path, prefix, flavors, scope=None):
    doc = {"version": 1, **({"scope": scope} if scope else {}),
           "flavors": [{**f, "name": prefix + f["name"]} for f in flavors]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(*args):
    return cli.main(["--os-cloud", "nodeforge-dev", *args])


def sync_json(capsys, path, *args) -> tuple[int, dict]:
    capsys.readouterr()
    code = run("flavor", "sync", "--flavors", str(path), "-o", "json", *args)
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def mine(admin, prefix):
    return {f["name"]: f for f in F.list_flavors(admin) if f["name"].startswith(prefix)}


def actions(data: dict, prefix: str) -> dict[str, str]:
    """name -> action of this test's flavors in a plan (others are ignored)."""
    return {f["name"].removeprefix(prefix): f["action"] for f in data["flavors"] if f["name"].startswith(prefix)}


def test_sync_creates_then_second_run_changes_nothing(admin, prefix, tmp_path, capsys):
    f = write(tmp_path / "flavors.yaml", prefix, [
        {"name": "a", "resource_class": "nftest-a", "required_traits": ["CUSTOM_NFTEST_A"], "vcpus": 4,
         "ram_mb": 4096, "disk_gb": 10, "description": "first"},
        {"name": "b", "resource_class": "nftest-b", "access": {"projects": ["nodeforge"]}}], scope=prefix + "s")
    assert run("flavor", "sync", "--flavors", str(f), "--dry-run") == 0
    assert not mine(admin, prefix)
    assert run("flavor", "sync", "--flavors", str(f)) == 0
    have = mine(admin, prefix)
    assert have[prefix + "a"]["extra_specs"] == {
        "resources:CUSTOM_NFTEST_A": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
        "resources:DISK_GB": "0", "trait:CUSTOM_NFTEST_A": "required", "nodeforge:managed": "true",
        "nodeforge:scope": prefix + "s"}
    assert have[prefix + "b"]["os-flavor-access:is_public"] is False
    project = admin.identity.find_project("nodeforge")
    assert have[prefix + "b"]["projects"] == [project.id]
    # The second run: no-op for both, and nothing else of this scope (whatever else Nova holds).
    code, data = sync_json(capsys, f)
    assert code == 0 and data["scope"] == prefix + "s"
    assert data["summary"]["no-op"] == 2 and sum(data["summary"].values()) == data["summary"]["legacy"] + 2
    assert actions(data, prefix) == {"a": "no-op", "b": "no-op"}

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
    code, out = sync_json(capsys, f)
    assert code == 3
    [p] = [x for x in out["flavors"] if x["name"] == prefix + "a"]
    assert p["action"] == "drift" and p["changes"] == [{"field": "vcpus", "current": 4, "desired": 8,
                                                        "mutable": False}]
    assert mine(admin, prefix)[prefix + "a"]["vcpus"] == 4
    assert run("flavor", "sync", "--flavors", str(f), "--replace") == 0
    again = mine(admin, prefix)[prefix + "a"]
    assert again["vcpus"] == 8 and again["id"] == a["id"] and again["description"] == "second"
    assert again["extra_specs"]["nodeforge:scope"] == prefix + "s"

    # Unlisted flavor of this scope: reported (and it is the only reason for exit 3), deleted only with --prune.
    doc["flavors"] = doc["flavors"][:1]
    f.write_text(yaml.safe_dump(doc))
    code, out = sync_json(capsys, f)
    assert code == 3 and actions(out, prefix) == {"a": "no-op", "b": "unlisted"}
    assert out["summary"]["unlisted"] == 1 and out["summary"]["drift"] == 0
    assert prefix + "b" in mine(admin, prefix)
    assert run("flavor", "sync", "--flavors", str(f), "--prune") == 0
    assert set(mine(admin, prefix)) == {prefix + "a"}


def test_nova_refuses_a_malformed_extra_spec_and_nothing_is_left(admin, prefix, tmp_path, capsys):
    # Nothing of this scope exists before: the exit 3 can only come from Nova's refusal.
    f = write(tmp_path / "bad.yaml", prefix, [
        {"name": "good", "resource_class": "nftest-good"},
        {"name": "bad", "resource_class": "nftest-bad", "extra_specs": {"trait:CUSTOM_NFTEST_X": "yes"}}],
        scope=prefix + "s")
    code, data = sync_json(capsys, f, "--dry-run")
    assert code == 0 and data["summary"]["create"] == 2 and not data["summary"]["unlisted"]
    code, data = sync_json(capsys, f)
    assert code == 3
    results = {r["name"].removeprefix(prefix): r for r in data["results"] if r["name"].startswith(prefix)}
    assert results["good"]["ok"] and results["good"]["action"] == "create"
    bad = results["bad"]
    assert not bad["ok"] and "HTTP 400" in bad["error"] and "trait:CUSTOM_NFTEST_X" in bad["error"], bad
    assert [r for r in data["results"] if not r["ok"]] == [bad]
    assert set(mine(admin, prefix)) == {prefix + "good"}


def test_two_scopes_in_one_nova(admin, prefix, tmp_path, capsys):
    team_a, team_b = prefix + "team-a", prefix + "team-b"
    fa = write(tmp_path / "a.yaml", prefix, [{"name": "a1", "resource_class": "nftest-a"},
                                             {"name": "a2", "resource_class": "nftest-a"}], scope=team_a)
    fb = write(tmp_path / "b.yaml", prefix, [{"name": "b1", "resource_class": "nftest-b"},
                                             {"name": "b2", "resource_class": "nftest-b"}], scope=team_b)
    assert run("flavor", "sync", "--flavors", str(fa)) == 0
    assert run("flavor", "sync", "--flavors", str(fb)) == 0
    scopes = {n.removeprefix(prefix): f["extra_specs"]["nodeforge:scope"] for n, f in mine(admin, prefix).items()}
    assert scopes == {"a1": team_a, "a2": team_a, "b1": team_b, "b2": team_b}

    # Each plan: its own flavors only, no unlisted for the other's (exit 0).
    for path, own, other in ((fa, {"a1", "a2"}, team_b), (fb, {"b1", "b2"}, team_a)):
        code, data = sync_json(capsys, path, "--dry-run")
        assert code == 0 and data["summary"]["unlisted"] == 0
        assert actions(data, prefix) == {n: "no-op" for n in own}
        assert data["other_scopes"][other] == 2

    # Each --prune deletes only its own: a drops a2, b drops b2.
    write(fa, prefix, [{"name": "a1", "resource_class": "nftest-a"}], scope=team_a)
    write(fb, prefix, [{"name": "b1", "resource_class": "nftest-b"}], scope=team_b)
    code, data = sync_json(capsys, fa, "--prune")
    assert code == 0 and actions(data, prefix) == {"a1": "no-op", "a2": "prune"}
    assert set(mine(admin, prefix)) == {prefix + n for n in ("a1", "b1", "b2")}
    code, data = sync_json(capsys, fb)
    assert code == 3 and actions(data, prefix) == {"b1": "no-op", "b2": "unlisted"}
    code, data = sync_json(capsys, fb, "--prune")
    assert code == 0 and actions(data, prefix) == {"b1": "no-op", "b2": "prune"}
    assert set(mine(admin, prefix)) == {prefix + "a1", prefix + "b1"}

    # A name owned by the other scope is refused, before any write: b's new flavor is not created either,
    # the clashing one is untouched, even with --replace and --prune; dry run or not: exit 1.
    before = mine(admin, prefix)
    write(fb, prefix, [{"name": "b1", "resource_class": "nftest-b", "description": "changed"},
                       {"name": "b3", "resource_class": "nftest-b"},
                       {"name": "a1", "resource_class": "nftest-b", "vcpus": 2}], scope=team_b)
    for extra in (["--dry-run"], [], ["--replace", "--prune"]):
        code, data = sync_json(capsys, fb, *extra)
        assert code == 1, (extra, data)
        assert actions(data, prefix) == {"b1": "update", "b3": "create", "a1": "conflict"}
        assert "results" not in data
        assert mine(admin, prefix) == before
    capsys.readouterr()
    assert run("flavor", "sync", "--flavors", str(fb)) == 1
    err = capsys.readouterr().err
    assert f"{prefix}a1 (scope '{team_a}')" in err and "nothing was written" in err, err
    assert mine(admin, prefix) == before


def test_a_file_without_scope_marks_its_flavors_with_the_derived_scope(admin, prefix, tmp_path, capsys):
    f = write(tmp_path / "team-flavors.yaml", prefix, [{"name": "d1", "resource_class": "nftest-d"}])
    derived = C.derive_scope(f)
    assert derived.startswith("team-flavors-")
    capsys.readouterr()
    assert run("flavor", "sync", "--flavors", str(f)) == 0
    assert f"no 'scope:'; using the scope derived from its path, '{derived}'" in capsys.readouterr().err
    assert mine(admin, prefix)[prefix + "d1"]["extra_specs"]["nodeforge:scope"] == derived
    code, data = sync_json(capsys, f)
    assert code == 0 and (data["scope"], data["scope_source"]) == (derived, "derived")
    assert actions(data, prefix) == {"d1": "no-op"}
    # Another file (another derived scope) listing d1 is refused; an empty one does not see it.
    other = write(tmp_path / "other.yaml", prefix, [{"name": "d1", "resource_class": "nftest-d"}])
    code, data = sync_json(capsys, other)
    assert code == 1 and actions(data, prefix) == {"d1": "conflict"}
    empty = write(tmp_path / "empty.yaml", prefix, [])
    code, data = sync_json(capsys, empty, "--prune")
    assert code == 0 and actions(data, prefix) == {}
    assert mine(admin, prefix)[prefix + "d1"]["extra_specs"]["nodeforge:scope"] == derived
    # Its own file, emptied, prunes it.
    write(f, prefix, [])
    code, data = sync_json(capsys, f, "--prune")
    assert code == 0 and actions(data, prefix) == {"d1": "prune"}
    assert not mine(admin, prefix)


def test_legacy_flavor_is_reported_and_left_alone(admin, prefix, tmp_path, capsys):
    """What `make demo` before scopes left behind: managed=true, no scope."""
    old = nova.call(admin, "POST", "/flavors", "create", body={"flavor": {
        "name": prefix + "old", "vcpus": 1, "ram": 512, "disk": 0}})["flavor"]
    nova.call(admin, "POST", f"/flavors/{old['id']}/os-extra_specs", "specs",
            body={"extra_specs": {"resources:CUSTOM_NFTEST_OLD": "1", "nodeforge:managed": "true"}})
    f = write(tmp_path / "flavors.yaml", prefix, [{"name": "new", "resource_class": "nftest-new"}],
              scope=prefix + "s")
    for extra in ([], ["--prune"], ["--replace", "--prune"]):
        code, data = sync_json(capsys, f, *extra)
        assert code == 0, (extra, data)
        assert actions(data, prefix) == {"new": "no-op" if extra else "create", "old": "legacy"}
    assert mine(admin, prefix)[prefix + "old"]["extra_specs"] == {"resources:CUSTOM_NFTEST_OLD": "1",
                                                                  "nodeforge:managed": "true"}
    # Explicit adoption: reported as unlisted (exit 3), deleted with --prune.
    code, data = sync_json(capsys, f, "--adopt-legacy")
    assert code == 3 and actions(data, prefix) == {"new": "no-op", "old": "unlisted"}
    code, data = sync_json(capsys, f, "--adopt-legacy", "--prune")
    assert code == 0 and actions(data, prefix) == {"new": "no-op", "old": "prune"}
    assert set(mine(admin, prefix)) == {prefix + "new"}
