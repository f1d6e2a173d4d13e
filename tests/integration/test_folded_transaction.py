"""A command's transaction with BEGIN sent with the barrier's first insert and the barrier
settle sent with COMMIT: the same rows as the plain path, two round trips fewer, savepoints
in handlers as before, nothing left open when a statement fails."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest

from participant_sdk import BARRIER_TABLE, Outcome, Phase, install_barrier
from participant_sdk.barrier import BarrierKey, BarrierReason, BarrierRecord
from participant_sdk.commands import PgCommandTransaction
from participant_sdk.folded import FOLDABLE
from participant_sdk.pools import create_pool
from participant_sdk.protocol import ErrorInfo, ErrorKind

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: Text that breaks naive quoting: quotes, backslashes (escape strings, octal and hex
#: escapes), a dollar quote, non-ASCII and a statement terminator.
NASTY = "st'ep\\'; DROP TABLE effects; --\\0\\x41 $$ é ✓"


async def _pool(dsn: str, queries: list[str]) -> Any:
    async def init(conn: Any) -> None:
        conn.add_query_logger(lambda record: queries.append(record.query))

    pool = await create_pool(dsn, min_size=1, max_size=2, init=init)
    async with pool.acquire() as conn:
        await install_barrier(conn)
        await conn.execute("CREATE TABLE effects (saga_id uuid, note text)")
    return pool


async def test_values_round_trip_and_the_transaction_takes_two_round_trips_fewer(
        fresh_db: str) -> None:
    assert FOLDABLE, "this asyncpg lacks what folding needs: commands take the plain path"
    queries: list[str] = []
    pool = await _pool(fresh_db, queries)
    key = BarrierKey(uuid.uuid4(), NASTY, Phase.TRY)
    message_id = uuid.uuid4()
    try:
        queries.clear()
        async with PgCommandTransaction.open(pool) as tx:
            assert await tx.barrier.insert(key, BarrierRecord(BarrierReason.HANDLED, None))
            assert not await tx.barrier.insert(key, BarrierRecord(BarrierReason.HANDLED, None))
            await tx.conn.execute("INSERT INTO effects VALUES ($1, $2)", key.saga_id, NASTY)
            with pytest.raises(RuntimeError):
                async with tx.conn.transaction():  # a handler's savepoint, rolled back
                    await tx.conn.execute("INSERT INTO effects VALUES ($1, 'undone')",
                                          key.saga_id)
                    raise RuntimeError("undo the savepoint")
            await tx.barrier.settle(key, BarrierRecord(BarrierReason.HANDLED, Outcome.OK,
                                                       message_id=message_id))
        assert queries[0].startswith("BEGIN;INSERT INTO " + BARRIER_TABLE)
        assert queries[-1].startswith(f"UPDATE {BARRIER_TABLE}")
        assert queries[-1].endswith(";COMMIT")
        assert not [q for q in queries if q.strip().rstrip(";") in ("BEGIN", "COMMIT")]
        async with pool.acquire() as conn:
            row = await conn.fetchrow(f"SELECT * FROM {BARRIER_TABLE}")
            assert (row["saga_id"], row["step"], row["phase"]) == (key.saga_id, NASTY, "try")
            assert (row["reason"], row["outcome"], row["message_id"], row["result"]) == (
                "handled", "ok", message_id, None)
            assert [r["note"] for r in await conn.fetch("SELECT note FROM effects")] == [NASTY]
    finally:
        await pool.close()


async def test_a_handlers_result_and_error_never_travel_as_literals(fresh_db: str) -> None:
    """A tracer records statements' text: rows with the handler's data bind their values."""
    queries: list[str] = []
    pool = await _pool(fresh_db, queries)
    secret = "card 4111-1111-1111-1111 " + NASTY
    result, error = {"note": secret}, ErrorInfo(kind=ErrorKind.BUSINESS, message=secret)
    try:
        queries.clear()
        settled = BarrierKey(uuid.uuid4(), "s", Phase.TRY)
        async with PgCommandTransaction.open(pool) as tx:  # the pending row folds, not this
            assert await tx.barrier.insert(settled, BarrierRecord(BarrierReason.HANDLED, None))
            await tx.barrier.settle(settled, BarrierRecord(
                BarrierReason.HANDLED, Outcome.REJECTED, result=result, error=error))
        rejected = BarrierKey(uuid.uuid4(), "s", Phase.TRY)
        async with PgCommandTransaction.open(pool) as tx:  # a rejection recorded alone
            assert await tx.barrier.insert(rejected, BarrierRecord(
                BarrierReason.HANDLED, Outcome.REJECTED, result=result, error=error))
        assert not [q for q in queries if "4111" in q]
        assert queries[0].startswith("BEGIN;INSERT")  # the pending row still folds
        async with pool.acquire() as conn:
            for key in (settled, rejected):
                row = await conn.fetchrow(
                    f"SELECT result, error FROM {BARRIER_TABLE} WHERE saga_id = $1",
                    key.saga_id)
                assert json.loads(row["result"]) == result
                assert ErrorInfo.model_validate_json(row["error"]) == error
    finally:
        await pool.close()


async def test_a_failing_statement_leaves_nothing_open_or_written(fresh_db: str) -> None:
    queries: list[str] = []
    pool = await _pool(fresh_db, queries)
    key = BarrierKey(uuid.uuid4(), "s", Phase.TRY)
    loop = asyncio.get_running_loop()
    complaints: list[dict[str, Any]] = []  # asyncpg reports a connection released mid-transaction
    loop.set_exception_handler(lambda _loop, context: complaints.append(context))
    try:
        # The folded insert itself fails: BEGIN ran, so the block is open; it is rolled back.
        async with pool.acquire() as conn:
            await conn.execute(f"ALTER TABLE {BARRIER_TABLE} ADD CONSTRAINT no_bad"
                               " CHECK (step <> 'bad')")
        with pytest.raises(asyncpg.CheckViolationError):
            async with PgCommandTransaction.open(pool) as tx:
                await tx.barrier.insert(BarrierKey(key.saga_id, "bad", Phase.TRY),
                                        BarrierRecord(BarrierReason.HANDLED, None))
        with pytest.raises(asyncpg.UndefinedTableError):
            async with PgCommandTransaction.open(pool) as tx:
                await tx.barrier.insert(key, BarrierRecord(BarrierReason.HANDLED, None))
                await tx.conn.execute("INSERT INTO nowhere VALUES (1)")
        # The settle fails in the round trip of its COMMIT: rolled back, nothing kept.
        async with pool.acquire() as conn:
            await conn.execute(f"ALTER TABLE {BARRIER_TABLE} ADD CONSTRAINT no_ok"
                               " CHECK (outcome IS DISTINCT FROM 'ok')")
        with pytest.raises(asyncpg.CheckViolationError):
            async with PgCommandTransaction.open(pool) as tx:
                await tx.barrier.insert(key, BarrierRecord(BarrierReason.HANDLED, None))
                await tx.barrier.settle(key, BarrierRecord(BarrierReason.HANDLED, Outcome.OK))
        async with pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval(f"SELECT count(*) FROM {BARRIER_TABLE}") == 0
        # The connections are clean: the next command runs and commits.
        async with PgCommandTransaction.open(pool) as tx:
            assert await tx.barrier.insert(key, BarrierRecord(BarrierReason.HANDLED, None))
            await tx.barrier.settle(key, BarrierRecord(BarrierReason.HANDLED, Outcome.REJECTED))
        async with pool.acquire() as conn:
            assert await conn.fetchval(f"SELECT outcome FROM {BARRIER_TABLE}") == "rejected"
        assert complaints == []
    finally:
        loop.set_exception_handler(None)
        await pool.close()
