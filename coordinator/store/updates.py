"""Update rows (migration 0016): validating an update's payload, reading and writing the
stored answer of an update id. Everything runs inside the caller's transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal
from uuid import UUID

import asyncpg
from pydantic import ValidationError

from coordinator.engine import CompiledSaga
from coordinator.engine.updates import declared_updates
from coordinator.store.nodes import dumps
from coordinator.store.update_errors import InvalidUpdatePayload, UnknownUpdate

__all__ = ["UpdateAnswer", "fetch_answer", "insert_answer", "update_payload"]

_INSERT: Final = """
INSERT INTO saga_updates (saga_id, update_id, name, payload, outcome, result, reason, sender,
                          answered_at)
VALUES ($1, $2, $3, $4::json, $5, $6::json, $7, $8, $9)
"""

_FETCH: Final = """
SELECT saga_id, update_id, name, outcome, result, reason, answered_at
FROM saga_updates WHERE saga_id = $1 AND update_id = $2
"""


@dataclass(frozen=True, slots=True)
class UpdateAnswer:
    """What the sender of an update is told, and what a resend of its id is told again."""

    saga_id: UUID
    update_id: str
    name: str
    outcome: Literal["accepted", "rejected"]
    #: Accepted: the handler's result.
    result: dict[str, Any] | None
    #: Rejected: the validator's reason.
    reason: str | None
    answered_at: datetime
    #: This id had been answered before: the stored answer, nothing applied now.
    duplicate: bool = False

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


def update_payload(definition: CompiledSaga, name: str, payload: Any) -> dict[str, Any]:
    """The payload as JSON, validated against the model of update ``name`` (none: any JSON
    object). Raises :class:`UnknownUpdate` or :class:`InvalidUpdatePayload`."""
    updates = declared_updates(definition)
    if name not in updates:
        raise UnknownUpdate(definition.name, name, updates)
    model = updates[name].model
    if model is None:
        if payload is None:
            return {}
        if not isinstance(payload, dict):
            raise InvalidUpdatePayload(name, [{"loc": (), "msg": "must be a JSON object"}])
        return dict(payload)
    try:
        return model.model_validate(payload if payload is not None else {}).model_dump(
            mode="json")
    except ValidationError as exc:
        raise InvalidUpdatePayload(name, exc.errors(include_url=False)) from exc


async def fetch_answer(conn: asyncpg.Connection | asyncpg.Pool, saga_id: UUID,
                       update_id: str) -> UpdateAnswer | None:
    """The stored answer of ``update_id``, or ``None``."""
    row = await conn.fetchrow(_FETCH, saga_id, update_id)
    if row is None:
        return None
    return UpdateAnswer(saga_id=row["saga_id"], update_id=row["update_id"], name=row["name"],
                        outcome=row["outcome"],
                        result=None if row["result"] is None else json.loads(row["result"]),
                        reason=row["reason"], answered_at=row["answered_at"])


async def insert_answer(conn: asyncpg.Connection, answer: UpdateAnswer,
                        payload: dict[str, Any], sender: str) -> None:
    """Store the answer (the saga row is locked: no other writer of this id can race)."""
    await conn.execute(_INSERT, answer.saga_id, answer.update_id, answer.name, dumps(payload),
                       answer.outcome, None if answer.result is None else dumps(answer.result),
                       answer.reason, sender, answer.answered_at)
