"""The barrier's statements per command on real Postgres, and the claim's one race.

A command costs BEGIN, the barrier's insert (a cancel's claim is one statement), the handler's
own SQL and COMMIT; a second barrier statement only when the handler returns a result or the
command is a duplicate. The claim reads the forward row in its statement's snapshot: when that
row commits while the claim waits on it, the claim cannot see it and the executor reads it
again (``test_claim_waits_for_a_forward_row_committed_after_its_snapshot``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from participant_sdk import BARRIER_TABLE, Outcome, Phase
from participant_sdk.barrier import BarrierKey, BarrierReason, BarrierRecord, PgBarrierStore
from participant_sdk.commands import PgCommandTransaction
from participant_sdk.executor import LocalRetry, execute
from tests.integration.test_barrier_postgres import _setup, _wallet

pytestmark = pytest.mark.integration


class _Counting:
    """An asyncpg connection that counts the statements sent through it."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.statements: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._conn, name)
        if name not in ("execute", "fetch", "fetchrow", "fetchval"):
            return method

        async def counted(query: str, *args: Any) -> Any:
            self.statements.append(" ".join(query.split())[:40])
            return await method(query, *args)

        return counted


async def test_statements_per_command(fresh_db: str) -> None:
    pool = await _setup(fresh_db)
    handlers, builder, _ = _wallet(pool)
    seen: list[_Counting] = []

    @contextlib.asynccontextmanager
    async def begin() -> AsyncIterator[PgCommandTransaction]:
        async with pool.acquire() as conn, conn.transaction():
            counting = _Counting(conn)
            seen.append(counting)
            yield PgCommandTransaction(counting)

    async def statements(phase: Phase, saga: uuid.UUID) -> int:
        seen.clear()
        done = await execute(builder.command("hold", phase, {"amount": 5}, saga_id=saga,
                                             step="s"),
                             participant="wallet", handlers=handlers, begin=begin,
                             retry=LocalRetry(initial=timedelta(0)))
        assert done.reply.outcome is not Outcome.FAILED, done.reply
        return sum(len(c.statements) for c in seen)

    # Handler statements: one effect row each (the Wallet's try and cancel return a result).
    first, second = uuid.uuid4(), uuid.uuid4()
    assert await statements(Phase.TRY, first) == 3  # insert, effect, settle (the result)
    assert await statements(Phase.CONFIRM, first) == 2  # insert, effect: no settle
    assert await statements(Phase.CONFIRM, first) == 2  # duplicate: insert, read the row
    assert await statements(Phase.CANCEL, second) == 1  # null compensation: the claim alone
    assert await statements(Phase.TRY, second) == 2  # late try: insert, read the marker
    third = uuid.uuid4()
    await statements(Phase.TRY, third)
    assert await statements(Phase.CANCEL, third) == 3  # claim, effect, settle (the result)
    rows = {(r["saga_id"], r["phase"]): (r["reason"], r["outcome"]) for r in await pool.fetch(
        f"SELECT saga_id, phase, reason, outcome FROM {BARRIER_TABLE}")}
    assert rows == {
        (first, "try"): ("handled", "ok"), (first, "confirm"): ("handled", "ok"),
        (second, "try"): ("blocked", "rejected"), (second, "cancel"): ("null_compensation", "ok"),
        (third, "try"): ("handled", "ok"), (third, "cancel"): ("handled", "ok"),
    }
    await pool.close()


async def _blocked_on_a_row(pool: Any) -> None:
    """Wait until a transaction of this database waits for another's row (its xid)."""
    for _ in range(500):
        if await pool.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the cancel never waited for the try's row")


@pytest.mark.parametrize("outcome", [Outcome.OK, Outcome.REJECTED])
async def test_claim_waits_for_a_forward_row_committed_after_its_snapshot(
    fresh_db: str, outcome: Outcome
) -> None:
    """A cancel whose claim waits on the try's uncommitted row, then sees it commit: an ``ok``
    try is undone by the handler, a refused one makes the cancel a null compensation."""
    pool = await _setup(fresh_db)
    handlers, builder, begin = _wallet(pool)
    saga = uuid.uuid4()
    cancel = builder.command("hold", Phase.CANCEL, {"amount": 5}, saga_id=saga, step="s")
    conn = await pool.acquire()
    try:
        xact = conn.transaction()
        await xact.start()
        await PgBarrierStore(conn).insert(
            BarrierKey(saga, "s", Phase.TRY),
            BarrierRecord(BarrierReason.HANDLED, outcome, message_id=uuid.uuid4()))
        running = asyncio.create_task(execute(
            cancel, participant="wallet", handlers=handlers, begin=begin,
            retry=LocalRetry(initial=timedelta(0))))
        await _blocked_on_a_row(pool)
        assert not running.done()
        await xact.commit()
        done = await running
    finally:
        await pool.release(conn)
    assert done.reply.outcome is Outcome.OK
    effects = [r["kind"] for r in await pool.fetch(
        "SELECT kind FROM effects WHERE saga_id = $1", saga)]
    reason = await pool.fetchval(
        f"SELECT reason FROM {BARRIER_TABLE} WHERE saga_id = $1 AND phase = 'cancel'", saga)
    if outcome is Outcome.OK:
        assert (effects, reason) == (["released"], "handled")
    else:
        assert (effects, reason) == ([], "null_compensation")
    await pool.close()
