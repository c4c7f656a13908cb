"""template apply, pure: the plan against Magnum's templates and clusters as the
API answers them (dicts), version naming, digests, the field-by-field diff,
older versions hidden, other scopes and hand-made templates untouched, bad
input refused before any write."""

from __future__ import annotations

import copy

import pytest

from nodeforge.magnum import templates as T
from nodeforge.magnum import apply as A
from tests.magnum.test_render import TEXT, edit, parse, state
from tests.test_templates import image

PATH = "/srv/repo/templates/t1.yaml"
SCOPED = edit(TEXT, 'kubernetes: "1.36"\n', 'kubernetes: "1.36"\nscope: team-a\n')


def team_a():
    return state(scope="team-a")


def res(text=SCOPED, st=None):
    return T.resolve(parse(text, PATH), st or team_a())


def as_magnum(p: A.TemplatePlan, uuid: str, **kw) -> dict:
    """What Magnum answers for a template created from the plan's body."""
    t = copy.deepcopy(p.body)
    t.update(uuid=uuid, cluster_distro="debian", project_id="p1", created_at="2026-01-01T00:00:00+00:00",
             updated_at=None, floating_ip_enabled=True, docker_storage_driver=None, **kw)
    return t


def test_version_names_and_marks():
    assert A.versioned_name("k8s-1.36", 3) == "k8s-1.36-v3"
    assert A.version_of_name("k8s-1.36", "k8s-1.36-v12") == 12
    assert A.version_of_name("k8s-1.36", "k8s-1.36-vx") is None and A.version_of_name("k8s", "k8s-1.36-v1") is None
    assert A.tags_for("team-a", 2) == "nodeforge,scope:team-a,v2"


def test_first_apply_creates_v1_then_a_rerun_is_a_noop():
    p = A.plan_template(res(), [], [])
    assert p.action is A.Action.CREATE and p.magnum_name == "t1-v1" and p.writes == 1
    assert p.changes == [A.Change("template", None, "new")]
    labels = p.body["labels"]
    assert labels["nodeforge_scope"] == "team-a" and labels["nodeforge_template"] == "t1"
    assert labels["nodeforge_template_version"] == "1" and labels["nodeforge_digest"] == p.digest
    assert p.body["tags"] == "nodeforge,scope:team-a,v1" and p.body["hidden"] is False
    assert p.body["server_type"] == "vm" and p.body["driver"] == "k8s_cluster_api_debian"
    v1 = as_magnum(p, "u1")
    again = A.plan_template(res(), [v1], [])
    assert again.action is A.Action.NOOP and again.writes == 0 and again.version == 1 and again.changes == []


def test_new_content_is_a_new_version_with_a_field_diff_and_the_old_one_hidden():
    p1 = A.plan_template(res(), [], [])
    v1 = as_magnum(p1, "u1")
    clusters = [{"uuid": "c1", "name": "prod", "cluster_template_id": "u1"}]
    # A newer approved image: new content.
    st = team_a()
    st.images.append(dict(image("bm2", patch="1", os_distro="debian", scope="team-a", promoted="2026-02-01")))
    p2 = A.plan_template(res(st=st), [v1], clusters)
    assert p2.action is A.Action.NEW_VERSION and p2.magnum_name == "t1-v2" and p2.digest != p1.digest
    assert {str(c) for c in p2.changes} == {"image_id: bm -> bm2", "labels.kube_tag: v1.36.0 -> v1.36.1"}
    assert [h["uuid"] for h in p2.hide] == ["u1"] and p2.writes == 2
    assert p2.versions == [{"version": 1, "uuid": "u1", "name": "t1-v1", "hidden": False, "digest": p1.digest,
                            "clusters": ["prod"]}]
    # v1 hidden after apply; v2 current: a re-run does nothing; v1 is never changed again.
    v1["hidden"] = True
    v2 = as_magnum(p2, "u2")
    p3 = A.plan_template(res(st=st), [v1, v2], clusters)
    assert p3.action is A.Action.NOOP and p3.writes == 0 and p3.hide == []
    # A label change: v3; v2 gets hidden, v1 (hidden already) is not written.
    p4 = A.plan_template(res(edit(SCOPED, 'keystone_auth_enabled: "true"', 'keystone_auth_enabled: "false"'), st),
                         [v1, v2], clusters)
    assert p4.magnum_name == "t1-v3" and [str(c) for c in p4.changes] == [
        "labels.keystone_auth_enabled: true -> false"] and [h["uuid"] for h in p4.hide] == ["u2"]


def test_public_hidden_and_tags_are_updated_in_place():
    p1 = A.plan_template(res(), [], [])
    v1 = as_magnum(p1, "u1", tags="something-else")
    text = edit(SCOPED, "magnum:\n", "magnum:\n  public: true\n")
    p = A.plan_template(res(text), [v1], [])
    assert p.action is A.Action.UPDATE and p.updates == {"public": True, "tags": "nodeforge,scope:team-a,v1"}
    assert p.digest == p1.digest and p.body is None and p.writes == 1


def test_only_the_files_scope_is_touched_and_names_are_never_reused():
    p1 = A.plan_template(res(), [], [])
    theirs = as_magnum(p1, "x1")
    theirs["labels"] = dict(theirs["labels"], nodeforge_scope="team-b")
    hand = {"uuid": "h1", "name": "t1-v2", "labels": {}, "hidden": False}
    p = A.plan_template(res(), [theirs, hand], [])
    # Neither is ours: a first version of our own, numbered past every t1-vN in Magnum; nothing hidden.
    assert p.action is A.Action.CREATE and p.magnum_name == "t1-v3" and p.hide == [] and p.versions == []


