"""Business calendars: which days are open, shared by schedules and human-task SLAs.

A day is closed when it is a weekend day, a public holiday of the configured country (and
subdivision) from the ``holidays`` package, or one of the custom closed dates. Dates are local
dates in the caller's time zone.
"""

from __future__ import annotations

import functools
from collections.abc import Container
from datetime import date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import ConfigDict, Field, model_validator

from coordinator.language.declared import Declared

__all__ = ["BusinessCalendar", "add_business_days"]

#: Longest run of closed days looked through before giving up (a calendar closing every day).
MAX_CLOSED_RUN = 400


@functools.lru_cache(maxsize=64)
def _public_holidays(country: str, subdivision: str | None) -> Container[date]:
    import holidays  # ~100 ms: only where a calendar names a country, not at every import

    try:
        found: Container[date] = holidays.country_holidays(country, subdiv=subdivision)
    except NotImplementedError as exc:
        raise ValueError(f"unknown country or subdivision for holidays: {exc}") from None
    return found


class BusinessCalendar(Declared):
    """Open and closed days. ``on_closed`` says what a schedule does with a closed day's time:
    ``skip`` it, or ``shift`` it to the same local time on the next business day."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: ISO country code for public holidays (``US``, ``DE``, ``GB``...); None: no holidays.
    country: str | None = Field(default=None, min_length=2, max_length=3)
    #: Subdivision code (``NY``, ``BY``, ``ENG``...), only with a country.
    subdivision: str | None = Field(default=None, min_length=1, max_length=10)
    #: Closed weekdays, Monday = 0 ... Sunday = 6.
    weekend: tuple[int, ...] = (5, 6)
    #: Extra closed dates (company shutdown days, ...).
    closed_dates: tuple[date, ...] = ()
    on_closed: Literal["skip", "shift"] = "skip"

    @model_validator(mode="after")
    def _check(self) -> BusinessCalendar:
        if any(d < 0 or d > 6 for d in self.weekend):
            raise ValueError("weekend days are 0 (Monday) to 6 (Sunday)")
        if len(set(self.weekend)) >= 7:
            raise ValueError("a calendar must have at least one open weekday")
        if self.subdivision is not None and self.country is None:
            raise ValueError("a subdivision needs a country")
        if self.country is not None:
            _public_holidays(self.country.upper(), self.subdivision)
        return self

    def is_business_day(self, day: date) -> bool:
        if day.weekday() in self.weekend or day in self.closed_dates:
            return False
        if self.country is None:
            return True
        return day not in _public_holidays(self.country.upper(), self.subdivision)

    def next_business_day(self, day: date) -> date:
        """``day`` itself when open, else the first open day after it."""
        for _ in range(MAX_CLOSED_RUN):
            if self.is_business_day(day):
                return day
            day += timedelta(days=1)
        raise ValueError(f"no business day within {MAX_CLOSED_RUN} days of {day}")

    def closed_run_start(self, day: date) -> date:
        """The first day of the run of closed days that ends just before ``day`` (``day``
        itself when the day before is open)."""
        start = day
        for _ in range(MAX_CLOSED_RUN):
            if self.is_business_day(start - timedelta(days=1)):
                return start
            start -= timedelta(days=1)
        raise ValueError(f"no business day within {MAX_CLOSED_RUN} days before {day}")


def add_business_days(calendar: BusinessCalendar, start: datetime, days: int,
                      timezone: str = "UTC") -> datetime:
    """``start`` moved ``days`` business days later, at the same local time (for SLAs such as
    "due in 2 business days": Friday 10:00 gives Tuesday 10:00, and so does Saturday 10:00).
    With ``days=0`` a start on a closed day moves to the next open day."""
    if days < 0:
        raise ValueError("days must be >= 0")
    tz = ZoneInfo(timezone)
    local = start.astimezone(tz)
    day = calendar.next_business_day(local.date()) if days == 0 else local.date()
    for _ in range(days):
        day = calendar.next_business_day(day + timedelta(days=1))
    moved = datetime.combine(day, local.timetz().replace(tzinfo=None), tzinfo=tz)
    return moved.astimezone(start.tzinfo)
