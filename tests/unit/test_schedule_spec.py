"""Fire-time computation: cron in a time zone across DST jumps, intervals, one-shots and
business calendars (weekends, public holidays, custom closed dates, shift vs skip)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from coordinator.language.declared import STORED
from coordinator.schedules import (
    BusinessCalendar,
    IntervalSpec,
    ScheduleDefinition,
    ScheduleSpec,
    add_business_days,
    run_saga_id,
)

NY = ZoneInfo("America/New_York")


def local(times: list[datetime], tz: ZoneInfo = NY) -> list[str]:
    return [t.astimezone(tz).strftime("%Y-%m-%d %H:%M%z") for t in times]


def test_daily_cron_on_spring_forward_runs_once_after_the_jump() -> None:
    # 2026-03-08: New York jumps from 02:00 EST to 03:00 EDT; 02:30 does not exist that day.
    spec = ScheduleSpec(cron=("30 2 * * *",), timezone="America/New_York")
    times = spec.preview(datetime(2026, 3, 6, 12, tzinfo=UTC), 4)
    assert local(times) == ["2026-03-07 02:30-0500", "2026-03-08 03:30-0400",
                            "2026-03-09 02:30-0400", "2026-03-10 02:30-0400"]


def test_daily_cron_on_fall_back_runs_once_not_twice() -> None:
    # 2026-11-01: 01:30 happens at -04:00 and again at -05:00; it fires at the first only.
    spec = ScheduleSpec(cron=("30 1 * * *",), timezone="America/New_York")
    times = spec.preview(datetime(2026, 10, 31, 12, tzinfo=UTC), 3)
    assert local(times) == ["2026-11-01 01:30-0400", "2026-11-02 01:30-0500",
                            "2026-11-03 01:30-0500"]
    # Asked from inside the repeated hour (after the first 01:30), it is not fired again.
    second = datetime(2026, 11, 1, 1, 40, tzinfo=NY).replace(fold=1)
    assert local([spec.next_after(second)]) == ["2026-11-02 01:30-0500"]  # type: ignore[list-item]
    # An hourly time inside the repeated hour never goes back to its first occurrence.
    hourly = ScheduleSpec(cron=("30 * * * *",), timezone="America/New_York")
    in_second_hour = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)  # 01:10 -05:00
    assert local([hourly.next_after(in_second_hour)]) == [  # type: ignore[list-item]
        "2026-11-01 02:30-0500"]


def test_hourly_cron_over_both_jumps_has_no_duplicate_instant() -> None:
    spec = ScheduleSpec(cron=("0 * * * *",), timezone="America/New_York")
    for start in (datetime(2026, 3, 8, 4, tzinfo=UTC), datetime(2026, 11, 1, 3, tzinfo=UTC)):
        times = spec.preview(start, 6)
        assert times == sorted(set(times)), local(times)
        walls = [t.astimezone(NY).strftime("%H:%M") for t in times]
        assert len(walls) == len(set(walls)), walls  # each wall time at most once


def test_interval_with_offset_is_aligned_to_the_epoch() -> None:
    spec = ScheduleSpec(intervals=(IntervalSpec(every=timedelta(hours=1),
                                                offset=timedelta(minutes=15)),))
    start = datetime(2026, 12, 1, 10, 15, tzinfo=UTC)
    assert spec.preview(start, 2) == [datetime(2026, 12, 1, 11, 15, tzinfo=UTC),
                                      datetime(2026, 12, 1, 12, 15, tzinfo=UTC)]
    assert spec.next_after(start - timedelta(microseconds=1)) == start


def test_one_shots_union_and_bounds() -> None:
    a = datetime(2026, 12, 24, 9, tzinfo=UTC)
    spec = ScheduleSpec(at=(a, a + timedelta(days=1)), cron=("0 0 1 1 *",),
                        end_at=datetime(2027, 6, 1, tzinfo=UTC))
    assert spec.preview(datetime(2026, 12, 1, tzinfo=UTC), 5) == [
        a, a + timedelta(days=1), datetime(2027, 1, 1, tzinfo=UTC)]
    later = ScheduleSpec(cron=("0 0 * * *",), start_at=datetime(2027, 1, 5, 12, tzinfo=UTC))
    assert later.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2027, 1, 6,
                                                                          tzinfo=UTC)


def test_business_days_skip_weekends_and_public_holidays() -> None:
    cal = BusinessCalendar(country="US", subdivision="NY")
    spec = ScheduleSpec(cron=("0 9 * * *",), timezone="America/New_York", calendar=cal)
    # Thu 2026-12-24, Fri 25 (Christmas), Sat, Sun, Mon 28.
    times = spec.preview(datetime(2026, 12, 23, 15, tzinfo=UTC), 3)
    assert [t.astimezone(NY).date() for t in times] == [
        date(2026, 12, 24), date(2026, 12, 28), date(2026, 12, 29)]


def test_shift_to_next_business_day_collapses_onto_one_run() -> None:
    cal = BusinessCalendar(country="US", on_closed="shift",
                           closed_dates=(date(2026, 12, 28),))
    # Monthly on the 1st; 2026-08-01 is a Saturday: runs Monday 3rd at the same local time.
    monthly = ScheduleSpec(cron=("0 6 1 * *",), timezone="America/New_York", calendar=cal)
    times = monthly.preview(datetime(2026, 7, 15, tzinfo=UTC), 2)
    assert local(times) == ["2026-08-03 06:00-0400", "2026-09-01 06:00-0400"]
    # Daily: Christmas (Fri), the weekend and the custom closed Monday all shift to Tuesday 29,
    # which then runs once, not five times.
    daily = ScheduleSpec(cron=("0 6 * * *",), timezone="America/New_York", calendar=cal)
    times = daily.preview(datetime(2026, 12, 24, 12, tzinfo=UTC), 3)
    assert local(times) == ["2026-12-29 06:00-0500", "2026-12-30 06:00-0500",
                            "2026-12-31 06:00-0500"]
    # Asked from inside the closed run, the shifted time is still found.
    assert daily.next_after(datetime(2026, 12, 26, 12, tzinfo=UTC)) == times[0]
    # Asked on the open day itself, before the shifted time: Saturday's run is still ahead.
    saturdays = ScheduleSpec(cron=("0 6 * * 6",), timezone="America/New_York",
                             calendar=BusinessCalendar(on_closed="shift"))
    monday_early = datetime(2026, 12, 7, 5, tzinfo=NY)
    assert local([saturdays.next_after(monday_early)]) == [  # type: ignore[list-item]
        "2026-12-07 06:00-0500"]


def test_add_business_days_for_slas() -> None:
    cal = BusinessCalendar(country="US")
    friday = datetime(2026, 12, 18, 10, tzinfo=NY)
    assert add_business_days(cal, friday, 2, "America/New_York") == datetime(
        2026, 12, 22, 10, tzinfo=NY)
    saturday = datetime(2026, 12, 19, 10, tzinfo=NY)
    assert add_business_days(cal, saturday, 2, "America/New_York") == datetime(
        2026, 12, 22, 10, tzinfo=NY)
    # Over Christmas (Friday 25 is a holiday): Thursday 24 + 1 business day = Monday 28.
    assert add_business_days(cal, datetime(2026, 12, 24, 10, tzinfo=NY), 1,
                             "America/New_York") == datetime(2026, 12, 28, 10, tzinfo=NY)
    assert add_business_days(cal, saturday, 0, "America/New_York") == datetime(
        2026, 12, 21, 10, tzinfo=NY)


@pytest.mark.parametrize("bad", [
    {"cron": ("61 * * * *",)},
    {"cron": ("0 9 * * *",), "timezone": "Mars/Olympus"},
    {},
    {"at": (datetime(2026, 1, 1),)},
    {"intervals": ({"every": "PT1H", "offset": "PT2H"},)},
    {"cron": ("0 9 * * *",), "calendar": {"country": "XX"}},
    {"cron": ("0 9 * * *",), "calendar": {"weekend": [0, 1, 2, 3, 4, 5, 6]}},
])
def test_bad_specs_are_refused_with_a_reason(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ScheduleSpec.model_validate(bad)


def test_run_ids_are_deterministic_per_schedule_and_time() -> None:
    t = datetime(2026, 12, 1, tzinfo=UTC)
    assert run_saga_id("a", t) == run_saga_id("a", t)
    assert run_saga_id("a", t) != run_saga_id("b", t)
    assert run_saga_id("a", t) != run_saga_id("a", t + timedelta(seconds=1))
    with pytest.raises(ValidationError):
        ScheduleDefinition(id="bad id!", saga_type="x", spec=ScheduleSpec(cron=("* * * * *",)))


def test_the_schedules_package_surface_is_pinned() -> None:
    import coordinator.schedules as schedules

    assert set(schedules.__all__) == {
        "BusinessCalendar", "DeclaredSchedule", "FireReport", "InputMapper", "IntervalSpec",
        "InvalidSchedule", "Outcome", "Overlap", "ScheduleConflict", "ScheduleDefinition",
        "ScheduleError", "ScheduleFirer", "ScheduleMetrics", "ScheduleNotFound",
        "ScheduleSpec", "ScheduleState", "add_business_days", "declared_mappers",
        "declared_schedules", "run_saga_id", "sync_declared"}
    assert all(hasattr(schedules, name) for name in schedules.__all__)


def test_jitter_is_deterministic_and_bounded() -> None:
    from coordinator.schedules.repository import jitter_of

    d = ScheduleDefinition(id="j", saga_type="x", spec=ScheduleSpec(cron=("* * * * *",)),
                           jitter=timedelta(seconds=30))
    times = [datetime(2026, 12, 1, tzinfo=UTC) + timedelta(minutes=i) for i in range(50)]
    delays = [jitter_of(d, t) for t in times]
    assert delays == [jitter_of(d, t) for t in times]  # every replica computes the same
    assert all(timedelta(0) <= j < timedelta(seconds=30) for j in delays)
    assert len(set(delays)) > 40  # spread, not one constant
    assert jitter_of(d.model_copy(update={"jitter": timedelta(0)}), times[0]) == timedelta(0)


def test_an_unknown_field_is_a_typo_from_an_operator_but_ignored_in_a_stored_row() -> None:
    typo = {"cron": ["0 2 * * *"], "timezon": "Europe/Paris",
            "intervals": [{"every": "PT1H", "offsett": "PT1M"}]}
    with pytest.raises(ValidationError, match="timezon"):
        ScheduleSpec.model_validate(typo)
    stored = ScheduleSpec.model_validate(typo, context=STORED)
    assert stored.timezone == "UTC" and stored.intervals[0].offset == timedelta(0)
