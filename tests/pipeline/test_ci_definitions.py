"""The CI job definitions in ci/: valid for their systems (the vendored
GitHub-workflow and GitLab-CI schemas of check-jsonschema, Zuul's job schema
through zuul-lint; both pinned in the dev extras), and they do what
docs/ci.md says: a schedule and on-demand trigger, `release check`, the
pipeline on a new release, a pull/merge request with the lockfile diff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CI = Path(__file__).resolve().parents[2] / "ci"
BIN = Path(sys.executable).parent
GITHUB = CI / "github" / "release-pipeline.yml"
GITLAB = CI / "gitlab" / "release-pipeline.gitlab-ci.yml"
ZUUL = CI / "zuul" / "zuul.yaml"


def _run(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path,schema", [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")])
def test_schema_valid(path, schema):
    proc = _run(BIN / "check-jsonschema", "--builtin-schema", schema, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_catches_mistakes(tmp_path):
    """The validation is real: an unquoted 'key: value' in a script line is rejected."""
    bad = tmp_path / "bad.gitlab-ci.yml"
    bad.write_text(GITLAB.read_text().replace("'git commit -m \"versions.yaml, os-packages.lock.yaml: ",
                                              "git commit -m \"versions.yaml, os-packages.lock.yaml: ")
                   .replace("manifests/os-packages.lock.yaml'\n", "manifests/os-packages.lock.yaml\n", 1))
    assert bad.read_text() != GITLAB.read_text()
    assert _run(BIN / "check-jsonschema", "--builtin-schema", "vendor.gitlab-ci", bad).returncode != 0


def test_zuul_lint():
    proc = _run(BIN / "zuul-lint", ZUUL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load(ZUUL.read_text())
    [job] = [d["job"] for d in doc if "job" in d]
    [project] = [d["project"] for d in doc if "project" in d]
    assert "nodeforge-release-pipeline" in project["periodic"]["jobs"]
    for playbook in [job["run"], job["post-run"]]:
        plays = yaml.safe_load((ZUUL.parent / playbook).read_text())
        assert isinstance(plays, list) and all("hosts" in p and p["tasks"] for p in plays)
    run_text = (ZUUL.parent / job["run"]).read_text()
    assert "nodeforge release check" in run_text and "nodeforge pipeline run" in run_text
    assert "refs/for/" in run_text   # proposes a Gerrit change


def test_github_workflow_does_the_job():
    wf = yaml.safe_load(GITHUB.read_text())
    triggers = wf[True] if True in wf else wf["on"]   # YAML 1.1 reads the key 'on' as a boolean
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    steps = {name: job["steps"] for name, job in wf["jobs"].items()}
    text = GITHUB.read_text()
    assert "nodeforge release check" in text and "nodeforge pipeline run" in text
    assert "10) echo \"new_release=true\"" in text                    # exit 10 means a new release
    assert wf["jobs"]["pipeline"]["needs"] == "check"
    pr = [s for s in steps["pipeline"] if "create-pull-request" in s.get("uses", "")]
    # Both locks go into the pull request (a package update moves only the OS package lock), the body is
    # the run's pr-body.md (the Kubernetes pins and the OS package table), the title says what triggered it.
    assert pr and pr[0]["with"]["add-paths"].split() == ["manifests/versions.yaml", "manifests/os-packages.lock.yaml"]
    assert pr[0]["with"]["body-path"] == "pr-body.md" and "pr-body.md\" >> pr-body.md" in text
    assert "needs.check.outputs.trigger" in pr[0]["with"]["title"]
    assert "OS package update(s)" in text and "kubernetes_new_release" in text
    # The pipeline job sees the same Debian mirrors as the check.
    env = wf["jobs"]["pipeline"]["env"]
    assert env["NODEFORGE_DEBIAN_SECURITY_MIRROR"] == wf["jobs"]["check"]["env"]["NODEFORGE_DEBIAN_SECURITY_MIRROR"]
    assert "secrets.NODEFORGE_CLOUDS_YAML" in text and "cat \"$OS_CLIENT_CONFIG_FILE\"" not in text


def test_gitlab_pipeline_does_the_job():
    doc = yaml.safe_load(GITLAB.read_text())
    sources = " ".join(r["if"] for r in doc["workflow"]["rules"])
    assert '"schedule"' in sources and '"web"' in sources
    assert any("nodeforge release check" in line for line in doc["release-check"]["script"])
    assert any("nodeforge pipeline run" in line for line in doc["release-pipeline"]["script"])
    assert any("merge_requests" in line for line in doc["release-merge-request"]["script"])
    assert doc["release-pipeline"]["resource_group"]   # one pipeline run at a time
    assert "bookworm" in doc["release-check"]["image"]   # Debian: gpgv and debian-archive-keyring for the package watch
    mr = "\n".join(doc["release-merge-request"]["script"])
    assert "manifests/os-packages.lock.yaml" in mr and "pr-body.md" in mr and "$TRIGGER" in mr
    assert "manifests/os-packages.lock.yaml" in doc["release-pipeline"]["artifacts"]["paths"]


def test_zuul_commits_both_locks():
    run_text = (ZUUL.parent / "playbooks" / "release-pipeline.yaml").read_text()
    assert "manifests/os-packages.lock.yaml" in run_text and "pr-body.md" in run_text
    assert "failed_when: check.rc not in [0, 10]" in run_text and "when: check.rc == 10" in run_text
