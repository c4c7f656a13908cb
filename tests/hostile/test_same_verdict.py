"""The same data gets the same verdict whether it is written as YAML or as JSON.

Every file kind a person writes is read by one loader whichever syntax it uses, and the
declarations judge data, not syntax: so one data tree, mutated (hypothesis: values of every type
and range, keys deleted, duplicated in lists, renamed, types swapped) and then written once by a
YAML 1.2 emitter and once by ``json.dumps``, must give the same exit code and the same problems
(``key.path: detail``, the file's name and line set aside) from the real command. NaN, infinities
and 70-bit integers are in the data on purpose: JSON and YAML spell them differently and both are
refused by key path. Inventories are read as ``.yaml`` and ``.json`` files (both formats they
take); the other kinds take YAML, of which JSON is a part.
"""

from __future__ import annotations

import copy
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from ruamel.yaml import YAML

from tests.hostile.conftest import HOSTILE, REPO, SECRETS, check, run_cli, secret_forms

# Plain data only: what both syntaxes can hold as the same value (no YAML-only spelling).
SCALARS = st.one_of(
    st.sampled_from([0, -1, 623, 65536, 2 ** 31, 2 ** 63 - 1, 2 ** 63, 2 ** 70, -(2 ** 70), 0.5, -0.0, 1e308,
                     float("nan"), float("inf"), float("-inf"), True, False, None, "", " ", "0623", "1.30",
                     "yes", "null", "true", "0x1F", "00:1a:2b:3c:4d:5e", "ipmi", "redfish", "é", "名前",
                     "../../etc/passwd", "a" * 300, "CUSTOM_GPU", "{name}", "x\ny"]),
    st.integers(-(2 ** 66), 2 ** 66),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
VALUES = st.one_of(SCALARS, SCALARS, st.just({}), st.just([]), SCALARS.map(lambda v: [v]),
                   SCALARS.map(lambda v: {"k": v}))
KEYS = st.one_of(st.sampled_from(["name", "driver", "bmc", "nodes", "version", "x", "", " ", "1.30", "true",
                                  "null", "0"]), st.text(max_size=12))


def _slots(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield node, k
            yield from _slots(v)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield node, i
            yield from _slots(v)


@st.composite
def mutated(draw, data):
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        slots = list(_slots(data))
        if not slots:
            break
        parent, key = slots[draw(st.integers(0, len(slots) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "delete", "rename", "duplicate", "swap"]))
        if op == "replace":
            parent[key] = draw(VALUES)
        elif op == "delete":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(KEYS)] = parent.pop(key)
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key + 1, copy.deepcopy(parent[key]))
        elif op == "swap":
            value = parent[key]
            parent[key] = (list(value.values()) if isinstance(value, dict) else
                           {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else [value])
    return data


def _yaml(data) -> str:
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.width = 4096
    out = io.StringIO()
    y.dump(data, out)
    return out.getvalue()


def _json(data) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False)   # NaN/Infinity written as JavaScript spells them


def _verdict(run, files: list[Path]) -> tuple[int, frozenset]:
    """The exit code and the problems, each as ``key.path: detail`` (file name and line set aside)."""
    lines = set()
    for line in (run.out + run.err).splitlines():
        line = line.strip().removeprefix("error: ")     # the first problem's prefix (order is by line)
        for f in files:
            line = line.replace(str(f), "FILE").replace(f.name, "FILE")
        line = re.sub(r"^(error: )?FILE(:\d+)?: ", "", line)
        line = re.sub(r"FILE:\d+", "FILE", line)           # "first at FILE:2": lines differ by syntax
        line = re.sub(r"-[0-9a-f]{10}'", "-SCOPE'", line)    # a scope derived from the file's path
        # The hint quotes the value as written: the two emitters spell some numbers apart (1e+308, 1.0e+308).
        line = re.sub(r'quote it: "[^"]*"', 'quote it: "(as written)"', line)
        line = re.sub(r"\(column \d+\)", "", line)
        if line:
            lines.add(line)
    return run.code, frozenset(lines)


