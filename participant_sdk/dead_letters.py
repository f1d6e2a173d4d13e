"""Dead letters: messages a loop could not process, kept raw with the reason.

Generic on purpose (no participant notions): the coordinator's reply loop can use the same
table and helpers. A dead letter never stops a loop; operators list and inspect them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEAD_LETTER_TABLE = "sagaflow_dead_letters"

DEAD_LETTER_DDL = f"""
CREATE TABLE IF NOT EXISTS {DEAD_LETTER_TABLE} (
    id          bigserial   PRIMARY KEY,
    source      text        NOT NULL,
    topic       text,
    partition   integer,
    "offset"    bigint,
    key         bytea,
    headers     jsonb       NOT NULL DEFAULT '[]'::jsonb,
    payload     bytea,
    reason      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS {DEAD_LETTER_TABLE}_position_idx
    ON {DEAD_LETTER_TABLE} (source, topic, partition, "offset");
CREATE INDEX IF NOT EXISTS {DEAD_LETTER_TABLE}_created_at_idx ON {DEAD_LETTER_TABLE} (created_at);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """One message that could not be processed.

    ``source`` names the loop that kept it (e.g. ``participant:payments``). ``headers`` keep
    their raw values, shown as text where they are UTF-8.
    """

    source: str
    reason: str
    payload: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    created_at: datetime | None = None
    id: int | None = None


async def install_dead_letters(conn: Any) -> None:
    """Create the dead-letter table if absent (safe to run concurrently)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", DEAD_LETTER_TABLE)
        await conn.execute(DEAD_LETTER_DDL)


async def record_dead_letter(conn: Any, letter: DeadLetter) -> bool:
    """Store ``letter``; a redelivery of the same (source, topic, partition, offset) is ignored.

    Returns whether a new row was written.
    """
    headers = [
        {"key": key, "value": value.decode("utf-8", errors="backslashreplace")}
        for key, value in letter.headers
    ]
    status: str = await conn.execute(
        f"INSERT INTO {DEAD_LETTER_TABLE}"  # noqa: S608
        ' (source, topic, partition, "offset", key, headers, payload, reason)'
        " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8) ON CONFLICT DO NOTHING",
        letter.source,
        letter.topic,
        letter.partition,
        letter.offset,
        letter.key,
        json.dumps(headers),
        letter.payload,
        letter.reason,
    )
    return status.endswith(" 1")


async def list_dead_letters(
    conn: Any, *, source: str | None = None, limit: int = 100, before_id: int | None = None
) -> list[DeadLetter]:
    """The newest dead letters first, optionally of one source (older than ``before_id``:
    the next page)."""
    rows = await conn.fetch(
        'SELECT id, source, topic, partition, "offset", key, headers, payload, reason,'  # noqa: S608
        f" created_at FROM {DEAD_LETTER_TABLE}"
        " WHERE ($1::text IS NULL OR source = $1) AND ($3::bigint IS NULL OR id < $3)"
        " ORDER BY id DESC LIMIT $2",
        source,
        limit,
        before_id,
    )
    return [
        DeadLetter(
            id=row["id"],
            source=row["source"],
            topic=row["topic"],
            partition=row["partition"],
            offset=row["offset"],
            key=row["key"],
            headers=[(h["key"], h["value"].encode()) for h in json.loads(row["headers"])],
            payload=row["payload"],
            reason=row["reason"],
            created_at=row["created_at"],
        )
        for row in rows
    ]
