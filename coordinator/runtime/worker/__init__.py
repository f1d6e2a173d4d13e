"""The coordinator worker: reply consumer and timer loop, any number of replicas."""

from typing import TYPE_CHECKING

from participant_sdk.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from coordinator.runtime.worker.worker import Worker, WorkerStateError
    from coordinator.sagas.loading import SagaImportError, build_registry, import_saga

#: Every public name, loaded from its module on first use: a reply function imports
#: ``coordinator.sagas.loading`` for its registry, not the worker loop's Kafka client,
#: schedules, metrics and holiday calendars (~130 ms of its cold start).
_LAZY = {
    "SagaImportError": "coordinator.sagas.loading",
    "Worker": "coordinator.runtime.worker.worker",
    "WorkerStateError": "coordinator.runtime.worker.worker",
    "build_registry": "coordinator.sagas.loading",
    "import_saga": "coordinator.sagas.loading",
}


__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = ["SagaImportError", "Worker", "WorkerStateError", "build_registry", "import_saga"]
