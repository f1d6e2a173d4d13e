"""The coordinator worker: reply consumer and timer loop, any number of replicas."""

from coordinator.worker.loading import SagaImportError, build_registry, import_saga
from coordinator.worker.worker import Worker, WorkerStateError

__all__ = ["SagaImportError", "Worker", "WorkerStateError", "build_registry", "import_saga"]
