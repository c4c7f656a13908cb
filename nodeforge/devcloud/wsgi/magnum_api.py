"""WSGI entry for Magnum's API in the local cloud: Magnum's own
``magnum/wsgi/api.py`` with oslo.db's writer transactions taking SQLite's
write lock first (:mod:`sqlite_writers`; uWSGI runs this with the folder on
``--pythonpath``).

Runs inside the Magnum virtualenv (not nodeforge's): it must not import
nodeforge. The configuration files come from ``--pyargv``, as for Magnum's
own entry.
"""

import sqlite_writers

sqlite_writers.install()

from magnum.wsgi.api import application  # noqa: E402,F401
