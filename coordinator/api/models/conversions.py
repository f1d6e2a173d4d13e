"""Stored sagas as response bodies: shared by the API routes and the web UI."""

from __future__ import annotations

from typing import Any

from coordinator.api.models.sagas import (
    ChildOut,
    DeadSagaOut,
    ErrorOut,
    HistoryEntryOut,
    SagaDetail,
    StepOut,
)
from coordinator.engine import SagaState, Status
from coordinator.store import HistoryRecord, SagaRecord

__all__ = ["current_step", "dead_saga", "detail", "history_entry", "retries", "summary"]


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
        "business_key": record.business_key,
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


def detail(record: SagaRecord, stuck: bool, children: list[ChildOut] | None = None,
           results: dict[str, Any] | None = None, *,
           search_attributes: dict[str, Any] | None = None) -> SagaDetail:
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
                      result=state.results() if results is None else results,
                      dead_step=state.dead_step,
                      rollback_reason=state.rollback_reason, dead_reason=state.dead_reason,
                      repaired=state.repaired, late_ok=state.late_ok,
                      resolution=state.resolution, history_length=record.history_seq,
                      timeouts=state.timeouts, timed_out=state.timed_out,
                      finished_at=state.finished_at,
                      parent_id=state.parent.saga_id if state.parent else None,
                      parent_node=state.parent.step if state.parent else None,
                      children=children or [], search_attributes=search_attributes or {})


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
