"""Magnum's conductor for the local cloud, with oslo.db's writer transactions
taking SQLite's write lock first (:mod:`sqlite_writers`, beside this file).

Runs inside the Magnum virtualenv (not nodeforge's): it must not import
nodeforge. Otherwise it is Magnum's ``magnum-conductor`` command unchanged;
the worker it forks inherits the patch.
"""

import sys

import sqlite_writers

sqlite_writers.install()

if __name__ == "__main__":
    from magnum.cmd.conductor import main

    sys.argv[0] = "magnum-conductor"
    sys.exit(main())
