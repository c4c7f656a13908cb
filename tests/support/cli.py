"""Fixtures for tests that drive the CLI in-process (``from tests.support.cli import run, no_cloud``)."""

import pytest

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
