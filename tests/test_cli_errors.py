"""How a failed command reports itself (README "Exit codes"): the exit code,
the ``error:``/``hint:`` lines (or JSON lines with ``--log-format json``) and,
with ``--output json|yaml``, the error as a document on stdout."""

from __future__ import annotations

import json

import pytest
import yaml





@pytest.mark.parametrize("args", [[], ["--os-cloud", ""]])
def test_no_cloud_selected_is_a_usage_error_naming_os_cloud_and_clouds_yaml(run, no_cloud, args):
    code, out, err = run(*args, "image", "list")
    assert code == 2
    assert "error: no cloud selected: OS_CLOUD is not set and --os-cloud was not given" in err
    assert "hint: set OS_CLOUD or pass --os-cloud NAME, naming a cloud in clouds.yaml" in err


def test_unknown_cloud_is_a_usage_error(run, no_cloud):
    code, _, err = run("--os-cloud", "no-such-cloud", "image", "list")
    assert code == 2 and "error: cannot use cloud 'no-such-cloud'" in err and "clouds.yaml" in err


def test_output_json_prints_the_error_as_a_json_document(run, tmp_path):
    missing = tmp_path / "missing.yaml"
    code, out, err = run("baremetal", "validate", missing, "-o", "json")
    assert code == 2
    assert json.loads(out) == {"error": f"{missing}: file not found", "hint": None, "exit_code": 2}
    assert f"error: {missing}: file not found" in err          # stderr keeps the message for people


