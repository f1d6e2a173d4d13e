"""The worker publishes the commands of its own commits right after each commit; the relays
only take the outbox rows it did not publish, once their lease has passed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from coordinator.store import SagaStore
from outbox_relay import Relay, RelaySettings
from outbox_relay.direct import DirectPublisher, direct_producer_config
from outbox_relay.message import (
    LeasedRow,
    OutboxMessage,
    insert_args,
    insert_select,
    leased_rows,
)
from outbox_relay.relay import _CLAIM
from participant_sdk.protocol import HEADER_MESSAGE_ID, command_topic, decode_command, reply_topic
from tests.integration.test_api_support import OPERATOR, TOKENS
from tests.integration.test_store_support import make_registry, migrated, verify_all
from tests.integration.test_worker_support import ScriptedParticipant, create_topics, ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTICIPANTS = ("payments", "inventory")
INPUT = {"order_id": "o-1", "amount": 5}


@pytest.fixture
async def topics(fresh_db: str, kafka_bootstrap: str, topic_prefix: str) -> str:
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {
        reply_topic(topic_prefix): 2, **{command_topic(p, topic_prefix): 1 for p in PARTICIPANTS}})
    return topic_prefix


async def _outbox(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(
            "SELECT id, shard, key, created_at > clock_timestamp() AS leased FROM sagaflow_outbox"))
    finally:
        await conn.close()


async def _claimable(dsn: str) -> int:
    """How many outbox rows a relay owning every shard would claim now."""
    conn = await asyncpg.connect(dsn)
    try:
        shards = list(range(await conn.fetchval("SELECT shard_count FROM sagaflow_outbox_meta")))
        return len(await conn.fetch(_CLAIM, shards, 100, 100))
    finally:
        await conn.close()


async def _first_command(bootstrap: str, topic: str, within: float) -> tuple[float, bytes] | None:
    """(arrival time, value) of the first record on ``topic`` within ``within`` seconds."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        part = TopicPartition(topic, 0)
        consumer.assign([part])
        await consumer.seek_to_beginning(part)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                return time.monotonic(), records[0].value
        return None
    finally:
        await consumer.stop()


async def test_the_worker_publishes_its_commands_itself_and_deletes_their_rows(
    topics: str, fresh_db: str, kafka_bootstrap: str,
) -> None:
    """No relay runs: every command after the first reaches the participant only because the
    worker published it after its commit (the first comes from a start on the worker's own
    store, so it is published the same way)."""
    registry = make_registry(topics)
    participant = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topics) for p in PARTICIPANTS], ok)
    store = await SagaStore.open(fresh_db, registry, max_size=3)
    worker = Worker(CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topics,
        group_id=f"{topics}-coordinator", publish_lease=timedelta(minutes=5),
        shutdown_grace=timedelta(seconds=5)), registry, store=store)
    await participant.start()
    await worker.start()
    try:
        ids = [(await store.start_saga("tcc_order", {**INPUT, "order_id": f"o-{i}"}))
               .record.saga_id for i in range(3)]
        deadline = time.monotonic() + 60
        while [r.status for r in [await store.get_saga(i) for i in ids] if r is not None
               ] != ["completed"] * len(ids):
            assert time.monotonic() < deadline, "sagas did not complete without a relay"
            await asyncio.sleep(0.05)
        await verify_all(store, ids)
        # Each saga: two tries and two confirms, each received once (no relay re-sent one).
        sent = sorted((c.saga_id, c.step, c.phase.value) for c in participant.received)
        assert sent == sorted((i, s, p) for i in ids for s in ("reserve", "hold")
                              for p in ("try", "confirm"))
        assert worker._publishing is not None
        publisher = worker._publishing.publisher
        assert publisher is not None
        await publisher.flush()
        assert publisher.sent == 12 and publisher.left == 0
        assert await _outbox(fresh_db) == []  # deleted once Kafka acknowledged them
    finally:
        await worker.stop()
        await participant.stop()
        await store.close()


async def test_a_row_the_writer_did_not_publish_goes_out_through_a_relay_after_its_lease(
    topics: str, fresh_db: str, kafka_bootstrap: str,
) -> None:
    """The writer committed and died before publishing: the relay leaves the leased row alone
    until the lease has passed, then sends it and deletes it."""
    lost: list[LeasedRow] = []
    store = await SagaStore.open(fresh_db, make_registry(topics), max_size=2)
    store.publish_own_rows(lost.extend, timedelta(seconds=1.5))
    relay = Relay(RelaySettings(postgres_dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                poll_interval=timedelta(milliseconds=50), shard_count=4))
    await relay.start()
    try:
        committed = time.monotonic()
        saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
        (row,) = await _outbox(fresh_db)
        assert row["leased"] and row["key"] == str(saga_id)
        assert [(r.id, r.message.key) for r in lost] == [(row["id"], str(saga_id))]
        assert await _claimable(fresh_db) == 0
        arrived = await _first_command(kafka_bootstrap, command_topic("payments", topics), 10)
        assert arrived is not None, "the relay never sent the leased row"
        assert arrived[0] - committed >= 1.4, "the relay took a row still leased"
        assert decode_command(arrived[1]).saga_id == saga_id
        deadline = time.monotonic() + 10
        while await _outbox(fresh_db):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await relay.stop()
        await store.close()


