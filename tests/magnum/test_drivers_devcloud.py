"""nodeforge's table of Magnum drivers (nodeforge/magnum/drivers.py) against
the drivers really installed in the local cloud's Magnum virtualenv: every
entry point of the ``magnum.drivers`` group is loaded by the Magnum venv's
own Python and its ``provides`` printed; the table must say exactly that, so
a driver upgrade that changes what it serves fails here, not in a user's
cluster create. The package versions are printed for the record."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nodeforge.devcloud.paths import Paths
from nodeforge.magnum import drivers as D
from tests.prereq import require

pytestmark = pytest.mark.devcloud

# Loads the class without instantiating it (magnum-cluster-api's __init__ wants a
# kubeconfig for its management cluster); ``provides`` is a property of the class.
PROBE = r"""
import json, warnings
warnings.simplefilter("ignore")
from importlib import metadata
out = []
for ep in sorted(metadata.entry_points(group="magnum.drivers"), key=lambda e: e.name):
    cls = ep.load()
    prop = cls.__dict__.get("provides") or next(
        (c.__dict__["provides"] for c in cls.__mro__ if "provides" in c.__dict__), None)
    provides = prop.fget(cls.__new__(cls)) if isinstance(prop, property) else list(prop)
    labels = sorted(getattr(__import__(cls.__module__, fromlist=["x"]), "_REGISTERED_LABEL_NAMES", ()) or [])
    out.append({"name": ep.name, "package": ep.dist.name if ep.dist else None,
                "version": ep.dist.version if ep.dist else None, "provides": provides, "labels": labels})
print(json.dumps(out))
"""


def installed(tmp: Path) -> list[dict]:
    """The drivers' entry points, loaded in Magnum's virtualenv. Its TMPDIR is ``tmp``: loading
    magnum-cluster-api makes a disk cache in the temporary directory, which would stay in /tmp."""
    python = Paths.default().venvs / "magnum" / "bin" / "python"
    require(python.exists(), f"the local cloud's Magnum virtualenv ({python.parent.parent}) is not installed: "
                             "run 'make setup' (nodeforge devcloud install)")
    proc = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_driver_table_is_what_the_installed_magnum_drivers_provide(tmp_path):
    found = installed(tmp_path)
    print("installed Magnum drivers:", ", ".join(f"{d['name']} ({d['package']} {d['version']})" for d in found))
    actual = {d["name"]: (d["package"].replace("_", "-").lower(),
                          sorted((p["server_type"], p["os"], p["coe"]) for p in d["provides"])) for d in found}
    table = {d.name: (d.package, sorted((p.server_type, p.os_distro, p.coe) for p in d.provides))
             for d in D.DRIVERS.values()}
    assert actual == table
    # None serves bare metal: the reason nodeforge renders 'vm' templates with bare-metal flavors.
    assert not any(p[0] == "bm" for _, provides in actual.values() for p in provides)
    # magnum-capi-helm refuses to read a label it has not registered: the table's labels are all registered.
    helm = next(d for d in found if d["name"] == "k8s_capi_helm_v1")
    assert D.CAPI_HELM_LABELS <= set(helm["labels"]), sorted(D.CAPI_HELM_LABELS - set(helm["labels"]))
