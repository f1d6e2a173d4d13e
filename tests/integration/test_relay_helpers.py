"""Shared helpers for the relay tests (no tests here)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaConsumer

from outbox_relay import OutboxMessage, RelaySettings, enqueue, install
from participant_sdk.protocol import HEADER_MESSAGE_ID

HEADER_SEQ = "x-seq"


@dataclass(frozen=True)
class Received:
    topic: str
    partition: int
    offset: int
    key: str
    seq: int
    message_id: str
    epoch: str | None


def fast_settings(pg: str, kafka: str, **kw: object) -> RelaySettings:
    base: dict[str, object] = {
        "postgres_dsn": pg,
        "kafka_bootstrap": kafka,
        "rebalance_interval": 0.3,
        "lag_interval": 0.5,
        "poll_interval": 0.05,
        "shard_count": 16,
    }
    base.update(kw)
    return RelaySettings(**base)  # type: ignore[arg-type]


def message(topic: str, key: str, seq: int, size: int = 16) -> OutboxMessage:
    return OutboxMessage(
        topic=topic,
        key=key,
        payload=f"{key}:{seq}:".encode().ljust(size, b"x"),
        message_id=uuid.uuid4(),
        headers={HEADER_SEQ: str(seq)},
    )


async def write(dsn: str, msgs: Sequence[OutboxMessage]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await install(conn, shard_count=16)
        async with conn.transaction():
            await enqueue(conn, msgs)
    finally:
        await conn.close()


async def outbox_count(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM sagaflow_outbox"))
    finally:
        await conn.close()


async def wait_outbox_empty(dsn: str, timeout: float) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while True:
        n = await outbox_count(dsn)
        if n == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"outbox still has {n} rows after {timeout}s")
        await asyncio.sleep(0.1)


async def consume(
    bootstrap: str,
    topics: Sequence[str],
    expect: int,
    timeout: float,  # noqa: ASYNC109
) -> list[Received]:
    """Read ``topics`` from the beginning until ``expect`` messages or ``timeout``."""
    consumer = AIOKafkaConsumer(
        *topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out: list[Received] = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for r in records:
                    h = {k: v.decode() for k, v in r.headers}
                    out.append(
                        Received(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.key.decode(),
                            int(h.get(HEADER_SEQ, "-1")),
                            h[HEADER_MESSAGE_ID],
                            h.get("sagaflow-relay-epoch"),
                        )
                    )
    finally:
        await consumer.stop()
    out.sort(key=lambda r: (r.topic, r.partition, r.offset))
    return out


def check_per_key_order(received: Sequence[Received]) -> dict[str, list[int]]:
    """Per key, the sequence with at-least-once repeats removed must be 0, 1, 2, ... in order
    of first arrival, and a repeat may only re-send something already seen."""
    seqs: dict[str, list[int]] = {}
    for r in received:
        seqs.setdefault(r.key, []).append(r.seq)
    for key, seq in seqs.items():
        first_seen: list[int] = []
        seen: set[int] = set()
        for s in seq:
            if s not in seen:
                seen.add(s)
                first_seen.append(s)
        assert first_seen == list(range(len(first_seen))), (key, seq[:50])
    return seqs


def relay_process(settings_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(settings_env)
    return subprocess.Popen(
        [sys.executable, "-m", "outbox_relay"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def relay_env(pg: str, kafka: str, **kw: str) -> dict[str, str]:
    env = {
        "SAGAFLOW_RELAY_POSTGRES_DSN": pg,
        "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP": kafka,
        "SAGAFLOW_RELAY_SHARD_COUNT": "16",
        "SAGAFLOW_RELAY_REBALANCE_INTERVAL": "0.3",
        "SAGAFLOW_RELAY_POLL_INTERVAL": "0.05",
    }
    env.update({f"SAGAFLOW_RELAY_{k.upper()}": v for k, v in kw.items()})
    return env
