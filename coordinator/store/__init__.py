"""The Postgres saga store: snapshots, append-only history, outbox rows and timers."""

from coordinator.store.errors import (
    InvalidInput,
    SagaConflict,
    SagaNotFound,
    StoreError,
    TransientStoreError,
    UnknownSagaType,
    UnknownSagaVersion,
)
from coordinator.store.records import (
    ApplyOutcome,
    ApplyResult,
    HistoryRecord,
    PendingEvent,
    SagaPage,
    SagaRecord,
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
    "PendingEvent",
    "SagaConflict",
    "SagaNotFound",
    "SagaPage",
    "SagaRecord",
    "SagaStore",
    "StartResult",
    "StoreError",
    "TimerRecord",
    "TransientStoreError",
    "UnknownSagaType",
    "UnknownSagaVersion",
    "VerifyResult",
]
