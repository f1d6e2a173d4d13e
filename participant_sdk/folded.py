"""A command's transaction in two round trips fewer: BEGIN goes out with the first statement,
and the last statement with COMMIT.

Each round trip wakes the participant's Postgres backend; BEGIN wakes it from idle, the
slowest wake-up of a command (``bench/README.md``, issue 17). Postgres's simple query protocol
runs several statements sent as one string in one round trip, but takes no parameters, so the
folded statements carry their values as literals (:func:`literal`, :func:`uuid_literal`); every
other statement of the transaction, the handler's included, is sent as usual. The caller folds
only statements whose values may appear in a trace (a tracer records a statement's text).

The transaction is an asyncpg :class:`~asyncpg.transaction.Transaction` registered on the
connection as if ``Connection.transaction()`` had started it, so a handler's own
``conn.transaction()`` is a savepoint as before. That registration uses two attributes asyncpg
does not document (``Connection._top_xact``, ``Transaction._state`` and ``_connection``, the
connection itself behind a pool's proxy); an asyncpg without
them gets the plain path (separate BEGIN and COMMIT), which :data:`FOLDABLE` tells.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from asyncpg.connection import Connection
from asyncpg.transaction import Transaction, TransactionState

__all__ = ["FOLDABLE", "FoldedTransaction", "literal", "uuid_literal"]

#: Whether this asyncpg has what folding needs (else BEGIN and COMMIT go out alone).
FOLDABLE: Final = ("_top_xact" in getattr(Connection, "__slots__", ())
                   and {"_state", "_connection"} <= set(getattr(Transaction, "__slots__", ()))
                   and hasattr(TransactionState, "STARTED"))


def literal(value: str | None) -> str:
    """``value`` as an SQL string literal (``NULL`` for None), whatever
    ``standard_conforming_strings`` says: an escape string with every backslash and quote
    doubled, so nothing in it is an escape. Postgres text cannot hold a NUL character."""
    if value is None:
        return "NULL"
    if "\x00" in value:
        raise ValueError("text for Postgres cannot contain a NUL character")
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def uuid_literal(value: uuid.UUID | None) -> str:
    if value is None:
        return "NULL"
    return f"'{uuid.UUID(str(value))}'::uuid"  # re-parsed: only hex digits and dashes


class FoldedTransaction:
    """One transaction on ``conn``: :meth:`begin_with` starts it with a first statement,
    :meth:`commit_with` names a last one to send with COMMIT, then :meth:`commit` or
    :meth:`rollback` (the caller always ends it with one of them)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._tx: Any = None
        self._last: str | None = None

    @property
    def started(self) -> bool:
        return self._tx is not None

    async def begin(self) -> None:
        """BEGIN alone (for a first statement that must bind its parameters)."""
        tx = self._conn.transaction()
        await tx.start()
        self._tx = tx

    async def begin_with(self, sql: str) -> str:
        """BEGIN, then ``sql`` (literal values only), in one round trip; its status."""
        conn = self._conn
        tx = conn.transaction()
        real = tx._connection if FOLDABLE else None  # a pool hands out a proxy
        if real is None or real._top_xact is not None or conn.is_in_transaction():
            await tx.start()
            self._tx = tx
            status: str = await conn.execute(sql)
            return status
        real._top_xact = tx
        try:
            status = await conn.execute("BEGIN;" + sql)
        except BaseException:
            if conn.is_in_transaction():  # BEGIN ran, the statement failed: roll back later
                tx._state = TransactionState.STARTED
                self._tx = tx
            else:
                real._top_xact = None
                tx._state = TransactionState.FAILED
            raise
        tx._state = TransactionState.STARTED
        self._tx = tx
        return status

    def commit_with(self, sql: str) -> None:
        """Send ``sql`` (literal values only) with the COMMIT, in its round trip."""
        if self._tx is None:
            raise RuntimeError("commit_with() before the transaction began")
        if self._last is not None:
            raise RuntimeError("commit_with() twice")
        self._last = sql

    async def commit(self) -> None:
        tx, last, self._last = self._tx, self._last, None
        if tx is None:
            return  # nothing ran
        conn = self._conn
        if last is None or not FOLDABLE:
            if last is not None:
                await conn.execute(last)
            await tx.commit()
            self._tx = None
            return
        real = tx._connection
        try:
            await conn.execute(last + ";COMMIT")
        except BaseException:
            if not conn.is_in_transaction():  # COMMIT itself failed: Postgres rolled back
                real._top_xact = None
                tx._state = TransactionState.FAILED
                self._tx = None
            raise  # else the last statement failed: the block is open, roll it back
        real._top_xact = None
        tx._state = TransactionState.COMMITTED
        self._tx = None

    async def rollback(self) -> None:
        tx, self._tx, self._last = self._tx, None, None
        if tx is not None and (not FOLDABLE or tx._state is TransactionState.STARTED):
            await tx.rollback()
