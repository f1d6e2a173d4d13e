"""Bodies of replay verification: one saga, or a job over a filter."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT, Reason
from coordinator.api.models.filters import SagaFilter
from coordinator.api.models.jobs import RepairItemOut

__all__ = ["VerifyJobOut", "VerifyOut", "VerifyRequest"]


class VerifyOut(BaseModel):
    """Whether replaying the saga's history through the core rebuilt its stored snapshot."""

    saga_id: UUID
    ok: bool
    #: Sequence number of the checkpoint the replay started from (0: the first event).
    from_seq: int
    replayed_events: int
    #: Paths where the stored snapshot and the replayed state disagree (empty when ``ok``).
    differences: list[str]


class VerifyRequest(BaseModel):
    model_config = STRICT

    filter: SagaFilter
    reason: Reason = "replay verification"
    #: Refuse the job when the filter matches more sagas than this.
    max_sagas: int = Field(default=1000, ge=1, le=10_000)


class VerifyJobOut(BaseModel):
    """A verify job; item outcomes are ``pending``, ``verified``, ``differs`` (the message
    lists the differences), ``not_found`` or ``failed``."""

    job_id: UUID
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
