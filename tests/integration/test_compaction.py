# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""Scheduled compaction in the worker, on a real Postgres (and the worker's real Kafka
consumer): long histories get checkpointed and archived, short ones and sagas whose replay
disagrees are left alone, and one replica at a time runs a round."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from uuid import UUID

import asyncpg
import pytest

from coordinator.config.settings import CoordinatorSettings
from coordinator.engine import ReplyReceived
from coordinator.runtime.worker import Worker
from coordinator.runtime.worker.compaction import COMPACTION_LOCK_KEY, CompactionLoop
from coordinator.store import PendingEvent, SagaStore
from participant_sdk.protocol import ErrorKind, Outcome, reply_topic
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
)
from tests.integration.test_worker_support import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

INPUT = {"order_id": "o-1", "amount": 10}
THRESHOLD = 5


async def _long_saga(store: SagaStore, clock: ManualClock) -> UUID:
    """A tcc_order whose first try fails until its retries run out: a dozen events."""
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    for _ in range(3):
        (command,) = [c for c in await outbox_commands(store) if c.saga_id == saga_id]
        await store.apply_many([PendingEvent(saga_id, ReplyReceived(
            reply=reply_to(command, (Outcome.FAILED, ErrorKind.TRANSIENT))))])
        clock.advance(timedelta(seconds=1))
        await store.fire_due_timers()
    record = await store.get_saga(saga_id)
    assert record is not None and record.history_seq >= THRESHOLD
    return saga_id


def _settings(dsn: str, bootstrap: str, prefix: str, **kw: object) -> CoordinatorSettings:
    return CoordinatorSettings(dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix,
                               group_id=f"{prefix}-g", pool_max_size=3,
                               shutdown_grace=timedelta(seconds=5), **kw)  # type: ignore[arg-type]


async def test_the_worker_checkpoints_long_histories_on_its_schedule(
    store: SagaStore, clock: ManualClock, fresh_db: str, kafka_bootstrap: str,
    topic_prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    long_one, tampered = await _long_saga(store, clock), await _long_saga(store, clock)
    short = (await store.start_saga("ship_order", INPUT)).record.saga_id
    async with store.pool.acquire() as conn:
        await conn.execute("UPDATE sagas SET snapshot = jsonb_set(snapshot::jsonb, '{reason}',"
                           " '\"edited by hand\"')::json WHERE id = $1", tampered)
    seq = (await store.get_saga(long_one)).history_seq  # type: ignore[union-attr]
    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1})
    settings = _settings(fresh_db, kafka_bootstrap, topic_prefix,
                         compact_interval=timedelta(milliseconds=200),
                         compact_min_events=THRESHOLD, compact_archive=True)
    with caplog.at_level(logging.INFO, logger="coordinator.runtime.worker.compaction"):
        async with Worker(settings, store.registry, store=store, name="w") as worker:
            assert worker.compaction is not None
            deadline = time.monotonic() + 20
            while worker.compaction.rounds < 2:
                assert time.monotonic() < deadline, "no compaction round ran"
                await asyncio.sleep(0.05)
    async with store.pool.acquire() as conn:
        checkpoints = {r["saga_id"]: r["seq"] for r in await conn.fetch(
            "SELECT saga_id, seq FROM saga_snapshots")}
        archived = await conn.fetchval(
            "SELECT count(*) FROM saga_history_archive WHERE saga_id = $1", long_one)
        left = await conn.fetchval("SELECT count(*) FROM saga_history WHERE saga_id = $1",
                                   long_one)
    assert checkpoints == {long_one: seq}  # the short one and the tampered one: none
    assert (archived, left) == (seq, 0)
    verdict = await store.verify(long_one)
    assert verdict.ok and (verdict.from_seq, verdict.replayed_events) == (seq, 0)
    assert (await store.verify(short)).ok
    refused = [r.getMessage() for r in caplog.records
               if r.name == "coordinator.runtime.worker.compaction" and r.levelno == logging.ERROR]
    assert refused and all(str(tampered) in m and "not checkpointed" in m for m in refused)


async def test_one_replica_at_a_time_and_off_by_default(
    store: SagaStore, clock: ManualClock, fresh_db: str
) -> None:
    saga_id = await _long_saga(store, clock)
    loop = CompactionLoop(store, _settings(fresh_db, "unused:9092", "p",
                                           compact_interval=timedelta(seconds=60),
                                           compact_min_events=THRESHOLD))
    other = await asyncpg.connect(fresh_db)  # another replica, in the middle of its round
    try:
        assert await other.fetchval("SELECT pg_try_advisory_lock($1)", COMPACTION_LOCK_KEY)
        assert (await loop.run_once()).ran is False
        assert (await store.verify(saga_id)).from_seq == 0
        await other.fetchval("SELECT pg_advisory_unlock($1)", COMPACTION_LOCK_KEY)
        done = await loop.run_once()
        assert (done.ran, done.compacted, done.refused) == (True, 1, 0)
        assert (await store.verify(saga_id)).from_seq > 0
        assert (await loop.run_once()).compacted == 0  # nothing new since the checkpoint
    finally:
        await other.close()
    assert CoordinatorSettings().compact_interval == timedelta(0)
    with pytest.raises(ValueError, match="off"):
        CompactionLoop(store, CoordinatorSettings())
