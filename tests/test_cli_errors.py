"""How a failed command reports itself (README "Exit codes"): the exit code,
the ``error:``/``hint:`` lines (or JSON lines with ``--log-format json``) and,
with ``--output json|yaml``, the error as a document on stdout."""

from __future__ import annotations

import json

import pytest
import yaml

from nodeforge import cli


@pytest.fixture
def run(capsys):
    def run(*args) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run


@pytest.fixture
def no_cloud(monkeypatch, tmp_path):
    """No OS_CLOUD, no OS_* credentials and no clouds.yaml to be found."""
    import os

    for var in list(os.environ):
        if var.startswith("OS_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("args", [[], ["--os-cloud", ""]])
def test_no_cloud_selected_is_a_usage_error_naming_os_cloud_and_clouds_yaml(run, no_cloud, args):
    code, out, err = run(*args, "image", "list")
    assert code == 2
    assert "error: no cloud selected: OS_CLOUD is not set and --os-cloud was not given" in err
    assert "hint: set OS_CLOUD or pass --os-cloud NAME, naming a cloud in clouds.yaml" in err


def test_unknown_cloud_is_a_usage_error(run, no_cloud):
    code, _, err = run("--os-cloud", "no-such-cloud", "image", "list")
    assert code == 2 and "error: cannot use cloud 'no-such-cloud'" in err and "clouds.yaml" in err
