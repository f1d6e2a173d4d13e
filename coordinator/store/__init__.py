"""The Postgres saga store: snapshots, append-only history, outbox rows and timers."""

from coordinator.store.errors import (
    InvalidInput,
    InvalidSignalPayload,
    SagaConflict,
    SagaFinished,
    SagaNotFound,
    StoreError,
    TransientStoreError,
    UnknownSagaType,
    UnknownSagaVersion,
    UnknownSignal,
)
from coordinator.store.records import (
    ApplyOutcome,
    ApplyResult,
    HistoryRecord,
    PendingEvent,
    PendingSignal,
    SagaPage,
    SagaRecord,
    SignalResult,
    StartResult,
    TimerRecord,
    VerifyResult,
)
from coordinator.store.store import SagaStore

__all__ = [
    "ApplyOutcome",
    "ApplyResult",
    "HistoryRecord",
    "InvalidInput",
    "InvalidSignalPayload",
    "PendingEvent",
    "PendingSignal",
    "SagaConflict",
    "SagaFinished",
    "SagaNotFound",
    "SagaPage",
    "SagaRecord",
    "SagaStore",
    "SignalResult",
    "StartResult",
    "StoreError",
    "TimerRecord",
    "TransientStoreError",
    "UnknownSagaType",
    "UnknownSagaVersion",
    "UnknownSignal",
    "VerifyResult",
]
