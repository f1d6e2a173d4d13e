"""Signals through Kafka: another service puts a SignalEnvelope on ``{prefix}.signals`` and
the worker applies it (once per signal id); undecodable or refused records become dead
letters and never stop the loop."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from aiokafka import AIOKafkaProducer
from pydantic import BaseModel

from coordinator.config.settings import CoordinatorSettings
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga
from coordinator.runtime.signal_wire import SignalEnvelope, SignalStart, encode_signal, signal_topic
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import reply_topic
from tests.integration.test_store_support import migrated, verify_all
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration


class Nothing(BaseModel):
    pass


class Approval(BaseModel):
    approver: str


class AwaitApproval(Saga):
    name = "await_approval"
    input_model = Nothing
    steps = (WaitForSignal("approval", "approved", payload=Approval),)


class NotesThenApproval(Saga):
    name = "notes_then_approval"
    input_model = Nothing
    max_kept_signals_per_name = 1
    steps = (WaitForSignal("approval", "approved", payload=Approval),
             WaitForSignal("note", "noted"))


@pytest.fixture
async def stack(fresh_db: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, AIOKafkaProducer, str]]:
    await migrated(fresh_db)
    topic = signal_topic(topic_prefix)
    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1, topic: 2})
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitApproval, NotesThenApproval])
    settings = CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
        group_id=f"{topic_prefix}-coordinator", timer_max_idle=timedelta(milliseconds=200),
        pool_max_size=3, shutdown_grace=timedelta(seconds=5))
    store = await SagaStore.open(fresh_db, registry, max_size=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        async with Worker(settings, registry, name="w1"):
            yield store, producer, topic
    finally:
        await producer.stop()
        await store.close()


async def test_kafka_signals_apply_once_and_bad_records_become_dead_letters(
    stack: tuple[SagaStore, AIOKafkaProducer, str],
) -> None:
    store, producer, topic = stack
    saga_id = (await store.start_saga("await_approval", {})).record.saga_id
    key = str(saga_id).encode()
    good = encode_signal(SignalEnvelope(saga_id=saga_id, name="approved", signal_id="a-1",
                                        payload={"approver": "ada"}, sender="hr"))
    bad_payload = json.dumps({"saga_id": str(saga_id), "name": "approved", "signal_id": "a-2",
                              "payload": {"approver": 7}}).encode()
    unknown_saga = encode_signal(SignalEnvelope(saga_id=uuid.uuid4(), name="approved",
                                                signal_id="a-3"))
    for value in (b"not json", bad_payload, unknown_saga, good, good):
        await producer.send_and_wait(topic, value, key=key)
    deadline = time.monotonic() + 30
    while True:
        record = await store.get_saga(saga_id)
        assert record is not None
        async with store.pool.acquire() as conn:
            letters = await conn.fetch("SELECT reason FROM sagaflow_dead_letters "
                                       "WHERE source = 'coordinator:signals' ORDER BY id")
        if record.status == "completed" and len(letters) == 3:
            break
        assert time.monotonic() < deadline, (record.status, [r["reason"] for r in letters])
        await asyncio.sleep(0.1)
    reasons = [r["reason"] for r in letters]
    assert reasons[0].startswith("undecodable SignalEnvelope")
    assert reasons[1].startswith("invalid payload for signal 'approved'")
    assert reasons[2].startswith("no saga with id")
    assert record.state.steps["approval"].result == {"approver": "ada"}
    history = await store.get_history(saga_id)
    assert [h.actor for h in history if h.event.type == "signal_received"] == ["kafka:hr"]
    await verify_all(store, [saga_id])


async def test_a_kafka_signal_with_start_starts_the_saga_and_delivers_once(
    stack: tuple[SagaStore, AIOKafkaProducer, str],
) -> None:
    store, producer, topic = stack
    saga_id = uuid.uuid4()
    value = encode_signal(SignalEnvelope(
        saga_id=saga_id, name="approved", signal_id="a-1", payload={"approver": "ada"},
        sender="hr", start=SignalStart(saga_type="await_approval")))
    for _ in range(2):  # the producer's redelivery
        await producer.send_and_wait(topic, value, key=str(saga_id).encode())
    deadline = time.monotonic() + 30
    while (record := await store.get_saga(saga_id)) is None or record.status != "completed":
        assert time.monotonic() < deadline, record
        await asyncio.sleep(0.1)
    history = await store.get_history(saga_id)
    assert [h.event.type for h in history][:2] == ["saga_started", "signal_received"]
    assert sum(h.event.type == "signal_received" for h in history) == 1
    await verify_all(store, [saga_id])


async def test_a_kafka_signal_past_the_kept_bound_becomes_a_dead_letter(
    stack: tuple[SagaStore, AIOKafkaProducer, str],
) -> None:
    store, producer, topic = stack
    saga_id = (await store.start_saga("notes_then_approval", {})).record.saga_id
    records = [SignalEnvelope(saga_id=saga_id, name="noted", signal_id="n-1"),
               SignalEnvelope(saga_id=saga_id, name="noted", signal_id="n-2"),
               SignalEnvelope(saga_id=saga_id, name="approved", signal_id="a-1",
                              payload={"approver": "ada"})]
    for envelope in records:  # in order: one key, one partition
        await producer.send_and_wait(topic, encode_signal(envelope), key=str(saga_id).encode())
    deadline = time.monotonic() + 30
    while True:
        record = await store.get_saga(saga_id)
        assert record is not None
        if record.status == "completed":
            break
        assert time.monotonic() < deadline, record.status
        await asyncio.sleep(0.1)
    async with store.pool.acquire() as conn:
        letters = await conn.fetch("SELECT reason FROM sagaflow_dead_letters "
                                   "WHERE source = 'coordinator:signals' ORDER BY id")
    assert [r["reason"].split(":")[0] for r in letters] == ["signal refused"]
    assert "max_kept_signals_per_name=1" in letters[0]["reason"]
    assert record.state.steps["note"].result == {}  # n-1, kept, then taken
    await verify_all(store, [saga_id])
