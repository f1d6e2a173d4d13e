"""A schedule as data: what to start, when, and what to do about overlaps and downtime."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from coordinator.language.declared import Declared
from coordinator.schedules.spec import ScheduleSpec

__all__ = ["SCHEDULE_ID", "Outcome", "Overlap", "ScheduleDefinition", "ScheduleState"]

SCHEDULE_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class Overlap(StrEnum):
    """What a fire time does while the previous run is still going (Temporal's meanings)."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    ALLOW_ALL = "allow_all"


class Outcome(StrEnum):
    """What happened to one nominal fire time (one ``schedule_runs`` row)."""

    STARTED = "started"
    BUFFERED = "buffered"
    SKIPPED = "skipped"
    MISSED = "missed"
    FAILED = "failed"
    TRIGGERED = "triggered"
    BACKFILLED = "backfilled"


#: Outcomes whose saga exists (the auditor's "ran").
RAN: Final = frozenset({Outcome.STARTED, Outcome.TRIGGERED, Outcome.BACKFILLED})


class ScheduleDefinition(Declared):
    """What an operator or a saga class declares. The firing state lives beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=128)
    saga_type: str = Field(min_length=1, max_length=200)
    saga_version: int | None = Field(default=None, ge=1)
    input: dict[str, Any] = Field(default_factory=dict)
    #: Name of an input field set to the nominal fire time (ISO 8601), if the saga wants it.
    fire_time_field: str | None = Field(default=None, min_length=1, max_length=200)
    spec: ScheduleSpec
    overlap: Overlap = Overlap.SKIP
    #: Fire times missed by at most this much (downtime, pause) still run; older ones are
    #: recorded as missed.
    catchup_window: timedelta = timedelta(minutes=1)
    #: Each start is delayed by a deterministic fraction of this (spreads load at :00).
    jitter: timedelta = timedelta(0)
    paused: bool = False
    note: str = Field(default="", max_length=2000)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not SCHEDULE_ID.match(value):
            raise ValueError("schedule id: letters, digits and _ . : - (at most 128), "
                             "starting with a letter or digit")
        return value

    @field_validator("catchup_window", "jitter")
    @classmethod
    def _non_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError("must not be negative")
        return value


class ScheduleState(BaseModel):
    """A stored schedule: its definition and where its firing stands."""

    model_config = ConfigDict(frozen=True)

    definition: ScheduleDefinition
    source: str
    next_fire_at: datetime | None
    due_at: datetime | None
    last_saga_id: str | None
    buffered: list[datetime]
    fired_count: int
    skipped_count: int
    missed_count: int
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
