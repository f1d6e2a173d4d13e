"""A poison row and an oversized row are dead-lettered; their keys stop; other keys flow."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from outbox_relay import (
    Relay,
    count_dead_letters,
    discard_dead_letter,
    install,
    list_dead_letters,
    requeue_dead_letter,
)
from tests.integration.test_relay_helpers import (
    check_per_key_order,
    consume,
    fast_settings,
    message,
    wait_outbox_empty,
    write,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_poison_and_oversized_rows(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    good = [message(topic, f"good-{i}", s) for s in range(5) for i in range(10)]
    big_first = message(topic, "big", 0, size=2_000_000)
    big_rest = [message(topic, "big", s) for s in (1, 2)]
    await write(fresh_db, [big_first, *big_rest, *good[:25]])
    # A row written by some other writer that Kafka can never accept: an invalid topic name.
    await conn.execute(
        "INSERT INTO sagaflow_outbox (shard, topic, key, payload, message_id, headers) "
        "VALUES (0, 'bad topic!', 'poison', 'x', $1, $2)",
        uuid.uuid4(),
        '{"x-seq": "0"}',
    )
    await conn.execute(
        "INSERT INTO sagaflow_outbox (shard, topic, key, payload, message_id, headers) "
        "VALUES (0, $1, 'poison', 'x', $2, '{\"x-seq\": \"1\"}')",
        topic,
        uuid.uuid4(),
    )
    # Headers must be a JSON object of text values; a number cannot become a Kafka header.
    await conn.execute(
        "INSERT INTO sagaflow_outbox (shard, topic, key, payload, message_id, headers) "
        "VALUES (1, $1, 'bad-headers', 'x', $2, '{\"x-seq\": 0}')",
        topic,
        uuid.uuid4(),
    )
    await write(fresh_db, good[25:])
    registry = CollectorRegistry()
    async with Relay(fast_settings(fresh_db, kafka_bootstrap), registry=registry):
        received = await consume(kafka_bootstrap, [topic], len(good), 30)
        seqs = check_per_key_order(received)
        assert {k for k in seqs} == {f"good-{i}" for i in range(10)}
        await wait_outbox_empty_except(conn, {"big", "poison"}, dead_letters=3)
        dead = await list_dead_letters(conn)
        assert {(d.key, d.error_class) for d in dead} == {
            ("big", "MessageSizeTooLargeError"),
            ("poison", "InvalidMessageError"),
            ("bad-headers", "InvalidMessageError"),
        }
        assert all(d.reason for d in dead)
        # Later rows of the stopped keys are held back, not published and not lost.
        held = await conn.fetch("SELECT key FROM sagaflow_outbox ORDER BY id")
        assert [r["key"] for r in held] == ["big", "big", "poison"]
        assert (
            registry.get_sample_value(
                "sagaflow_relay_rows_dead_lettered_total",
                {"error_class": "MessageSizeTooLargeError"},
            )
            == 1
        )
        # Operators: discard the oversized row, so the rest of its key flows in order.
        big_dead = next(d for d in dead if d.key == "big")
        poison_dead = next(d for d in dead if d.key == "poison")
        assert await discard_dead_letter(conn, big_dead.id)
        # Requeue the poison row: it fails again and stays dead-lettered, still ahead of seq 1.
        assert await requeue_dead_letter(conn, poison_dead.id)
        await wait_outbox_empty_except(conn, {"poison"}, dead_letters=2)
        big = await consume(kafka_bootstrap, [topic], len(good) + 2, 10)
        assert [r.seq for r in big if r.key == "big"] == [1, 2]
        assert await count_dead_letters(conn) == 2
        (again,) = [d for d in await list_dead_letters(conn) if d.key == "poison"]
        assert again.id == poison_dead.id and again.failed_at >= poison_dead.failed_at
        # Discard it: the key's later row is published.
        assert await discard_dead_letter(conn, poison_dead.id)
        await wait_outbox_empty(fresh_db, 10)
        assert not await requeue_dead_letter(conn, poison_dead.id)
    await conn.close()


async def wait_outbox_empty_except(
    conn: asyncpg.Connection, keys: set[str], dead_letters: int
) -> None:
    import asyncio

    for _ in range(200):
        left = {r["key"] for r in await conn.fetch("SELECT DISTINCT key FROM sagaflow_outbox")}
        dead = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox_dead_letter")
        if left <= keys and dead == dead_letters:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"outbox still holds {left}")
