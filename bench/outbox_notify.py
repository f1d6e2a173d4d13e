"""What waking the relay costs writers, and what it buys, measured side by side.

Three ways for writers to commit an outbox row: ``plain`` (no hint: the relay finds it at its
next poll), ``notify`` (``enqueue(notify=True)``: a NOTIFY inside the writer's transaction) and
``waker`` (a :class:`~outbox_relay.RelayWaker` hint after the commit, coalesced, on its own
connection).

* Writers: ``--writers`` connections commit one-message outbox transactions for ``--seconds``
  in each mode, the order rotating over ``--rounds``. Reported: commits/s and the ratio of
  each mode to ``plain`` (median over rounds).
* Pick-up: one writer commits a message every 50-350 ms (sparse traffic, so the relay has
  backed off to its idle poll) with a relay running; pick-up latency is the Kafka record
  timestamp (set when the relay hands it to the producer) minus the moment the writer's
  commit returned. Reported: p50 / p95 / max per mode.

    python -m bench.outbox_notify [--writers 16] [--seconds 5] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import statistics
import sys
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from bench.load import percentile
from bench.standalone import add_service_args, fresh_database, warm_topics, write_result
from outbox_relay import OutboxMessage, Relay, RelaySettings, RelayWaker, enqueue, install

MODES = ("plain", "notify", "waker")


def _message(topic: str) -> OutboxMessage:
    key = str(uuid.uuid4())
    return OutboxMessage(topic=topic, key=key, payload=b"x" * 256, message_id=uuid.uuid4())


async def _commit(conn: asyncpg.Connection, msg: OutboxMessage, mode: str,
                  waker: RelayWaker) -> None:
    async with conn.transaction():
        await enqueue(conn, [msg], notify=mode == "notify")
    if mode == "waker":
        waker.wake()


async def _writer_rate(dsn: str, writers: int, seconds: float, mode: str) -> float:
    """Commits/s of ``writers`` connections each committing one-message transactions."""
    conns = [await asyncpg.connect(dsn) for _ in range(writers)]
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    waker = RelayWaker(pool)
    await waker.start()
    count = 0
    stop_at = time.monotonic() + seconds

    async def write(conn: asyncpg.Connection) -> None:
        nonlocal count
        while time.monotonic() < stop_at:
            await _commit(conn, _message("bench.notify"), mode, waker)
            count += 1

    try:
        start = time.monotonic()
        await asyncio.gather(*(write(c) for c in conns))
        return count / (time.monotonic() - start)
    finally:
        await waker.stop()
        await pool.close()
        for c in conns:
            await c.close()
        cleanup = await asyncpg.connect(dsn)
        await cleanup.execute("TRUNCATE sagaflow_outbox")
        await cleanup.close()


async def _pickup(dsn: str, kafka: str, topic: str, count: int, mode: str) -> list[float]:
    """Pick-up latencies (ms) of ``count`` sparse messages through a running relay."""
    settings = RelaySettings(postgres_dsn=dsn, kafka_bootstrap=kafka)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka, auto_offset_reset="latest", group_id=None
    )
    await consumer.start()
    committed: dict[str, float] = {}
    latencies: list[float] = []
    try:
        # Seek to the end before writing so only this run's records are read.
        await consumer.seek_to_end()
        async with Relay(settings, registry=CollectorRegistry()):
            writer = await asyncpg.connect(dsn)
            pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
            waker = RelayWaker(pool)
            await waker.start()
            try:
                for _ in range(count):
                    await asyncio.sleep(random.uniform(0.05, 0.35))
                    msg = _message(topic)
                    await _commit(writer, msg, mode, waker)
                    committed[msg.key] = time.time()
            finally:
                await waker.stop()
                await pool.close()
                await writer.close()
            while len(latencies) < count:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batch.values():
                    for r in records:
                        at = committed.get(r.key.decode()) if r.key else None
                        if at is not None:
                            latencies.append(max(0.0, r.timestamp - at * 1000))
    finally:
        await consumer.stop()
    return latencies


async def run(args: argparse.Namespace) -> dict[str, Any]:
    topic = f"bench{uuid.uuid4().hex[:8]}.notify"
    async with fresh_database(args.postgres) as dsn:
        conn = await asyncpg.connect(dsn)
        await install(conn)
        await conn.close()
        await warm_topics(args.kafka, [topic])
        rounds = []
        for i in range(args.rounds):
            order = MODES[i % 3 :] + MODES[: i % 3]
            rates = {m: await _writer_rate(dsn, args.writers, args.seconds, m) for m in order}
            rounds.append(rates)
            print(f"round {i + 1}: writer commits/s " + ", ".join(
                f"{m} {rates[m]:,.0f}" for m in MODES))
        pickup = {}
        for mode in MODES:
            lat = await _pickup(dsn, args.kafka, topic, args.pickups, mode)
            pickup[mode] = {
                "p50_ms": round(percentile(lat, 50), 1),
                "p95_ms": round(percentile(lat, 95), 1),
                "max_ms": round(max(lat), 1),
            }
            print(f"pick-up, {mode}: {pickup[mode]}")
    ratios = {m: round(statistics.median(r[m] / r["plain"] for r in rounds), 3) for m in MODES}
    return {
        "bench": "outbox_notify",
        "smoke": args.smoke,
        "when": dt.datetime.now(dt.UTC).isoformat(),
        "writers": args.writers,
        "seconds": args.seconds,
        "rounds": [{k: round(v) for k, v in r.items()} for r in rounds],
        "writer_rate_ratio_to_plain": ratios,
        "pickup": pickup,
        "machine": {"cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pickups", type=int, default=60, help="sparse messages per mode")
    add_service_args(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.writers, args.seconds, args.rounds, args.pickups = 2, 0.3, 1, 3
    result = asyncio.run(run(args))
    print(f"median writer commit rate / plain: {result['writer_rate_ratio_to_plain']}")
    write_result(args, "outbox_notify", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
