"""The relay as a function: many concurrent ticks publish every row once, in per-key order."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from outbox_relay import RelayTick, enqueue
from outbox_relay.schema import SHARD_LOCK_NAMESPACE
from outbox_relay.shards import ShardOwnership
from tests.integration.test_relay_helpers import (
    check_per_key_order,
    consume,
    fast_settings,
    message,
    outbox_count,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def test_concurrent_ticks_publish_every_row_once_in_key_order(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, outbox_admin: asyncpg.Connection
) -> None:
    topic = f"{topic_prefix}.tick"
    keys = [f"saga-{i}" for i in range(30)]
    per_key = 20
    admin = outbox_admin
    registry = CollectorRegistry()
    # Eight warm instances, each taking at most 3 shards per tick and small batches, so
    # ticks overlap on the same shards all the time.
    ticks = [
        RelayTick(fast_settings(fresh_db, kafka_bootstrap, batch_size=7), max_shards=3,
                  registry=registry if i == 0 else None)
        for i in range(8)
    ]
    writing = True

    async def writer(group: list[str], seqs: range) -> None:
        conn = await asyncpg.connect(fresh_db)
        try:
            for seq in seqs:
                for key in group:
                    async with conn.transaction():
                        await enqueue(conn, [message(topic, key, seq)])
                await asyncio.sleep(0.002 * (seq % 2))
        finally:
            await conn.close()

    async def invoker(tick: RelayTick) -> int:
        published = 0
        while writing or await outbox_count(fresh_db):
            published += (await tick()).published
            await asyncio.sleep(0.005)
        return published

    try:
        # A backlog first (every tick finds work at once), then writers racing the ticks.
        await writer(keys, range(per_key // 2))
        invokers = [asyncio.ensure_future(invoker(t)) for t in ticks]
        await asyncio.gather(*(writer(keys[i::3], range(per_key // 2, per_key))
                               for i in range(3)))
        writing = False
        counts = await asyncio.gather(*invokers)
        total = len(keys) * per_key
        # Every row deleted was acknowledged exactly once: no two ticks sent the same row.
        assert sum(counts) == total, counts
        assert sum(1 for c in counts if c) > 1, counts  # the work was really shared
        # Read past the expected count (for a few seconds) so a duplicate would show.
        received = await consume(kafka_bootstrap, [topic], total + 1, 4)
        assert len(received) == total
        assert len({r.message_id for r in received}) == total
        seqs = check_per_key_order(received)
        assert all(seqs[k] == list(range(per_key)) for k in keys)
        # Each publishing tick is a new ownership epoch of its shards.
        assert all(r.epoch is not None for r in received)
        epochs = await admin.fetchval("SELECT count(*) FROM sagaflow_outbox_shard WHERE epoch > 0")
        assert epochs == len({r.epoch.split(".")[0] for r in received if r.epoch})
        # No advisory lock outlives its tick's transaction.
        locks = await admin.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert locks == 0
    finally:
        for t in ticks:
            await t.close()


async def test_tick_leaves_the_shards_a_relay_loop_owns(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, outbox_admin: asyncpg.Connection
) -> None:
    topic = f"{topic_prefix}.mixed"
    admin = outbox_admin
    loop_conn = await asyncpg.connect(fresh_db)
    tick = RelayTick(fast_settings(fresh_db, kafka_bootstrap))
    try:
        # A relay loop's shard ownership (session locks), on a connection of its own.
        ownership = ShardOwnership(loop_conn, 16, "loop")
        await ownership.join()
        await ownership.rebalance()
        assert len(ownership.owned) == 16
        async with admin.transaction():
            await enqueue(admin, [message(topic, f"k{i}", 0) for i in range(20)])
        report = await tick()
        assert report.shards == [] and report.published == 0
        assert await outbox_count(fresh_db) == 20
        await ownership.release_all()
        report = await tick()
        assert report.published == 20 and len(report.shards) > 1
        assert await outbox_count(fresh_db) == 0
    finally:
        await tick.close()
        await loop_conn.close()


async def test_a_killed_tick_frees_its_shards_with_its_connection(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, outbox_admin: asyncpg.Connection
) -> None:
    topic = f"{topic_prefix}.killed"
    admin = outbox_admin
    stuck = await asyncpg.connect(fresh_db)
    tick = RelayTick(fast_settings(fresh_db, kafka_bootstrap))
    try:
        async with admin.transaction():
            await enqueue(admin, [message(topic, f"k{i}", 0) for i in range(20)])
        # A tick frozen mid-publish: its transaction holds every shard's lock.
        tx = stuck.transaction()
        await tx.start()
        await stuck.execute("SELECT pg_advisory_xact_lock($1, s) FROM generate_series(0, 15) s",
                            SHARD_LOCK_NAMESPACE)
        assert (await tick()).published == 0
        # Its instance dies: Postgres ends the session (as when the socket closes). The
        # timeout makes the call wait until the backend has exited and so let go of its locks.
        pid = stuck.get_server_pid()
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
        report = await tick()
        assert report.published == 20
        assert await outbox_count(fresh_db) == 0
    finally:
        stuck.terminate()
        await tick.close()
