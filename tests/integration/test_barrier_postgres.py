"""The barrier on real Postgres: races between try and cancel, purge, and the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from participant_sdk import BARRIER_TABLE, Outcome, Phase, install_barrier, purge_barrier
from participant_sdk.commands import PgCommandTransaction
from participant_sdk.executor import LocalRetry, execute
from participant_sdk.testing import ParticipantHarness
from tests.integration.test_participant_behaviour import PgSink, Wallet

pytestmark = pytest.mark.integration


async def _setup(dsn: str) -> Any:
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=20)
    async with pool.acquire() as conn:
        await install_barrier(conn)
        await install_barrier(conn)  # idempotent
        await conn.execute(
            "CREATE TABLE effects (id bigserial PRIMARY KEY, saga_id uuid, step text,"
            " kind text, amount int)"
        )
    return pool


def _wallet(pool: Any) -> tuple[Any, ParticipantHarness, Any]:
    """The wallet's handlers, a command builder, and a transaction factory on ``pool``."""
    wallet = Wallet(PgSink())

    @contextlib.asynccontextmanager
    async def begin() -> AsyncIterator[PgCommandTransaction]:
        async with pool.acquire() as conn, conn.transaction():
            yield PgCommandTransaction(conn)

    return wallet.validate(), ParticipantHarness(wallet), begin


async def test_concurrent_try_and_cancel_collapse_to_a_legal_outcome(fresh_db: str) -> None:
    """Try and cancel of one step sent at once: either the try won (held, then released) or
    the cancel did (null compensation, the try refused, nothing held). Over the rounds both
    must happen, or the test did not exercise the race it is about."""
    pool = await _setup(fresh_db)
    handlers, builder, begin = _wallet(pool)

    async def run(command: Any, delay: float) -> Any:
        await asyncio.sleep(delay)
        return await execute(command, participant="wallet", handlers=handlers, begin=begin,
                             retry=LocalRetry(initial=timedelta(0)))

    won: dict[str, int] = {"try": 0, "cancel": 0}
    for round_ in range(200):
        if round_ >= 20 and min(won.values()) >= 3:
            break
        # Which one leaves first alternates, and the other follows 0-4 ms later: the race is
        # real in every round, and a scheduler that always favours one side cannot hide the
        # other winner.
        lag = (round_ // 2 % 5) / 1000
        try_lag, cancel_lag = (0.0, lag) if round_ % 2 else (lag, 0.0)
        saga = uuid.uuid4()
        try_cmd = builder.command("hold", Phase.TRY, {"amount": 5}, saga_id=saga, step="s")
        cancel_cmd = builder.command("hold", Phase.CANCEL, {"amount": 5}, saga_id=saga, step="s")
        tried, cancelled = await asyncio.gather(run(try_cmd, try_lag),
                                                run(cancel_cmd, cancel_lag))
        assert cancelled.reply.outcome is Outcome.OK
        effects = [r["kind"] for r in await pool.fetch(
            "SELECT kind FROM effects WHERE saga_id = $1 ORDER BY id", saga)]
        phases = {r["phase"]: r["reason"] for r in await pool.fetch(
            f"SELECT phase, reason FROM {BARRIER_TABLE} WHERE saga_id = $1", saga)}
        if tried.reply.outcome is Outcome.OK:  # try won the race: cancel undid it
            assert effects == ["held", "released"]
            assert phases == {"try": "handled", "cancel": "handled"}
            won["try"] += 1
        else:  # cancel won: null compensation, try refused, nothing held
            assert tried.reply.error is not None
            assert tried.reply.error.kind.value == "barrier_refused"
            assert effects == []
            assert phases == {"try": "blocked", "cancel": "null_compensation"}
            won["cancel"] += 1
    await pool.close()
    print(f"\nraces won: {won}")
    assert won["try"] >= 3 and won["cancel"] >= 3, won


#: The advisory lock key that holds back one side of a race (the database is the test's own).
HOLD = 4242


async def _waiting_for_hold(pool: Any, count: int) -> None:
    """Wait until ``count`` transactions are blocked on the :data:`HOLD` lock."""
    for _ in range(500):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND objid = $1 AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())", HOLD)
        if waiting == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} transactions never waited for the hold")


