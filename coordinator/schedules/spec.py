"""When a schedule fires: cron expressions in a time zone, fixed intervals, one-shot times.

A spec is the union of its parts; :meth:`ScheduleSpec.next_after` is the first fire time
strictly after an instant, so the firing loop can walk the nominal times one by one and every
replica computes the same sequence.

Daylight saving: cron fields are matched against local wall-clock time. A wall time that
happens twice (fall-back) fires once, at its first occurrence. A wall time that does not exist
(spring-forward) is read with the offset in force before the jump, so ``30 2 * * *`` fires at
03:30 that day: neither skipped nor doubled. Intervals count elapsed time from the Unix epoch
(plus the offset) and ignore wall clocks.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import ConfigDict, Field, field_validator, model_validator

from coordinator.language.calendars import BusinessCalendar
from coordinator.language.declared import Declared

__all__ = ["IntervalSpec", "ScheduleSpec"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Raw times examined for one answer before the spec is declared unsatisfiable.
_MAX_STEPS = 200_000


class IntervalSpec(Declared):
    """Every ``every``, at epoch + ``offset`` + k * ``every`` (``every=1h, offset=15m``: at
    quarter past each hour, UTC)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: timedelta
    offset: timedelta = timedelta(0)

    @model_validator(mode="after")
    def _check(self) -> IntervalSpec:
        if self.every < timedelta(milliseconds=100):
            raise ValueError("interval `every` must be at least 100 ms")
        if not timedelta(0) <= self.offset < self.every:
            raise ValueError("interval `offset` must be >= 0 and smaller than `every`")
        return self

    def next_after(self, t: datetime) -> datetime:
        every = self.every // _US
        since = (t - EPOCH - self.offset) // _US
        return EPOCH + self.offset + timedelta(microseconds=(since // every + 1) * every)


class ScheduleSpec(Declared):
    """Cron expressions (5 fields, or 6 with seconds last), intervals and one-shot times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cron: tuple[str, ...] = Field(default=(), max_length=20)
    intervals: tuple[IntervalSpec, ...] = Field(default=(), max_length=20)
    #: One-shot fire times (timezone-aware).
    at: tuple[datetime, ...] = Field(default=(), max_length=1000)
    #: IANA zone the cron fields and the calendar's dates are read in.
    timezone: str = "UTC"
    #: No fire time before / after these instants.
    start_at: datetime | None = None
    end_at: datetime | None = None
    calendar: BusinessCalendar | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for expr in value:
            if not croniter.is_valid(expr):
                raise ValueError(f"invalid cron expression {expr!r}")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("at", "start_at", "end_at")
    @classmethod
    def _aware(cls, value: object) -> object:
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, datetime) and item.tzinfo is None:
                raise ValueError("times must carry a time zone offset (e.g. ...Z or +01:00)")
        return value

    @model_validator(mode="after")
    def _check(self) -> ScheduleSpec:
        if not (self.cron or self.intervals or self.at):
            raise ValueError("a spec needs at least one of `cron`, `intervals` or `at`")
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("`end_at` must be after `start_at`")
        return self

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    # -- fire times -------------------------------------------------------------------------

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire time strictly after ``t`` (None when the spec has no more)."""
        if self.start_at is not None and t < self.start_at:
            t = self.start_at - _US
        found = self._calendar_next(t)
        if found is None or (self.end_at is not None and found > self.end_at):
            return None
        return found

    def preview(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` fire times after ``after``."""
        times: list[datetime] = []
        t: datetime | None = after
        while len(times) < count and t is not None:
            t = self.next_after(t)
            if t is not None:
                times.append(t)
        return times

    def between(self, start: datetime, end: datetime, limit: int) -> list[datetime]:
        """Fire times in ``[start, end]``, at most ``limit`` of them."""
        times: list[datetime] = []
        t = self.next_after(start - _US)
        while t is not None and t <= end and len(times) < limit:
            times.append(t)
            t = self.next_after(t)
        return times

    def _calendar_next(self, t: datetime) -> datetime | None:
        cal = self.calendar
        if cal is None:
            return self._raw_next(t)
        tz = self.tz
        if cal.on_closed == "skip":
            r = self._raw_next(t)
            for _ in range(_MAX_STEPS):
                if r is None or cal.is_business_day(r.astimezone(tz).date()):
                    return r
                r = self._raw_next(r)
            raise ValueError("no fire time on a business day was found")
        # shift: a closed day's time moves to the next business day; times from the closed
        # days just before t may land after t, so look from the start of that closed run.
        day = t.astimezone(tz).date()
        first = cal.closed_run_start(day)
        r = self._raw_next(t if first == day and cal.is_business_day(day)
                           else _midnight(first, tz) - _US)
        best: datetime | None = None
        for _ in range(_MAX_STEPS):
            if r is None or (best is not None and r >= best):
                return best
            shifted = self._shift(r, cal)
            if shifted > t and (best is None or shifted < best):
                best = shifted
            r = self._raw_next(r)
        raise ValueError("no business-day fire time was found")

    def _shift(self, r: datetime, cal: BusinessCalendar) -> datetime:
        tz = self.tz
        local = r.astimezone(tz)
        day = cal.next_business_day(local.date())
        if day == local.date():
            return r
        return _instant(datetime.combine(day, local.time()), tz)

    def _raw_next(self, t: datetime) -> datetime | None:
        candidates = [i.next_after(t) for i in self.intervals]
        candidates += [_cron_next(expr, t, self.tz) for expr in self.cron]
        later = [a for a in self.at if a > t]
        if later:
            candidates.append(min(later))
        return min(candidates).astimezone(UTC) if candidates else None


def _instant(naive: datetime, tz: ZoneInfo) -> datetime:
    """The instant of a local wall time: its first occurrence, or (in a gap) the wall time
    read with the offset before the jump."""
    return naive.replace(tzinfo=tz, fold=0).astimezone(UTC)


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    return _instant(datetime.combine(day, datetime.min.time()), tz)


def _cron_next(expr: str, t: datetime, tz: ZoneInfo) -> datetime:
    wall = t.astimezone(tz).replace(tzinfo=None)
    it = croniter(expr, wall, second_at_beginning=False)
    for _ in range(_MAX_STEPS):
        candidate = _instant(it.get_next(datetime), tz)
        if candidate > t:  # a wall time already passed in the repeated hour is not fired again
            return candidate
    raise ValueError(f"cron {expr!r} has no time after {t.isoformat()}")
