"""The one safe loader: limits enforced before or while parsing, bad text refused
with its line, key paths mapped to lines (YAML, JSON, CSV)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from nodeforge.schema import fastyaml

from nodeforge.errors import ConfigError
from nodeforge.schema import Limits, SchemaError, load, read_text


def _bomb(levels: int = 9, width: int = 10) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "nodes:\n  - name: n1\n    properties:\n" + textwrap.indent("\n".join(lines), "      ") + "\n"


def test_the_billion_laughs_file_is_small():
    assert len(_bomb().encode()) < 1400          # the 1.3 KB file: 10**9 strings expanded


_CHILD = r"""
import resource, sys
from nodeforge.errors import ConfigError
from nodeforge.schema import load
try:
    doc = load(sys.argv[1])
    import json; json.dumps(doc.data)
    print("ACCEPTED")
except ConfigError as exc:
    print("REFUSED", exc)
# VmHWM: the peak RSS of this process image (ru_maxrss would carry the parent's across fork + exec)
print("MAXRSS_KB", next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def test_alias_bomb_is_refused_within_memory_in_a_child_process(tmp_path):
    """Peak memory of a child process (its VmHWM; getrusage's ru_maxrss would include the parent's)."""
    path = tmp_path / "inventory.yaml"
    path.write_text(_bomb())
    # timeout: a bound so a regression cannot hang the suite (not a timing assertion)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED" in proc.stdout and "aliases are expanded" in proc.stdout, proc.stdout
    assert f"{path}:" in proc.stdout
    rss_kb = int(proc.stdout.split("MAXRSS_KB")[1])
    assert rss_kb < 100 * 1024, f"peak RSS {rss_kb} KiB"


def test_many_aliases_are_refused_before_composing(tmp_path):
    text = "base: &b {x: 1}\nitems:\n" + "".join("  - *b\n" for _ in range(1500))
    with pytest.raises(ConfigError, match=r"f.yaml:\d+: more than 1000 YAML aliases"):
        load(tmp_path / "f.yaml", text)


def test_ordinary_aliases_are_expanded_in_the_plain_data(tmp_path):
    doc = load(tmp_path / "f.yaml", "defaults: &d {driver: ipmi, port: 623}\nnodes:\n  - *d\n  - <<: *d\n    port: 624\n")
    assert doc.data["nodes"] == [{"driver": "ipmi", "port": 623}, {"driver": "ipmi", "port": 624}]
    assert type(doc.data["nodes"][0]) is dict and type(doc.data["nodes"][0]["port"]) is int


def test_file_size_is_limited_before_reading(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as fh:          # sparse: 300 MB that take no disk
        fh.truncate(300 << 20)
    with pytest.raises(ConfigError, match=r"big.yaml: larger than 4 MiB; not read"):
        load(path)
    small = tmp_path / "small.yaml"
    small.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(ConfigError, match="larger than 1000 bytes"):
        load(small, limits=Limits(max_bytes=1000))
    assert load(small, limits=Limits(max_bytes=4000)).data["a"] == "x" * 2000
    with pytest.raises(ConfigError, match="larger than 1000 bytes"):
        load("given.yaml", "a: " + "x" * 2000, limits=Limits(max_bytes=1000))


@pytest.mark.parametrize("data,line,detail", [
    (b"a: 1\nb: caf\xe9\n", 2, "not UTF-8 text (byte 0xe9"),
    (b"a: 1\n\nc: \x00\n", 3, "not a text file (NUL byte)"),
    (b"a: " + b"[" * 20000 + b"]" * 20000 + b"\n", 1, "nested more than 64 levels deep"),
    (b'{"a": ' + b'{"b": ' * 100 + b"1" + b"}" * 101, 1, "nested more than 64 levels deep"),
])
def test_binary_non_utf8_and_deep_files_are_refused_with_their_line(tmp_path, data, line, detail):
    path = tmp_path / "f.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and detail in str(info.value)
    assert info.value.exit_code == 2


def test_block_nesting_is_limited_after_composing(tmp_path):
    text = "".join("  " * i + f"k{i}:\n" for i in range(70)) + "  " * 70 + "x\n"
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        load(tmp_path / "f.yaml", text)


def test_bom_is_dropped_and_missing_file_or_directory_is_a_config_error(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert load(path).data == {"a": 1}
    assert read_text(path) == "a: 1\n"
    with pytest.raises(ConfigError, match="file not found"):
        load(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load(tmp_path)


def test_yaml_key_paths_map_to_lines(tmp_path):
    doc = load(tmp_path / "inv.yaml", textwrap.dedent("""\
        nodes:
          - name: a
          - name: b
            driver_info:
              ipmi_port: 623
        other: [1, 2]
        """))
    assert doc.line(("nodes", 1, "driver_info", "ipmi_port")) == 5
    assert doc.line(("nodes", 1)) == 3
    assert doc.line(("nodes", 1, "driver_info", "missing")) == 4     # nearest ancestor
    assert doc.line(("other", 1)) == 6
    assert doc.line(()) == 1
    assert doc.problem(("nodes", 0, "name"), "bad").__str__() == f"{tmp_path / 'inv.yaml'}:2: nodes[0].name: bad"


def test_yaml_implicit_types_become_plain_values_and_keep_their_source_text(tmp_path):
    doc = load(tmp_path / "f.yaml", "v: 1.30\nb: true\ny: yes\nd: 2024-01-01\nh: 0x10\n")
    assert doc.data["v"] == 1.3 and type(doc.data["v"]) is float
    assert doc.data["b"] is True and doc.data["y"] == "yes"     # YAML 1.2: yes is a string
    assert type(doc.data["h"]) is int
    assert doc.source_text(("v",)) == "1.30"


def test_yaml_syntax_and_duplicate_keys_name_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"f.yaml:2: invalid YAML"):
        load(tmp_path / "f.yaml", "a: 1\nb: : [\n")
    with pytest.raises(ConfigError, match=r"f.yaml:2: duplicate key 'a'"):
        load(tmp_path / "f.yaml", "a: 1\na: 2\n")


def test_a_duplicated_key_never_echoes_its_values(tmp_path):
    # ruamel's own message quotes both values: a password given twice was printed twice.
    text = "driver_info:\n  ipmi_username: admin\n  ipmi_password: NFinline-Secret-77\n" \
           "  ipmi_password: NFinline-Secret-78\n"
    with pytest.raises(ConfigError) as err:
        load(tmp_path / "inv.yaml", text)
    message = str(err.value)
    assert "inv.yaml:4: duplicate key 'ipmi_password'" in message and "line 2" in message
    assert "NFinline-Secret" not in message


def test_json_is_strict_and_maps_lines_when_a_problem_needs_them(tmp_path):
    doc = load(tmp_path / "r.json", '{\n  "a": 1,\n  "b": {\n    "c": [1, 2]\n  }\n}\n')
    assert doc.data == {"a": 1, "b": {"c": [1, 2]}} and doc.format == "json"
    assert doc.line(("b", "c")) == 4
    with pytest.raises(ConfigError, match=r"r.json:2: invalid JSON"):
        load(tmp_path / "r.json", '{\n  "a": ,\n}')
    with pytest.raises(SchemaError, match=r"r.json:1: a: a number out of range"):    # as YAML's .nan
        load(tmp_path / "r.json", '{"a": NaN}')
    with pytest.raises(SchemaError, match=r"r.json: a: duplicate key"):
        load(tmp_path / "r.json", '{"a": 1, "a": 2}')


def test_csv_rows_map_to_lines_and_bad_headers_are_refused(tmp_path):
    doc = load(tmp_path / "n.csv", "\ufeffname,mac\n\na,aa:bb:cc:dd:ee:ff\n\"b\nc\",x\nd,y\n")
    assert doc.data[0] == {"name": "a", "mac": "aa:bb:cc:dd:ee:ff"}
    assert [doc.line((i,)) for i in range(3)] == [3, 4, 6]
    with pytest.raises(ConfigError, match=r"n.csv:1: duplicate column\(s\) mac"):
        load(tmp_path / "n.csv", "name,mac,mac\na,b,c\n")
    with pytest.raises(ConfigError, match="empty CSV file"):
        load(tmp_path / "n.csv", "")
    with pytest.raises(ConfigError, match="no data rows"):
        load(tmp_path / "n.csv", "name,mac\n")
    with pytest.raises(ConfigError, match=r"n.csv:2: 3 fields, the header has 2"):
        load(tmp_path / "n.csv", "name,mac\na,b,c\n")


def test_schema_error_renders_one_problem_per_line_and_as_json(tmp_path):
    from nodeforge.schema import Problem

    err = SchemaError("f.yaml", [Problem("f.yaml", 3, ("nodes", 0, "driver_info", "ipmi_port"), "bad port"),
                                 Problem("f.yaml", None, (), "empty"),
                                 Problem("f.yaml", 7, ("kubernetes", "1.36", "x y"), "odd")])
    assert str(err).splitlines() == ["f.yaml:3: nodes[0].driver_info.ipmi_port: bad port",
                                     "f.yaml: (top level): empty", 'f.yaml:7: kubernetes["1.36"]["x y"]: odd']
    assert err.exit_code == 2
    doc = json.loads(json.dumps(err.to_dict()))
    assert doc["problems"][0] == {"file": "f.yaml", "line": 3, "key": "nodes[0].driver_info.ipmi_port",
                                  "keypath": ["nodes", 0, "driver_info", "ipmi_port"], "detail": "bad port"}
    assert err.details["problems"] == doc["problems"]


@pytest.mark.parametrize("text,line", [("? complex: {}\n", None), ("? [a, b]\n: 1\n", 1),
                                       ("? {a: [1]}\n: 2\n", None), ("mirrors:\n  ? [x]\n  : 1\n", 2)])
def test_complex_mapping_keys_are_refused_not_a_traceback(tmp_path, text, line):
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "f.yaml", text)
    assert "a mapping key must be a plain value" in str(info.value)
    if line:
        assert str(info.value).startswith(f"{tmp_path / 'f.yaml'}:{line}: ")


@pytest.mark.parametrize("text,line,detail", [
    ("a: 1\nb: 2024-13-45\n", None, "a value cannot be read"),
    ("a: !!int x\n", None, "a value cannot be read"),
    ("a: 1\nb: !!binary aGVsbG8=\n", 2, "a YAML tag"),
    ("a: !!set {x, y}\n", 1, "a YAML tag"),
    ("a: !custom 3\n", 1, "a YAML tag"),
    ("x: 1\na: !!python/object:os.system {}\n", 2, "a YAML tag"),
    ("- !foo [1]\n", 1, "a YAML tag"),
])
def test_unreadable_scalars_and_tags_are_refused_not_a_traceback(tmp_path, text, line, detail):
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "f.yaml", text)
    assert detail in str(info.value)
    if line:
        assert str(info.value).startswith(f"{tmp_path / 'f.yaml'}:{line}: ")


def test_a_large_file_without_aliases_is_not_an_alias_bomb(tmp_path):
    text = "nodes:\n" + "".join(f"  - {{name: n{i}, a: 1, b: 2, c: 3}}\n" for i in range(3000))
    doc = load(tmp_path / "big.yaml", text, limits=Limits(max_nodes=1000))
    assert len(doc.data["nodes"]) == 3000          # 24,000 values, none added by aliases


def test_aliases_may_repeat_a_section_within_the_limit(tmp_path):
    text = "d: &d {" + ", ".join(f"k{i}: {i}" for i in range(100)) + "}\nnodes:\n" + "  - *d\n" * 900
    assert len(load(tmp_path / "f.yaml", text).data["nodes"]) == 900     # 900 x 201 values added: < 200,000
    with pytest.raises(ConfigError, match="values added once YAML aliases are expanded"):
        load(tmp_path / "f.yaml", text, limits=Limits(max_nodes=100_000))


def test_a_fifo_or_device_is_refused_without_hanging(tmp_path):
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(ConfigError, match="not a regular file"):
            load(path)


def test_too_many_values_are_counted_by_libyaml_and_refused_before_the_slow_parse(tmp_path):
    import yaml

    from tests.prereq import require

    require(getattr(yaml, "__with_libyaml__", False), "PyYAML built with libyaml (the pinned wheel is)")
    text = "".join(f"k{i:06d}: v\n" for i in range(60_000))      # 120,001 values, 660 KB
    with pytest.raises(ConfigError, match=r"big.yaml:40000: more than 80000 values"):
        load(tmp_path / "big.yaml", text)
    assert len(load(tmp_path / "big.yaml", text[: 11 * 3000]).data) == 3000
    with pytest.raises(ConfigError, match="more than 5000 values"):
        load(tmp_path / "big.yaml", text[: 11 * 3000], limits=Limits(max_values=5000))
    deep = "a: " + "[" * 70 + "]" * 70 + "\n" + "# padding\n" * 4000      # > 32 KiB: libyaml's pass
    with pytest.raises(ConfigError, match=r"big.yaml:1: nested more than 64 levels deep"):
        load(tmp_path / "big.yaml", deep)


# --- a large plain file's tree is built from libyaml's events (10,000 nodes) ---------

from hypothesis import given, settings, strategies as st  # noqa: E402

from nodeforge.schema import loader as _loader  # noqa: E402

_KEYS = st.text("abcdefghij_-.0123456789", min_size=1, max_size=6)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["yes", "no", "on", "1.30", "0o17", "0x1f", "1_000", "52:54:00:00:00:01", "~",
                                     "null", "True", "2024-01-01x", ".inf", "-.5", "1e3", "a: b", "#x", "'q'"]),
                    st.text(max_size=8))
