"""Durable sleeps end to end: worker, relay, Kafka and an SDK participant with its barrier.

The sleep's timer is a row in Postgres (kind ``sleep``, no phase); the worker's timer loop
fires it and the next command goes out only then. An operator cancel of a sleeping saga
deletes the row in the cancel's own transaction.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.engine import OperatorRepair, RepairVerb
from coordinator.language.nodes import Sleep
from coordinator.language.saga import RetryPolicy, Saga, SagaStep
from coordinator.store import SagaStore
from tests.integration.inprocess_stack import Desk, inprocess_stack
from tests.integration.test_store_support import verify_all

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))
NAP = timedelta(seconds=1.5)


class NapInput(BaseModel):
    nap_s: float


class Napping(Saga):
    name = "napping"
    input_model = NapInput
    steps = (
        SagaStep("before", "desk", "book", compensable=True, retry=QUICK),
        Sleep("nap", lambda ctx: timedelta(seconds=ctx.input.nap_s)),
        SagaStep("after", "desk", "book", compensable=True, retry=QUICK),
    )



@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix,
                               sagas=[Napping], participants=[Desk()]) as running:
        yield running

async def _until(check: object, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def _sleep_timers(store: SagaStore, saga_id: uuid.UUID) -> list[asyncpg.Record]:
    async with store.pool.acquire() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT id, kind, phase, due_at FROM timers WHERE saga_id = $1 AND kind = 'sleep'",
            saga_id)
        return rows


async def _effects(effects: asyncpg.Connection, saga_id: uuid.UUID) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await effects.fetch(
        "SELECT step, kind, at FROM effects WHERE saga_id = $1 ORDER BY id", saga_id)
    return rows


async def _status(store: SagaStore, saga_id: uuid.UUID) -> str:
    record = await store.get_saga(saga_id)
    assert record is not None
    return record.status


async def test_a_sleep_holds_the_next_command_until_its_timer_fires(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("napping", {"nap_s": NAP.total_seconds()})
    saga_id = started.record.saga_id

    async def sleeping() -> bool:
        return bool(await _sleep_timers(store, saga_id))

    await _until(sleeping)
    [timer] = await _sleep_timers(store, saga_id)
    assert timer["phase"] is None
    record = await store.get_saga(saga_id)
    assert record is not None and record.state.steps["nap"].phase.value == "sleeping"
    assert [e["step"] for e in await _effects(effects, saga_id)] == ["before"]

    async def completed() -> bool:
        return await _status(store, saga_id) == "completed"

    await _until(completed)
    before, after = await _effects(effects, saga_id)
    assert (before["step"], after["step"]) == ("before", "after")
    assert after["at"] - before["at"] >= NAP  # the command waited for the timer
    assert await _sleep_timers(store, saga_id) == []
    await verify_all(store, [saga_id])


async def test_an_operator_cancel_of_a_sleeping_saga_deletes_its_timer(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("napping", {"nap_s": 3 * 24 * 3600.0})  # three days
    saga_id = started.record.saga_id

    async def sleeping() -> bool:
        return bool(await _sleep_timers(store, saga_id))

    await _until(sleeping)
    result = await store.apply(saga_id, OperatorRepair(
        verb=RepairVerb.CANCEL, actor="ops", reason="customer left"), actor="operator:ops")
    assert result.outcome.value == "applied", result
    assert await _sleep_timers(store, saga_id) == []  # gone with the cancel's transaction

    async def cancelled() -> bool:
        return await _status(store, saga_id) == "cancelled"

    await _until(cancelled)
    assert [(e["step"], e["kind"]) for e in await _effects(effects, saga_id)] == [
        ("before", "booked"), ("before", "unbooked")]
    await verify_all(store, [saga_id])