@pytest.mark.parametrize("first", ["try", "cancel"])
async def test_rejected_try_races_cancel_and_duplicates(fresh_db: str, first: str) -> None:
    """A rejecting try (no savepoint: rolled back whole, refusal recorded in a second
    transaction) and its duplicate against a concurrent cancel, in each order in turn: all
    three are in flight at once, and the side that must lose waits, inside its transaction,
    on an advisory lock the test holds until the other side is done. Whichever goes first, no
    effect survives, the cancel is a null compensation and every try reply is a rejection:
    the handler's own (``business``) when the try went first, the barrier's when the cancel
    did."""
    pool = await _setup(fresh_db)
    handlers, builder, begin = _wallet(pool)

    @contextlib.asynccontextmanager
    async def held() -> AsyncIterator[PgCommandTransaction]:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", HOLD)
            yield PgCommandTransaction(conn)

    def run(command: Any, *, hold: bool) -> asyncio.Task[Any]:
        return asyncio.create_task(execute(
            command, participant="wallet", handlers=handlers, begin=held if hold else begin,
            retry=LocalRetry(initial=timedelta(0))))

    expected_kind = "business" if first == "try" else "barrier_refused"
    gate = await pool.acquire()
    try:
        for _ in range(5):
            saga = uuid.uuid4()
            try_cmd = builder.command("hold", Phase.TRY, {"amount": 500}, saga_id=saga, step="s")
            cancel_cmd = builder.command("hold", Phase.CANCEL, {"amount": 500}, saga_id=saga,
                                         step="s")
            await gate.execute("SELECT pg_advisory_lock($1)", HOLD)
            tries = [run(try_cmd, hold=first == "cancel") for _ in range(2)]
            cancel = run(cancel_cmd, hold=first == "try")
            ahead, behind = (tries, [cancel]) if first == "try" else ([cancel], tries)
            await _waiting_for_hold(pool, len(behind))
            await asyncio.gather(*ahead)
            assert not any(task.done() for task in behind), "the held side did not wait"
            await gate.execute("SELECT pg_advisory_unlock($1)", HOLD)
            await asyncio.gather(*behind)
            tried, duplicate = (task.result() for task in tries)
            assert cancel.result().reply.outcome is Outcome.OK
            for reply in (tried.reply, duplicate.reply):
                assert reply.outcome is Outcome.REJECTED and reply.error is not None
                assert reply.error.kind.value == expected_kind, reply.error
            assert tried.reply.error == duplicate.reply.error  # both from one barrier row
            assert await pool.fetch("SELECT kind FROM effects WHERE saga_id = $1", saga) == []
            row = await pool.fetchrow(
                f"SELECT reason, outcome FROM {BARRIER_TABLE}"
                " WHERE saga_id = $1 AND phase = 'cancel'", saga)
            assert (row["reason"], row["outcome"]) == ("null_compensation", "ok")
    finally:
        await pool.release(gate)
        await pool.close()


async def test_cancel_between_rejection_rollback_and_record_wins(fresh_db: str) -> None:
    """The window the second transaction opens: a cancel lands after the rejected try rolled
    back and before its refusal is recorded. The try then answers from the cancel's marker."""
    pool = await _setup(fresh_db)
    handlers, builder, begin = _wallet(pool)
    saga = uuid.uuid4()
    try_cmd = builder.command("hold", Phase.TRY, {"amount": 500}, saga_id=saga, step="s")
    cancel_cmd = builder.command("hold", Phase.CANCEL, {"amount": 500}, saga_id=saga, step="s")

    opened = 0
    cancelled: list[Any] = []

    @contextlib.asynccontextmanager
    async def begin_try() -> AsyncIterator[PgCommandTransaction]:
        nonlocal opened
        opened += 1
        if opened == 2:  # the rejection's own transaction: let the cancel in first
            cancelled.append(await execute(cancel_cmd, participant="wallet", handlers=handlers,
                                           begin=begin))
        async with begin() as tx:
            yield tx

    tried = await execute(try_cmd, participant="wallet", handlers=handlers, begin=begin_try)
    assert opened == 2
    assert cancelled[0].reply.outcome is Outcome.OK
    assert tried.reply.outcome is Outcome.REJECTED and tried.reply.error is not None
    assert tried.reply.error.kind.value == "barrier_refused"
    assert await pool.fetch("SELECT kind FROM effects WHERE saga_id = $1", saga) == []
    again = await execute(try_cmd, participant="wallet", handlers=handlers, begin=begin)
    assert again.reply.error == tried.reply.error
    await pool.close()

async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "participant_sdk", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_purge_and_cli(fresh_db: str) -> None:
    code, _, err = await _cli("install-barrier", "--dsn", fresh_db)
    assert code == 0, err
    conn = await asyncpg.connect(fresh_db)
    try:
        for age in (timedelta(days=30), timedelta(hours=1)):
            await conn.execute(
                f"INSERT INTO {BARRIER_TABLE} (saga_id, step, phase, reason, outcome, created_at)"
                " VALUES ($1, 's', 'try', 'handled', 'ok', now() - $2::interval)",
                uuid.uuid4(), age,
            )
        assert await purge_barrier(conn, timedelta(days=7)) == 1
        code, out, err = await _cli("purge-barrier", "--dsn", fresh_db, "--older-than", "30m")
        assert code == 0, err
        assert "deleted 1" in out
        assert await conn.fetchval(f"SELECT count(*) FROM {BARRIER_TABLE}") == 0
    finally:
        await conn.close()
