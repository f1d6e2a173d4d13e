"""An idle LISTENing relay waits for hints instead of polling, and still shares shards."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from outbox_relay import Relay, RelayWaker, enqueue, install
from tests.integration.test_relay_helpers import fast_settings, message
from tests.integration.test_relay_waker import keys_within

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def _owners(conn: asyncpg.Connection) -> Counter[str | None]:
    return Counter(r["owner"] for r in await conn.fetch("SELECT owner FROM sagaflow_outbox_shard"))


async def test_an_idle_relay_sends_only_its_shard_check_and_a_hint_still_wakes_it(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    pool = await asyncpg.create_pool(fresh_db, min_size=1, max_size=2)
    await install(conn, shard_count=16)
    await enqueue(conn, [message(topic, "k-0", 0)])  # creates the topic in the first round
    settings = fast_settings(fresh_db, kafka_bootstrap, poll_interval=30.0,
                             rebalance_interval=1.0, lag_interval=0.5)
    waker = RelayWaker(pool)
    await waker.start()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest")
    queries: list[str] = []
    try:
        async with Relay(settings, registry=CollectorRegistry()) as relay:
            await consumer.start()
            assert await keys_within(consumer, 10, {"k-0"}) == {"k-0"}
            await asyncio.sleep(0.5)  # the rounds after the first batch are over
            assert relay._conn is not None
            relay._conn.add_query_logger(lambda record: queries.append(record.query))
            await asyncio.sleep(3.0)
            idle = list(queries)
            # Three shard checks (one a second) and nothing else: no claim, no lag query.
            assert 2 <= len(idle) <= 4, idle
            started = time.monotonic()
            await enqueue(conn, [message(topic, "k-1", 1)])
            waker.wake()
            assert await keys_within(consumer, 2.0, {"k-1"}) == {"k-1"}
            assert time.monotonic() - started < 1.0
    finally:
        await consumer.stop()
        await waker.stop()
        await pool.close()
        await conn.close()


async def test_idle_relays_still_share_shards_and_take_over_a_stopped_ones(
    fresh_db: str, kafka_bootstrap: str
) -> None:
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)

    def settings(relay_id: str) -> object:
        return fast_settings(fresh_db, kafka_bootstrap, poll_interval=30.0,
                             rebalance_interval=0.3, relay_id=relay_id)

    async def until(want: dict[str | None, int], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (owners := await _owners(conn)) != Counter(want):
            assert time.monotonic() < deadline, owners
            await asyncio.sleep(0.05)

    try:
        async with Relay(settings("a"), registry=CollectorRegistry()):  # type: ignore[arg-type]
            await until({"a": 16}, 5)
            async with Relay(settings("b"), registry=CollectorRegistry()):  # type: ignore[arg-type]
                # "a" sleeps with nothing to do: its idle wait still rebalances.
                await until({"a": 8, "b": 8}, 5)
            await until({"a": 16}, 5)
    finally:
        await conn.close()



async def test_a_connection_left_mid_operation_is_replaced_and_the_relay_goes_on(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """When the primary died, a relay's idle connection was left waiting for a server that
    was gone, and its next claim raised asyncpg's InternalClientError ("another operation is
    in progress"), which ended the relay. It must drop that connection and connect again."""
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    await enqueue(conn, [message(topic, "k-0", 0)])
    settings = fast_settings(fresh_db, kafka_bootstrap, poll_interval=30.0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest")
    try:
        async with Relay(settings, registry=CollectorRegistry()) as relay:
            await consumer.start()
            assert await keys_within(consumer, 10, {"k-0"}) == {"k-0"}
            await asyncio.sleep(0.5)  # idle now: the next hint is met by a burst
            first = relay._conn
            assert first is not None
            burst = relay._burst

            async def left_mid_operation() -> tuple[int, int]:
                relay._burst = burst  # type: ignore[method-assign]
                raise asyncpg.InternalClientError(
                    "cannot switch to state 12; another operation (2) is in progress")

            relay._burst = left_mid_operation  # type: ignore[method-assign]
            await enqueue(conn, [message(topic, "k-1", 1)], notify=True)
            assert await keys_within(consumer, 10, {"k-1"}) == {"k-1"}
            assert first.is_closed() and relay._conn is not first
            assert relay._task is not None and not relay._task.done()
    finally:
        await consumer.stop()
        await conn.close()