_DOCS = st.dictionaries(_KEYS, st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                                            | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12),
                        min_size=1, max_size=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=150, deadline=None)
@given(doc=_DOCS, flow=st.booleans())
def test_the_event_built_tree_reads_like_the_round_trip_parser(doc, flow):
    """Same plain data (YAML 1.2 typing: yes is a string, 0o17 an int), same line of every key path
    and same text as written, whatever the scalars and layout."""
    import yaml

    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True, sort_keys=False)
    built = fastyaml.build(yaml, text)
    try:
        rt = _loader.load("x.yaml", text)           # small: the round-trip parser
    except ConfigError:                             # ruamel refuses it ('._' reads as a float): so must the fast path
        assert built is None
        return
    if built is None:                               # something only the round-trip parser judges (a timestamp)
        return
    fast = _loader.Document("x.yaml", "yaml", built, _loader.plain(built), text)
    assert fast.data == rt.data
    for path in _paths(rt.data):
        assert fast.line(path) == rt.line(path), path
        if path:
            assert fast.source_text(path) == rt.source_text(path), path


@pytest.mark.parametrize("text", ["a: &x 1\nb: *x\n", "a: !!str 1\n", "a: 1\na: 2\n", "? [a]\n: 1\n",
                                  "a: 1\n---\nb: 2\n", "<<: {a: 1}\n", "a: 2024-01-01\n", "%YAML 1.1\n---\na: 1\n"])
