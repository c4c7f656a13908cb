"""Bare-metal flavors: the file (profiles-derived), the pure plan (field by
field; immutable drift needs --replace), the flavor shape, capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.compute import flavors as F
from nodeforge.errors import ConfigError
from nodeforge.ironic import constants as C

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "flavors.yaml"


def spec(**kw) -> F.FlavorSpec:
    return F.FlavorSpec(**{"name": "bm.x", "resource_class": "baremetal-x", "required_traits": ("CUSTOM_A",),
                           "vcpus": 8, "ram": 8192, "disk": 100, **kw})


def nova(s: F.FlavorSpec, **kw) -> dict:
    """The flavor Nova would return for ``s``."""
    return {"id": "f-1", "name": s.name, "vcpus": s.vcpus, "ram": s.ram, "disk": s.disk, "swap": 0,
            "OS-FLV-EXT-DATA:ephemeral": 0, "os-flavor-access:is_public": s.is_public,
            "description": s.description, "extra_specs": s.extra_specs(), "projects": [], **kw}


def test_manifest_derives_resource_class_and_traits_from_profiles():
    ff = F.load(MANIFEST)
    compute = ff.by_name()["bm.compute"]
    assert compute.extra_specs() == {
        "resources:CUSTOM_BAREMETAL_COMPUTE": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
        "resources:DISK_GB": "0", "trait:CUSTOM_LOCAL_NVME": "required", "trait:CUSTOM_NIC_25G": "required",
        "nodeforge:managed": "true", "nodeforge:scope": "platform"}
    assert ff.by_name()["bm.storage"].resource_class == "baremetal-storage"
    assert (ff.scope, ff.scope_source) == ("platform", "file")


def test_invalid_file_lists_every_problem(tmp_path):
    f = tmp_path / "flavors.yaml"
    f.write_text("version: 1\nprofiles: " + str(ROOT / "manifests" / "hardware-profiles.yaml") + "\nflavors:\n"
                 "  - {name: a, profile: nope}\n"
                 "  - {name: b, vcpus: 0, access: private}\n"
                 "  - {name: a, resource_class: x, extra_specs: {'resources:VCPU': '1'}, colour: red}\n")
    with pytest.raises(ConfigError) as exc:
        F.load(f)
    text = str(exc.value)
    for expected in (f"{f}:4: flavors[0].profile: 'nope' is not in",
                     f"{f}:5: flavors[1]: flavor 'b' needs resource_class or profile",
                     f"{f}:5: flavors[1].vcpus: ",
                     f"{f}:5: flavors[1].access: must be 'public' or {{projects: [name-or-id, ...]}}",
                     f"{f}:6: flavors[2].name: duplicate flavor 'a'",
                     f"{f}:6: flavors[2].extra_specs.resources:VCPU: key 'resources:VCPU' is set by nodeforge",
                     f"{f}:6: flavors[2].colour: unknown key (allowed: profile, resource_class,"):
        assert expected in text, (expected, text)
    # One problem per line, each file:line: key.path: detail; the same as objects for --output json.
    assert len(text.splitlines()) == len(exc.value.details["problems"]) == 7, text


@pytest.mark.parametrize("entry,key,detail", [
    ("vcpus: 1e400", "vcpus", "a number out of range"),
    ("ram_mb: .nan", "ram_mb", "a number out of range"),
    ("vcpus: 2147483648", "vcpus", "2147483647"),
    ("disk_gb: -1", "disk_gb", "an integer >= 0"),
    ("disk_gb: '5'", "disk_gb", "got the string '5'"),
    ("extra_specs: {'hw:x': 1.30}", "extra_specs.hw:x", "must be a string of at most 255 characters (quoted: "
                                                        "unquoted, YAML reads 1.30 as a number) or an integer"),
    ("required_traits: [lower]", "required_traits[0]", "1-255 characters of A-Z 0-9 _"),
    ("resource_class: 'a b'", "resource_class", "1-80 characters of A-Z a-z 0-9 . _ -"),
])
def test_numbers_are_finite_and_in_nova_range_and_types_are_not_coerced(tmp_path, entry, key, detail):
    """Nova's 32-bit bounds, no NaN/inf, no silent str() of YAML's implicit types (each failed before)."""
    f = tmp_path / "flavors.yaml"
    rc = "" if entry.startswith("resource_class") else "    resource_class: x\n"
    f.write_text(f"version: 1\nflavors:\n  - name: a\n{rc}    {entry}\n")
    line = 4 if rc == "" else 5
    with pytest.raises(ConfigError) as exc:
        F.load(f)
    assert str(exc.value).startswith(f"{f}:{line}: flavors[0].{key}: ") and detail in str(exc.value), str(exc.value)


@pytest.mark.parametrize("profiles", ["7", "[a]", "{a: 1}", "''"])
def test_profiles_that_is_not_a_path_is_a_problem_not_a_traceback(tmp_path, profiles):
    """``profiles: 7`` raised TypeError (PosixPath / int) before (found by tests/hostile)."""
    f = tmp_path / "flavors.yaml"
    f.write_text(f"version: 1\nprofiles: {profiles}\nflavors:\n  - {{name: a, resource_class: x}}\n")
    with pytest.raises(ConfigError) as exc:
        F.load(f)
    assert str(exc.value).startswith(f"{f}:2: profiles: "), str(exc.value)


def test_plan_create_noop_update_drift_replace():
    s = spec(description="d")
    assert F.plan_flavor(s, None, ()).action is F.Action.CREATE
    assert F.plan_flavor(s, nova(s), ()).action is F.Action.NOOP
    p = F.plan_flavor(s, nova(s, description="old", extra_specs={**s.extra_specs(), "trait:CUSTOM_B": "required"}),
                      ())
    assert p.action is F.Action.UPDATE
    assert [(c.field, c.current, c.desired) for c in p.changes] == [
        ("description", "old", "d"), ("extra_specs.trait:CUSTOM_B", "required", None)]
    drifted = nova(s, vcpus=4, ram=4096)
    p = F.plan_flavor(s, drifted, ())
    assert p.action is F.Action.DRIFT and "--replace" in p.note
    assert [(c.field, c.current, c.desired, c.mutable) for c in p.changes] == [
        ("vcpus", 4, 8, False), ("ram", 4096, 8192, False)]
    assert F.plan_flavor(s, drifted, (), replace=True).action is F.Action.REPLACE


def test_plan_private_access_by_project():
    s = spec(is_public=False, projects=("p1",))
    p = F.plan_flavor(s, nova(s, projects=["p0"]), ("p1",))
    assert p.action is F.Action.UPDATE
    assert [(c.field, c.current, c.desired) for c in p.changes] == [("projects", ["p0"], ["p1"])]


def test_shape_problems_and_capacity():
    good = nova(spec())
    assert F.Shape.of(good).problems() == []
    vm = {"id": "v", "name": "m1.small", "extra_specs": {}}
    assert "not a bare-metal flavor" in F.Shape.of(vm).problems()[0]
    half = nova(spec(), extra_specs={"resources:CUSTOM_BAREMETAL_X": "1", "resources:VCPU": "0"})
    assert "does not zero resources:MEMORY_MB, resources:DISK_GB" in F.Shape.of(half).problems()[0]
    nodes = [{"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": False},
             {"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": True},
             {"resource_class": "baremetal-x", "traits": ["CUSTOM_A"], "provision_state": "active",
              "maintenance": False},
             {"resource_class": "baremetal-x", "traits": [], "provision_state": "available", "maintenance": False},
             {"resource_class": "other", "traits": ["CUSTOM_A"], "provision_state": "available",
              "maintenance": False}]
    [row] = F.capacity([good, vm], nodes)
    assert (row["flavor"], row["available"], row["active"], row["maintenance"], row["total"]) == ("bm.x", 1, 1, 1, 3)


# ----------------------------------------------------------------------------- ownership scopes

def flavor_file(tmp_path, name: str, flavors: list[dict], scope: str | None = None) -> F.FlavorFile:
    import yaml

    doc = {"version": 1, **({"scope": scope} if scope is not None else {}), "flavors": flavors}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return F.load(path)


def in_nova(ff: F.FlavorFile, fid_prefix: str) -> list[dict]:
    """The flavors a sync of ``ff`` would have left in Nova."""
    return [nova(s, id=f"{fid_prefix}-{i}") for i, s in enumerate(ff.flavors)]


def legacy(name: str, fid: str) -> dict:
    """A flavor made by nodeforge before scopes: managed=true, no scope."""
    s = spec(name=name)
    return nova(s, id=fid, extra_specs={k: v for k, v in s.extra_specs().items() if k != F.SCOPE_KEY})


def actions(plan: F.Plan | dict) -> dict[str, str]:
    if isinstance(plan, dict):                            # the JSON of `flavor sync -o json`
        return {p["name"]: p["action"] for p in plan["flavors"]}
    return {p.name: p.action.value for p in plan.flavors}


def test_scope_is_validated_with_its_line(tmp_path):
    f = tmp_path / "flavors.yaml"
    for bad in ("Team A", "-a", "a/b", "x" * 64, "5", "[a]"):
        f.write_text(f"version: 1\nflavors:\n  - {{name: a, resource_class: x}}\nscope: {bad}\n")
        with pytest.raises(ConfigError) as exc:
            F.load(f)
        detail = ("expected a string, got the number 5; quote it" if bad == "5" else
                  "expected a string, got a list" if bad == "[a]" else "1-63 characters of a-z 0-9 . _ -")
        assert str(exc.value).startswith(f"{f}:4: scope: ") and detail in str(exc.value), (bad, str(exc.value))
    f.write_text("version: 1\nscope: team-a\nscopes: x\nflavors:\n"
                 "  - {name: a, resource_class: x, extra_specs: {'nodeforge:scope': team-b}}\n")
    with pytest.raises(ConfigError) as exc:
        F.load(f)
    text = str(exc.value)
    assert f"{f}:3: scopes: unknown key (allowed: version, scope, profiles, defaults, flavors)" in text, text
    assert f"{f}:5: flavors[0].extra_specs.nodeforge:scope: key 'nodeforge:scope': keys starting 'nodeforge:' " \
           "are nodeforge's ownership mark" in text, text


def test_default_scope_is_derived_from_the_path_and_stable(tmp_path, monkeypatch):
    ff = flavor_file(tmp_path, "Team_Flavors.yaml", [{"name": "a", "resource_class": "x"}])
    assert ff.scope_source == "derived" and ff.scope.startswith("team_flavors-")
    assert C.SCOPE_PATTERN.match(ff.scope)
    assert ff.flavors[0].extra_specs()[F.SCOPE_KEY] == ff.scope
    monkeypatch.chdir(tmp_path)                          # same file, another working directory: same scope
    assert F.load("Team_Flavors.yaml").scope == ff.scope
    (tmp_path / "other.yaml").write_text((tmp_path / "Team_Flavors.yaml").read_text())
    assert F.load("other.yaml").scope != ff.scope        # another file: another scope
    # In a git checkout: the path relative to the checkout's root, so two
    # clones in different places derive the same scope.
    for clone in ("one", "two/deeper"):
        (tmp_path / clone / ".git").mkdir(parents=True)
        (tmp_path / clone / "manifests").mkdir()
        (tmp_path / clone / "manifests" / "flavors.yaml").write_text((tmp_path / "other.yaml").read_text())
    one, two = (F.load(tmp_path / c / "manifests" / "flavors.yaml").scope for c in ("one", "two/deeper"))
    assert one == two and one.startswith("flavors-") and one != F.load(tmp_path / "other.yaml").scope


def test_two_scopes_side_by_side_see_only_their_own(tmp_path):
    a = flavor_file(tmp_path, "a.yaml", [{"name": "a.one", "resource_class": "x"},
                                         {"name": "a.two", "resource_class": "x"}], scope="team-a")
    b = flavor_file(tmp_path, "b.yaml", [{"name": "b.one", "resource_class": "y"}], scope="team-b")
    cloud = in_nova(a, "fa") + in_nova(b, "fb") + [nova(spec(name="m1.small"), id="vm", extra_specs={})]
    pa, pb = F.plan(None, a, flavors=cloud), F.plan(None, b, flavors=cloud)
    assert actions(pa) == {"a.one": "no-op", "a.two": "no-op"} and not pa.blocked
    assert actions(pb) == {"b.one": "no-op"} and not pb.blocked
    assert pa.other_scopes == {"team-b": 1} and pb.other_scopes == {"team-a": 2}
    assert pa.to_dict()["scope"] == "team-a"
    # team-a drops a.two: its own flavor is unlisted, b's never; --prune deletes only a.two.
    a2 = flavor_file(tmp_path, "a.yaml", [{"name": "a.one", "resource_class": "x"}], scope="team-a")
    assert actions(F.plan(None, a2, flavors=cloud)) == {"a.one": "no-op", "a.two": "unlisted"}
    pruned = F.plan(None, a2, prune=True, flavors=cloud)
    assert [(p.name, p.action, p.flavor_id) for p in pruned.flavors if p.action is F.Action.PRUNE] == [
        ("a.two", F.Action.PRUNE, "fa-1")]
    # An empty team-b file prunes b.one only.
    b2 = flavor_file(tmp_path, "b.yaml", [], scope="team-b")
    assert actions(F.plan(None, b2, prune=True, flavors=cloud)) == {"b.one": "prune"}


def test_a_name_owned_by_another_scope_is_refused_before_any_write(tmp_path):
    a = flavor_file(tmp_path, "a.yaml", [{"name": "shared", "resource_class": "x"}], scope="team-a")
    b = flavor_file(tmp_path, "b.yaml", [{"name": "new", "resource_class": "y"},
                                         {"name": "shared", "resource_class": "y", "vcpus": 2}], scope="team-b")
    cloud = in_nova(a, "fa")
    for kw in ({}, {"replace": True}, {"prune": True}):
        p = F.plan(None, b, flavors=cloud, **kw)
        assert actions(p) == {"new": "create", "shared": "conflict"}
        [c] = p.conflicts
        assert "under scope 'team-a' (not 'team-b')" in c.note
        assert [(x.field, x.current, x.desired) for x in c.changes] == [("extra_specs.nodeforge:scope", "team-a",
                                                                         "team-b")]

    class NoWrites:                                       # any Nova call fails the test
        def __getattr__(self, name):
            raise AssertionError(f"Nova called: {name}")

    with pytest.raises(F.ScopeConflict) as exc:
        F.apply(NoWrites(), p)
    assert "lists flavors that belong to another scope in Nova: shared (scope 'team-a'); nothing was written" \
        in str(exc.value) and str(b.path) in str(exc.value)


def test_legacy_flavors_are_reported_never_touched_unless_adopted(tmp_path):
    a = flavor_file(tmp_path, "a.yaml", [{"name": "a.one", "resource_class": "x"}], scope="team-a")
    cloud = in_nova(a, "fa") + [legacy("old.one", "l1")]
    for kw in ({}, {"prune": True}, {"replace": True}):
        p = F.plan(None, a, flavors=cloud, **kw)
        assert actions(p) == {"a.one": "no-op", "old.one": "legacy"}
        assert not p.blocked and "made before scopes" in p.flavors[1].note
    assert F.apply(None, F.plan(None, a, prune=True, flavors=cloud))[1].ok   # legacy: no call, not a failure
    assert actions(F.plan(None, a, adopt_legacy=True, flavors=cloud)) == {"a.one": "no-op", "old.one": "unlisted"}
    p = F.plan(None, a, adopt_legacy=True, prune=True, flavors=cloud)
    assert actions(p) == {"a.one": "no-op", "old.one": "prune"} and "adopted with --adopt-legacy" in p.flavors[1].note
    # Listed by name: the legacy flavor is taken into the file's scope (the plan shows the mark added).
    s = spec(name="old.one", scope="team-a")
    mine = flavor_file(tmp_path, "m.yaml", [{"name": "old.one", "resource_class": s.resource_class,
                                             "required_traits": list(s.required_traits), "vcpus": s.vcpus,
                                             "ram_mb": s.ram, "disk_gb": s.disk}], scope="team-a")
    [p] = F.plan(None, mine, flavors=[legacy("old.one", "l1")]).flavors
    assert p.action is F.Action.UPDATE and "taken into scope 'team-a'" in p.note
    assert [(c.field, c.current, c.desired) for c in p.changes] == [("extra_specs.nodeforge:scope", None, "team-a")]
    # ... and a flavor of another scope is never "legacy": it is simply not ours.
    other = nova(spec(name="b.one", scope="team-b"), id="fb")
    assert actions(F.plan(None, a, adopt_legacy=True, prune=True, flavors=[other])) == {"a.one": "create"}


class FakeNova:
    """Just enough of Nova's flavor API for `flavor sync` (records writes)."""

    def __init__(self, flavors: list[dict]):
        self.flavors = {f["id"]: f for f in flavors}
        self.writes: list[str] = []
        self.compute = self

    def request(self, url, method, json=None, microversion=None, raise_exc=False, **kwargs):
        import json as _json
        import types

        def resp(status, body=None):
            text = _json.dumps(body) if body is not None else ""
            return types.SimpleNamespace(status_code=status, text=text, content=text.encode(),
                                         json=lambda: _json.loads(text))
        if method == "GET" and url.startswith("/flavors/detail"):
            return resp(200, {"flavors": list(self.flavors.values())})
        self.writes.append(f"{method} {url}")
        if method == "POST" and url == "/flavors":
            f = {**json["flavor"], "id": json["flavor"].get("id") or f"new-{len(self.flavors)}", "extra_specs": {}}
            self.flavors[f["id"]] = f
            return resp(200, {"flavor": f})
        fid = url.split("/")[2]
        if method == "POST" and url.endswith("/os-extra_specs"):
            self.flavors[fid]["extra_specs"].update(json["extra_specs"])
            return resp(200, json)
        if method == "DELETE" and url == f"/flavors/{fid}":
            self.flavors.pop(fid, None)
            return resp(202)
        raise AssertionError(f"unexpected {method} {url}")


