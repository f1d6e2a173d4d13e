"""Which sagas a list, a bulk repair, a verify job or a migration applies to."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT, Int32, Name
from coordinator.engine import Status

__all__ = ["SagaFilter", "SagaSort"]


class SagaSort(StrEnum):
    CREATED = "created_at"
    CREATED_DESC = "-created_at"
    UPDATED = "updated_at"
    UPDATED_DESC = "-updated_at"
    PROGRESS = "last_progress_at"
    PROGRESS_DESC = "-last_progress_at"


class SagaFilter(BaseModel):
    """Which sagas: every field given must match."""

    model_config = STRICT

    saga_type: Name | None = None
    version: Int32 | None = None
    status: Status | None = None
    #: The step the saga is working on, or the step it is dead at.
    current_step: Name | None = None
    #: Created at least / at most this many seconds ago.
    min_age_seconds: float | None = Field(default=None, ge=0, le=3.2e9, strict=True)
    max_age_seconds: float | None = Field(default=None, ge=0, le=3.2e9, strict=True)
    #: Running or compensating without progress for longer than the stuck threshold.
    stuck: bool | None = Field(default=None, strict=True)
    #: Some step used at least this many retries (attempts beyond the first) in one phase.
    min_retries: int | None = Field(default=None, ge=0, le=1_000_000, strict=True)
    #: The id people know the saga by (``Saga.business_key``), exactly.
    business_key: str | None = Field(default=None, min_length=1, max_length=200)

    def is_empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())
