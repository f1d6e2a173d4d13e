"""A saga's timeout is a row in Postgres, not a task in a process: the coordinator that
started the saga is gone (its store closed, as after a kill), two others fire due timers at
once, and exactly one of them applies the timeout."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from pydantic import BaseModel

from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.integration.test_store_support import migrated, verify_all

pytestmark = pytest.mark.integration


class Order(BaseModel):
    order_id: str


class Waiting(Saga):
    name = "waiting"
    input_model = Order
    timeout = timedelta(hours=2)
    steps = (WaitForSignal("approve", "approved"),
             SagaStep("ship", "desk", "ship", compensable=True))


async def test_a_timeout_outlives_its_coordinator_and_fires_once_among_replicas(
        fresh_db: str, topic_prefix: str) -> None:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Waiting])
    first = await SagaStore.open(fresh_db, registry, max_size=2)
    started = await first.start_saga("waiting", {"order_id": "o-1"}, actor="test")
    saga_id, began = started.record.saga_id, started.record.state.started_at
    await first.close()  # the coordinator that armed the timeouts is gone

    due = began + timedelta(hours=2, seconds=1)
    async with await SagaStore.open(fresh_db, registry, max_size=2) as a, \
            await SagaStore.open(fresh_db, registry, max_size=2) as b:
        early = began + timedelta(hours=1)
        assert await a.fire_due_timers(now=early) == 0  # not due yet
        fired = await asyncio.gather(a.fire_due_timers(now=due), b.fire_due_timers(now=due))
        assert sorted(fired) == [0, 1]  # claimed by one of them
        record = await a.get_saga(saga_id)
        assert record is not None and record.status == "compensated"
        assert record.state.reason == "timed out after 2h in approve"
        history = await a.get_history(saga_id)
        assert [h.event.to_json()["type"] for h in history].count("timer_fired") == 1
        assert await a.fire_due_timers(now=due + timedelta(days=1)) == 0  # nothing left
        await verify_all(a, [saga_id])
