"""Saga timeouts end to end: worker, relay, Kafka and SDK participants with their barrier.

The timeout is a row in ``timers`` (kind ``timeout``) written with the saga's start; the
worker's timer loop fires it while the saga waits for a signal that never comes, and the saga
rolls back what it did. A parent that times out while its child saga runs cancels the child,
which rolls back its own steps first.
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

from coordinator.api.models.conversions import detail
from coordinator.engine.work import message_id
from coordinator.language.nodes import ChildSaga, WaitForSignal
from coordinator.language.saga import RetryPolicy, Saga, SagaStep
from coordinator.store import SagaStore
from participant_sdk.protocol import Phase
from tests.integration.inprocess_stack import Desk, inprocess_stack
from tests.integration.test_store_support import verify_all

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))
LIMIT = timedelta(seconds=2)


class Order(BaseModel):
    order_id: str


def book(name: str) -> SagaStep:
    return SagaStep(name, "desk", "book", compensable=True, retry=QUICK)


class Held(Saga):
    """Books, then waits for an approval nobody sends: the timeout rolls the booking back."""

    name = "held"
    input_model = Order
    timeout = LIMIT
    steps = (book("hold"), WaitForSignal("approve", "approved"), book("ship"))


class SlowChild(Saga):
    name = "slow_child"
    input_model = Order
    steps = (book("pack"), WaitForSignal("picked", "picked"))


class TimedParent(Saga):
    name = "timed_parent"
    input_model = Order
    timeout = LIMIT
    steps = (book("charge"), ChildSaga("ship_it", SlowChild, deadline=timedelta(hours=1)))



@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix,
                               sagas=[Held, SlowChild, TimedParent],
                               participants=[Desk()]) as running:
        yield running


async def _status(store: SagaStore, saga_id: uuid.UUID, wanted: str, within: float = 30
                  ) -> None:
    deadline = time.monotonic() + within
    while True:
        record = await store.get_saga(saga_id)
        if record is not None and record.status == wanted:
            return
        assert time.monotonic() < deadline, f"{saga_id} is {record and record.status}"
        await asyncio.sleep(0.05)


async def _timers(store: SagaStore, saga_id: uuid.UUID) -> list[asyncpg.Record]:
    async with store.pool.acquire() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT id, kind, step, due_at FROM timers WHERE saga_id = $1 AND event IS NULL",
            saga_id)
        return rows


async def _effects(effects: asyncpg.Connection) -> list[tuple[str, str]]:
    rows = await effects.fetch("SELECT step, kind FROM effects ORDER BY id")
    return [(r["step"], r["kind"]) for r in rows]


async def test_a_saga_stuck_in_a_signal_wait_times_out_and_rolls_back(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("held", {"order_id": "o-1"})
    saga_id, began = started.record.saga_id, started.record.state.started_at
    [timer] = [t for t in await _timers(store, saga_id) if t["kind"] == "timeout"]
    assert (timer["step"], timer["due_at"]) == ("", began + LIMIT)  # durable, from the start
    assert detail(started.record, stuck=False).timeouts == {"": began + LIMIT}  # the API's
    await _status(store, saga_id, "compensated")
    record = await store.get_saga(saga_id)
    assert record is not None
    assert record.state.reason == "timed out after 2s in approve"
    assert record.state.timed_out is not None and record.state.timed_out["node"] == ""
    assert await _effects(effects) == [("hold", "booked"), ("hold", "unbooked")]
    assert await _timers(store, saga_id) == []
    await verify_all(store, [saga_id])


async def test_a_parent_that_times_out_cancels_its_running_child(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("timed_parent", {"order_id": "o-2"})
    parent = started.record.saga_id
    await _status(store, parent, "compensated")
    record = await store.get_saga(parent)
    assert record is not None and record.state.reason == "timed out after 2s in ship_it"
    child_id = message_id(parent, "ship_it", Phase.TRY, 1)  # the child's id is its try's
    await _status(store, child_id, "compensated")  # cancelled: it rolled its own steps back
    assert await _effects(effects) == [("charge", "booked"), ("pack", "booked"),
                                       ("pack", "unbooked"), ("charge", "unbooked")]
    await verify_all(store, [parent, child_id])
