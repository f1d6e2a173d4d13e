"""Outbox dead letters: rows that can never be published, how the relay writes them, and the
operator functions over them.

A key with a dead letter is held back: its later rows wait until the dead letter is requeued
(published again, in its original place, ahead of the later rows) or discarded.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Final

import asyncpg


@dataclass(frozen=True, slots=True)
class OutboxDeadLetter:
    """A row the relay gave up on, with why."""

    id: int
    shard: int
    topic: str
    key: str
    payload: bytes
    message_id: uuid.UUID
    headers: dict[str, str]
    created_at: dt.datetime
    failed_at: dt.datetime
    error_class: str
    reason: str


#: Deletes acked and dead rows in one statement (one round trip, no BEGIN/COMMIT); the dead
#: ones are copied to the dead-letter table first (both read the statement's snapshot).
SETTLE: Final = """
WITH dead AS (
    INSERT INTO sagaflow_outbox_dead_letter
        (id, shard, topic, key, payload, message_id, headers, created_at, error_class, reason)
    SELECT o.id, o.shard, o.topic, o.key, o.payload, o.message_id, o.headers, o.created_at,
           d.error_class, d.reason
    FROM unnest($3::smallint[], $4::bigint[], $5::text[], $6::text[])
        AS d(shard, id, error_class, reason)
    JOIN sagaflow_outbox o ON o.shard = d.shard AND o.id = d.id
    ON CONFLICT (id) DO UPDATE SET failed_at = clock_timestamp(),
        error_class = excluded.error_class, reason = excluded.reason
)
DELETE FROM sagaflow_outbox o
USING unnest($1::smallint[] || $3::smallint[], $2::bigint[] || $4::bigint[]) AS d(shard, id)
WHERE o.shard = d.shard AND o.id = d.id
"""

_COLUMNS: Final = (
    "id, shard, topic, key, payload, message_id, headers::text AS headers, created_at, "
    "failed_at, error_class, reason"
)


def _from_record(r: asyncpg.Record) -> OutboxDeadLetter:
    return OutboxDeadLetter(
        id=r["id"],
        shard=r["shard"],
        topic=r["topic"],
        key=r["key"],
        payload=bytes(r["payload"]),
        message_id=r["message_id"],
        headers=json.loads(r["headers"]),
        created_at=r["created_at"],
        failed_at=r["failed_at"],
        error_class=r["error_class"],
        reason=r["reason"],
    )


async def list_dead_letters(
    conn: asyncpg.Connection, *, limit: int = 100, after_id: int | None = None
) -> list[OutboxDeadLetter]:
    """Dead letters in id order, ``limit`` at a time (pass the last id as ``after_id``)."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM sagaflow_outbox_dead_letter "  # noqa: S608 - constant columns
        "WHERE $1::bigint IS NULL OR id > $1 ORDER BY id LIMIT $2",
        after_id,
        limit,
    )
    return [_from_record(r) for r in rows]


async def count_dead_letters(conn: asyncpg.Connection) -> int:
    value = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox_dead_letter")
    return int(value)


async def requeue_dead_letter(conn: asyncpg.Connection, dead_letter_id: int) -> bool:
    """Put a dead letter back in the outbox under its original id (so before its key's later
    rows). Returns False if there was no such dead letter."""
    async with conn.transaction():
        status = await conn.execute(
            """
            WITH d AS (DELETE FROM sagaflow_outbox_dead_letter WHERE id = $1 RETURNING *)
            INSERT INTO sagaflow_outbox
                (id, shard, topic, key, payload, message_id, headers, created_at)
            OVERRIDING SYSTEM VALUE
            SELECT id, shard, topic, key, payload, message_id, headers, created_at FROM d
            """,
            dead_letter_id,
        )
    return bool(status == "INSERT 0 1")


async def discard_dead_letter(conn: asyncpg.Connection, dead_letter_id: int) -> bool:
    """Drop a dead letter for good; its key's later rows flow again. False if none."""
    status = await conn.execute(
        "DELETE FROM sagaflow_outbox_dead_letter WHERE id = $1", dead_letter_id
    )
    return bool(status == "DELETE 1")