def test_a_file_without_scope_owns_by_its_derived_scope():
    p = A.plan_template(T.resolve(parse(TEXT, PATH), state()), [], [])
    assert p.scope == T.parse(__import__("nodeforge.schema.loader", fromlist=["x"]).load_yaml_tree(PATH, TEXT),
                              PATH).ownership_scope
    assert p.scope.startswith("t1-") and p.body["labels"]["nodeforge_scope"] == p.scope


def test_broken_links_are_not_written_and_capacity_is_only_a_warning():
    st = team_a()
    st.nodes = st.nodes[:1]          # 1 node, 2 needed: a warning for apply
    p = A.plan_template(res(st=st), [], [])
    assert p.action is A.Action.CREATE and p.warnings and "capacity" in p.warnings[0]
    st.images = []
    p = A.plan_template(res(st=st), [], [])
    assert p.action is A.Action.BROKEN and p.writes == 0 and "no approved image" in p.issues[0]


def test_bad_input_refuses_every_template_before_any_write():
    good = res()
    bad = T.resolve(parse(edit(SCOPED, "flavor: bm.compute, count: 1}\n  - {name: default-worker",
                               "flavor: bm.nope, count: 1}\n  - {name: default-worker"), PATH), team_a())
    with pytest.raises(A.TemplateInputError) as exc:
        A.plan([good, bad], [], [])
    text = str(exc.value)
    assert text.startswith("1 problem(s) in the template file(s), nothing was written:\n  ")
    assert f"{PATH}:7: node_groups[0].flavor: flavor 'bm.nope' not found in Nova" in text
    assert exc.value.exit_code == 2


def test_diff_ignores_marks_and_reports_removed_labels():
    cur = {"image_id": "a", "labels": {"x": "1", "gone": "2", "nodeforge_digest": "d"}, "public": False}
    want = {"image_id": "b", "labels": {"x": "1"}, "public": False}
    assert [str(c) for c in A.diff(cur, want)] == ["image_id: a -> b", "labels.gone: 2 -> None"]
    assert A.digest({"name": "a", "hidden": True, "labels": {"k": "v", "nodeforge_template_version": "3"}}) == \
        A.digest({"name": "b", "hidden": False, "labels": {"k": "v"}})


PROJECTS = [{"id": "p-tenant", "name": "tenant-a"}, {"id": "p-dup1", "name": "dup"}, {"id": "p-dup2", "name": "dup"}]


def with_projects():
    st = team_a()
    st.projects = [dict(p) for p in PROJECTS]
    return st


def test_a_declared_project_is_resolved_by_name_or_id_and_is_part_of_the_content():
    by_name = edit(SCOPED, "scope: team-a\n", "scope: team-a\nproject: tenant-a\n")
    r = res(by_name, with_projects())
    assert r.project_id == "p-tenant" and not r.issues
    assert res(edit(SCOPED, "scope: team-a\n", "scope: team-a\nproject: p-tenant\n"), with_projects()).project_id \
        == "p-tenant"
    p = A.plan_template(r, [], [])
    assert p.project_id == "p-tenant" and p.to_dict()["project_id"] == "p-tenant"
    undeclared = A.plan_template(res(st=with_projects()), [], [])
    assert undeclared.project_id is None and undeclared.digest != p.digest
    assert "project_id" not in p.body          # Magnum takes the owner from the token, not the body
    # Created in that project: a re-run is a no-op; the same content in another project is a new version.
    v1 = as_magnum(p, "u1")
    v1["project_id"] = "p-tenant"
    assert A.plan_template(r, [v1], []).action is A.Action.NOOP
    moved = A.plan_template(res(by_name.replace("project: tenant-a", "project: p-dup1"), with_projects()), [v1], [])
    assert moved.action is A.Action.NEW_VERSION and A.Change("project_id", "p-tenant", "p-dup1") in moved.changes
    assert [h["uuid"] for h in moved.hide] == ["u1"]


@pytest.mark.parametrize("value, why", [
    ("nobody", "project 'nobody' not found in Keystone"),
    ("dup", "2 projects are named 'dup': give its ID"),
])
def test_an_unknown_or_ambiguous_project_is_bad_input_naming_file_line_field(value, why):
    text = edit(SCOPED, "scope: team-a\n", f"scope: team-a\nproject: {value}\n")
    line = text.splitlines().index(f"project: {value}") + 1
    r = res(text, with_projects())
    with pytest.raises(A.TemplateInputError) as exc:
        A.plan([r], [], [])
    assert f"{PATH}:{line}: project: {why}" in str(exc.value)


def test_a_project_that_cannot_be_listed_is_bad_input_not_a_guess():
    text = edit(SCOPED, "scope: team-a\n", "scope: team-a\nproject: tenant-a\n")
    r = res(text, team_a())                   # projects None: the token may not list Keystone projects
    assert [i.kind for i in r.bad_input] == ["project"] and "cannot be checked" in r.bad_input[0].detail


@pytest.mark.parametrize("value", ["''", "[a, b]", "7"])
def test_a_project_that_is_not_a_name_is_refused_with_its_line(value):
    text = edit(SCOPED, "scope: team-a\n", f"scope: team-a\nproject: {value}\n")
    with pytest.raises(T.ConfigError, match=r":\d+: project: (must be a Keystone project name or ID|expected a string)"):
        parse(text, PATH)
