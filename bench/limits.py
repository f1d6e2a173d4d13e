"""The machine's limits, measured in the same run as the sagas.

* Postgres: one-row INSERT transactions per second from asyncpg, ``concurrency`` connections.
* Kafka: raw aiokafka produce -> consume, with the stack's producer settings (idempotent,
  ``acks=all``): the rate when the producer streams, and the round trip of one message at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.load import percentile
from bench.stack import dsn_for
from participant_sdk.pools import create_pool


async def postgres_write_rate(admin_dsn: str, *, concurrency: int, duration_s: float,
                              commit_samples: int = 300) -> dict[str, Any]:
    """One-row INSERT transactions per second (each statement its own commit), and the
    latency of one such commit alone (``commit_ms``)."""
    async with scratch_pool(admin_dsn, "limit", concurrency) as pool:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE rows (id bigserial PRIMARY KEY, saga_id uuid,"
                               " body text, at timestamptz DEFAULT now())")
        body = "x" * 200
        # One commit's latency: sequential 1-row INSERT commits on one connection.
        commits: list[float] = []
        async with pool.acquire() as conn:
            for _ in range(commit_samples):
                t = time.perf_counter()
                await conn.execute("INSERT INTO rows (saga_id, body) VALUES ($1, $2)",
                                   uuid.uuid4(), body)
                commits.append((time.perf_counter() - t) * 1000)
        count = 0
        stop_at = time.monotonic() + duration_s

        async def writer() -> None:
            nonlocal count
            async with pool.acquire() as conn:
                while time.monotonic() < stop_at:
                    await conn.execute("INSERT INTO rows (saga_id, body) VALUES ($1, $2)",
                                       uuid.uuid4(), body)
                    count += 1

        start = time.monotonic()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
        elapsed = time.monotonic() - start
        # The same, but acquiring from the pool per transaction as the stack's code does:
        # asyncpg's default reset on release adds a round trip and a commit each time.
        pooled = 0
        stop_at = time.monotonic() + duration_s

        async def pooled_writer() -> None:
            nonlocal pooled
            while time.monotonic() < stop_at:
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("INSERT INTO rows (saga_id, body) VALUES ($1, $2)",
                                       uuid.uuid4(), body)
                pooled += 1

        pooled_start = time.monotonic()
        await asyncio.gather(*(pooled_writer() for _ in range(concurrency)))
        pooled_elapsed = time.monotonic() - pooled_start
    return {"transactions": count, "seconds": elapsed, "rate": count / elapsed,
            "concurrency": concurrency,
            "pool_acquire_per_txn_rate": pooled / pooled_elapsed,
            "commit_ms": {"p50": percentile(commits, 50), "p95": percentile(commits, 95),
                          "count": len(commits)}}


@contextlib.asynccontextmanager
async def scratch_pool(admin_dsn: str, suffix: str, size: int) -> AsyncIterator[asyncpg.Pool]:
    """A pool of ``size`` connections on a new database, dropped afterwards."""
    name = f"bench_{uuid.uuid4().hex[:8]}_{suffix}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        # The stack's own pool kind: no reset query on release.
        pool = await create_pool(dsn_for(admin_dsn, name), min_size=size, max_size=size)
        try:
            yield pool
        finally:
            await pool.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def scratch_topic(bootstrap: str, suffix: str) -> str:
    """A new 4-partition topic for one measurement; its name."""
    topic = f"bench{uuid.uuid4().hex[:8]}.{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
    finally:
        await admin.close()
    return topic


async def kafka_round_trip(bootstrap: str, *, duration_s: float, pings: int) -> dict[str, Any]:
    """Streamed produce->consume rate, and one-at-a-time produce->consume latency."""
    topic = await scratch_topic(bootstrap, "limit")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                                linger_ms=5, max_batch_size=512 * 1024)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await producer.start()
    await consumer.start()
    try:
        # Wait until the consumer owns its partitions, so the first message is not lost in a join.
        while not consumer.assignment():
            await asyncio.sleep(0.05)
            await consumer.getmany(timeout_ms=50)
        payload = b"x" * 400
        # Round trip of one message at a time: send, await the ack, consume it. No linger here
        # (as the participants' reply producer); the relay adds its linger_ms to each command.
        pinger = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                  acks="all", linger_ms=0)
        await pinger.start()
        try:
            rtts: list[float] = []
            for i in range(pings):
                t = time.perf_counter()
                await pinger.send_and_wait(topic, payload, key=f"ping-{i}".encode())
                got = False
                while not got:
                    batch = await consumer.getmany(timeout_ms=1000)
                    got = any(batch.values())
                rtts.append((time.perf_counter() - t) * 1000)
        finally:
            await pinger.stop()
        # Streamed: produce as fast as acks allow (bounded in flight), consume concurrently.
        consumed = 0
        produced = 0
        stop = asyncio.Event()
        caught_up = asyncio.Event()
        target: list[int] = []

        async def consume() -> None:
            nonlocal consumed
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=10_000)
                consumed += sum(len(v) for v in batch.values())
                if target and consumed >= target[0]:
                    caught_up.set()

        reader = asyncio.create_task(consume())
        start = time.monotonic()
        stop_at = start + duration_s
        in_flight: set[asyncio.Future[Any]] = set()
        i = 0
        while time.monotonic() < stop_at:
            fut = await producer.send(topic, payload, key=f"saga-{i % 5000}".encode())
            in_flight.add(fut)
            fut.add_done_callback(in_flight.discard)
            produced += 1
            i += 1
            if len(in_flight) >= 5000:
                await asyncio.wait(set(in_flight), return_when=asyncio.FIRST_COMPLETED)
        await producer.flush()
        target.append(produced)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(caught_up.wait(), 30)
        elapsed = time.monotonic() - start
        stop.set()
        await reader
    finally:
        await consumer.stop()
        await producer.stop()
        with contextlib.suppress(Exception):
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.delete_topics([topic])
            finally:
                await admin.close()
    return {
        "stream_messages": consumed,
        "stream_seconds": elapsed,
        "stream_rate": consumed / elapsed,
        "round_trip_ms": {"p50": percentile(rtts, 50), "p95": percentile(rtts, 95),
                          "p99": percentile(rtts, 99), "count": len(rtts)},
        "round_trip_rate": 1000 / percentile(rtts, 50),
    }
