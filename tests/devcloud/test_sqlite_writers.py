"""The local cloud's Magnum entries make oslo.db's writer transactions take SQLite's write
lock when they begin (``nodeforge/devcloud/wsgi/sqlite_writers.py``), run for real with
oslo.db and SQLAlchemy in the Magnum virtualenv on a WAL-mode SQLite file.

The race it closes, played step by step in one thread (no timing): a writer session reads
(Magnum's update_cluster: SELECT, then UPDATE), another connection commits, then the writer
writes. With oslo.db's plain deferred BEGIN that write fails at once with "database is
locked" (SQLITE_BUSY_SNAPSHOT; no busy timeout helps): Magnum's conductor, writing
CREATE_FAILED, left its cluster in CREATE_IN_PROGRESS for good (a CI run waited 900 s)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nodeforge.devcloud.paths import Paths
from tests.prereq import require

WSGI = Path(__file__).resolve().parents[2] / "nodeforge" / "devcloud" / "wsgi"

RACE = r"""
import json, sqlite3, sys
sys.path.insert(0, sys.argv[3])
if sys.argv[2] == "patched":
    import sqlite_writers
    sqlite_writers.install()
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

db = sys.argv[1]
setup = sqlite3.connect(db)
setup.execute("PRAGMA journal_mode=WAL")
setup.execute("CREATE TABLE cluster (id INTEGER PRIMARY KEY, status TEXT, touched INTEGER)")
setup.execute("INSERT INTO cluster VALUES (1, 'CREATE_IN_PROGRESS', 0)")
setup.commit()
setup.close()

tx = enginefacade.transaction_context()
tx.configure(connection=f"sqlite:///{db}?timeout=30")

class Ctx:
    pass

def other_writer_gets_the_lock():
    # Another connection asks for the write lock without waiting (timeout 0).
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    other.execute("UPDATE cluster SET touched = touched + 1")
    other.execute("COMMIT")
    other.close()
    return True

out = {}
with tx.reader.using(Ctx()) as session:
    session.execute(sa.text("SELECT status FROM cluster WHERE id = 1")).scalar()
    out["other_wrote_during_a_read"] = other_writer_gets_the_lock()
try:
    with tx.writer.using(Ctx()) as session:
        session.execute(sa.text("SELECT status FROM cluster WHERE id = 1")).scalar()
        out["other_wrote_during_a_write"] = other_writer_gets_the_lock()
        session.execute(sa.text("UPDATE cluster SET status = 'CREATE_FAILED' WHERE id = 1"))
    out["write"] = "ok"
except Exception as exc:
    out["write"] = str(exc).splitlines()[0]
check = sqlite3.connect(db)
out["status"] = check.execute("SELECT status FROM cluster WHERE id = 1").fetchone()[0]
print(json.dumps(out))
"""


def _race(tmp_path: Path, mode: str, venv: str = "magnum") -> dict:
    python = Paths.default().venv_bin(venv, "python")
    require(python.exists(), f"the local cloud's {venv} virtualenv ({python.parent.parent}) is not installed: "
                             "run 'make setup'")
    proc = subprocess.run([str(python), "-c", RACE, str(tmp_path / f"{mode}.sqlite"), mode, str(WSGI)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("venv", ["magnum", "openstack"])     # Magnum's oslo.db, and Glance's
@pytest.mark.parametrize("mode", ["plain", "patched"])
def test_writer_sessions_hold_the_write_lock_from_their_first_read(tmp_path, mode, venv):
    got = _race(tmp_path, mode, venv)
    # Readers never hold the write lock (Magnum leaves some read transactions open).
    assert got["other_wrote_during_a_read"] is True, got
    if mode == "plain":
        # oslo.db as shipped: the other writer commits between our read and our write, and our
        # write fails at once. This is the failure the patch exists for; if it no longer
        # happens, oslo.db changed and the patch may be obsolete.
        assert got["other_wrote_during_a_write"] is True, got
        assert "database is locked" in got["write"], got
        assert got["status"] == "CREATE_IN_PROGRESS", got
    else:
        assert got["other_wrote_during_a_write"] is False, got
        assert got["write"] == "ok" and got["status"] == "CREATE_FAILED", got


def test_the_magnum_and_glance_entries_install_it():
    """Magnum's conductor launcher and API WSGI file, and Glance's API WSGI file, install the patch
    before the service loads."""
    from nodeforge.devcloud import openstack

    for name, service in (("magnum_conductor.py", "magnum"), ("magnum_api.py", "magnum"),
                          ("glance_api.py", "glance")):
        text = openstack.wsgi_entry(name).read_text()
        assert text.index("sqlite_writers.install()") < text.index(f"from {service}"), name


@pytest.mark.devcloud
def test_the_local_glance_runs_its_patched_entry(devcloud):
    """The session's own Glance was started from that entry, with sqlite_writers on its path
    (a delete racing the end of a web-download import got "database is locked", HTTP 500)."""
    from nodeforge.devcloud import openstack

    argv = json.loads((devcloud.paths.run / "glance.pid").read_text())["argv"]
    assert argv[argv.index("--wsgi-file") + 1] == str(openstack.wsgi_entry("glance_api.py"))
    assert argv[argv.index("--pythonpath") + 1] == str(WSGI)
