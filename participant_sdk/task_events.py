"""The human-task notifications the coordinator publishes on ``{prefix}.tasks``.

Every change of a human task (created, claimed, reminded, escalated, completed, ...) is one
message, keyed by the saga id, written to the outbox in the transaction that made the change,
so a team's mail or chat consumer sees each change once it happened (at least once: dedupe on
the ``saga-message-id`` header) and one saga's changes in order. Decode one with
``TaskEvent.model_validate_json(record.value)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KIND_TASK_EVENT", "TaskChangeKind", "TaskEvent", "TaskSnapshot", "tasks_topic"]

#: ``saga-message-kind`` header of a task notification.
KIND_TASK_EVENT = "task-event"

TaskChangeKind = Literal[
    "created", "claimed", "unclaimed", "reassigned", "delegated", "resolved", "commented",
    "reminded", "escalated", "completed", "rejected", "expired", "cancelled",
]

_READER = ConfigDict(extra="ignore", frozen=True)


def tasks_topic(prefix: str) -> str:
    """The topic of the task notifications of a deployment."""
    return f"{prefix}.tasks"


class TaskComment(BaseModel):
    model_config = _READER

    by: str
    at: datetime
    text: str


class TaskSnapshot(BaseModel):
    """The task as it stands after the change."""

    model_config = _READER

    id: str
    saga_type: str
    node: str = Field(description="The task node's key in its saga.")
    state: Literal["open", "completed", "rejected", "expired", "cancelled"]
    title: str
    description: str = ""
    candidate_users: list[str] = Field(default_factory=list)
    candidate_groups: list[str] = Field(default_factory=list)
    excluded_users: list[str] = Field(default_factory=list,
                                      description="Four eyes: may not complete it.")
    assignee: str | None = None
    owner: str | None = Field(default=None, description="Who delegated it.")
    delegation: Literal["pending", "resolved"] | None = None
    priority: int = Field(ge=0, le=100)
    due_at: datetime | None = None
    escalation_tier: int = 0
    reminders: int = 0
    chain: str | None = None
    outcome: str | None = None
    result: dict[str, Any] | None = None
    completed_by: str | None = None
    comments: list[TaskComment] = Field(default_factory=list)
    created_at: datetime
    claimed_at: datetime | None = None
    closed_at: datetime | None = None
    updated_at: datetime


class TaskEvent(BaseModel):
    """One change of one human task."""

    model_config = _READER

    change: TaskChangeKind
    task_id: str
    actor: str | None = Field(description="Who did it; null: the coordinator (a reminder, an "
                              "escalation, a timeout, a rollback).")
    at: datetime
    saga_id: UUID
    task: TaskSnapshot
