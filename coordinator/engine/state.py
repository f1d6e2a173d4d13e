"""The state of one saga: a frozen snapshot that the pure core folds events into.

``SagaState.steps`` is a flat mapping from a stable *node key* to that node's state: a step or
composite's name (``"ship"``, ``"lines"``), a for-each item (``"lines[3]"``) or a node inside
one (``"lines[3].reserve"``). ``parent`` names the enclosing node's key. A node has a state
only once it was entered; the active configuration is the set of keys in an active phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from participant_sdk.protocol import Phase

__all__ = [
    "STATE_FORMAT_VERSION",
    "AppliedUpdate",
    "ErrorRecord",
    "KeptSignal",
    "Outstanding",
    "ParentLink",
    "PatchChoice",
    "SagaState",
    "Stage",
    "Status",
    "StepPhase",
    "StepState",
]

#: Readers ignore fields they do not know (a newer build or a rollback wrote them); writers
#: stay strict through mypy (pydantic plugin, ``init_forbid_extra``).
#: ``defer_build``: a model's validator is built on its first validation, not at import; the
#: engine builds most of its models through :func:`trusted` and never validates them, so a
#: function's cold start skips their schemas.
_FROZEN = ConfigDict(frozen=True, extra="ignore", defer_build=True)
#: Format of the stored snapshot and node rows. Additive changes keep it; a change an older
#: reader would misread bumps it, and such a reader then refuses the row instead.
STATE_FORMAT_VERSION = 1
_M = TypeVar("_M", bound=BaseModel)
#: The path a version guard took.
PatchChoice = Literal["old", "new"]


class Status(StrEnum):
    """Where a saga stands as a whole."""

    #: Started with a later ``start_at``: it exists (listed, cancellable) but runs nothing yet.
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    #: A person must act: a rollback or confirm ran out of retries, or a step that cannot be
    #: undone blocks the rollback.
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """No event moves the saga any more (``dead`` is not terminal: operators repair it)."""
        return self in (Status.COMPLETED, Status.COMPENSATED, Status.CANCELLED)


class Stage(StrEnum):
    """Which walk over the tree the saga is on."""

    FORWARD = "forward"  # running the tree: trying / executing steps as their nodes allow
    #: A child saga's tree succeeded: it waits for its parent to confirm or cancel it.
    PREPARED = "prepared"
    CONFIRM = "confirm"  # the whole tree succeeded: confirming all tried TCC steps at once
    ROLLBACK = "rollback"  # undoing, in reverse order of completion along each path
    DONE = "done"


class StepPhase(StrEnum):
    """Where one step (node) stands. Also the suffix of machine state names."""

    PENDING = "pending"
    SKIPPED = "skipped"  # its guard said no (or a choice took no branch)
    #: A composite node whose children are running.
    RUNNING = "running"
    TRYING = "trying"
    TRIED = "tried"
    CONFIRMING = "confirming"
    CONFIRMED = "confirmed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    #: The forward phase failed for good (rejected, non-retryable or out of attempts).
    FAILED = "failed"
    #: Rolled back by hand: an operator skipped its cancel or compensation.
    RESOLVED = "resolved"
    #: A sleep node waits for its wake-up timer (a deliberate wait, not a stuck step).
    SLEEPING = "sleeping"
    #: A wait-for-signal node waits for its signal (or its timeout).
    WAITING = "waiting"

    @property
    def is_active(self) -> bool:
        """A command of this step is in flight or waiting for a retry."""
        return self in _ACTIVE

    @property
    def is_deliberate_wait(self) -> bool:
        """The node waits on purpose: for time to pass, or for a signal."""
        return self in _DELIBERATE


_ACTIVE = frozenset(
    {
        StepPhase.TRYING,
        StepPhase.CONFIRMING,
        StepPhase.CANCELLING,
        StepPhase.EXECUTING,
        StepPhase.COMPENSATING,
    }
)
_DELIBERATE = frozenset({StepPhase.SLEEPING, StepPhase.WAITING})


class ErrorRecord(BaseModel):
    """The last failure of a step: from a reply, a missed deadline or a mapper."""

    model_config = _FROZEN

    #: An ``ErrorKind`` value, or ``"deadline"``, ``"rejected"`` or ``"mapper"``.
    kind: str
    message: str
    phase: Phase
    attempt: int
    at: datetime


class Outstanding(BaseModel):
    """The command of a step that awaits its reply."""

    model_config = _FROZEN

    message_id: UUID
    phase: Phase
    attempt: int
    sent_at: datetime
    deadline_timer: str


class ParentLink(BaseModel):
    """A child saga's parent, and the parent's latest request to it (try, confirm or cancel),
    which the child answers once, when it can."""

    model_config = _FROZEN

    saga_id: UUID
    #: The parent's node key that runs this child.
    step: str
    #: 1 for a child of a top-level saga.
    depth: int
    phase: Phase
    attempt: int
    message_id: UUID
    answered: bool = False


class KeptSignal(BaseModel):
    """A signal that arrived before a wait for it: kept until a wait consumes it."""

    model_config = _FROZEN

    signal_id: str
    name: str
    payload: dict[str, Any]
    received_at: datetime


class AppliedUpdate(BaseModel):
    """The latest accepted update of one name (``language.updates``): what ``ctx.updates``
    reads. Every accepted update is in the history and in ``saga_updates`` (migration 0016)."""

    model_config = _FROZEN

    update_id: str
    payload: dict[str, Any]
    result: dict[str, Any]
    applied_at: datetime
    #: How many updates of this name were accepted so far.
    count: int = 1


class StepState(BaseModel):
    """One node of the saga: a step (later also a group, a wait, a sleep or a child saga)."""

    model_config = _FROZEN

    key: str
    #: Name of the definition node this instance runs (equal to ``key`` for plain steps).
    node: str
    #: Key of the enclosing group node, ``None`` at top level (reserved for parallel groups).
    parent: str | None = None
    phase: StepPhase = StepPhase.PENDING
    #: Highest attempt number used so far, per protocol phase (never reset: ids stay unique).
    attempts: dict[Phase, int] = Field(default_factory=dict)
    #: First attempt number of the current retry budget (an operator retry starts a new one).
    budget_from: dict[Phase, int] = Field(default_factory=dict)
    outstanding: Outstanding | None = None
    #: Timer id of the pending retry backoff, if the step is waiting to retry.
    retry_timer: str | None = None
    #: A sleep's or a wait's own timer (wake-up, timeout) while it waits, and when it is due.
    timer: str | None = None
    due_at: datetime | None = None
    #: A forward command of this step was sent at least once (so rollback must undo it).
    sent: bool = False
    #: A forward attempt got no reply before its deadline: its effect is unknown.
    uncertain: bool = False
    #: Left in flight when rollback (or a race's decision) abandoned it.
    abandoned: bool = False
    #: A for-each item's value.
    item: Any = None
    #: A for-each's number of items; a choice's branch taken (-1: none); how many times a
    #: sleep or a wait was entered (its timer ids stay unique when an operator retry re-enters it).
    count: int | None = None
    #: A for-each's items below this index have all succeeded: its walk starts there, so a
    #: reply costs the same whatever the number of items already done.
    settled: int = 0
    #: A for-each's items below this index are all confirmed (confirm) or undone
    #: (rollback): those walks start there too.
    walked: int = 0
    #: A race's winning branch keys, in the order they won.
    winners: list[str] | None = None
    #: Forward payload, built by the step's mapper (or replaced by an operator retry).
    payload: dict[str, Any] | None = None
    #: Operator-supplied payload for the current confirm/cancel/compensate phase.
    payload_override: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    last_error: ErrorRecord | None = None
    #: Position in the order in which nodes succeeded (rollback walks it backwards).
    completed_seq: int | None = None
    started_at: datetime | None = None
    phase_changed_at: datetime | None = None
    finished_at: datetime | None = None
    note: str | None = None

    def attempt(self, phase: Phase) -> int:
        return self.attempts.get(phase, 0)

    def used(self, phase: Phase) -> int:
        """Attempts of ``phase`` spent in the current retry budget."""
        return self.attempt(phase) - self.budget_from.get(phase, 1) + 1


class SagaState(BaseModel):
    """Everything the coordinator knows about one saga; the stored snapshot."""

    model_config = _FROZEN

    saga_id: UUID
    saga_type: str
    version: int
    status: Status
    #: :data:`STATE_FORMAT_VERSION` of the writer (rows written before it existed: 1).
    format_version: int = Field(default=STATE_FORMAT_VERSION, ge=1, le=STATE_FORMAT_VERSION)
    stage: Stage = Stage.FORWARD
    input: dict[str, Any]
    #: By node key; a :class:`~coordinator.engine.stepmap.StepMap` in the states the engine
    #: makes (it shares what a decision did not change), a dict in states read from JSON.
    steps: Annotated[Mapping[str, StepState],
                     PlainSerializer(dict, return_type=dict[str, StepState])]
    #: Why the saga is rolling back, dead, cancelled or resolved.
    reason: str | None = None
    trace_context: dict[str, str] = Field(default_factory=dict)
    #: Set on a child saga: the parent saga and node it runs for.
    parent: ParentLink | None = None
    #: The step whose failure started the rollback, if a step's did.
    cause: str | None = None
    #: Branches being undone while the saga goes on (a race's losers and failed branches).
    undoing: list[str] = Field(default_factory=list)
    #: Status the saga gets once its rollback is done: compensated, or cancelled by an operator.
    rollback_outcome: Status | None = None
    #: The step that made the saga dead, if it is dead.
    dead_step: str | None = None
    #: Set when an operator resolved the saga by hand: actor, reason, previous status.
    resolution: dict[str, Any] | None = None
    #: Why the rollback started (a step's failure, an operator's cancel or compensate); a
    #: later death does not overwrite it, so an auditor still reads the original cause.
    rollback_reason: str | None = None
    #: Why the saga is dead, only while it is (a repair clears it; the history keeps it).
    dead_reason: str | None = None
    #: The last repair that took the saga out of ``dead``: verb, actor, reason, time, and the
    #: dead step and reason it cleared.
    repaired: dict[str, Any] | None = None
    #: A late ``ok`` for the dead step's phase arrived (its participant did it after all):
    #: step, phase, attempt and time; a retry completes the step. Cleared by a repair.
    late_ok: dict[str, Any] | None = None
    completions: int = 0
    #: A delayed start's time (status ``scheduled`` until then).
    start_at: datetime | None = None
    #: Who started the saga, when the starter said (the API's principal): four eyes.
    started_by: str | None = None
    #: Signals received that no wait has consumed yet, in arrival order.
    signals: list[KeptSignal] = Field(default_factory=list)
    #: The latest accepted update of each name, by update name (see ``AppliedUpdate``).
    updates: dict[str, AppliedUpdate] = Field(default_factory=dict)
    #: Version guards decided so far: change id -> ``"old"`` or ``"new"`` (see ``Patched``).
    patches: dict[str, PatchChoice] = Field(default_factory=dict)
    #: Timeouts armed now (``coordinator.engine.timeouts``): node key (``""``: the saga's
    #: own) -> when it passes. Each has a durable ``timeout`` timer.
    timeouts: dict[str, datetime] = Field(default_factory=dict)
    #: The timeout that passed, if one did: node (``""``: the saga), after_s, on_timeout,
    #: at, reason. A dead saga with it is repaired by compensate or resolve.
    timed_out: dict[str, Any] | None = None
    events_applied: int = 0
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_json` rebuilds an equal state."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls.model_validate(data)

    def step(self, key: str) -> StepState:
        return self.steps[key]

    def results(self) -> dict[str, dict[str, Any] | None]:
        """Results of the steps whose forward phase succeeded, by key."""
        done = {StepPhase.TRIED, StepPhase.CONFIRMED, StepPhase.SUCCEEDED}
        return {k: s.result for k, s in self.steps.items() if s.phase in done}

    def active_steps(self) -> list[str]:
        """Keys of the steps with a command in flight or a retry pending, sorted."""
        return sorted(k for k, s in self.steps.items() if s.phase.is_active)

    def waiting_nodes(self) -> list[str]:
        """Keys of the nodes waiting on purpose (sleeping, waiting for a signal), sorted."""
        return sorted(k for k, s in self.steps.items() if s.phase.is_deliberate_wait)

    def machine_states(self) -> list[str]:
        """The machine states the saga is in: one per active step (``lines[2].reserve`` is
        drawn as its node ``reserve``), or the saga's own state when none is active."""
        if self.status is Status.DEAD:
            return ["dead"]
        if self.status is Status.SCHEDULED:
            return ["scheduled"]
        if self.status.is_terminal:
            return [self.status.value]
        states = sorted({f"{self.steps[k].node}.{self.steps[k].phase.value}"
                         for k in (*self.active_steps(), *self.waiting_nodes())})
        return states or ["start" if self.stage is Stage.FORWARD else self.stage.value]

    def machine_state(self) -> str:
        """The first of :meth:`machine_states` (one name, for callers that show one)."""
        return self.machine_states()[0]


# -- copies and construction of already-valid data, without pydantic's validation ------------


def replace(model: _M, changes: dict[str, Any]) -> _M:
    """``model.model_copy(update=changes)`` without its generic machinery: a new frozen
    instance with ``changes`` applied and no validation (the engine only writes values of the
    fields' types). Equal, field for field, to what ``model_copy`` returns."""
    new = object.__new__(type(model))
    object.__setattr__(new, "__dict__", {**model.__dict__, **changes})
    object.__setattr__(new, "__pydantic_fields_set__",
                       model.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


_FIELD_NAMES: dict[type[BaseModel], frozenset[str]] = {}


def trusted(cls: type[_M], **values: Any) -> _M:
    """``cls(**values)`` for values the engine built itself, already of the fields' types:
    no validation (pydantic's ``model_construct`` is slower than validating small models).
    Every field must be given, defaults included."""
    fields = _FIELD_NAMES.get(cls)
    if fields is None:  # ``cls.model_fields`` is a slow property: read it once per class
        fields = _FIELD_NAMES[cls] = frozenset(cls.model_fields)
    assert values.keys() == fields, (cls.__name__, set(values))
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__pydantic_fields_set__", set(values))
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new
