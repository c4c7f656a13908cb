"""A run record (``runs/<id>/run.json``) that is not one: ``pipeline show`` exits 2 naming the file
and what is wrong, never a traceback; ``pipeline list`` skips it. Read by the one bounded reader."""

from __future__ import annotations

import os

import pytest

from tests.hostile.conftest import check, run_cli

GOOD = '{"schema": "nodeforge-pipeline-run/1", "run_id": "r1", "inputs": {}, "created": "x", "status": "ok", "stages": []}'

CASES = {
    "missing-keys": ('{"schema": "nodeforge-pipeline-run/1"}', "no 'run_id'"),
    "a-list": ("[1, 2]", "expected 'nodeforge-pipeline-run/1'"),
    "stages-not-objects": (GOOD.replace('"stages": []', '"stages": [1]'), "stages must be a list of objects"),
    "nan": (GOOD.replace('"inputs": {}', '"inputs": {"x": NaN}'), "inputs.x: a number out of range"),
    "deep": ('{"a": ' + "[" * 500 + "]" * 500 + "}", "nested more than"),
    "not-json": ("{not json", "invalid JSON"),
    "not-utf8": (b'{"a": "\xff"}', "not UTF-8"),
    "fifo": (None, "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_run_record_is_named_not_raised(case, tmp_path):
    text, words = CASES[case]
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    path = run_dir / "run.json"
    if text is None:
        os.mkfifo(path)
    elif isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    run = run_cli(["pipeline", "show", "r1", "--runs-dir", tmp_path / "runs"])
    check(run, codes=(2,), note=f"({case})")
    assert str(path) in run.err and words in run.err, run.err
    run = run_cli(["-o", "json", "pipeline", "list", "--runs-dir", tmp_path / "runs"])
    check(run, codes=(0,), json_out=True, note=f"({case})")
