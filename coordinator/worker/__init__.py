"""The coordinator worker: reply consumer and timer loop, any number of replicas."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.worker.loading import SagaImportError, build_registry, import_saga
    from coordinator.worker.worker import Worker, WorkerStateError

#: Every public name, loaded from its module on first use: a reply function imports
#: ``coordinator.worker.loading`` for its registry, not the worker loop's Kafka client,
#: schedules, metrics and holiday calendars (~130 ms of its cold start).
_LAZY = {
    "SagaImportError": "coordinator.worker.loading",
    "Worker": "coordinator.worker.worker",
    "WorkerStateError": "coordinator.worker.worker",
    "build_registry": "coordinator.worker.loading",
    "import_saga": "coordinator.worker.loading",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'coordinator.worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["SagaImportError", "Worker", "WorkerStateError", "build_registry", "import_saga"]
