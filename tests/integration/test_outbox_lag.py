# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""The outbox lag and backlog gauges, of the relay and of the coordinator, on real Postgres and
Kafka: rows held back make the lag rise; once they are published it falls back to zero.

Rows are held back the way production holds them: a row Kafka can never accept (an invalid
topic name) is dead-lettered by the relay, and every later row of its key waits behind it
until an operator discards the dead letter.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from coordinator.observability.scan import WorkerObservability
from coordinator.store import SagaStore
from outbox_relay import Relay, discard_dead_letter, install, list_dead_letters
from tests.integration.test_relay_helpers import fast_settings, message, write
from tests.integration.test_store_support import (
    clock,  # noqa: F401
    store,  # noqa: F401
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def poison_key(conn: asyncpg.Connection, key: str) -> None:
    """An outbox row for ``key`` (in the key's shard, as ``enqueue`` places it) that Kafka
    refuses, an invalid topic name: it stops the key."""
    await conn.execute(
        "INSERT INTO sagaflow_outbox (shard, topic, key, payload, message_id, headers) "
        "SELECT ((hashtextextended($1, 0) & 9223372036854775807) % shard_count)::smallint,"
        " 'bad topic!', $1, 'x', $2, '{}' FROM sagaflow_outbox_meta", key, uuid.uuid4())


async def until(check: Callable[[], object], what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def release(conn: asyncpg.Connection, key: str) -> None:
    (dead,) = [d for d in await list_dead_letters(conn) if d.key == key]
    assert await discard_dead_letter(conn, dead.id)


async def test_relay_lag_rises_while_rows_are_held_and_falls_when_they_go(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    await poison_key(conn, "held")
    await write(fresh_db, [message(topic, "held", s) for s in range(3)]
                + [message(topic, f"free-{i}", 0) for i in range(5)])
    registry = CollectorRegistry()

    def gauge(name: str) -> float:
        value = registry.get_sample_value(f"sagaflow_relay_outbox_{name}")
        return -1.0 if value is None else value

    try:
        async with Relay(fast_settings(fresh_db, kafka_bootstrap, lag_interval=0.2),
                         registry=registry):
            await until(lambda: gauge("backlog_rows") == 3,
                        f"backlog {gauge('backlog_rows')}, never the 3 held rows")
            first = gauge("lag_seconds")
            assert first > 0
            await asyncio.sleep(1.0)
            await until(lambda: gauge("lag_seconds") >= first + 0.8, "lag did not rise")
            assert gauge("backlog_rows") == 3
            await release(conn, "held")
            await until(lambda: gauge("backlog_rows") == 0, "held rows never published")
            await until(lambda: gauge("lag_seconds") == 0, "lag did not fall back to 0")
        assert await conn.fetchval("SELECT count(*) FROM sagaflow_outbox") == 0
    finally:
        await conn.close()


async def test_coordinator_lag_gauge_follows_the_held_commands(
    store: SagaStore, fresh_db: str, kafka_bootstrap: str
) -> None:
    async with store.pool.acquire() as conn:
        held = uuid.uuid4()
        await poison_key(conn, str(held))  # before the saga: its commands queue behind it
        await store.start_saga("ship_order", {"order_id": "held", "amount": 1}, saga_id=held)
        await store.start_saga("ship_order", {"order_id": "free", "amount": 1})
        scanner = WorkerObservability(store)
        gauge = scanner.metrics.registry.get_sample_value
        async with Relay(fast_settings(fresh_db, kafka_bootstrap), registry=CollectorRegistry()):
            async def only_held_left() -> bool:
                keys = {r["key"] for r in await conn.fetch("SELECT key FROM sagaflow_outbox")}
                return keys == {str(held)}

            await until(only_held_left, "the free saga's command was never published")
            await scanner.scan()
            assert gauge("sagaflow_outbox_backlog_rows") == 1
            first = gauge("sagaflow_outbox_lag_seconds")
            assert first is not None and first > 0
            await asyncio.sleep(1.0)
            await scanner.scan()
            later = gauge("sagaflow_outbox_lag_seconds")
            assert later is not None and later >= first + 0.9
            await release(conn, str(held))
            await until(lambda: conn.fetchval("SELECT count(*) = 0 FROM sagaflow_outbox"),
                        "the held command was never published")
            await scanner.scan()
            assert gauge("sagaflow_outbox_backlog_rows") == 0
            assert gauge("sagaflow_outbox_lag_seconds") == 0

