# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""Relay wake-up hints sent after commits: coalesced, never lost, and wired to the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.hints.relay import start_relay_waker
from coordinator.store import SagaStore
from outbox_relay import NOTIFY_CHANNEL, Relay, RelayWaker, enqueue, install
from tests.integration.test_relay_helpers import fast_settings, message
from tests.integration.test_store_support import (
    clock,  # noqa: F401
    store,  # noqa: F401
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class Hints:
    """A LISTEN on the relays' channel, counting what arrives."""

    def __init__(self) -> None:
        self.count = 0
        self.conn: asyncpg.Connection | None = None

    def _on(self, *_: object) -> None:
        self.count += 1

    async def settle(self, seconds: float = 0.3) -> int:
        await asyncio.sleep(seconds)
        return self.count


@pytest.fixture
async def hints(fresh_db: str) -> AsyncIterator[Hints]:
    listener = Hints()
    conn = await asyncpg.connect(fresh_db)
    await conn.add_listener(NOTIFY_CHANNEL, listener._on)
    listener.conn = conn
    yield listener
    await conn.close()


async def test_hints_are_coalesced_and_a_pending_one_is_sent_at_stop(
    fresh_db: str, hints: Hints
) -> None:
    pool = await asyncpg.create_pool(fresh_db, min_size=1, max_size=2)
    waker = RelayWaker(pool, min_interval=timedelta(milliseconds=300))
    await waker.start()
    try:
        for _ in range(50):  # a burst of commits: one hint
            waker.wake()
        assert await hints.settle(0.15) == 1
        waker.wake()  # during the pause after a hint: sent when the pause ends
        waker.wake()
        assert await hints.settle(0.05) == 1
        assert await hints.settle(0.4) == 2
        await asyncio.sleep(0.3)
        waker.wake()
        waker.wake()
    finally:
        await waker.stop()  # the pending hint goes out before the task ends
        await pool.close()
    assert await hints.settle(0.2) == 3
    assert waker.sent == 3


async def test_a_hint_wakes_an_idle_relay_at_once(fresh_db: str, kafka_bootstrap: str,
                                                  topic_prefix: str) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    pool = await asyncpg.create_pool(fresh_db, min_size=1, max_size=2)
    await install(conn, shard_count=16)
    # The relay polls every 5 s: only a hint can make it publish sooner.
    settings = fast_settings(fresh_db, kafka_bootstrap, min_poll_interval=5.0, poll_interval=5.0)
    waker = RelayWaker(pool)
    await waker.start()
    # Published by the relay's first round: creates the topic, so that later sends do not wait
    # for Kafka's topic creation.
    await enqueue(conn, [message(topic, "k-0", 0)])
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest")
    try:
        async with Relay(settings, registry=CollectorRegistry()):
            await consumer.start()
            assert await keys_within(consumer, 10, {"k-0"}) == {"k-0"}
            await asyncio.sleep(0.5)  # the relay's first rounds are over: it sleeps
            await enqueue(conn, [message(topic, "k-1", 1)])  # autocommit, no hint
            assert await keys_within(consumer, 1.0) == set()
            for seq in (2, 3):  # the first hint also brings k-1; the second proves none is lost
                await enqueue(conn, [message(topic, f"k-{seq}", seq)])
                waker.wake()
                want = {"k-1", "k-2"} if seq == 2 else {"k-3"}
                assert await keys_within(consumer, 1.5, want) == want
                await asyncio.sleep(0.3)
    finally:
        await consumer.stop()
        await waker.stop()
        await pool.close()
        await conn.close()


async def keys_within(consumer: AIOKafkaConsumer, seconds: float,
                      want: set[str] | None = None) -> set[str]:
    """Keys read within ``seconds`` (returns early once ``want`` is read)."""
    keys: set[str] = set()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and (want is None or keys != want):
        batch = await consumer.getmany(timeout_ms=max(1, int(min(left, 0.1) * 1000)))
        keys |= {r.key.decode() for part in batch.values() for r in part if r.key}
    return keys


@pytest.mark.parametrize("wake", [True, False])
async def test_store_commits_with_commands_send_hints_when_enabled(
    store: SagaStore, hints: Hints, wake: bool
) -> None:
    waker = await start_relay_waker(store, CoordinatorSettings(wake_relays=wake))
    try:
        await store.start_saga("tcc_order", {"order_id": "o-1", "amount": 10})
        assert await hints.settle() == (1 if wake else 0)
    finally:
        if waker is not None:
            await waker.stop()
