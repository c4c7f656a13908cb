"""Write transactions that take SQLite's write lock when they begin, for an
OpenStack service of the local cloud (oslo.db on a WAL-mode SQLite file).

Runs inside a service's virtualenv (not nodeforge's): it must not import
nodeforge. oslo.db starts every SQLite transaction with a plain ``BEGIN``
(deferred: no lock until the first write). A writer session that reads first
(Magnum's ``update_cluster``: ``SELECT ... FOR UPDATE``, then ``UPDATE``) then
holds a read snapshot; if another connection commits before its first write,
SQLite answers that write with SQLITE_BUSY_SNAPSHOT, "database is locked", at
once and without calling the busy handler: no busy timeout helps. Magnum's
conductor, writing CREATE_FAILED while another thread or the API wrote,
raised that error and left its cluster in CREATE_IN_PROGRESS for good.

:func:`install` makes the transactions of oslo.db's *writer* sessions and
connections begin with ``BEGIN IMMEDIATE``: the write lock is taken first,
waiting with the busy timeout for another writer, and the snapshot can no
longer go stale. Readers keep the deferred ``BEGIN`` (in WAL mode they never
block a writer; Magnum leaves some read transactions open after their session
has closed, which must not hold the write lock).
"""

from __future__ import annotations

import contextlib
import threading

_state = threading.local()
_installed = False


def _writing() -> bool:
    return getattr(_state, "writers", 0) > 0


@contextlib.contextmanager
def _marked(writer: bool):
    _state.writers = getattr(_state, "writers", 0) + (1 if writer else 0)
    try:
        yield
    finally:
        _state.writers -= 1 if writer else 0


def install() -> None:
    """Patch oslo.db's transaction context (idempotent)."""
    global _installed
    if _installed:
        return
    import sqlalchemy
    from oslo_db.sqlalchemy import enginefacade as ef

    def _wrap(original):
        @contextlib.contextmanager
        def wrapped(self, savepoint=False, context=None):
            with _marked(self.mode is ef._WRITER), original(self, savepoint=savepoint, context=context) as got:
                yield got
        return wrapped

    ef._TransactionContext._session = _wrap(ef._TransactionContext._session)
    ef._TransactionContext._connection = _wrap(ef._TransactionContext._connection)

    # A class-level listener runs before the engine's own (oslo.db's, which emits
    # "BEGIN" unless the connection is already marked as in a transaction).
    @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "begin")
    def _begin_immediate(conn):
        if conn.dialect.name != "sqlite" or not _writing() or "in_transaction" in conn.info:
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        conn.info["in_transaction"] = True

    _installed = True
