"""Bodies of the saga routes: starting, reading, listing sagas and their types."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, Field, model_validator

from coordinator.api.models.fields import STRICT, Int32, Name
from coordinator.engine import Status, StepPhase

__all__ = [
    "ChildOut",
    "DeadSagaOut",
    "DeadSagaPageOut",
    "DiagramOut",
    "ErrorOut",
    "HistoryEntryOut",
    "HistoryOut",
    "SagaDetail",
    "SagaPageOut",
    "SagaSummary",
    "SagaTypeOut",
    "StartRequest",
    "StepOut",
]


class StartRequest(BaseModel):
    model_config = STRICT

    type: Name = Field(description="Registered saga type (GET /saga-types lists them).")
    version: Int32 | None = Field(default=None, description="Default: the latest version.")
    input: dict[str, Any] = Field(description="Validated against the type's input model.")
    saga_id: UUID | None = Field(
        default=None,
        description="Your own id makes the start idempotent: the same id and input return "
        "the existing saga (200); the same id with another input is a 409.",
    )
    start_at: AwareDatetime | None = Field(
        default=None, description="Delayed start: the saga exists at once as `scheduled` "
        "(listed, cancellable) and its first command goes out at this time.")
    delay_seconds: float | None = Field(
        default=None, ge=0, le=3.2e9, strict=True,
        description="Delayed start after this many seconds (instead of `start_at`).")

    @model_validator(mode="after")
    def _one_start_time(self) -> StartRequest:
        if self.start_at is not None and self.delay_seconds is not None:
            raise ValueError("give start_at or delay_seconds, not both")
        return self


class ErrorOut(BaseModel):
    kind: str
    message: str
    phase: str
    attempt: int
    at: datetime


class StepOut(BaseModel):
    key: str
    node: str
    #: Key of the enclosing node, for steps nested in a group (None at the top level).
    parent: str | None = None
    phase: StepPhase
    attempts: dict[str, int]
    last_error: ErrorOut | None
    result: dict[str, Any] | None
    payload: dict[str, Any] | None
    started_at: datetime | None
    phase_changed_at: datetime | None
    finished_at: datetime | None
    note: str | None


class SagaSummary(BaseModel):
    saga_id: UUID
    saga_type: str
    version: int
    status: Status
    #: The id people know the saga by, if its class declares one (``Saga.business_key``).
    business_key: str | None = None
    stage: str
    #: The first of ``states`` (kept for clients that show one state).
    state: str
    #: The machine states the saga is in: one per active step (``reserve.trying``), or the
    #: saga's own (``confirming`` is per step too, ``dead``, ``completed``, ...).
    states: list[str]
    #: The dead step, else the first active step.
    current_step: str | None
    #: Every step key with a command in flight or a retry pending (parallel branches,
    #: for-each items, confirms): a repair verb needs one of them when there are several.
    active_steps: list[str]
    reason: str | None
    #: Highest retry count of any step phase.
    retries: int
    stuck: bool
    created_at: datetime
    updated_at: datetime
    last_progress_at: datetime


class ChildOut(BaseModel):
    """A child saga, run by one node of its parent."""

    saga_id: UUID
    saga_type: str
    status: Status
    #: The parent's node key that runs it.
    node: str
    created_at: datetime


class SagaDetail(SagaSummary):
    input: dict[str, Any]
    #: Set on a child saga: its parent and the parent's node that runs it.
    parent_id: UUID | None = None
    parent_node: str | None = None
    #: The child sagas this saga started (oldest first, at most 1,000).
    children: list[ChildOut] = []
    steps: list[StepOut]
    #: Every succeeded node's result by node key (a for-each's: a list per item).
    result: dict[str, Any]
    #: The saga's search attributes (its class's ``search``) that have a value, by name.
    search_attributes: dict[str, Any] = {}
    dead_step: str | None
    #: Why the rollback started; kept when the rollback later dies.
    rollback_reason: str | None = None
    #: Why the saga is dead, only while it is.
    dead_reason: str | None = None
    #: The last repair that took the saga out of ``dead`` (verb, actor, reason, at, and the
    #: dead step and reason it cleared).
    repaired: dict[str, Any] | None = None
    #: A late ``ok`` for the dead step arrived (step, phase, attempt, at): retry completes it.
    late_ok: dict[str, Any] | None = None
    resolution: dict[str, Any] | None
    #: Timeouts armed now: node key (``""``: the saga's own) -> when it passes.
    timeouts: dict[str, datetime] = {}
    #: The timeout that passed, if one did: node, after_s, on_timeout, at, reason.
    timed_out: dict[str, Any] | None = None
    history_length: int
    finished_at: datetime | None


class SagaPageOut(BaseModel):
    items: list[SagaSummary]
    #: Pass back as ``cursor`` for the next page; null on the last page.
    next_cursor: str | None


class HistoryEntryOut(BaseModel):
    seq: int
    type: str
    recorded_at: datetime
    #: Who caused it: ``api:<name>``, ``operator:<name>``, ``worker``, ``timer``, ...
    actor: str
    #: The operator's reason, for repairs.
    reason: str | None
    #: What the core did with the event (its history notes).
    annotation: Any
    ignored: str | None
    event: dict[str, Any]


class HistoryOut(BaseModel):
    saga_id: UUID
    entries: list[HistoryEntryOut]


class DiagramOut(BaseModel):
    saga_id: UUID
    state: str
    states: list[str]
    mermaid: str


class SagaTypeOut(BaseModel):
    name: str
    version: int
    latest: bool
    definition: dict[str, Any]
    #: The search attributes the version declares: name -> kind (str, int, float, bool,
    #: datetime, keywords), what ``GET /sagas?q=`` filters on.
    search_attributes: dict[str, str] = {}


class DeadSagaOut(BaseModel):
    saga_id: UUID
    saga_type: str
    version: int
    reason: str | None
    step: str | None
    last_error: ErrorOut | None
    attempts: dict[str, int]
    created_at: datetime
    updated_at: datetime


class DeadSagaPageOut(BaseModel):
    items: list[DeadSagaOut]
    next_cursor: str | None
