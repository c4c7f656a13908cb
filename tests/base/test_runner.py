"""nodeforge.base.runner: the one way a host tool runs (real processes, no doubles)."""

from __future__ import annotations

import logging
import os
import sys

import pytest

from nodeforge.base import runner
from nodeforge.errors import ExitCode, MissingToolError, NodeforgeError
from nodeforge.redact import Secret

PY = sys.executable


def test_output_is_captured_and_merged():
    proc = runner.run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert proc.returncode == 0 and "out" in proc.stdout and "err" in proc.stdout


def test_stderr_apart_when_asked():
    proc = runner.run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], merge=False)
    assert proc.stdout == "out\n" and proc.stderr == "err\n"


def test_a_failure_names_the_tool_the_status_and_the_tail():
    with pytest.raises(runner.CommandError) as exc:
        runner.run([PY, "-c", "import sys; print('x' * 2000 + 'THE END'); sys.exit(3)"])
    e = exc.value
    assert e.tool == os.path.basename(PY) and e.status == 3 and e.tail.endswith("THE END")
    assert len(e.tail) <= runner.TAIL_CHARS and f"{e.tool} failed (exit 3): " in str(e)
    assert e.exit_code == ExitCode.FAILURE


def test_the_callers_error_class_keeps_its_prefix_and_exit_code():
    class StageError(NodeforgeError):
        message = "stage: {detail}"
        exit_code = ExitCode.USAGE

    with pytest.raises(StageError) as exc:
        runner.run([PY, "-c", "raise SystemExit(5)"], what="the step", error=StageError)
    assert str(exc.value).startswith("stage: the step failed (exit 5)") and exc.value.kwargs["status"] == 5
    assert exc.value.exit_code == ExitCode.USAGE


def test_check_false_returns_the_status():
    assert runner.run([PY, "-c", "raise SystemExit(7)"], check=False).returncode == 7


def test_timeout_kills_and_raises():
    with pytest.raises(runner.CommandTimeout) as exc:
        runner.run([PY, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert "did not finish within 0.5 s" in str(exc.value) and exc.value.status is None


def test_output_streams_into_a_log_file_and_the_error_quotes_its_end(tmp_path):
    log = tmp_path / "setup.log"
    log.write_text("earlier line\n")
    with pytest.raises(runner.CommandError) as exc:
        runner.run([PY, "-c", "print('step one'); print('boom'); raise SystemExit(2)"], log_file=log)
    text = log.read_text()
    assert text.startswith("earlier line\n") and "step one\nboom\n" in text   # appended, not replaced
    assert f"exited 2; see the log {log}" in str(exc.value) and str(exc.value).rstrip().endswith("boom")


def test_a_secret_on_the_command_line_is_refused():
    with pytest.raises(TypeError, match="secret"):
        runner.run(["echo", Secret("hunter2-password")])


def test_the_logged_command_and_the_tail_mask_registered_secrets(caplog):
    secret = Secret("s3cr3t-value-for-runner")
    with caplog.at_level(logging.DEBUG, logger="nodeforge.base.runner"):
        with pytest.raises(runner.CommandError) as exc:
            # the value reaches the tool through the environment, and the tool prints it
            runner.run([PY, "-c", "import os; print(os.environ['PW']); raise SystemExit(1)"],
                       env={**os.environ, "PW": secret.reveal()})
    assert secret.reveal() not in str(exc.value) and "***" in str(exc.value)
    assert secret.reveal() not in caplog.text and "$ " in caplog.text


def test_privileged_prefixes_sudo_only_when_not_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert runner.as_root(["rm", "x"]) == ["sudo", "-n", "rm", "x"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert runner.as_root(["rm", "x"]) == ["rm", "x"]


def test_the_log_object_receives_the_command_and_its_output():
    class Log:
        text = ""

        def write(self, s):
            self.text += s

    log = Log()
    runner.run([PY, "-c", "print('hello')"], log=log)
    assert log.text.startswith("$ ") and "hello" in log.text


def test_require_names_the_debian_package(tmp_path):
    assert runner.packages()["mcopy"] == "mtools"
    with pytest.raises(MissingToolError) as exc:
        runner.require("mcopy", path=str(tmp_path))
    assert "'mcopy'" in str(exc.value) and "'mtools'" in str(exc.value) and "make setup" in str(exc.value)
    assert runner.require("sh")["sh"].endswith("/sh")