def test_anything_else_is_left_to_the_round_trip_parser(text):
    import yaml

    assert fastyaml.build(yaml, text) is None


def test_a_large_file_is_built_from_events_and_reports_the_same_lines(tmp_path):
    rows = "".join(f"  - {{name: n{i}, port: {i}, on: yes}}\n" for i in range(3000))
    text = "version: 1\nnodes:\n" + rows + "  - {name: bad, port: '7'}\n"
    assert len(text) > fastyaml.COUNT_FROM
    doc = _loader.load(tmp_path / "big.yaml", text)
    assert isinstance(doc.doc, _loader.CommentedMap) and doc.data["nodes"][5] == {"name": "n5", "port": 5, "on": "yes"}
    assert doc.line(("nodes", 3000, "port")) == 3003 and doc.source_text(("nodes", 3000, "port")) == "'7'"


@pytest.mark.parametrize("text", ["-_: 1\n", "a: -_\n", "a: [+_]\n"])
def test_a_scalar_the_round_trip_parser_cannot_construct_is_a_message(tmp_path, text):
    # Found by the tree-builder property test: ruamel resolves '-_' as an int and raised IndexError.
    with pytest.raises(ConfigError, match=r"x.yaml: invalid YAML: a value cannot be read"):
        _loader.load(tmp_path / "x.yaml", text)
