"""Request and response bodies of the operator API (they are its OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from coordinator.engine import RepairVerb, SagaState, Status, StepPhase
from coordinator.store import HistoryRecord, SagaRecord

__all__ = [
    "BulkRepairRequest",
    "CancelRequest",
    "CompensateRequest",
    "DeadLetterOut",
    "DeadSagaOut",
    "DiagramOut",
    "HistoryOut",
    "OutboxDeadLetterOut",
    "RepairJobOut",
    "RepairJobPageOut",
    "RepairJobSummary",
    "ResolveRequest",
    "RetryRequest",
    "SagaDetail",
    "SagaFilter",
    "SagaSort",
    "SagaSummary",
    "SagaTypeOut",
    "SkipRequest",
    "StartRequest",
    "VerifyJobOut",
    "VerifyOut",
    "VerifyRequest",
]

_STRICT = ConfigDict(extra="forbid")


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
Reason = Annotated[
    str,
    Field(min_length=1, max_length=2000, pattern=r"\S",
          description="Why: recorded in the saga's history with the caller's name."),
    AfterValidator(_no_nul),
]
Int32 = Annotated[int, Field(ge=1, le=2_147_483_647)]


# -- filters ------------------------------------------------------------------------------


class SagaSort(StrEnum):
    CREATED = "created_at"
    CREATED_DESC = "-created_at"
    UPDATED = "updated_at"
    UPDATED_DESC = "-updated_at"
    PROGRESS = "last_progress_at"
    PROGRESS_DESC = "-last_progress_at"


class SagaFilter(BaseModel):
    """Which sagas: every field given must match."""

    model_config = _STRICT

    saga_type: Name | None = None
    version: Int32 | None = None
    status: Status | None = None
    #: The step the saga is working on, or the step it is dead at.
    current_step: Name | None = None
    #: Created at least / at most this many seconds ago.
    min_age_seconds: float | None = Field(default=None, ge=0, le=3.2e9)
    max_age_seconds: float | None = Field(default=None, ge=0, le=3.2e9)
    #: Running or compensating without progress for longer than the stuck threshold.
    stuck: bool | None = None
    #: Some step used at least this many retries (attempts beyond the first) in one phase.
    min_retries: int | None = Field(default=None, ge=0, le=1_000_000)

    def is_empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


# -- sagas ---------------------------------------------------------------------------------


class StartRequest(BaseModel):
    model_config = _STRICT

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
        default=None, ge=0, le=3.2e9, description="Delayed start after this many seconds "
        "(instead of `start_at`).")

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
    #: Results of the steps whose forward phase succeeded, by step.
    result: dict[str, dict[str, Any] | None]
    dead_step: str | None
    resolution: dict[str, Any] | None
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


# -- repairs -------------------------------------------------------------------------------


class _Repair(BaseModel):
    model_config = _STRICT

    reason: Reason


class RetryRequest(_Repair):
    step: Name | None = Field(default=None, description="Default: the failed/stuck step.")
    payload: dict[str, Any] | None = Field(
        default=None, description="Replaces the command payload of the re-driven phase.")


class SkipRequest(_Repair):
    step: Name | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="Recorded as the skipped step's result.")


class CompensateRequest(_Repair):
    step: Name | None = None
    payload: dict[str, Any] | None = Field(
        default=None, description="Payload of the re-driven cancel/compensation, if any.")


class CancelRequest(_Repair):
    pass


class ResolveRequest(_Repair):
    status: Literal["completed", "compensated"] = Field(
        default="completed", description="The final status the saga is closed with.")


class BulkRepairRequest(BaseModel):
    model_config = _STRICT

    verb: RepairVerb
    reason: Reason
    filter: SagaFilter
    step: Name | None = None
    payload: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    status: Literal["completed", "compensated"] | None = None
    #: Refuse the job when the filter matches more sagas than this.
    max_sagas: int = Field(default=1000, ge=1, le=10_000)


class RepairItemOut(BaseModel):
    saga_id: UUID
    #: ``pending``, ``applied``, ``refused``, ``not_found`` or ``failed``.
    outcome: str
    status: str | None
    message: str | None
    finished_at: datetime | None


class RepairJobOut(BaseModel):
    job_id: UUID
    verb: RepairVerb
    reason: str
    actor: str
    filter: dict[str, Any]
    #: ``pending``, ``running`` or ``done``.
    status: str
    total: int
    counts: dict[str, int]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    items: list[RepairItemOut]


# -- replay verification -------------------------------------------------------------------


class VerifyOut(BaseModel):
    """Whether replaying the saga's history through the core rebuilt its stored snapshot."""

    saga_id: UUID
    ok: bool
    #: Sequence number of the checkpoint the replay started from (0: the first event).
    from_seq: int
    replayed_events: int
    #: Paths where the stored snapshot and the replayed state disagree (empty when ``ok``).
    differences: list[str]


