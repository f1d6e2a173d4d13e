"""The worker end to end: relay -> Kafka -> scripted participant -> Kafka -> two workers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from coordinator.store import SagaStore
from outbox_relay import Relay, RelaySettings
from participant_sdk.dead_letters import list_dead_letters
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorKind,
    Outcome,
    ReplyEnvelope,
    command_topic,
    reply_topic,
)
from tests.integration.test_store_support import (
    make_registry,
    migrated,
    reply_to,
    verify_all,
)
from tests.integration.test_worker_support import ScriptedParticipant, by_order, create_topics

pytestmark = pytest.mark.integration

PARTICIPANTS = ("payments", "inventory", "shipping")


def script(command: CommandEnvelope) -> list[ReplyEnvelope]:
    """ok-*: all ok; rej-*: shipping rejects; retry-*: first try fails (transient), a stale
    ok for it arrives after the retry; dup-*: every reply is sent twice."""
    order = by_order(command)
    if order.startswith("rej") and command.participant == "shipping" and command.phase == "action":
        return [reply_to(command, Outcome.REJECTED)]
    if order.startswith("retry") and command.phase in ("try", "action") and command.step in (
        "reserve", "charge"
    ):
        if command.attempt == 1:
            return [reply_to(command, (Outcome.FAILED, ErrorKind.TRANSIENT))]
        stale = command.model_copy(update={"attempt": 1, "message_id": uuid.uuid4()})
        return [reply_to(command, Outcome.OK), reply_to(stale, Outcome.OK)]
    replies = [reply_to(command, Outcome.OK)]
    return replies * 2 if order.startswith("dup") else replies


@pytest.fixture
async def stack(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[tuple[SagaStore, list[Worker], ScriptedParticipant]]:
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {
        reply_topic(topic_prefix): 4,
        **{command_topic(p, topic_prefix): 1 for p in PARTICIPANTS},
    })
    registry = make_registry(topic_prefix)
    settings = CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
        group_id=f"{topic_prefix}-coordinator", timer_max_idle=timedelta(milliseconds=300),
        pool_max_size=3, shutdown_grace=timedelta(seconds=5),
    )
    relay = Relay(RelaySettings(postgres_dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                poll_interval=timedelta(milliseconds=30), shard_count=4))
    participant = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in PARTICIPANTS], script)
    workers = [Worker(settings, registry, name=f"w{i}") for i in (1, 2)]
    store = await SagaStore.open(fresh_db, registry, max_size=2)
    await relay.start()
    await participant.start()
    try:
        for worker in workers:
            await worker.start()
        deadline = time.monotonic() + 30
        while not all(w.assignment() for w in workers):
            assert time.monotonic() < deadline, "workers never shared the reply partitions"
            await asyncio.sleep(0.1)
        yield store, workers, participant
    finally:
        for worker in workers:
            await worker.stop()
        await participant.stop()
        await relay.stop()
        await store.close()


async def wait_finished(store: SagaStore, ids: list[uuid.UUID], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while True:
        records = [await store.get_saga(i) for i in ids]
        pending = [r for r in records if r is None or r.status in ("running", "compensating")]
        if not pending:
            return
        assert time.monotonic() < deadline, [(r.saga_id, r.status) for r in pending if r]
        await asyncio.sleep(0.1)


async def test_two_workers_run_sagas_to_the_end(
    stack: tuple[SagaStore, list[Worker], ScriptedParticipant], topic_prefix: str,
    kafka_bootstrap: str,
) -> None:
    store, workers, participant = stack
    plan = {
        "tcc_order": ["ok-1", "ok-2", "dup-1", "retry-1", "ok-3"],
        "ship_order": ["ok-4", "rej-1", "rej-2", "dup-2", "retry-2"],
    }
    ids: dict[str, uuid.UUID] = {}
    for saga_type, orders in plan.items():
        for order in orders:
            started = await store.start_saga(saga_type, {"order_id": order, "amount": 5})
            ids[f"{saga_type}/{order}"] = started.record.saga_id
    # Garbage on the reply topic must be dead-lettered, not stop anything.
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(reply_topic(topic_prefix), b"\x00not json", key=b"junk")
    finally:
        await producer.stop()

    await wait_finished(store, list(ids.values()))
    statuses = {name: (await store.get_saga(i)).status for name, i in ids.items()}  # type: ignore[union-attr]
    for name, status in statuses.items():
        expected = "compensated" if "/rej" in name else "completed"
        assert status == expected, (name, status)
    await verify_all(store, ids.values())
    # Duplicates and stale replies were recorded as ignored.
    for name in ("tcc_order/dup-1", "ship_order/dup-2", "tcc_order/retry-1",
                 "ship_order/retry-2"):
        history = await store.get_history(ids[name])
        assert any(h.ignored for h in history), name
    # The retry sagas went through a retry timer.
    retried = [c for c in participant.received if c.attempt == 2]
    assert {str(c.payload["order_id"]) for c in retried} >= {"retry-1", "retry-2"}
    assert sum(w.timers_fired for w in workers) >= 2
    # Both replicas did work.
    assert all(w.batches > 0 for w in workers), [w.batches for w in workers]
    async with store.pool.acquire() as conn:
        letters = await list_dead_letters(conn, source="coordinator:replies")
    deadline = time.monotonic() + 10
    while not letters:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
        async with store.pool.acquire() as conn:
            letters = await list_dead_letters(conn, source="coordinator:replies")
    (letter,) = letters
    assert letter.payload == b"\x00not json" and "undecodable" in letter.reason
