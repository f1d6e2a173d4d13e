"""Request and response bodies of the operator API (they are its OpenAPI schema), one module
per resource; every name is re-exported here, where callers import it from."""

from coordinator.api.models.conversions import (
    current_step,
    dead_saga,
    detail,
    history_entry,
    retries,
    summary,
)
from coordinator.api.models.dead_letters import (
    ActionOut,
    DeadLetterOut,
    DeadLetterPageOut,
    OutboxDeadLetterOut,
    OutboxDeadLetterPageOut,
)
from coordinator.api.models.fields import Int32, Name, Reason, Text
from coordinator.api.models.filters import SagaFilter, SagaSort
from coordinator.api.models.jobs import (
    BulkRepairRequest,
    RepairItemOut,
    RepairJobOut,
    RepairJobPageOut,
    RepairJobSummary,
)
from coordinator.api.models.repairs import (
    CancelRequest,
    CompensateRequest,
    ResolveRequest,
    RetryRequest,
    SkipRequest,
)
from coordinator.api.models.sagas import (
    ChildOut,
    DeadSagaOut,
    DeadSagaPageOut,
    DiagramOut,
    ErrorOut,
    HistoryEntryOut,
    HistoryOut,
    SagaDetail,
    SagaPageOut,
    SagaSummary,
    SagaTypeOut,
    StartRequest,
    StepOut,
)
from coordinator.api.models.verify import VerifyJobOut, VerifyOut, VerifyRequest

__all__ = [
    "ActionOut",
    "BulkRepairRequest",
    "CancelRequest",
    "ChildOut",
    "CompensateRequest",
    "DeadLetterOut",
    "DeadLetterPageOut",
    "DeadSagaOut",
    "DeadSagaPageOut",
    "DiagramOut",
    "ErrorOut",
    "HistoryEntryOut",
    "HistoryOut",
    "Int32",
    "Name",
    "OutboxDeadLetterOut",
    "OutboxDeadLetterPageOut",
    "Reason",
    "RepairItemOut",
    "RepairJobOut",
    "RepairJobPageOut",
    "RepairJobSummary",
    "ResolveRequest",
    "RetryRequest",
    "SagaDetail",
    "SagaFilter",
    "SagaPageOut",
    "SagaSort",
    "SagaSummary",
    "SagaTypeOut",
    "SkipRequest",
    "StartRequest",
    "StepOut",
    "Text",
    "VerifyJobOut",
    "VerifyOut",
    "VerifyRequest",
    "current_step",
    "dead_saga",
    "detail",
    "history_entry",
    "retries",
    "summary",
]