class VerifyRequest(BaseModel):
    model_config = _STRICT

    filter: SagaFilter
    reason: Reason = "replay verification"
    #: Refuse the job when the filter matches more sagas than this.
    max_sagas: int = Field(default=1000, ge=1, le=10_000)


class VerifyJobOut(BaseModel):
    """A verify job; item outcomes are ``pending``, ``verified``, ``differs`` (the message
    lists the differences), ``not_found`` or ``failed``."""

    job_id: UUID
    reason: str
    actor: str
    filter: dict[str, Any]
    #: ``pending``, ``running`` or ``done``.
    status: str
    total: int
    counts: dict[str, int]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    items: list[RepairItemOut]


# -- dead letters --------------------------------------------------------------------------


class DeadLetterOut(BaseModel):
    id: int
    source: str
    topic: str | None
    partition: int | None
    offset: int | None
    reason: str
    created_at: datetime | None
    key_base64: str | None
    payload_base64: str | None
    headers: list[dict[str, str]]
    #: The payload decoded as a reply envelope, when it is one.
    decoded: dict[str, Any] | None = None


class OutboxDeadLetterOut(BaseModel):
    id: int
    shard: int
    topic: str
    key: str
    message_id: UUID
    headers: dict[str, str]
    payload_base64: str
    error_class: str
    reason: str
    created_at: datetime
    failed_at: datetime


class DeadLetterPageOut(BaseModel):
    items: list[DeadLetterOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class OutboxDeadLetterPageOut(BaseModel):
    items: list[OutboxDeadLetterOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class ActionOut(BaseModel):
    """What a dead-letter action did."""

    id: int
    action: str
    detail: str


# -- conversions ---------------------------------------------------------------------------


def current_step(state: SagaState) -> str | None:
    if state.status is Status.DEAD:
        return state.dead_step
    active = state.active_steps()
    return active[0] if active else None


def retries(state: SagaState) -> int:
    return max((max(n - 1, 0) for s in state.steps.values() for n in s.attempts.values()),
               default=0)


def summary(record: SagaRecord, stuck: bool) -> dict[str, Any]:
    state = record.state
    return {
        "saga_id": record.saga_id,
        "saga_type": record.saga_type,
        "version": record.version,
        "status": state.status,
        "stage": state.stage.value,
        "state": state.machine_state(),
        "states": state.machine_states(),
        "current_step": current_step(state),
        "active_steps": state.active_steps(),
        "reason": state.reason,
        "retries": retries(state),
        "stuck": stuck,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_progress_at": record.last_progress_at,
    }


def _error(state: SagaState, key: str | None) -> ErrorOut | None:
    if key is None or key not in state.steps:
        return None
    err = state.steps[key].last_error
    return None if err is None else ErrorOut(kind=err.kind, message=err.message,
                                             phase=err.phase.value, attempt=err.attempt,
                                             at=err.at)


def detail(record: SagaRecord, stuck: bool, children: list[ChildOut] | None = None
           ) -> SagaDetail:
    state = record.state
    steps = [
        StepOut(key=s.key, node=s.node, parent=s.parent, phase=s.phase,
                attempts={p.value: n for p, n in s.attempts.items()},
                last_error=_error(state, s.key), result=s.result, payload=s.payload,
                started_at=s.started_at, phase_changed_at=s.phase_changed_at,
                finished_at=s.finished_at, note=s.note)
        for s in state.steps.values()
    ]
    return SagaDetail(**summary(record, stuck), input=state.input, steps=steps,
                      result=state.results(), dead_step=state.dead_step,
                      resolution=state.resolution, history_length=record.history_seq,
                      finished_at=state.finished_at,
                      parent_id=state.parent.saga_id if state.parent else None,
                      parent_node=state.parent.step if state.parent else None,
                      children=children or [])


def dead_saga(record: SagaRecord) -> DeadSagaOut:
    state = record.state
    step = state.dead_step
    attempts = ({p.value: n for p, n in state.steps[step].attempts.items()}
                if step is not None and step in state.steps else {})
    return DeadSagaOut(saga_id=record.saga_id, saga_type=record.saga_type,
                       version=record.version, reason=state.reason, step=step,
                       last_error=_error(state, step), attempts=attempts,
                       created_at=record.created_at, updated_at=record.updated_at)


def history_entry(h: HistoryRecord) -> HistoryEntryOut:
    event = h.event.to_json()
    return HistoryEntryOut(seq=h.seq, type=str(event.get("type")), recorded_at=h.recorded_at,
                           actor=h.actor, reason=event.get("reason"), annotation=h.annotation,
                           ignored=h.ignored, event=event)


class RepairJobSummary(BaseModel):
    """One bulk repair job in ``GET /repairs`` (``GET /repairs/{id}`` has its items)."""

    job_id: UUID
    verb: RepairVerb
    reason: str
    actor: str
    status: str
    total: int
    created_at: datetime
    finished_at: datetime | None


class RepairJobPageOut(BaseModel):
    items: list[RepairJobSummary]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None
