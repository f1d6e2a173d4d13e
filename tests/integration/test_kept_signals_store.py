"""Kept signals live in their ``saga_signals`` rows, not in the saga's snapshot (migration
0012): signals nobody takes yet leave the saga row as it was, every reader still sees them
in arrival order, a wait takes the first, and replay still rebuilds the stored state."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_signals_api import AwaitPayment
from tests.integration.test_store_support import (
    ManualClock,
    migrated,
    outbox_commands,
    reply_to,
    verify_all,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with await SagaStore.open(fresh_db, registry, max_size=2, clock=ManualClock()
                                    ) as opened:
        yield opened


async def answer_all(store: SagaStore) -> list[str]:
    steps = []
    for command in await outbox_commands(store):
        await store.apply(command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))
        steps.append(command.step)
    return steps


async def _spine(store: SagaStore, saga_id: object) -> str:
    async with store.pool.acquire() as conn:
        return str(await conn.fetchval("SELECT snapshot FROM sagas WHERE id = $1", saga_id))


async def test_kept_signals_stay_out_of_the_snapshot(store: SagaStore) -> None:
    saga_id = (await store.start_saga("await_payment", {"order_id": "o-1"})).record.saga_id
    before = await _spine(store, saga_id)
    for n in range(20):  # "reserve" is in flight: no wait takes them yet
        await store.signal(saga_id, "paid", {"amount": n}, signal_id=f"p-{n}")
    spine = await _spine(store, saga_id)
    assert '"signals"' not in spine
    assert len(spine) < len(before) + 200  # the history seq and times moved, nothing more
    record = await store.get_saga(saga_id)
    assert record is not None
    assert [s.payload["amount"] for s in record.state.signals] == list(range(20))
    await verify_all(store, [saga_id])
    assert await answer_all(store) == ["reserve"]  # the wait is reached: it takes p-0
    record = await store.get_saga(saga_id)
    assert record is not None
    assert record.state.steps["pay"].result == {"amount": 0}
    assert [s.signal_id for s in record.state.signals] == [f"p-{n}" for n in range(1, 20)]
    await verify_all(store, [saga_id])
