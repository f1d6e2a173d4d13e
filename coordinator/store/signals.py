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

__all__ = ["insert_signal", "mark_consumed", "signal_payload", "signal_stored"]

_INSERT: Final = """
INSERT INTO saga_signals (saga_id, signal_id, name, payload, sender, received_at)
VALUES ($1, $2, $3, $4::json, $5, $6) ON CONFLICT (saga_id, signal_id) DO NOTHING
RETURNING true
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


async def signal_stored(conn: asyncpg.Connection, saga_id: UUID, signal_id: str) -> bool:
    """That signal id was already applied to this saga (checked with the saga row locked)."""
    return bool(await conn.fetchval(
        "SELECT true FROM saga_signals WHERE saga_id = $1 AND signal_id = $2",
        saga_id, signal_id))


async def insert_signal(conn: asyncpg.Connection, saga_id: UUID, signal_id: str, name: str,
                        payload: dict[str, Any], sender: str, now: datetime) -> bool:
    """Store the signal; False when that id was already stored for this saga (a resend)."""
    inserted = await conn.fetchval(_INSERT, saga_id, signal_id, name, dumps(payload), sender,
                                   now)
    return bool(inserted)


async def mark_consumed(conn: asyncpg.Connection,
                        consumed: Sequence[tuple[UUID, str, str, datetime]]) -> None:
    """(saga id, signal id, wait node key, when) of each signal a wait took."""
    if consumed:
        await conn.execute(_CONSUMED, [c[0] for c in consumed], [c[1] for c in consumed],
                           [c[2] for c in consumed], [c[3] for c in consumed])
