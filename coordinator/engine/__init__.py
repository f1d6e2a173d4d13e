"""The pure core: ``advance(definition, state, event, now) -> Decision`` and its fold, ``replay``.

Nothing here does I/O, reads a clock or draws a random number. Message ids are uuid5 over
(saga id, step, phase, attempt); timer ids and jitter derive from the same fields.
"""

from coordinator.engine.compiled import CompiledSaga, CompiledStep, StepKind, compile_saga
from coordinator.engine.decide import advance, message_id, replay, timer_id
from coordinator.engine.decision import (
    Decision,
    EngineError,
    HistoryEntry,
    InvalidInput,
    InvalidTransition,
    OutgoingCommand,
    TimerRequest,
)
from coordinator.engine.events import (
    Event,
    OperatorRepair,
    ParentRequest,
    RepairVerb,
    ReplyReceived,
    SagaStarted,
    SignalReceived,
    TaskActed,
    TaskAction,
    TimerFired,
    TimerKind,
    event_from_json,
)
from coordinator.engine.results import node_results
from coordinator.engine.state import (
    ErrorRecord,
    Outstanding,
    SagaState,
    Stage,
    Status,
    StepPhase,
    StepState,
)

__all__ = [
    "CompiledSaga",
    "CompiledStep",
    "Decision",
    "EngineError",
    "ErrorRecord",
    "Event",
    "HistoryEntry",
    "InvalidInput",
    "InvalidTransition",
    "OperatorRepair",
    "OutgoingCommand",
    "Outstanding",
    "ParentRequest",
    "RepairVerb",
    "ReplyReceived",
    "SagaStarted",
    "SagaState",
    "SignalReceived",
    "Stage",
    "Status",
    "StepKind",
    "StepPhase",
    "StepState",
    "TaskActed",
    "TaskAction",
    "TimerFired",
    "TimerKind",
    "TimerRequest",
    "advance",
    "compile_saga",
    "event_from_json",
    "message_id",
    "node_results",
    "replay",
    "timer_id",
]
