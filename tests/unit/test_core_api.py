"""Pins the public surface of the definition and engine packages: changes must be deliberate."""

from __future__ import annotations

import coordinator.engine as engine
import coordinator.language.saga as definition
import coordinator.sagas.registry as registry
from coordinator.engine import (
    HistoryEntry,
    OperatorRepair,
    RepairVerb,
    SagaStarted,
    SignalReceived,
    Status,
    TimerFired,
    TimerKind,
    event_from_json,
)
from participant_sdk.protocol import Phase

ENGINE = {
    "CompiledSaga", "CompiledStep", "Decision", "EngineError", "ErrorRecord", "Event",
    "HistoryEntry", "InvalidInput", "InvalidTransition", "OperatorRepair", "OutgoingCommand",
    "ParentRequest", "Outstanding", "RepairVerb", "ReplyReceived", "SagaStarted", "SagaState",
    "SignalReceived", "Stage", "TaskActed", "TaskAction",
    "Status", "StepKind", "StepPhase", "StepState", "TimerFired", "TimerKind", "TimerRequest",
    "advance", "compile_saga", "event_from_json", "message_id", "node_results", "replay",
    "timer_id",
}
DEFINITION = {
    "DEFAULT_DEADLINE", "DEFAULT_RETRY", "DEFAULT_ROLLBACK_RETRY",
    "DefinitionError", "Guard", "Mapper", "Migration", "PolicyLike", "RetryPolicy", "Saga",
    "SagaStep", "StepContext", "StepSpec", "TccStep", "resolve_policy", "validate_saga_class",
}


def test_engine_exports() -> None:
    assert set(engine.__all__) == ENGINE
    assert all(hasattr(engine, name) for name in ENGINE)


def test_definition_and_registry_exports() -> None:
    assert set(definition.__all__) == DEFINITION
    assert set(registry.__all__) == {"SagaRegistry", "UnknownSaga"}


def test_status_terminality() -> None:
    assert {s for s in Status if s.is_terminal} == {
        Status.COMPLETED, Status.COMPENSATED, Status.CANCELLED}


def test_events_round_trip_through_json() -> None:
    import uuid
    from datetime import UTC, datetime

    events = [
        SagaStarted(saga_id=uuid.UUID(int=5), saga_type="t", version=2, input={"a": [1]},
                    trace_context={"traceparent": "x"}),
        TimerFired(timer_id="t1", step="s", phase=Phase.CANCEL, attempt=3,
                   kind=TimerKind.RETRY),
        OperatorRepair(verb=RepairVerb.SKIP, actor="bob", reason="why", step="s",
                       result={"r": 1}),
        TimerFired(timer_id="t2", step="nap", attempt=1, kind=TimerKind.SLEEP),
        SignalReceived(signal_id="s-1", name="paid", payload={"amount": 1}, sender="api:x"),
    ]
    for event in events:
        assert event_from_json(event.to_json()) == event
        entry = HistoryEntry(event=event, at=datetime(2026, 1, 1, tzinfo=UTC), note="n")
        assert HistoryEntry.from_json(entry.to_json()) == entry
