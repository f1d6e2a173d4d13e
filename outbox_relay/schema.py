"""DDL of the outbox tables and the idempotent installer.

Tables (all prefixed ``sagaflow_outbox``):

* ``sagaflow_outbox``: pending rows; deleted once Kafka acknowledged them. ``shard`` is computed
  at insert time from the key. The primary key is ``(shard, id)``, the only index: every read
  and delete names the shard, and one index instead of two makes writers' inserts cheaper and
  leaves the planner no id-only index to prefer for claims (it did, filtering other shards).
* ``sagaflow_outbox_dead_letter``: rows that can never be published, with the reason. A key with a
  dead letter is held back until an operator requeues or discards it.
* ``sagaflow_outbox_shard``: one row per shard with its current owner and a fencing epoch that
  grows by one at every change of owner (ownership itself is a Postgres advisory lock).
* ``sagaflow_outbox_meta``: the shard count, fixed at install time (writers and relays read it).
"""

from __future__ import annotations

from typing import Final

import asyncpg

from outbox_relay.errors import SchemaError

#: Advisory-lock namespace (first int4 key) of shard ownership locks; the second key is the shard.
SHARD_LOCK_NAMESPACE: Final = 0x5A6A0001
#: Advisory-lock namespace of relay membership locks; the second key is a random relay number.
MEMBER_LOCK_NAMESPACE: Final = 0x5A6A0002
#: Transaction-level advisory lock serialising concurrent install() calls.
_INSTALL_LOCK: Final = 0x5A6A0000

DEFAULT_SHARD_COUNT: Final = 32

#: Channel relays LISTEN on; writers may send a coalesced hint (see ``notify_relays``).
NOTIFY_CHANNEL: Final = "sagaflow_outbox"

DDL: Final[tuple[str, ...]] = (
    """
    CREATE TABLE IF NOT EXISTS sagaflow_outbox_meta (
        singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        shard_count integer NOT NULL CHECK (shard_count BETWEEN 1 AND 32767)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS sagaflow_outbox (
        id          bigint GENERATED ALWAYS AS IDENTITY,
        shard       smallint NOT NULL,
        topic       text NOT NULL,
        key         text NOT NULL,
        payload     bytea NOT NULL,
        message_id  uuid NOT NULL,
        headers     jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
        CONSTRAINT sagaflow_outbox_pkey PRIMARY KEY (shard, id)
    ) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02,
            autovacuum_vacuum_threshold = 1000)
    """,
    """
    CREATE TABLE IF NOT EXISTS sagaflow_outbox_dead_letter (
        id             bigint PRIMARY KEY,
        shard          smallint NOT NULL,
        topic          text NOT NULL,
        key            text NOT NULL,
        payload        bytea NOT NULL,
        message_id     uuid NOT NULL,
        headers        jsonb NOT NULL,
        created_at     timestamptz NOT NULL,
        failed_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
        error_class    text NOT NULL,
        reason         text NOT NULL
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS sagaflow_outbox_dead_letter_key
        ON sagaflow_outbox_dead_letter (key)
    """,
    """
    CREATE TABLE IF NOT EXISTS sagaflow_outbox_shard (
        shard        smallint PRIMARY KEY,
        epoch        bigint NOT NULL DEFAULT 0,
        owner        text,
        acquired_at  timestamptz
    )
    """,
)


async def install(conn: asyncpg.Connection, *, shard_count: int = DEFAULT_SHARD_COUNT) -> None:
    """Create the outbox tables if missing (idempotent, safe to run concurrently).

    ``shard_count`` only matters the first time: the installed count is kept afterwards, because
    every stored row's shard was computed with it.
    """
    if await _installed(conn):
        # CREATE INDEX IF NOT EXISTS takes a SHARE lock before it checks, which would queue
        # behind (and then block) every open writer transaction: skip the DDL when in place.
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _INSTALL_LOCK)
        for statement in DDL:
            await conn.execute(statement)
        await conn.execute(
            "INSERT INTO sagaflow_outbox_meta (shard_count) VALUES ($1) ON CONFLICT DO NOTHING",
            shard_count,
        )
        installed = await installed_shard_count(conn)
        await conn.execute(
            "INSERT INTO sagaflow_outbox_shard (shard) SELECT generate_series(0, $1 - 1) "
            "ON CONFLICT DO NOTHING",
            installed,
        )


_OBJECTS: Final = (
    "sagaflow_outbox_meta",
    "sagaflow_outbox",
    "sagaflow_outbox_pkey",
    "sagaflow_outbox_dead_letter",
    "sagaflow_outbox_dead_letter_key",
    "sagaflow_outbox_shard",
)


async def _installed(conn: asyncpg.Connection) -> bool:
    missing = await conn.fetchval(
        "SELECT count(*) FROM unnest($1::text[]) AS n(name) WHERE to_regclass(n.name) IS NULL",
        list(_OBJECTS),
    )
    if missing:
        return False
    count = await conn.fetchval("SELECT shard_count FROM sagaflow_outbox_meta")
    if count is None:
        return False
    shards = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox_shard")
    return bool(shards == count)


async def installed_shard_count(conn: asyncpg.Connection) -> int:
    """The shard count the outbox was installed with."""
    try:
        value = await conn.fetchval("SELECT shard_count FROM sagaflow_outbox_meta")
    except asyncpg.UndefinedTableError as exc:
        raise SchemaError("outbox tables are not installed; call outbox_relay.install()") from exc
    if value is None:
        raise SchemaError("sagaflow_outbox_meta is empty; call outbox_relay.install()")
    return int(value)
