"""Errors of the schedules package.

Hierarchy::

    ScheduleError            root: something about a schedule is wrong
    ├── InvalidSchedule      the spec, calendar or policy does not validate (HTTP 422)
    ├── ScheduleNotFound     no schedule has this id (HTTP 404)
    └── ScheduleConflict     the id is taken, or the change is not legal now (HTTP 409)
"""

from __future__ import annotations

__all__ = ["InvalidSchedule", "ScheduleConflict", "ScheduleError", "ScheduleNotFound"]


class ScheduleError(Exception):
    code = "schedule_error"


class InvalidSchedule(ScheduleError, ValueError):
    code = "invalid_schedule"


class ScheduleNotFound(ScheduleError, LookupError):
    code = "schedule_not_found"

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id!r}")
        self.schedule_id = schedule_id


class ScheduleConflict(ScheduleError):
    code = "schedule_conflict"