def test_cli_sync_two_scopes_refusal_and_legacy(tmp_path, monkeypatch, capsys):
    import json

    from nodeforge import cli
    from nodeforge.commands import options

    a = flavor_file(tmp_path, "a.yaml", [{"name": "a.one", "resource_class": "x"}], scope="team-a")
    fake = FakeNova(in_nova(a, "fa") + [legacy("old.one", "l1")])
    monkeypatch.setattr(options.AppContext, "connect", lambda self: fake)

    def sync(path, *args):
        capsys.readouterr()
        code = cli.main(["flavor", "sync", "--flavors", str(path), "-o", "json", *args])
        out = capsys.readouterr()
        return code, json.loads(out.out), out.err

    b = tmp_path / "b.yaml"
    b.write_text("version: 1\nscope: team-b\nflavors:\n  - {name: b.one, resource_class: y}\n"
                 "  - {name: a.one, resource_class: y}\n")
    for args, old_one in (([], "legacy"), (["--dry-run"], "legacy"),
                          (["--prune", "--replace", "--adopt-legacy"], "prune")):
        code, data, err = sync(b, *args)
        assert code == 1 and actions(data) == {"b.one": "create", "a.one": "conflict", "old.one": old_one}, args
        assert "a.one (scope 'team-a')" in err and "nothing was written" in err and "hint:" in err
    assert fake.writes == []
    b.write_text("version: 1\nscope: team-b\nflavors:\n  - {name: b.one, resource_class: y}\n")
    code, data, err = sync(b, "--prune")
    assert code == 0 and actions(data) == {"b.one": "create", "old.one": "legacy"}
    assert data["other_scopes"] == {"team-a": 1} and err == ""
    assert [f["extra_specs"].get("nodeforge:scope") for f in fake.flavors.values()] == ["team-a", None, "team-b"]
    c = tmp_path / "c.yaml"
    c.write_text("version: 1\nflavors: []\n")
    code, data, err = sync(c, "--prune")
    assert code == 0 and data["scope_source"] == "derived" and actions(data) == {"old.one": "legacy"}
    assert f"{c} has no 'scope:'; using the scope derived from its path, '{data['scope']}'" in err
    assert len(fake.flavors) == 3
