"""Relays as separate processes: SIGKILL mid-batch, several owners, failover."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter

import asyncpg
import pytest

from outbox_relay import enqueue, install
from tests.integration.test_relay_helpers import (
    check_per_key_order,
    consume,
    message,
    relay_env,
    relay_process,
    wait_outbox_empty,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(60)]


async def _writer(dsn: str, topic: str, keys: list[str], per_key: int, pause: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for seq in range(per_key):
            async with conn.transaction():
                await enqueue(conn, [message(topic, k, seq) for k in keys])
            await asyncio.sleep(pause)
    finally:
        await conn.close()


async def test_sigkill_mid_batch_repeatedly_loses_nothing(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    keys = [f"saga-{i}" for i in range(100)]
    per_key = 60
    env = relay_env(fresh_db, kafka_bootstrap, batch_size="100", relay_id="victim")
    writer = asyncio.create_task(_writer(fresh_db, topic, keys, per_key, 0.03))
    kills = 0
    try:
        for _ in range(6):
            proc = relay_process(env)
            await asyncio.sleep(random.uniform(0.4, 0.9))
            proc.send_signal(signal.SIGKILL)
            # It was alive when the kill landed (not already exited): the fault fired.
            assert proc.wait(5) == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
            kills += 1
        await writer
        final = relay_process(env)
        await wait_outbox_empty(fresh_db, 30)
        live = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sagaflow-relay:victim'"
        )
        for _ in range(100):  # the final relay is up, so its signal handlers are installed
            if await conn.fetchval(live) == 1:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        owned = "SELECT count(*) FROM sagaflow_outbox_shard WHERE owner IS NOT NULL"
        final.send_signal(signal.SIGTERM)
        assert final.wait(15) == 0
        # Graceful stop released every shard.
        assert await conn.fetchval(owned) == 0
    finally:
        writer.cancel()
        await conn.close()
    total = len(keys) * per_key
    received = await consume(kafka_bootstrap, [topic], total, 30)
    seqs = check_per_key_order(received)
    assert all(sorted(set(v)) == list(range(per_key)) for v in seqs.values())
    assert set(seqs) == set(keys)
    # A duplicate is the same message (same id), and there are at most a few batches per kill.
    by_id: dict[str, set[tuple[str, int]]] = {}
    for r in received:
        by_id.setdefault(r.message_id, set()).add((r.key, r.seq))
    assert len(by_id) == total
    assert all(len(v) == 1 for v in by_id.values())
    duplicates = len(received) - total
    assert duplicates <= kills * 2 * 100, duplicates


async def _owners(conn: asyncpg.Connection) -> dict[int, str | None]:
    rows = await conn.fetch("SELECT shard, owner FROM sagaflow_outbox_shard")
    return {r["shard"]: r["owner"] for r in rows}


@pytest.mark.parametrize("relays", [2, 3])
async def test_several_relays_one_owner_per_shard_and_failover(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, relays: int
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    keys = [f"saga-{i}" for i in range(64)]
    per_key = 80
    procs = {
        f"r{i}": relay_process(
            relay_env(fresh_db, kafka_bootstrap, batch_size="50", relay_id=f"r{i}")
        )
        for i in range(relays)
    }
    writer = asyncio.create_task(_writer(fresh_db, topic, keys, per_key, 0.04))
    try:
        # Shards spread over all relays.
        deadline = time.monotonic() + 10
        while True:
            owners = await _owners(conn)
            counts = Counter(owners.values())
            if set(counts) == set(procs) and max(counts.values()) <= -(-16 // relays):
                break
            assert time.monotonic() < deadline, counts
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        victim = "r0"
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(5)
        killed_at = time.monotonic()
        while True:
            owners = await _owners(conn)
            if all(o is not None and o != victim for o in owners.values()):
                break
            assert time.monotonic() - killed_at < 5, owners
            await asyncio.sleep(0.05)
        failover = time.monotonic() - killed_at
        await writer
        await wait_outbox_empty(fresh_db, 30)
    finally:
        writer.cancel()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(15)
        await conn.close()
    assert failover < 5
    total = len(keys) * per_key
    received = await consume(kafka_bootstrap, [topic], total, 30)
    check_per_key_order(received)
    assert len({r.message_id for r in received}) == total
    # One owner at a time: in every partition, the epochs stamped on a shard's messages never
    # go back (an older owner never publishes after a newer one began).
    last: dict[tuple[int, int], int] = {}
    for r in received:  # sorted by (topic, partition, offset)
        assert r.epoch is not None
        shard, epoch = (int(x) for x in r.epoch.split("."))
        prev = last.get((r.partition, shard), 0)
        assert epoch >= prev, (r, prev)
        last[(r.partition, shard)] = epoch
    assert len({r.epoch for r in received}) >= 16
