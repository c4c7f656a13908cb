"""The shared plan/apply types (nodeforge/plan.py): kinds, field changes, results, the exit rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodeforge import plan as P
from nodeforge.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]


def test_feature_kinds_are_the_shared_enum_with_their_json_values():
    from nodeforge.compute import flavors
    from nodeforge.ironic import classify, enroll
    from nodeforge.magnum import apply
    from nodeforge.publish import catalog

    for mod, name in ((enroll, "Action"), (classify, "Outcome"), (flavors, "Action"), (apply, "Action"),
                      (catalog, "Action")):
        assert getattr(mod, name) is P.Kind, mod.__name__
    # the strings the outputs (and docs) show
    assert [k.value for k in enroll.KINDS] == ["create", "update", "no-op", "error"]
    assert [k.value for k in classify.KINDS] == ["no-op", "update", "no-match", "ambiguous", "refused", "no-facts"]
    assert [k.value for k in flavors.KINDS] == ["create", "update", "replace", "drift", "no-op", "prune",
                                                "unlisted", "conflict", "legacy"]
    assert [k.value for k in apply.KINDS] == ["create", "new-version", "update", "no-op", "broken"]
    assert [k.value for k in catalog.KINDS] == ["approve", "keep", "hide", "deactivate", "delete"]
    assert flavors.Change is P.FieldChange and apply.Change is P.FieldChange and enroll.FieldChange is P.FieldChange


def test_no_second_action_enum_or_change_class_in_the_plan_features():
    """The per-feature Action/Outcome enums and Change classes are gone (oslock's
    package-watch Change and release's bump entry are not plan entries)."""
    pattern = re.compile(r"^class (Action|Outcome|Change|FieldChange)\b", re.M)
    found = {str(p.relative_to(ROOT)) for p in (ROOT / "nodeforge").rglob("*.py") if pattern.search(p.read_text())}
    assert found <= {"nodeforge/plan.py", "nodeforge/oslock/watch.py", "nodeforge/pins/release.py"}, found


def test_counts_keep_the_feature_order_and_zeros():
    got = P.counts((P.Kind.CREATE, P.Kind.UPDATE, P.Kind.NOOP), [P.Kind.NOOP, P.Kind.NOOP, P.Kind.CREATE])
    assert list(got.items()) == [("create", 1), ("update", 0), ("no-op", 2)]


def test_kind_prints_its_value():
    assert f"{P.Kind.NEW_VERSION}" == "new-version" == str(P.Kind.NEW_VERSION)
    assert json.dumps({"a": P.Kind.NOOP}) == '{"a": "no-op"}'


def test_field_change_masks_secrets_and_keeps_others():
    pw = P.FieldChange("driver_info.redfish_password", "old-secret-1", "new-secret-2")
    assert pw.to_dict() == {"field": "driver_info.redfish_password", "current": "***", "desired": "***"}
    assert "secret" not in str(pw)
    assert P.FieldChange("driver_info.ipmi_password", None, P.ROTATED).to_dict()["desired"] == P.ROTATED
    assert P.FieldChange("ram", 1024, 2048, mutable=False).to_dict() == {
        "field": "ram", "current": 1024, "desired": 2048, "mutable": False}
    assert "mutable" not in P.FieldChange("labels", {}, {"a": "b"}).to_dict()
    assert str(P.FieldChange("public", False, True)) == "public: False -> True"
    assert P.describe([P.FieldChange("a", 1, 2), P.FieldChange("flavor", None, "new")], skip=["flavor"]) == "a: 1 -> 2"


def test_change_document():
    c = P.Change(P.Kind.UPDATE, "node-1", (P.FieldChange("resource_class", "a", "b"),), "drifted")
    assert c.to_dict() == {"kind": "update", "target": "node-1", "reason": "drifted",
                           "fields": [{"field": "resource_class", "current": "a", "desired": "b"}]}


@pytest.mark.parametrize("statuses,none_done_fails,code", [
    ([], True, ExitCode.OK),
    (["done", "done"], True, ExitCode.OK),
    (["done", "failed"], True, ExitCode.PARTIAL),
    (["failed", "failed"], True, ExitCode.FAILURE),
    (["failed", "failed"], False, ExitCode.PARTIAL),
])
def test_exit_code(statuses, none_done_fails, code):
    results = [P.Result(f"t{i}", P.Kind.UPDATE, P.Status(s)) for i, s in enumerate(statuses)]
    assert P.exit_code(results, none_done_fails=none_done_fails) is code


def test_skipped_by_policy_counts_only_when_flagged_or_reported():
    fine = P.result("legacy", P.Kind.LEGACY, ok=False, attempted=False)
    drift = P.result("d", P.Kind.DRIFT, ok=False, attempted=False)
    broken = P.result("b", P.Kind.BROKEN, ok=False, attempted=False)
    assert fine.status is drift.status is P.Status.SKIPPED and broken.status is P.Status.FAILED
    assert not fine.problem and drift.problem and broken.problem
    assert P.exit_code([fine, P.result("x", P.Kind.CREATE, ok=True)]) is ExitCode.OK
    assert P.exit_code([drift, P.result("x", P.Kind.CREATE, ok=True)]) is ExitCode.PARTIAL
    # a dry run's verdict: what would need fixing, writes aside
    assert P.exit_code([P.planned("a", P.Kind.CREATE), P.planned("b", P.Kind.NOOP)]) is ExitCode.OK
    assert P.exit_code([P.planned("a", P.Kind.CREATE), P.planned("b", P.Kind.NO_MATCH)],
                       none_done_fails=False) is ExitCode.PARTIAL


def test_result_document_scrubs_the_error():
    from nodeforge.redact import register

    register("hunter2-secret-value")
    r = P.Result("n", P.Kind.CREATE, P.Status.FAILED, "refused: password hunter2-secret-value", "auth")
    assert "hunter2-secret-value" not in json.dumps(r.to_dict()) and r.to_dict()["error_kind"] == "auth"


def test_bare_metal_error_kinds_are_one_enum():
    from nodeforge.ironic import errorkind, preflight, report
    from nodeforge.transport import ErrorKind as TransportKind

    K = errorkind.ErrorKind
    assert preflight.Check("n", "b", False, failure=K.TLS).to_dict()["failure"] == "tls"
    assert all(isinstance(k, K) for k in report.HINTS)
    for t in TransportKind:                   # every refusal of an API call has a bare-metal kind
        assert K.of(t).value == t.value
    assert K.timeout("clean") is K.CLEAN_TIMEOUT and K.rejected("provide") is K.PROVIDE_REJECTED
    for stage in ("manage", "inspect", "clean", "provide"):
        K.timeout(stage), K.rejected(stage)


def test_feature_plan_entries_in_the_shared_shape():
    """Each feature's plan entry gives the shared Change: kind, target, fields before/after, reason."""
    from nodeforge.compute import flavors
    from nodeforge.ironic import enroll, inventory as inv
    from nodeforge.publish import catalog
    from tests.support.ironic import FakeProvisioner

    spec = flavors.FlavorSpec("bm.test", "baremetal", ())
    drift = flavors.plan_flavor(spec, {"id": "f1", "name": "bm.test", "vcpus": 2, "ram": 1024, "disk": 0,
                                       "extra_specs": {}}, ())
    c = drift.to_change()
    assert c.kind is drift.action and c.target == "bm.test"
    assert {"field": "vcpus", "current": 2, "desired": 1, "mutable": False} in c.to_dict()["fields"]

    step = catalog.Step("img-1", "k8s-1.34", P.Kind.HIDE, "beyond keep=2")
    assert step.to_change().to_dict() == {"kind": "hide", "target": "k8s-1.34", "fields": [],
                                          "reason": "beyond keep=2"}

    bmc = inv.Bmc(inv.BmcKind.FAKE, "fake://n1", "n1", None, None, None)
    node = inv.NodeSpec(name="n1", bmc=bmc, location=inv.Location("t.yaml", 1))
    plan = enroll.plan(inv.Inventory(Path("t.yaml"), inv.Format.NODEFORGE, [node]), FakeProvisioner())
    assert plan.nodes[0].to_change().to_dict()["kind"] == "create"
