"""Outbox-to-Kafka throughput of the relay against a raw aiokafka idempotent producer.

Both send the same messages (same topic layout, keys, payload sizes and headers) in the same run:
the relay from a pre-filled outbox until it is empty (rows deleted after acks), the raw producer
straight from memory, awaiting every ack. The two alternate over several rounds (which goes
first alternates too) so that a noisy neighbour hits both; the ratio reported is the median of
the rounds' ratios. Prints every round and the medians, writes JSON to ``bench/results/``.

    python -m bench.relay_throughput [--messages 100000] [--rounds 5] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import time
import uuid

import asyncpg
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from bench.standalone import add_service_args, fresh_database, warm_topics, write_result
from outbox_relay import OutboxMessage, Relay, RelaySettings, enqueue, install
from participant_sdk.protocol import HEADER_MESSAGE_ID


def _messages(topic: str, n: int, keys: int, size: int) -> list[OutboxMessage]:
    payload = b"x" * size
    return [
        OutboxMessage(
            topic=topic,
            key=f"saga-{i % keys:06d}",
            payload=payload,
            message_id=uuid.uuid4(),
            headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        )
        for i in range(n)
    ]


async def _fill(dsn: str, msgs: list[OutboxMessage], shards: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await install(conn, shard_count=shards)
        for i in range(0, len(msgs), 5000):
            async with conn.transaction():
                await enqueue(conn, msgs[i : i + 5000])
    finally:
        await conn.close()


async def _relay_run(settings: RelaySettings, total: int) -> float:
    conn = await asyncpg.connect(settings.postgres_dsn)
    registry = CollectorRegistry()
    relay = Relay(settings, registry=registry)
    try:
        start = time.perf_counter()
        await relay.start()
        while True:
            published = registry.get_sample_value("sagaflow_relay_rows_published_total") or 0
            if published >= total:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        left = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox")
        assert left == 0, f"{left} rows left"
        return elapsed
    finally:
        await relay.stop()
        await conn.close()


async def _raw_run(settings: RelaySettings, msgs: list[OutboxMessage]) -> float:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=settings.linger_ms,
        max_batch_size=settings.producer_batch_bytes,
        max_request_size=settings.max_request_size,
    )
    start = time.perf_counter()
    await producer.start()
    try:
        futures = []
        for m in msgs:
            headers = [(k, v.encode()) for k, v in m.headers.items()]
            headers.append((HEADER_MESSAGE_ID, str(m.message_id).encode()))
            headers.append(("sagaflow-relay-epoch", b"0.1"))
            futures.append(
                await producer.send(m.topic, m.payload, key=m.key.encode(), headers=headers)
            )
        await asyncio.gather(*futures)
        return time.perf_counter() - start
    finally:
        await producer.stop()


async def _round(args: argparse.Namespace, n: int, relay_first: bool) -> tuple[float, float]:
    """One relay run and one raw run on fresh topics and a fresh database: (relay s, raw s)."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    relay_topic, raw_topic = f"{prefix}.relay", f"{prefix}.raw"
    async with fresh_database(args.postgres) as dsn:
        await warm_topics(args.kafka, [relay_topic, raw_topic])
        settings = RelaySettings(
            postgres_dsn=dsn,
            kafka_bootstrap=args.kafka,
            batch_size=args.batch_size,
            shard_count=args.shards,
            poll_interval=dt.timedelta(milliseconds=20),
        )
        msgs = _messages(relay_topic, n, args.keys, args.size)
        await _fill(dsn, msgs, args.shards)
        raw_msgs = _messages(raw_topic, n, args.keys, args.size)
        if relay_first:
            relay_s = await _relay_run(settings, n)
            raw_s = await _raw_run(settings, raw_msgs)
        else:
            raw_s = await _raw_run(settings, raw_msgs)
            relay_s = await _relay_run(settings, n)
        return relay_s, raw_s


async def run(args: argparse.Namespace) -> dict[str, object]:
    rounds = []
    for i in range(args.rounds):
        relay_s, raw_s = await _round(args, args.messages, relay_first=i % 2 == 0)
        relay_rate, raw_rate = args.messages / relay_s, args.messages / raw_s
        rounds.append(
            {
                "relay_msg_per_s": round(relay_rate),
                "raw_msg_per_s": round(raw_rate),
                "ratio": round(relay_rate / raw_rate, 3),
            }
        )
        print(
            f"round {i + 1}: relay {relay_rate:,.0f} msg/s, raw {raw_rate:,.0f} msg/s, "
            f"ratio {relay_rate / raw_rate:.3f}"
        )
    return {
        "bench": "relay_throughput",
        "smoke": args.smoke,
        "when": dt.datetime.now(dt.UTC).isoformat(),
        "messages": args.messages,
        "payload_bytes": args.size,
        "keys": args.keys,
        "batch_size": args.batch_size,
        "shards": args.shards,
        "rounds": rounds,
        "relay_msg_per_s": round(statistics.median(r["relay_msg_per_s"] for r in rounds)),
        "raw_msg_per_s": round(statistics.median(r["raw_msg_per_s"] for r in rounds)),
        "ratio": statistics.median(r["ratio"] for r in rounds),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256, help="payload bytes")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5, help="relay/raw pairs, order alternating")
    add_service_args(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.messages, args.keys, args.rounds = 300, 20, 2
    result = asyncio.run(run(args))
    print(f"median relay: {result['relay_msg_per_s']:,} msg/s")
    print(f"median raw:   {result['raw_msg_per_s']:,} msg/s")
    print(f"median ratio: {result['ratio']}")
    write_result(args, "relay_throughput", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
