"""Scale to zero: with every function instance gone, commands and timers fall due; invoking
only the functions (cold instances) then finishes every saga, and nothing ran meanwhile."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.language.saga import RetryPolicy, Saga, SagaStep, StepContext, TccStep
from coordinator.store import SagaStore
from participant_sdk import HandlerContext, Participant, TransientError, on_action
from tests.integration.functions_support import FunctionStack
from tests.integration.test_functions_e2e import order

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Prep(BaseModel):
    order_id: str


class Warmup(Participant):
    """Fails every first attempt: its retry is a coordinator timer (backoff 0.5 s)."""

    name = "warmup"

    @on_action("prepare")
    async def prepare(self, ctx: HandlerContext, body: Prep) -> dict[str, Any]:
        if ctx.command.attempt == 1:
            raise TransientError("not warm yet")
        return {"prepared": body.order_id}


class OrderInput(BaseModel):
    order_id: str
    customer_id: str
    amount_cents: int
    sku: str
    quantity: int
    address: str


def _prep(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"order_id": ctx.input.order_id}


def _funds(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"customer": ctx.input.customer_id, "amount": ctx.input.amount_cents}


class WarmOrder(Saga):
    name = "warm_order"
    version = 1
    input_model = OrderInput
    steps = (
        SagaStep("prepare", "warmup", "prepare", payload=_prep, compensable=False,
                 retry=RetryPolicy(max_attempts=3, initial_backoff=timedelta(milliseconds=500),
                                   jitter=0.0)),
        TccStep("reserve_funds", "payments", "charge", payload=_funds),
    )


async def connected_backends(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"))
    finally:
        await conn.close()


async def test_every_saga_finishes_from_functions_alone_after_scaling_to_zero(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    def stack() -> FunctionStack:
        return FunctionStack(fresh_db, kafka_bootstrap, topic_prefix, [WarmOrder],
                             participants=[Warmup()])

    first = stack()
    await first.setup()
    store = await SagaStore.open(fresh_db, first.registry, min_size=1, max_size=2)
    early = [(await store.start_saga("warm_order", order(i))).record.saga_id for i in range(4)]
    # Invocations until every first attempt has failed and its retry timer is set.
    for _ in range(20):
        await first.round()
        async with store.pool.acquire() as conn:
            timers = await conn.fetchval("SELECT count(*) FROM timers")
        if timers >= len(early):
            break
    assert timers >= len(early)
    # More sagas while everything is down: their first commands wait in the outbox.
    late = [(await store.start_saga("warm_order", order(10 + i))).record.saga_id
            for i in range(3)]
    await store.close()
    await first.close()
    # Zero: no instance, no pool, no poller. The retry timers fall due meanwhile.
    assert await connected_backends(fresh_db) == 0
    await asyncio.sleep(1.0)
    assert await connected_backends(fresh_db) == 0

    cold = stack()
    await cold.setup()
    store = await SagaStore.open(fresh_db, cold.registry, min_size=1, max_size=2)
    try:
        statuses: dict[Any, str] = {}
        for _ in range(40):
            await cold.round()
            statuses = {i: str((await store.get_saga(i)).status)  # type: ignore[union-attr]
                        for i in (*early, *late)}
            if all(s == "completed" for s in statuses.values()):
                break
        assert set(statuses.values()) == {"completed"}, statuses
        async with store.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM sagaflow_outbox") == 0
            assert await conn.fetchval("SELECT count(*) FROM timers") == 0
            # Each early saga's retry came from its timer, fired by a tick after the pause.
            fired = await conn.fetch(
                "SELECT DISTINCT saga_id FROM saga_history WHERE actor = 'timer'")
        assert set(early) <= {r["saga_id"] for r in fired}
    finally:
        await store.close()
        await cold.close()
