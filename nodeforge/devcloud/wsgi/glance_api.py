"""WSGI entry for Glance's API in the local cloud: Glance's own
``glance/wsgi/api.py`` with oslo.db's writer transactions taking SQLite's
write lock first (:mod:`sqlite_writers`; uWSGI runs this with the folder on
``--pythonpath``). Glance's import tasks run in the API's own process, in
threads of their own: a delete (it reads the image, then writes) raced the
end of a web-download import and got "database is locked" at once, an HTTP
500 (a clean-clone test run, 2026-12-05).

Runs inside the OpenStack virtualenv (not nodeforge's): it must not import
nodeforge. The configuration comes from ``OS_GLANCE_CONFIG_DIR``, as for
Glance's own entry.
"""

import sqlite_writers

sqlite_writers.install()

from glance.wsgi.api import application  # noqa: E402,F401