def _seed_data(path: str):
    return YAML(typ="safe", pure=True).load((REPO / path).read_text())


def _profiles_cmd(d: Path, name: str):
    return ["baremetal", "classify", "--profiles", d / name, "--dry-run"]


def _flavors_cmd(d: Path, name: str):
    (d / "hardware-profiles.yaml").write_text((REPO / "manifests/hardware-profiles.yaml").read_text())
    return ["flavor", "sync", "--flavors", d / name, "--dry-run"]


def _template_cmd(d: Path, name: str):
    (d / "templates").mkdir(exist_ok=True)
    (d / name).rename(d / "templates" / "t.yaml")
    return ["template", "check", "--templates", d / "templates"]


def _retention_cmd(d: Path, name: str):
    return ["image", "promote", "--retention", d / name, "--dry-run", "some-image"]


def _lockfile_cmd(d: Path, name: str):
    return ["image", "render", "--k8s", "1.36", "--lockfile", d / name, "--out", d / "render"]


def _inventory_cmd(d: Path, name: str):
    return ["baremetal", "validate", d / name]


KINDS = {
    # kind: (seed, command, file names for (YAML, JSON))
    "inventory": ("tests/ironic/data/nodeforge.yaml", _inventory_cmd, ("inv.yaml", "inv.json")),
    "inventory-ironicclient": ("docs/examples/inventory-ironicclient.yaml", _inventory_cmd, ("inv.yaml", "inv.json")),
    "profiles": ("manifests/hardware-profiles.yaml", _profiles_cmd, ("p.yaml", "p.yaml")),
    "flavors": ("manifests/flavors.yaml", _flavors_cmd, ("flavors.yaml", "flavors.yaml")),
    "template": ("manifests/templates/k8s-1.36-baremetal.yaml", _template_cmd, ("t.yaml", "t.yaml")),
    "retention": ("manifests/image-retention.yaml", _retention_cmd, ("r.yaml", "r.yaml")),
    "lockfile": ("manifests/versions.yaml", _lockfile_cmd, ("versions.yaml", "versions.yaml")),
}


@pytest.fixture
def env(no_cloud_env, tmp_path):
    secret = tmp_path / "secrets"
    secret.mkdir()
    (secret / "bmc.pw").write_text(SECRETS["bmc_file"] + "\n")
    return {**no_cloud_env, "BMC_PASSWORD": SECRETS["bmc_env"]}


@pytest.mark.parametrize("kind", sorted(KINDS))
@HOSTILE
@given(data=st.data())
def test_yaml_and_json_get_the_same_verdict(kind, data, workdir, env):
    seed, command, (yaml_name, json_name) = KINDS[kind]
    doc = data.draw(mutated(_seed_data(seed)), label="data")
    verdicts = []
    d = workdir()          # one directory for both (a scope derived from the path is the same)
    for name, text in ((yaml_name, _yaml(doc)), (json_name, _json(doc))):
        shutil.rmtree(d)
        d.mkdir()
        (d / "secrets").mkdir()
        (d / "secrets" / "bmc.pw").write_text(SECRETS["bmc_file"] + "\n")
        (d / name).write_text(text)
        run = run_cli(command(d, name), env=env)
        check(run, codes=(0, 1, 2), secrets=secret_forms(SECRETS.values()), note=f"({kind} as {name})")
        verdicts.append((_verdict(run, [d / name, d]), text))
    (yaml_verdict, yaml_text), (json_verdict, json_text) = verdicts
    assert yaml_verdict == json_verdict, (
        f"{kind}: the same data, another verdict\nYAML {yaml_verdict}\nJSON {json_verdict}\n"
        f"--- YAML\n{yaml_text[:2000]}\n--- JSON\n{json_text[:2000]}")
