"""Connection pools with a cheap release: no ``RESET ALL`` round trip per acquire.

asyncpg's default ``Pool.release`` runs ``Connection.reset()``: one extra round trip (and one
implicit transaction) per acquire that runs ``pg_advisory_unlock_all(); CLOSE ALL;
UNLISTEN *; RESET ALL``. sagaflow's code leaves no session state on pooled connections (no
session advisory locks, ``LISTEN``, cursors outside a transaction or plain ``SET``: the relay's
locks and ``LISTEN`` live on its own dedicated connection, not a pool), so it skips that query.

What asyncpg still does on every release with a custom ``reset`` (``asyncpg/pool.py``,
``PoolConnectionHolder.release`` -> ``Connection._reset``): an open transaction is rolled back
(and logged through the loop's exception handler unless it was a managed
``conn.transaction()``), and ``add_listener`` / ``add_log_listener`` callbacks are dropped. A
connection whose reset fails is terminated, a closed one is discarded.

Code running on these connections (participant handlers included) must therefore use
``SET LOCAL`` / ``pg_advisory_xact_lock`` / transaction-scoped cursors, or undo what it sets
(``coordinator.migrations.migrate`` unlocks its session lock in ``finally``). Pass
``full_reset=True`` for asyncpg's default.
"""

from __future__ import annotations

from typing import Any

import asyncpg

__all__ = ["create_pool", "no_session_reset"]


async def no_session_reset(conn: Any) -> None:
    """The pool ``reset`` hook: nothing beyond asyncpg's own rollback of an open transaction."""


async def create_pool(dsn: str, *, full_reset: bool = False, **kwargs: Any) -> Any:
    """``asyncpg.create_pool(dsn, **kwargs)`` with the cheap release unless ``full_reset``."""
    if not full_reset:
        kwargs.setdefault("reset", no_session_reset)
    return await asyncpg.create_pool(dsn, **kwargs)
