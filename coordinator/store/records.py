"""Values the store returns: saga rows, history rows, per-event outcomes, pages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from coordinator.engine import Event, SagaState
from participant_sdk.dead_letters import DeadLetter

__all__ = [
    "ApplyOutcome",
    "ApplyResult",
    "HistoryRecord",
    "PendingEvent",
    "SagaPage",
    "SagaRecord",
    "SignalResult",
    "StartResult",
    "TimerRecord",
    "VerifyResult",
]


@dataclass(frozen=True, slots=True)
class SagaRecord:
    """The stored snapshot row of one saga."""

    saga_id: UUID
    saga_type: str
    version: int
    status: str
    state: SagaState
    trace_context: dict[str, str]
    #: Sequence number of the last history row (the number of events applied).
    history_seq: int
    created_at: datetime
    updated_at: datetime
    last_progress_at: datetime
    #: The id people know the saga by, if its class declares one (``Saga.business_key``).
    business_key: str | None = None


@dataclass(frozen=True, slots=True)
class StartResult:
    record: SagaRecord
    #: False when the saga already existed with the same input (an idempotent repeat).
    created: bool


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    saga_id: UUID
    seq: int
    event: Event
    #: The ``now`` the core was given for this event.
    recorded_at: datetime
    actor: str
    #: The decision's history entries (JSON), for people reading the history.
    annotation: Any
    #: Why the core ignored the event (duplicate or stale), else None.
    ignored: str | None


class ApplyOutcome(StrEnum):
    #: The event changed the saga; it is in the history.
    APPLIED = "applied"
    #: The core ignored it (duplicate, stale); recorded in the history as ignored.
    IGNORED = "ignored"
    #: No saga has that id; nothing recorded (dead-lettered when the event came with a record).
    NOT_FOUND = "not_found"
    #: The core refused the event (invalid transition or a failing definition); not recorded.
    REJECTED = "rejected"
    #: This process does not register the saga's version: the event is kept and retried
    #: later (see ``coordinator.store.deferral``); nothing recorded yet.
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class ApplyResult:
    saga_id: UUID
    outcome: ApplyOutcome
    status: str | None = None
    seq: int | None = None
    reason: str | None = None
    #: The saga's type and version when it was found (for spans and metrics).
    saga_type: str | None = field(default=None, compare=False)
    version: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """One event for :meth:`SagaStore.apply_many`.

    ``dead_letter`` is kept (in the same transaction) when the event cannot be applied: the
    saga is unknown or the core refuses it. Its ``reason`` is filled in by the store.
    ``trace_context`` (W3C headers) is the context the commands this event causes carry;
    default: the saga's stored context.
    """

    saga_id: UUID
    event: Event
    actor: str = "worker"
    dead_letter: DeadLetter | None = None
    trace_context: Mapping[str, str] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SagaPage:
    items: list[SagaRecord]
    #: Pass as ``cursor`` to get the next page; None on the last page.
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class TimerRecord:
    timer_id: str
    saga_id: UUID
    due_at: datetime
    step: str | None
    phase: str | None
    attempt: int | None
    kind: str


@dataclass(frozen=True, slots=True)
class SagaStart:
    """Signal-with-start: the saga to start first if its id does not exist yet."""

    saga_type: str
    input: Any
    version: int | None = None


@dataclass(frozen=True, slots=True)
class PendingSignal:
    """One signal for :meth:`SagaStore.signal_many`. ``dead_letter`` is kept (in the same
    transaction, its ``reason`` filled in) when the signal is refused for good; with
    ``start``, the saga is started first unless it exists (as :meth:`signal_with_start`)."""

    saga_id: UUID
    name: str
    signal_id: str
    payload: Any = None
    actor: str = "api"
    dead_letter: DeadLetter | None = None
    start: SagaStart | None = None


@dataclass(frozen=True, slots=True)
class SignalResult:
    """A signal accepted for a saga: ``duplicate`` when that id was already applied;
    ``started`` when signal-with-start created the saga."""

    saga_id: UUID
    signal_id: str
    name: str
    duplicate: bool
    started: bool = False


@dataclass(frozen=True, slots=True)
class VerifyResult:
    saga_id: UUID
    #: Whether replaying the history rebuilt exactly the stored snapshot.
    ok: bool
    #: Sequence number of the checkpoint replay started from (0: from the first event).
    from_seq: int
    #: How many history rows were replayed.
    replayed_events: int
    differences: list[str] = field(default_factory=list)
