"""Human tasks in Postgres: the tasks table written from decisions, their notifications on
the outbox, and the inbox queries.

The saga's snapshot holds each task (its node's payload); ``human_tasks`` is its projection,
upserted in the transaction of the decision that changed it, and every change is published
on ``{prefix}.tasks`` through the outbox in that transaction, for a team's mail or chat
consumer (the message is ``participant_sdk.task_events.TaskEvent``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine.decision import TaskChange
from outbox_relay.message import OutboxMessage
from participant_sdk.protocol import HEADER_MESSAGE_KIND
from participant_sdk.task_events import KIND_TASK_EVENT

__all__ = ["KIND_TASK_EVENT", "TASK_COLUMNS", "TaskWrite", "task_messages", "write_tasks"]

#: Namespace of notification message ids (uuid5 of saga, history seq and position).
_NOTIFY_NS: Final = uuid.UUID("5d0f8a4e-7b3c-4e21-8f6a-2c9b1d7e4a30")

#: Columns the decisions write (``created_at`` and ``form_schema`` only when a task opens).
TASK_COLUMNS: Final = (
    "id", "saga_id", "saga_type", "node", "state", "title", "description", "candidate_users",
    "candidate_groups", "excluded_users", "assignee", "owner", "delegation", "proposal",
    "priority", "due_at", "escalation_tier", "reminders", "chain", "form_schema", "outcome",
    "result", "completed_by", "comments", "created_at", "claimed_at", "updated_at",
    "closed_at",
)

_KEEP_ON_UPDATE: Final = frozenset({"id", "saga_id", "saga_type", "node", "created_at",
                                    "form_schema"})

_SET_ON_UPDATE: Final = ", ".join(f"{c} = excluded.{c}" for c in TASK_COLUMNS
                                  if c not in _KEEP_ON_UPDATE)
UPSERT_TASKS: Final = ("INSERT INTO human_tasks SELECT * FROM "  # noqa: S608
                       "json_populate_recordset(NULL::human_tasks, $1) "
                       "ON CONFLICT (id) DO UPDATE SET " + _SET_ON_UPDATE)


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """One task change of a batch: the history seq of the event that made it and its place
    among that event's task changes (together, the notification's id)."""

    saga_id: UUID
    seq: int
    index: int
    at: datetime
    change: TaskChange


def latest_rows(writes: Sequence[TaskWrite]) -> list[dict[str, Any]]:
    """The row of each task as its last change in the batch leaves it."""
    rows: dict[str, dict[str, Any]] = {}
    for w in writes:
        rows[w.change.task_id] = {**rows.get(w.change.task_id, {}), **w.change.record}
    return [{c: row.get(c) for c in TASK_COLUMNS} | {"comments": row.get("comments") or []}
            for row in rows.values()]


async def write_tasks(conn: asyncpg.Connection, writes: Sequence[TaskWrite]) -> None:
    """Upsert the tasks ``writes`` changed, in the caller's transaction."""
    if writes:
        await conn.execute(UPSERT_TASKS, json.dumps(latest_rows(writes)))


def task_messages(writes: Sequence[TaskWrite]) -> list[OutboxMessage]:
    """One notification per change, keyed by the saga id (one saga's changes stay in order)."""
    out: list[OutboxMessage] = []
    for w in writes:
        change = w.change
        body = {"change": change.change, "task_id": change.task_id, "actor": change.actor,
                "at": w.at.isoformat(), "saga_id": str(w.saga_id),
                "task": {k: v for k, v in change.record.items() if k != "form_schema"}}
        out.append(OutboxMessage(
            topic=change.topic, key=str(w.saga_id),
            payload=json.dumps(body, separators=(",", ":")).encode(),
            message_id=uuid.uuid5(_NOTIFY_NS, f"{w.saga_id}/{w.seq}/{w.index}"),
            headers={HEADER_MESSAGE_KIND: KIND_TASK_EVENT}))
    return out
