"""Signal rows (migration 0007): validating a payload, inserting a signal once, marking the
ones a wait consumed. Everything runs inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg
from pydantic import ValidationError

from coordinator.engine import CompiledSaga
from coordinator.store.errors import InvalidSignalPayload, UnknownSignal
from coordinator.store.nodes import dumps

__all__ = ["insert_signals", "mark_consumed", "signal_payload", "stored_signals"]

_INSERT: Final = """
INSERT INTO saga_signals (saga_id, signal_id, name, payload, sender, received_at)
SELECT saga_id, signal_id, name, payload::json, sender, $6
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[])
    AS u(saga_id, signal_id, name, payload, sender)
ON CONFLICT (saga_id, signal_id) DO NOTHING
"""

_STORED: Final = """
SELECT s.saga_id, s.signal_id FROM saga_signals s
JOIN unnest($1::uuid[], $2::text[]) AS u(saga_id, signal_id)
  ON s.saga_id = u.saga_id AND s.signal_id = u.signal_id
"""

_CONSUMED: Final = """
UPDATE saga_signals AS s SET consumed_at = u.at, consumed_by = u.node
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[]) AS u(saga_id, id, node, at)
WHERE s.saga_id = u.saga_id AND s.signal_id = u.id
"""


def signal_payload(definition: CompiledSaga, name: str, payload: Any) -> dict[str, Any]:
    """The payload as JSON, validated against the model the saga's waits for ``name``
    declare (none declared: any JSON object)."""
    if name not in definition.signals:
        raise UnknownSignal(definition.name, name, definition.signals)
    model = definition.signals[name]
    if model is None:
        if payload is None:
            return {}
        if not isinstance(payload, dict):
            raise InvalidSignalPayload(name, [{"loc": (), "msg": "must be a JSON object"}])
        return dict(payload)
    try:
        return model.model_validate(payload if payload is not None else {}).model_dump(
            mode="json")
    except ValidationError as exc:
        raise InvalidSignalPayload(name, exc.errors(include_url=False)) from exc


async def stored_signals(conn: asyncpg.Connection, keys: Sequence[tuple[UUID, str]]
                         ) -> set[tuple[UUID, str]]:
    """Which (saga id, signal id) pairs were already applied (read with the sagas locked)."""
    if not keys:
        return set()
    rows = await conn.fetch(_STORED, [k[0] for k in keys], [k[1] for k in keys])
    return {(r["saga_id"], r["signal_id"]) for r in rows}


async def insert_signals(conn: asyncpg.Connection,
                         rows: Sequence[tuple[UUID, str, str, dict[str, Any], str]],
                         now: datetime) -> None:
    """Store (saga id, signal id, name, payload, sender) signals in one statement."""
    if rows:
        await conn.execute(_INSERT, [r[0] for r in rows], [r[1] for r in rows],
                           [r[2] for r in rows], [dumps(r[3]) for r in rows],
                           [r[4] for r in rows], now)


async def mark_consumed(conn: asyncpg.Connection,
                        consumed: Sequence[tuple[UUID, str, str, datetime]]) -> None:
    """(saga id, signal id, wait node key, when) of each signal a wait took."""
    if consumed:
        await conn.execute(_CONSUMED, [c[0] for c in consumed], [c[1] for c in consumed],
                           [c[2] for c in consumed], [c[3] for c in consumed])
