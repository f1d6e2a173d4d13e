"""Schedules: start sagas on cron expressions, intervals and one-shot times, exactly once
across any number of coordinator replicas, with overlap and catch-up policies and business
calendars (see docs/saga-language.md, "Schedules")."""

from coordinator.language.calendars import BusinessCalendar, add_business_days
from coordinator.schedules.declared import (
    DeclaredSchedule,
    declared_mappers,
    declared_schedules,
    sync_declared,
)
from coordinator.schedules.errors import (
    InvalidSchedule,
    ScheduleConflict,
    ScheduleError,
    ScheduleNotFound,
)
from coordinator.schedules.firing import FireReport, InputMapper, ScheduleFirer
from coordinator.schedules.metrics import ScheduleMetrics
from coordinator.schedules.model import Outcome, Overlap, ScheduleDefinition, ScheduleState
from coordinator.schedules.repository import run_saga_id
from coordinator.schedules.spec import IntervalSpec, ScheduleSpec

__all__ = [
    "BusinessCalendar",
    "DeclaredSchedule",
    "FireReport",
    "InputMapper",
    "IntervalSpec",
    "InvalidSchedule",
    "Outcome",
    "Overlap",
    "ScheduleConflict",
    "ScheduleDefinition",
    "ScheduleError",
    "ScheduleFirer",
    "ScheduleMetrics",
    "ScheduleNotFound",
    "ScheduleSpec",
    "ScheduleState",
    "add_business_days",
    "declared_mappers",
    "declared_schedules",
    "run_saga_id",
    "sync_declared",
]