async def test_rows_of_a_key_with_a_dead_letter_are_left_to_the_relays(
    topics: str, fresh_db: str,
) -> None:
    """A relay holds back a key with a dead letter; its writer must not publish it either."""
    handed: list[LeasedRow] = []
    saga_id = uuid.uuid4()
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute(
            "INSERT INTO sagaflow_outbox_dead_letter (id, shard, topic, key, payload, message_id,"
            " headers, created_at, error_class, reason) VALUES (-1, 0, 't', $1, '\\x00', $2,"
            " '{}', now(), 'MessageSizeTooLargeError', 'too large')", str(saga_id), uuid.uuid4())
    finally:
        await conn.close()
    async with await SagaStore.open(fresh_db, make_registry(topics), max_size=2) as store:
        store.publish_own_rows(handed.extend, timedelta(minutes=5))
        await store.start_saga("tcc_order", INPUT, saga_id=saga_id)
        other = (await store.start_saga("tcc_order", {**INPUT, "order_id": "o-2"})).record
    rows = {r["key"]: r["leased"] for r in await _outbox(fresh_db)}
    assert rows == {str(saga_id): False, str(other.saga_id): True}
    assert [r.message.key for r in handed] == [str(other.saga_id)]


async def test_a_row_kafka_refuses_stays_for_the_relays_and_stops_its_key(
    topics: str, fresh_db: str, kafka_bootstrap: str,
) -> None:
    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(**direct_producer_config(kafka_bootstrap, "direct-test"))

    async with await SagaStore.open(fresh_db, make_registry(topics), max_size=2) as store:
        publisher = DirectPublisher(store.pool, producer, lease=timedelta(minutes=5))
        await publisher.start()
        try:
            store.publish_own_rows(publisher.publish, timedelta(minutes=5))
            # A command over Kafka's request size limit (1 MiB): refused.
            huge = {**INPUT, "order_id": "x" * 1_100_000}
            saga_id = (await store.start_saga("tcc_order", huge)).record.saga_id
            await asyncio.wait_for(publisher.flush(), 10)
            assert (publisher.sent, publisher.left) == (0, 1)
            assert [r["key"] for r in await _outbox(fresh_db)] == [str(saga_id)]
            # The key is held back: a later (small) row of it is left too, not sent ahead of
            # the refused one; another key's row goes out.
            publisher.publish(await _leased(store, [str(saga_id), str(uuid.uuid4())]))
            await asyncio.wait_for(publisher.flush(), 10)
            assert (publisher.sent, publisher.left) == (1, 2)
        finally:
            await publisher.stop()


async def _leased(store: SagaStore, keys: list[str]) -> list[LeasedRow]:
    """A small leased row for each key (as a timer's retry would write), committed."""
    messages = [OutboxMessage(topic="t.cmd", key=key, payload=b"{}", message_id=uuid.uuid4())
                for key in keys]
    args = insert_args(messages)
    async with store.transaction() as conn:
        row = await conn.fetchrow(
            "WITH o AS (" + insert_select(1, lease="$6::interval") + ") "
            "SELECT array_agg(shard::int) AS shards, array_agg(id) AS ids, "
            "array_agg(message_id) AS message_ids FROM o WHERE leased",
            *args, timedelta(minutes=5))
    handed = leased_rows(row["shards"], row["ids"], row["message_ids"], messages, args[4])
    assert [r.message.key for r in handed] == keys
    assert HEADER_MESSAGE_ID not in handed[0].headers  # the publisher adds it
    return handed


@contextlib.asynccontextmanager
async def _api(dsn: str, bootstrap: str, prefix: str) -> AsyncIterator[tuple[Any, Any]]:
    """The API on its own store (as ``coordinator api`` runs it) and a client of it."""
    app = create_app(ApiSettings(dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix),
                     registry=make_registry(prefix), auth=TokenAuth.parse(TOKENS),
                     run_jobs=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api",
            headers={"Authorization": f"Bearer {OPERATOR}"}) as client:
        yield app, client


async def test_the_api_publishes_the_first_command_of_each_saga_it_starts(
    topics: str, fresh_db: str, kafka_bootstrap: str,
) -> None:
    """No relay runs: the first command reaches Kafka because the API published it after the
    start's commit, and its row is deleted."""
    async with _api(fresh_db, kafka_bootstrap, topics) as (app, client):
        publisher = app.state.publishing.publisher
        deadline = time.monotonic() + 20
        while not publisher._tasks:  # the producer connects in the background
            assert time.monotonic() < deadline, "the API's producer never connected"
            await asyncio.sleep(0.05)
        started = await client.post("/sagas", json={"type": "tcc_order", "input": INPUT})
        assert started.status_code == 201, started.text
        arrived = await _first_command(kafka_bootstrap, command_topic("payments", topics), 10)
        assert arrived is not None, "the first command never reached Kafka"
        assert str(decode_command(arrived[1]).saga_id) == started.json()["saga_id"]
        await publisher.flush()
        assert (publisher.sent, publisher.left) == (1, 0)
        assert await _outbox(fresh_db) == []


async def test_an_api_without_kafka_serves_and_leaves_its_commands_to_the_relays(
    topics: str, fresh_db: str,
) -> None:
    async with _api(fresh_db, "127.0.0.1:9", topics) as (app, client):
        started = await client.post("/sagas", json={"type": "tcc_order", "input": INPUT})
        assert started.status_code == 201, started.text
        (row,) = await _outbox(fresh_db)
        assert row["leased"] and row["key"] == started.json()["saga_id"]
        assert app.state.publishing.publisher.left == 1  # a relay sends it after the lease
