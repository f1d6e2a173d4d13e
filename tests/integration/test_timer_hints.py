"""Timer hints on real Postgres: a worker that sleeps long (``timer_max_idle`` 30 s) still
fires a timer another process wrote due sooner, because that process NOTIFYs after its commit;
the listener comes back after its connection is killed."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.hints.timers import TimerHintListener, start_timer_waker
from coordinator.runtime.signal_wire import signal_topic
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import reply_topic
from tests.integration.test_api_support import app_client
from tests.integration.test_signals_api import AwaitPayment
from tests.integration.test_store_support import migrated, outbox_commands
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration

LONG_SLEEP = timedelta(seconds=30)


async def _until(predicate: object, limit: float, what: str) -> float:
    """Seconds until ``predicate()`` (sync or async) holds; fails after ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        value = predicate()  # type: ignore[operator]
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not within {limit} s")


@pytest.fixture
async def registry(fresh_db: str, topic_prefix: str) -> SagaRegistry:
    await migrated(fresh_db)
    return SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])


async def test_a_delayed_start_through_the_api_wakes_a_worker_that_sleeps_long(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, registry: SagaRegistry
) -> None:
    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1,
                                          signal_topic(topic_prefix): 1})
    settings = CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
        group_id=f"{topic_prefix}-coordinator", timer_max_idle=LONG_SLEEP,
        publish_commands=False, pool_max_size=3, shutdown_grace=timedelta(seconds=5))
    async with Worker(settings, registry, name="w1") as worker, \
            await SagaStore.open(fresh_db, registry, max_size=2) as api_store, \
            app_client(api_store) as api:
        assert worker._hints is not None
        await _until(lambda: worker._hints.listening, 10, "the worker listening")
        await asyncio.sleep(0.5)  # the worker's loops are in their long sleep now
        started = await api.post(
            "/sagas", json={"type": "await_payment", "input": {"order_id": "o-1"},
                            "delay_seconds": 1},
            headers={"Authorization": "Bearer operator-token-1"})
        assert started.status_code == 201, started.text
        assert started.json()["status"] == "scheduled"
        took = await _until(lambda: _has_command(api_store), 8, "the first command")
        # Due after 1 s; without the hint the worker would look again only after 30 s.
        assert 0.9 <= took < 5, took
        assert worker.timers_fired == 1


async def _has_command(store: SagaStore) -> bool:
    return bool(await outbox_commands(store))


async def test_only_timers_due_before_the_workers_next_look_are_hinted_and_it_reconnects(
    fresh_db: str, registry: SagaRegistry
) -> None:
    hints: list[float] = []
    listener = TimerHintListener(lambda: asyncpg.connect(fresh_db),
                                 lambda: hints.append(time.monotonic()), name="t")
    settings = CoordinatorSettings(dsn=fresh_db, timer_max_idle=timedelta(seconds=10))
    async with await SagaStore.open(fresh_db, registry, max_size=2) as store:
        waker = await start_timer_waker(store, settings)
        assert waker is not None
        await listener.start()
        try:
            await _until(lambda: listener.listening, 10, "listening")
            assert len(hints) == 1  # after connecting: hints may have been missed before
            await store.start_saga("await_payment", {"order_id": "later"},
                                   start_at=datetime.now(UTC) + timedelta(hours=1))
            await asyncio.sleep(0.5)
            assert listener.received == 0  # an hour away: the worker's own sleep finds it
            await store.start_saga("await_payment", {"order_id": "soon"},
                                   start_at=datetime.now(UTC) + timedelta(seconds=5))
            await _until(lambda: listener.received == 1, 5, "a hint")
            async with store.pool.acquire() as conn:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE pid <> pg_backend_pid() AND datname = current_database()"
                    " AND query LIKE 'LISTEN%'")
            await _until(lambda: len(hints) == 3 and listener.listening, 10,
                         "listening again, with a hint for what it may have missed")
        finally:
            await listener.stop()
            await waker.stop()
