# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""A late ``ok`` for a dead saga's dead step, on a real store: recorded in the history, and
with ``resume_on_late_ok`` the worker's resumer retries the step by itself (issue 42)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.config.settings import CoordinatorSettings
from coordinator.engine import ReplyReceived, Status
from coordinator.runtime.late_ok import ACTOR, LateOkResumer
from coordinator.runtime.worker import Worker
from coordinator.store import PendingEvent, SagaStore
from coordinator.store.queries import get_history
from participant_sdk.protocol import (
    CommandEnvelope,
    Outcome,
    Phase,
    encode,
    envelope_headers,
    reply_topic,
)
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    make_registry,
    migrated,
    outbox_commands,
    reply_to,
    store,  # noqa: F401
)
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "amount": 10}


async def _answer(store: SagaStore, command: CommandEnvelope, outcome: Outcome) -> None:
    await store.apply_many([PendingEvent(command.saga_id, ReplyReceived(
        reply=reply_to(command, outcome)))])


async def _dead_at_the_shipping_undo(store: SagaStore) -> CommandEnvelope:
    """ship_order: charged, shipping rejected, its undo rejected: dead at ``ship``."""
    saga = (await store.start_saga("ship_order", INPUT)).record
    (charge,) = await outbox_commands(store)
    await _answer(store, charge, Outcome.OK)
    (ship,) = await outbox_commands(store)
    await _answer(store, ship, Outcome.REJECTED)
    (refund,) = await outbox_commands(store)
    assert refund.phase is Phase.COMPENSATE
    await _answer(store, refund, Outcome.REJECTED)
    record = await store.get_saga(saga.saga_id)
    assert record is not None and record.state.status is Status.DEAD
    assert record.state.rollback_reason is not None and "ship" in record.state.rollback_reason
    return refund


async def test_a_late_ok_is_recorded_and_the_saga_waits_for_a_person(
    store: SagaStore, clock: ManualClock
) -> None:
    refund = await _dead_at_the_shipping_undo(store)
    await _answer(store, refund, Outcome.OK)
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.DEAD
    assert record.state.late_ok is not None and record.state.late_ok["step"] == "ship"
    async with store.pool.acquire() as conn:
        last = (await get_history(conn, refund.saga_id))[-1]
    assert last.ignored is None
    assert "a late ok for the dead step arrived" in " ".join(last.annotation)
    assert await outbox_commands(store) == []  # nothing sent by itself


async def test_with_the_setting_the_worker_retries_by_itself(
    store: SagaStore, clock: ManualClock
) -> None:
    resumer = LateOkResumer(store)
    resumer.start()
    refund = await _dead_at_the_shipping_undo(store)
    await asyncio.sleep(0)
    await resumer.stop()
    dead = await store.get_saga(refund.saga_id)
    assert dead is not None and dead.state.status is Status.DEAD  # only a late ok resumes it
    await _answer(store, refund, Outcome.OK)
    await asyncio.sleep(0)  # the listener's task
    await resumer.stop()
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.COMPENSATING
    assert record.state.repaired is not None and record.state.repaired["actor"] == ACTOR
    assert record.state.dead_reason is None and record.state.late_ok is None
    (again,) = await outbox_commands(store)
    assert (again.step, again.phase) == ("ship", Phase.COMPENSATE)
    await _answer(store, again, Outcome.OK)  # the barrier's stored answer
    (refund_charge,) = await outbox_commands(store)
    assert (refund_charge.step, refund_charge.phase) == ("charge", Phase.COMPENSATE)
    await _answer(store, refund_charge, Outcome.OK)
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.COMPENSATED
    assert record.state.reason == record.state.rollback_reason
    assert (await store.verify(refund.saga_id)).ok


async def test_the_worker_resumes_a_saga_when_a_late_ok_comes_over_kafka(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str,
) -> None:
    """The whole path with ``resume_on_late_ok``: the late reply on the replies topic, the
    worker records it and retries the dead step by itself; the retried command is in the
    outbox (no relay runs here)."""
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1})
    registry = make_registry(topic_prefix)
    async with await SagaStore.open(fresh_db, registry, max_size=2) as store:
        refund = await _dead_at_the_shipping_undo(store)
        settings = CoordinatorSettings(
            dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
            group_id=f"{topic_prefix}-coordinator", resume_on_late_ok=True, pool_max_size=2,
            shutdown_grace=timedelta(seconds=5), timer_hints=False, result_hints=False)
        worker = Worker(settings, registry, name="late-ok")
        await worker.start()
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            late = reply_to(refund, Outcome.OK)
            await producer.send_and_wait(reply_topic(topic_prefix), encode(late),
                                         key=str(late.saga_id).encode(),
                                         headers=envelope_headers(late))
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                record = await store.get_saga(refund.saga_id)
                assert record is not None
                if record.state.repaired is not None:
                    break
                assert asyncio.get_running_loop().time() < deadline, record.state.status
                await asyncio.sleep(0.1)
        finally:
            await producer.stop()
            await worker.stop()
        assert record.state.status is Status.COMPENSATING
        assert record.state.repaired["actor"] == ACTOR
        async with store.pool.acquire() as conn:
            actors = [h.actor for h in await get_history(conn, refund.saga_id)][-2:]
        assert actors == [f"participant:{refund.participant}", ACTOR]
