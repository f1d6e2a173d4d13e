"""Bodies of bulk repair jobs: a verb applied to every saga a filter matches."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT, Name, Reason
from coordinator.api.models.filters import SagaFilter
from coordinator.engine import RepairVerb

__all__ = [
    "BulkRepairRequest",
    "RepairItemOut",
    "RepairJobOut",
    "RepairJobPageOut",
    "RepairJobSummary",
]


class BulkRepairRequest(BaseModel):
    model_config = STRICT

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