def test_output_json_error_of_an_invalid_inventory_lists_the_issues(run, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nnodes:\n  - {name: n1, bmc: {address: 'fake://n1'}, colour: red}\n")
    code, out, _ = run("baremetal", "validate", inv, "--output", "json")
    doc = json.loads(out)
    assert code == 2 and doc["exit_code"] == 2 and doc["valid"] is False and doc["file"] == str(inv)
    assert doc["error"].startswith(f"{inv}:3: nodes[0].colour: unknown key") and \
        doc["hint"].startswith("fix every listed problem")
    assert [(p["line"], p["key"]) for p in doc["problems"]] == [(3, "nodes[0].colour")]


def test_output_yaml_prints_the_error_as_yaml(run, tmp_path):
    code, out, _ = run("-o", "yaml", "baremetal", "validate", tmp_path / "missing.yaml")
    assert code == 2 and yaml.safe_load(out)["exit_code"] == 2


def test_usage_error_with_output_json(run):
    code, out, err = run("release", "bump", "--minor", "1.36.1", "-o", "json")
    assert code == 2
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and "'1.36.1' is not a Kubernetes minor" in doc["error"]
    assert doc["hint"] == "see 'nodeforge release bump --help'"
    assert "Usage: nodeforge release bump" in err              # click's own text on stderr


def test_log_format_json_makes_error_and_hint_json_lines(run, tmp_path):
    missing = tmp_path / "missing.yaml"
    code, out, err = run("--log-format", "json", "baremetal", "validate", missing)
    assert code == 2 and out == ""
    lines = [json.loads(line) for line in err.splitlines()]   # every stderr line is JSON
    [record] = [r for r in lines if r["level"] == "error"]
    assert record["message"] == f"{missing}: file not found" and record["exit_code"] == 2
    code, _, err = run("release", "bump", "--minor", "1.36.1", "--log-format=json")
    [record] = [json.loads(line) for line in err.splitlines()]
    assert code == 2 and record["level"] == "error" and "is not a Kubernetes minor" in record["message"]
    assert record["hint"] == "see 'nodeforge release bump --help'"


def test_json_error_output_masks_registered_secrets(run, tmp_path, monkeypatch):
    from nodeforge.redact import register

    register("sekrit-in-error-9f")
    inv = tmp_path / "sekrit-in-error-9f.yaml"
    code, out, err = run("baremetal", "validate", inv, "-o", "json", "--log-format", "json")
    assert code == 2 and "sekrit-in-error-9f" not in out + err
    assert json.loads(out)["error"].endswith("***.yaml: file not found")


def test_log_format_json_makes_every_stderr_line_json_warnings_too(run, no_cloud, tmp_path):
    """The 'no scope:' warning of flavor sync was a plain 'warning:' line among the JSON lines before."""
    f = tmp_path / "flavors.yaml"
    f.write_text("version: 1\nflavors:\n  - {name: a, resource_class: x}\n")
    code, out, err = run("--log-format", "json", "flavor", "sync", "--flavors", f, "--dry-run")
    lines = [json.loads(line) for line in err.splitlines()]          # every line is JSON
    assert code == 2 and [x["level"] for x in lines] == ["warning", "error"], err
    assert "has no 'scope:'" in lines[0]["message"] and "no cloud selected" in lines[1]["message"]
    code, _, err = run("flavor", "sync", "--flavors", f, "--dry-run")
    assert code == 2 and err.startswith(f"warning: {f} has no 'scope:'"), err


@pytest.mark.parametrize("text", ["bad value {", "value {a.b} here", "{0.real}", "}{", "{:>{}}"])
def test_an_error_message_built_from_data_with_braces_is_kept_as_it_is(text):
    """A message holding a brace from the data raised ValueError/AttributeError inside the
    error's own constructor before (a traceback instead of the error)."""
    from nodeforge.errors import NodeforgeError

    assert str(NodeforgeError(f"file x: {text}", a=1)) == f"file x: {text}"


def test_an_unexpected_exception_is_one_redacted_error_line(run, monkeypatch, capsys):
    """A library exception quoting a URL (http.client.InvalidURL) reaches the CLI's last handler:
    one error line, exit 1, no traceback, the credential masked (nodeforge.redact)."""
    import http.client

    from nodeforge import cli
    from nodeforge.commands import release as release_cmd

    secret = "Zq9HIDDENv4"

    def boom(*_args, **_kwargs):
        raise http.client.InvalidURL(f"nonnumeric port: 'https://user:pa/{secret}@deb.example/debian'")

    monkeypatch.setattr(release_cmd.lockfile, "load", boom)
    code, out, err = run("release", "lock-packages", "--dry-run")
    assert code == 1 and secret not in out + err
    assert err.startswith("error: unexpected error: InvalidURL: nonnumeric port: 'https://***@deb.example/debian'")
    assert "Traceback" not in err
    assert cli.main(["-v", "release", "lock-packages", "--dry-run"]) == 1   # -v: the traceback, masked
    err = capsys.readouterr().err
    assert "Traceback" in err and "https://***@deb.example/debian" in err and secret not in err


@pytest.mark.parametrize("how", ["option", "env", "only"])
def test_an_unreachable_cloud_is_one_line_naming_the_cloud_and_the_endpoint(run, no_cloud, tmp_path, monkeypatch, how):
    """Nothing listens at the cloud's auth_url: exit 1, one error line naming the cloud, where its
    name came from and the endpoint, a hint, no traceback, no library warning, no password; with
    -o json a JSON error document."""
    from tests.support.ports import free_tcp_port

    port = free_tcp_port()                                 # free: nothing listens there
    password = "pw-never-shown-4711"
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"dead": {"auth": {
        "auth_url": f"http://127.0.0.1:{port}/v3", "username": "u", "password": password, "project_name": "p",
        "user_domain_name": "Default", "project_domain_name": "Default"}, "region_name": "RegionOne"}}}))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    args = ["--os-cloud", "dead"] if how == "option" else []
    if how == "env":
        monkeypatch.setenv("OS_CLOUD", "dead")
    source = {"option": "--os-cloud", "env": "$OS_CLOUD", "only": f"the only cloud in {clouds}"}[how]
    code, out, err = run(*args, "image", "list")
    assert code == 1, err
    # Neither option nor OS_CLOUD: openstacksdk takes the only cloud in clouds.yaml, and nodeforge says so.
    assert (f"info: using cloud 'dead', the only cloud in {clouds}" in err) == (how == "only"), err
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert line.startswith(f"error: cloud 'dead' ({source}): cannot reach http://127.0.0.1:{port}/v3")
    assert line.endswith("connection refused") and "unexpected" not in err and "WARNING" not in err
    assert "hint: check that the cloud is up" in err and password not in out + err
    code, out, err = run(*args, "image", "list", "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["exit_code"] == 1 and doc["error"] == line[len("error: "):] and password not in out + err


def _in_session(sid: int) -> list[str]:
    """Command names of the processes of session ``sid``."""
    import os

    names = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(pid)) == sid:
                names.append(open(f"/proc/{pid}/comm").read().strip())
        except (OSError, ProcessLookupError):
            continue
    return names


def test_ctrl_c_exits_130_without_a_traceback_and_leaves_no_process(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) while a command waits for a BMC: exit
    130, 'interrupted', no traceback, and nothing of it left running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.support.ports import free_tcp_port

    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "nodes": [{
        "name": "silent", "macs": ["52:54:00:00:00:09"], "resource_class": "baremetal",
        "bmc": {"address": f"ipmi://127.0.0.1:{free_tcp_port()}", "username": "admin",
                "password": "env:NODEFORGE_SECRET_CTRL_C"}}]}))
    env = dict(os.environ, NODEFORGE_SECRET_CTRL_C="pw-ctrl-c-0815")
    proc = subprocess.Popen([sys.executable, "-m", "nodeforge.cli", "baremetal", "preflight", str(inv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while "ipmitool" not in _in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "ipmitool" in _in_session(proc.pid), "the command never reached its BMC call"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert "pw-ctrl-c-0815" not in out + err
    time.sleep(0.5)
    assert _in_session(proc.pid) == []
