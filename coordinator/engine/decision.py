"""What the core hands back: the new state and the effects the store must commit with it.

Exceptions of the engine::

    EngineError
     ├── InvalidTransition   an event (usually an operator verb) is not legal in this state
     │    └── TaskRefused    a person may not act on a human task (the code says why)
     └── InvalidInput        a start event's input does not validate against the input model
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from coordinator.engine.events import Event, TimerKind, event_from_json
from coordinator.engine.state import ParentLink, SagaState
from participant_sdk.protocol import CommandEnvelope, Phase

__all__ = [
    "ChildStart",
    "ConsumedSignal",
    "Decision",
    "Delivery",
    "EngineError",
    "HistoryEntry",
    "InvalidInput",
    "InvalidTransition",
    "OutgoingCommand",
    "TaskChange",
    "TaskRefused",
    "TimerRequest",
]

#: Validators are built on first use (see ``state._FROZEN``): the engine builds decisions
#: through ``trusted``, so a reply never validates one.
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class EngineError(Exception):
    """Root of the engine's exceptions."""


class InvalidTransition(EngineError):
    """The event is not legal in the saga's current state; the message says why (HTTP 409)."""


class TaskRefused(InvalidTransition):
    """A person may not do that to a human task now. ``code`` says why: ``closed`` and
    ``claimed`` (HTTP 409), ``not_candidate``, ``not_assignee`` and ``four_eyes`` (HTTP 403),
    ``unknown`` (HTTP 404)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidInput(EngineError):
    """A saga's input does not validate against its definition's input model (HTTP 422)."""


class OutgoingCommand(BaseModel):
    """A command to put in the outbox, keyed by the saga id, for ``topic``."""

    model_config = _FROZEN

    topic: str
    envelope: CommandEnvelope


class TimerRequest(BaseModel):
    """A durable timer to insert; when due, feed ``TimerFired`` with these fields back."""

    model_config = _FROZEN

    #: Deterministic: ``{saga_id}:{step}:{phase}:{attempt}:{kind}`` (a node's own timer:
    #: ``{saga_id}:{step}:{kind}:{attempt}``). Safe as a primary key.
    timer_id: str
    due_at: datetime
    step: str
    #: ``None`` for a node's own timer (a sleep): it is about no command.
    phase: Phase | None
    attempt: int
    kind: TimerKind


class ChildStart(BaseModel):
    """A child saga to start in the parent's transaction (its id is the try's message id)."""

    model_config = _FROZEN

    saga_id: UUID
    saga_type: str
    #: ``None``: the latest registered version when it starts.
    version: int | None
    input: dict[str, Any]
    trace_context: dict[str, str]
    parent: ParentLink


class ConsumedSignal(BaseModel):
    """A kept or arriving signal that a wait took: the store marks its row consumed."""

    model_config = _FROZEN

    signal_id: str
    #: The key of the wait node that took it.
    node: str


class TaskChange(BaseModel):
    """A human task opened, changed or closed by this decision: the store writes ``record``
    to the tasks table and publishes the change on ``topic`` through the outbox, in the
    decision's transaction."""

    model_config = _FROZEN

    task_id: str
    #: The key of the task node.
    node: str
    #: What happened: created, claimed, unclaimed, reassigned, delegated, resolved,
    #: commented, reminded, escalated, completed, rejected, expired or cancelled.
    change: str
    #: Who did it (``None``: the engine, on a timer or a rollback).
    actor: str | None
    #: The task as it now stands (the tasks table's row, as JSON).
    record: dict[str, Any]
    topic: str


class Delivery(BaseModel):
    """An event for another saga (a parent's request to its child, a child's answer),
    written with this decision and applied later in that saga's own transaction: a change
    never locks two saga rows."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True,
                              defer_build=True)

    saga_id: UUID
    event: Event
    #: Unique per delivery: a re-sent request or answer is stored once.
    message_id: UUID


class HistoryEntry(BaseModel):
    """One history row: the event, when it was applied, and what it did."""

    model_config = _FROZEN

    event: Event
    at: datetime
    #: Short outcome, e.g. ``"reserve_funds: try ok"`` or ``"ignored: stale attempt 1"``.
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event.to_json(), "at": self.at.isoformat(), "note": self.note}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HistoryEntry:
        return cls(
            event=event_from_json(data["event"]),
            at=datetime.fromisoformat(data["at"]),
            note=data["note"],
        )


class Decision(BaseModel):
    """The outcome of applying one event. Commit all of it in one transaction, or none."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True,
                              defer_build=True)

    state: SagaState
    history: list[HistoryEntry] = Field(default_factory=list)
    commands: list[OutgoingCommand] = Field(default_factory=list)
    timers: list[TimerRequest] = Field(default_factory=list)
    #: Timer ids to delete (their saga moved on); deleting a missing one is fine.
    cancel_timers: list[str] = Field(default_factory=list)
    #: Child sagas to start, and events for other sagas, committed with this decision.
    children: list[ChildStart] = Field(default_factory=list)
    deliveries: list[Delivery] = Field(default_factory=list)
    #: Signals a wait consumed in this decision.
    consumed_signals: list[ConsumedSignal] = Field(default_factory=list)
    #: Human tasks opened, changed or closed by this decision.
    tasks: list[TaskChange] = Field(default_factory=list)
    #: Why the event changed nothing (duplicate or stale reply, stale timer), else ``None``.
    ignored: str | None = None
    #: Every phase change (key, node, from, to) and status change ("", "", from, to) made,
    #: in order. Not stored: tests check each against the exported machine.
    moves: list[tuple[str, str, str, str]] = Field(default_factory=list)
    #: Keys of the nodes this decision created or replaced, in the order first touched (new
    #: keys in the order they were added to ``state.steps``), so the store writes only them.
    #: A start's own static tree is not in it: a new saga is written whole.
    touched: list[str] = Field(default_factory=list)
