"""The outbox message and the helper that writes it inside the caller's transaction."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg
from opentelemetry import propagate

from outbox_relay.errors import InvalidMessageError
from outbox_relay.schema import NOTIFY_CHANNEL
from participant_sdk.protocol import HEADER_MESSAGE_ID

_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One Kafka message to publish once the writing transaction commits."""

    topic: str
    #: Kafka key (the saga id as text); also the shard key, so one key is one ordered stream.
    key: str
    payload: bytes
    #: Unique id; sent as the ``saga-message-id`` header so consumers can deduplicate.
    message_id: uuid.UUID
    #: Extra Kafka headers (text values), e.g. ``traceparent``, ``saga-message-kind``.
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LeasedRow:
    """An outbox row its writer publishes itself (:class:`~outbox_relay.direct.DirectPublisher`):
    where it is stored and what it holds."""

    shard: int
    id: int
    message: OutboxMessage
    #: The headers as stored (the writer's trace context included), text values.
    headers: Mapping[str, str]


def leased_rows(shards: Sequence[int] | None, ids: Sequence[int] | None,
                message_ids: Sequence[uuid.UUID] | None, messages: Sequence[OutboxMessage],
                headers: Sequence[str]) -> list[LeasedRow]:
    """The leased rows an insert returned (:func:`insert_select` with a lease), joined with
    the messages and the stored header JSON (:func:`insert_args`) it inserted, in id order."""
    if not ids:
        return []
    assert shards is not None and message_ids is not None
    by_id = {m.message_id: (m, h) for m, h in zip(messages, headers, strict=True)}
    rows = sorted(zip(ids, shards, message_ids, strict=True))
    return [LeasedRow(shard, row_id, by_id[mid][0], json.loads(by_id[mid][1]))
            for row_id, shard, mid in rows]


def valid_topic(topic: str) -> bool:
    """Whether Kafka accepts ``topic`` as a topic name."""
    return _TOPIC_RE.fullmatch(topic) is not None and topic not in (".", "..")


def _headers_json(message: OutboxMessage) -> str:
    headers = dict(message.headers)
    if HEADER_MESSAGE_ID in headers and headers[HEADER_MESSAGE_ID] != str(message.message_id):
        raise InvalidMessageError(f"header {HEADER_MESSAGE_ID} disagrees with message_id")
    headers.pop(HEADER_MESSAGE_ID, None)
    # Carry the caller's trace context unless it chose its own.
    if "traceparent" not in headers:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        headers.update(carrier)
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessageError(f"header {name!r} must map text to text")
    return json.dumps(headers, separators=(",", ":"))


def insert_select(first: int, *, only_keys: str | None = None, lease: str | None = None
                  ) -> str:
    """The outbox INSERT of :func:`enqueue` with its five array parameters (topic, key,
    payload, message id, headers: :func:`insert_args`) numbered from ``$first``, to run as a
    data-modifying CTE of a writer's own statement. ``only_keys``: an SQL expression yielding
    keys (text); rows of other keys are not inserted.

    ``lease``: an SQL interval expression for a writer that publishes its rows itself right
    after its commit (:class:`~outbox_relay.direct.DirectPublisher`). Each row's ``created_at``
    is then set that far ahead: relays leave a row alone until its ``created_at``, so the
    writer has that long to publish and delete it before a relay takes it as its own (the
    recovery path). A row of a key with a dead letter gets no lease (the relays hold such a
    key back; its writer must not publish it either). The insert returns each row's shard, id,
    message id and ``leased``.

    Ids follow the arrays' order; the shard is computed from the key as every writer does.
    """
    p = [f"${first + i}" for i in range(5)]
    where = f"WHERE t.key IN ({only_keys})\n" if only_keys is not None else ""
    if lease is None:
        created, returning = "clock_timestamp()", ""
    else:
        created = f"""clock_timestamp() + CASE WHEN {lease} > interval '0'
            AND (NOT (SELECT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter))
                 OR NOT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter d
                                WHERE d.key = t.key))
            THEN {lease} ELSE interval '0' END"""  # noqa: S608 - the caller's constant SQL
        returning = ("RETURNING shard, id, message_id, created_at > clock_timestamp() "
                     "AS leased\n")
    return f"""
INSERT INTO sagaflow_outbox (shard, topic, key, payload, message_id, headers, created_at)
SELECT ((hashtextextended(t.key, 0) & 9223372036854775807)
        % (SELECT shard_count FROM sagaflow_outbox_meta))::smallint,
       t.topic, t.key, t.payload, t.message_id, t.headers, {created}
FROM unnest({p[0]}::text[], {p[1]}::text[], {p[2]}::bytea[], {p[3]}::uuid[], {p[4]}::jsonb[])
     WITH ORDINALITY AS t(topic, key, payload, message_id, headers, ord)
{where}ORDER BY t.ord
{returning}"""  # noqa: S608 - parameter numbers and the caller's constant SQL


def insert_args(messages: Sequence[OutboxMessage]) -> list[list[Any]]:
    """The five array parameters of :func:`insert_select` for ``messages``; raises
    :class:`InvalidMessageError` for a message Kafka would refuse (bad topic, bad header)."""
    for message in messages:
        if not valid_topic(message.topic):
            raise InvalidMessageError(f"invalid Kafka topic name {message.topic!r}")
    return [
        [m.topic for m in messages],
        [m.key for m in messages],
        [m.payload for m in messages],
        [m.message_id for m in messages],
        [_headers_json(m) for m in messages],
    ]


_INSERT: Final = insert_select(1)


async def enqueue(
    conn: asyncpg.Connection, messages: Sequence[OutboxMessage], *, notify: bool = False
) -> None:
    """Insert ``messages`` into the outbox in one round trip, inside the caller's transaction.

    Rows become visible to the relay when the caller commits; ids follow ``messages`` order.
    ``notify=True`` also sends a wake-up hint to the relays. Leave it off on hot paths:
    a NOTIFY makes the commit take a cluster-wide lock (see the bench notes).
    """
    if not messages:
        return
    await conn.execute(_INSERT, *insert_args(messages))
    if notify:
        await notify_relays(conn)


async def notify_relays(conn: asyncpg.Connection) -> None:
    """Send the relays a wake-up hint (delivered at the caller's commit, coalesced by Postgres)."""
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
