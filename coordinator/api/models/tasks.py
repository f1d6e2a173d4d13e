"""Bodies of the human-task routes: a task as the inbox lists it, one task with its form's
JSON Schema and comments, the counts, and the bodies of the actions people take."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT, Name, Text

__all__ = [
    "TaskActionOut",
    "TaskComment",
    "TaskCommentRequest",
    "TaskCompleteRequest",
    "TaskCountsOut",
    "TaskDelegateRequest",
    "TaskDetail",
    "TaskPageOut",
    "TaskReassignRequest",
    "TaskState",
    "TaskSummary",
    "task_detail",
    "task_summary",
]

TaskState = Literal["open", "completed", "rejected", "expired", "cancelled"]


class TaskSummary(BaseModel):
    """One task as an inbox lists it."""

    id: str
    saga_id: UUID
    saga_type: str
    node: str = Field(description="The task node's key in its saga (highlighted in the "
                                  "saga's diagram).")
    state: str
    title: str
    priority: int
    due_at: datetime | None
    overdue: bool = Field(description="Open and past its due time.")
    candidate_users: list[str]
    candidate_groups: list[str]
    assignee: str | None
    owner: str | None = Field(description="Who delegated it, while it is with a delegate.")
    escalation_tier: int
    created_at: datetime
    claimed_at: datetime | None
    closed_at: datetime | None


class TaskComment(BaseModel):
    by: str
    at: datetime
    text: str


class TaskDetail(TaskSummary):
    """One task: the listing's fields, its form as JSON Schema, comments and outcome."""

    description: str
    excluded_users: list[str] = Field(description="Four eyes: they may not complete it.")
    delegation: str | None
    proposal: dict[str, Any] | None = Field(
        description="A delegate's completed form, back with the owner to confirm.")
    reminders: int
    chain: str | None
    form_schema: dict[str, Any] | None = Field(
        description="The form's JSON Schema: what `complete` takes as `data`.")
    outcome: str | None
    result: dict[str, Any] | None
    completed_by: str | None
    comments: list[TaskComment]
    updated_at: datetime


class TaskPageOut(BaseModel):
    items: list[TaskSummary]
    next_cursor: str | None


class TaskCountsOut(BaseModel):
    """How many tasks the same filters match."""

    total: int
    overdue: int
    mine: int = Field(description="Held or delegated by the caller.")
    unclaimed: int


class TaskActionOut(BaseModel):
    """The task after the action, and the saga's status after it (a completion may move the
    saga on)."""

    task: TaskDetail
    saga_status: str


class TaskCompleteRequest(BaseModel):
    model_config = STRICT

    data: dict[str, Any] = Field(description="The form, validated against the task's form "
                                             "model (see `form_schema`).")


class TaskReassignRequest(BaseModel):
    model_config = STRICT

    to_user: Name = Field(description="The person who holds the task from now on.")


class TaskDelegateRequest(BaseModel):
    model_config = STRICT

    to_user: Name = Field(description="The delegate.")
    return_to_owner: bool = Field(
        default=False, description="The delegate's completed form comes back to you to "
                                   "confirm, instead of closing the task.")


class TaskCommentRequest(BaseModel):
    model_config = STRICT

    text: Text = Field(min_length=1, max_length=2000, pattern=r"\S")


def task_summary(row: dict[str, Any], now: datetime) -> TaskSummary:
    return TaskSummary(**_summary_fields(row, now))


def task_detail(row: dict[str, Any], now: datetime) -> TaskDetail:
    fields = _summary_fields(row, now)
    fields.update({k: row.get(k) for k in (
        "description", "excluded_users", "delegation", "proposal", "reminders", "chain",
        "form_schema", "outcome", "result", "completed_by", "updated_at")})
    fields["comments"] = [TaskComment(**c) for c in row.get("comments") or []]
    return TaskDetail(**fields)


def _summary_fields(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    fields = {k: row.get(k) for k in TaskSummary.model_fields if k != "overdue"}
    due = row.get("due_at")
    fields["overdue"] = row.get("state") == "open" and due is not None and due < now
    return fields
