"""Firing due schedules: claim one with ``FOR UPDATE SKIP LOCKED``, start its runs, advance it.

Each claimed schedule is handled in one transaction that holds its row lock. A run is started
through the store's idempotent ``start_saga`` with a saga id derived from (schedule id,
nominal time), then the run record and the schedule's next fire time are written and the
transaction commits. A replica killed in between leaves the row unlocked and unadvanced; the
next replica derives the same id, finds the saga already there and records it as started. So
every nominal time is run once, or recorded as buffered, skipped, missed or failed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import InvalidTransition, OperatorRepair, RepairVerb
from coordinator.schedules import repository as repo
from coordinator.schedules.errors import ScheduleConflict, ScheduleError
from coordinator.schedules.metrics import ScheduleMetrics
from coordinator.schedules.model import RAN, Outcome, Overlap, ScheduleDefinition
from coordinator.store import (
    InvalidInput,
    SagaConflict,
    SagaNotFound,
    SagaStore,
    UnknownSagaType,
    UnknownSagaVersion,
)

__all__ = ["FireReport", "InputMapper", "ScheduleFirer"]

log = logging.getLogger(__name__)
audit = logging.getLogger("coordinator.api.audit")

#: Builds a run's input from its nominal fire time (declared-in-code schedules).
InputMapper = Callable[[datetime], Mapping[str, Any]]

#: A saga in these statuses is "still going" for the overlap policy.
IN_FLIGHT: Final = ("running", "compensating")
#: Nominal times handled per schedule per claim (a long outage is caught up over ticks).
MAX_PER_CLAIM: Final = 100
#: How soon a schedule with buffered runs looks again at its previous run.
BUFFER_POLL_S: Final = 0.5
_RECORD: Final = (
    "INSERT INTO schedule_runs (schedule_id, nominal_at, outcome, saga_id, reason, recorded_at,"
    " started_at, actor) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    " ON CONFLICT (schedule_id, nominal_at) DO NOTHING")
_RECORD_REPLACING: Final = _RECORD.replace(
    "DO NOTHING", "DO UPDATE SET outcome = EXCLUDED.outcome, saga_id = EXCLUDED.saga_id, "
    "reason = EXCLUDED.reason, started_at = EXCLUDED.started_at, actor = EXCLUDED.actor")
_BROKEN = (InvalidInput, UnknownSagaType, UnknownSagaVersion)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class FireReport:
    """What one tick did (counts over every schedule it handled)."""

    schedules: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def started(self) -> int:
        return self.outcomes.get(Outcome.STARTED, 0)

    def add(self, outcome: Outcome) -> None:
        self.outcomes[outcome.value] = self.outcomes.get(outcome.value, 0) + 1


@dataclass
class _Firing:
    """The mutable firing state of one claimed schedule, written back at the end."""

    definition: ScheduleDefinition
    next_fire_at: datetime | None
    last_saga_id: UUID | None
    buffered: list[datetime]
    cancel_requested: UUID | None
    counts: dict[str, int] = field(default_factory=lambda: {"fired": 0, "skipped": 0,
                                                              "missed": 0})
    last_fired_at: datetime | None = None


class ScheduleFirer:
    """Fires schedules on a :class:`SagaStore`. Replicas each run one; none holds state."""

    def __init__(self, store: SagaStore, *, metrics: ScheduleMetrics | None = None,
                 mappers: Mapping[str, InputMapper] | None = None,
                 clock: Callable[[], datetime] = _utcnow, actor: str = "scheduler") -> None:
        if store.pool.get_max_size() < 2:
            # A claim holds one connection while the start takes another.
            raise ValueError("schedules need a store pool of at least 2 connections")
        self.store = store
        self.metrics = metrics
        self.mappers = dict(mappers or {})
        self.clock = clock
        self.actor = actor

    # -- the tick -------------------------------------------------------------------------

    async def fire_due(self, *, now: datetime | None = None, limit: int = 100) -> FireReport:
        """Handle up to ``limit`` due schedules, one claim (transaction) each."""
        report = FireReport()
        for _ in range(limit):
            at = now or self.clock()
            async with self.store.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    repo.SELECT_SCHEDULE + " WHERE NOT paused AND due_at <= $1"
                    " ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED", at)
                if row is None:
                    break
                await self._fire_claimed(conn, row, at, report)
            report.schedules += 1
        return report

    async def next_due(self) -> datetime | None:
        async with self.store.pool.acquire() as conn:
            value: datetime | None = await conn.fetchval(
                "SELECT min(due_at) FROM schedules WHERE NOT paused")
            return value

    async def _fire_claimed(self, conn: asyncpg.Connection, row: asyncpg.Record,
                            now: datetime, report: FireReport) -> None:
        try:
            d = repo.definition_of(row)
        except (ValueError, ScheduleError) as exc:  # a row edited by hand: park it
            log.error("schedule %s cannot be read (%s); pausing it", row["id"], exc)
            await conn.execute("UPDATE schedules SET paused = true, note = $2 WHERE id = $1",
                               row["id"], f"paused by the scheduler: {exc}"[:2000])
            return
        f = _Firing(d, row["next_fire_at"], row["last_saga_id"],
                    [datetime.fromisoformat(t) for t in json.loads(row["buffered"])],
                    row["cancel_requested"])
        busy = await self._in_flight(conn, f.last_saga_id)
        if f.buffered and not busy:
            nominal = f.buffered.pop(0)
            busy = await self._run(conn, f, nominal, now, report)
        handled = 0
        while (f.next_fire_at is not None and handled < MAX_PER_CLAIM
               and repo.due_for(d, f.next_fire_at) <= now):  # type: ignore[operator]
            nominal = f.next_fire_at
            handled += 1
            busy = await self._handle(conn, f, nominal, now, busy, report)
            try:
                f.next_fire_at = d.spec.next_after(nominal)
            except ValueError as exc:  # e.g. a calendar that closes every day from here on
                log.error("schedule %s has no fire time after %s: %s", d.id, nominal, exc)
                f.next_fire_at = None
        if f.buffered and f.cancel_requested is None and d.overlap is Overlap.CANCEL_OTHER \
                and busy and f.last_saga_id is not None:
            await self._cancel(f, f.last_saga_id)
        due = repo.due_for(d, f.next_fire_at)
        if f.buffered:
            poll = datetime.fromtimestamp(now.timestamp() + BUFFER_POLL_S, UTC)
            due = poll if due is None else min(due, poll)
        await conn.execute(
            """
            UPDATE schedules SET next_fire_at = $2, due_at = $3, last_saga_id = $4,
                   buffered = $5::jsonb, cancel_requested = $6,
                   fired_count = fired_count + $7, skipped_count = skipped_count + $8,
                   missed_count = missed_count + $9,
                   last_fired_at = coalesce($10, last_fired_at)
            WHERE id = $1
            """,
            d.id, f.next_fire_at, due, f.last_saga_id,
            json.dumps([t.isoformat() for t in f.buffered]), f.cancel_requested,
            f.counts["fired"], f.counts["skipped"], f.counts["missed"], f.last_fired_at)

    async def _handle(self, conn: asyncpg.Connection, f: _Firing, nominal: datetime,
                      now: datetime, busy: bool, report: FireReport) -> bool:
        """Apply the catch-up window and the overlap policy to one due nominal time; return
        whether a run is in flight afterwards."""
        d = f.definition
        sid = repo.run_saga_id(d.id, nominal)
        if await conn.fetchval("SELECT true FROM sagas WHERE id = $1", sid):
            # Started by a replica that died before committing: it ran, record it so.
            return await self._run(conn, f, nominal, now, report)
        if now - nominal > d.catchup_window:
            await self._record(conn, f, nominal, Outcome.MISSED, now, report,
                               reason=f"older than the catch-up window ({d.catchup_window})")
            return busy
        overlap = d.overlap
        if not busy or overlap is Overlap.ALLOW_ALL:
            if overlap is Overlap.BUFFER_ALL and f.buffered:
                return await self._buffer(conn, f, nominal, now, report)
            return await self._run(conn, f, nominal, now, report)
        if overlap is Overlap.SKIP:
            await self._record(conn, f, nominal, Outcome.SKIPPED, now, report,
                               reason=f"previous run {f.last_saga_id} still in flight")
            return busy
        if overlap is Overlap.BUFFER_ONE and f.buffered:
            await self._record(conn, f, nominal, Outcome.SKIPPED, now, report,
                               reason="one run is already buffered")
            return busy
        if overlap is Overlap.CANCEL_OTHER:
            for older in f.buffered:  # superseded by the newer time
                await self._record(conn, f, older, Outcome.SKIPPED, now, report,
                                   reason=f"superseded by the run at {nominal.isoformat()}",
                                   replace=True)
            f.buffered.clear()
        return await self._buffer(conn, f, nominal, now, report)

    async def _buffer(self, conn: asyncpg.Connection, f: _Firing, nominal: datetime,
                      now: datetime, report: FireReport) -> bool:
        f.buffered.append(nominal)
        await self._record(conn, f, nominal, Outcome.BUFFERED, now, report,
                           reason=f"waiting for run {f.last_saga_id}")
        return True

    async def _run(self, conn: asyncpg.Connection, f: _Firing, nominal: datetime,
                   now: datetime, report: FireReport, *, outcome: Outcome = Outcome.STARTED,
                   kind: str = "run") -> bool:
        """Start (or find) the run of ``nominal`` and record it; True if it is in flight."""
        d = f.definition
        sid = repo.run_saga_id(d.id, nominal, kind)
        try:
            status = await self._start(d, nominal, sid)
        except _BROKEN as exc:
            log.error("schedule %s: the run at %s cannot start: %s", d.id, nominal, exc)
            await self._record(conn, f, nominal, Outcome.FAILED, now, report, reason=str(exc),
                               replace=True)
            return False
        await self._record(conn, f, nominal, outcome, now, report, saga_id=sid, replace=True)
        f.last_saga_id = sid
        f.cancel_requested = None
        f.last_fired_at = now
        if self.metrics is not None and outcome is Outcome.STARTED:
            self.metrics.lag(d.id, (now - nominal).total_seconds())
        return status in IN_FLIGHT

    async def _start(self, d: ScheduleDefinition, nominal: datetime, sid: UUID) -> str:
        mapper = self.mappers.get(d.id)
        try:
            data: dict[str, Any] = dict(mapper(nominal)) if mapper else dict(d.input)
        except Exception as exc:  # the saga author's code: record the failure, go on
            raise InvalidInput(d.saga_type, [{"loc": (), "msg": f"input mapper failed: "
                                              f"{type(exc).__name__}: {exc}"}]) from exc
        if d.fire_time_field:
            data[d.fire_time_field] = nominal.isoformat()
        try:
            result = await self.store.start_saga(
                d.saga_type, data, saga_id=sid, version=d.saga_version,
                actor=f"schedule:{d.id}")
        except SagaConflict:
            # Started before with another input (the schedule was edited after a crash
            # mid-firing): that start is the run of this time.
            record = await self.store.get_saga(sid)
            return record.status if record is not None else "running"
        return result.record.status

    async def _record(self, conn: asyncpg.Connection, f: _Firing, nominal: datetime,
                      outcome: Outcome, now: datetime, report: FireReport, *,
                      saga_id: UUID | None = None, reason: str | None = None,
                      replace: bool = False) -> None:
        await conn.execute(
            _RECORD_REPLACING if replace else _RECORD,
            f.definition.id, nominal, outcome.value, saga_id, reason, now,
            now if saga_id is not None else None, self.actor)
        report.add(outcome)
        if outcome in RAN:
            f.counts["fired"] += 1
        elif outcome is Outcome.SKIPPED:
            f.counts["skipped"] += 1
        elif outcome is Outcome.MISSED:
            f.counts["missed"] += 1
        if self.metrics is not None:
            self.metrics.recorded(f.definition.id, outcome.value)

    async def _in_flight(self, conn: asyncpg.Connection, saga_id: UUID | None) -> bool:
        if saga_id is None:
            return False
        status = await conn.fetchval("SELECT status FROM sagas WHERE id = $1", saga_id)
        return status in IN_FLIGHT

    async def _cancel(self, f: _Firing, saga_id: UUID) -> None:
        """cancel_other: roll the previous run back through the operator cancel repair."""
        actor = f"schedule:{f.definition.id}"
        event = OperatorRepair(verb=RepairVerb.CANCEL, actor=actor,
                               reason="a newer scheduled run is waiting (overlap cancel_other)")
        try:
            await self.store.apply(saga_id, event, actor=f"operator:{actor}")
        except (InvalidTransition, SagaNotFound) as exc:
            log.info("schedule %s: previous run %s not cancelled (%s); waiting for it",
                     f.definition.id, saga_id, exc)
        else:
            audit.info("repair cancel saga=%s by=%s reason=overlap cancel_other", saga_id,
                       actor)
        f.cancel_requested = saga_id

    # -- operator actions -----------------------------------------------------------------

    async def trigger(self, schedule_id: str, *, actor: str,
                      now: datetime | None = None) -> repo.RunRecord:
        """Start a run now, whatever the overlap policy (like Temporal's trigger)."""
        at = now or self.clock()
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        report = FireReport()
        async with self.store.pool.acquire() as conn, conn.transaction():
            row = await repo.get(conn, schedule_id, lock=True)
            f = _Firing(repo.definition_of(row), row["next_fire_at"], row["last_saga_id"],
                        [datetime.fromisoformat(t) for t in json.loads(row["buffered"])],
                        row["cancel_requested"])
            if await conn.fetchval("SELECT true FROM schedule_runs WHERE schedule_id = $1 "
                                   "AND nominal_at = $2", schedule_id, at):
                raise ScheduleConflict(f"a run of {schedule_id!r} at {at.isoformat()} exists")
            await self._run(conn, f, at, at, report, outcome=Outcome.TRIGGERED,
                            kind="trigger")
            await conn.execute(
                "UPDATE schedules SET last_saga_id = $2, fired_count = fired_count + $3, "
                "last_fired_at = coalesce($4, last_fired_at), updated_by = $5 WHERE id = $1",
                schedule_id, f.last_saga_id, f.counts["fired"], f.last_fired_at, actor)
            run = await repo.get_run(conn, schedule_id, at)
        audit.info("schedule trigger id=%s by=%s saga=%s", schedule_id, actor, run["saga_id"])
        return run

    async def backfill(self, schedule_id: str, start: datetime, end: datetime, *, actor: str,
                       limit: int = 1000, now: datetime | None = None) -> FireReport:
        """Run every fire time in ``[start, end]`` (not after now) that has no run yet, or
        was skipped or missed; whatever the overlap policy and catch-up window."""
        at = now or self.clock()
        report = FireReport()
        async with self.store.pool.acquire() as conn, conn.transaction():
            row = await repo.get(conn, schedule_id, lock=True)
            d = repo.definition_of(row)
            f = _Firing(d, row["next_fire_at"], row["last_saga_id"],
                        [datetime.fromisoformat(t) for t in json.loads(row["buffered"])],
                        row["cancel_requested"])
            upto = min(end, at)
            done = {r["nominal_at"] for r in await conn.fetch(
                "SELECT nominal_at FROM schedule_runs WHERE schedule_id = $1 AND nominal_at "
                "BETWEEN $2 AND $3 AND outcome NOT IN ('skipped', 'missed')",
                schedule_id, start, upto)}
            for nominal in d.spec.between(start, upto, limit):
                if nominal in done or (f.next_fire_at is not None
                                       and nominal >= f.next_fire_at):
                    continue  # already ran, or not handled yet: the firing loop owns it
                await self._run(conn, f, nominal, at, report, outcome=Outcome.BACKFILLED)
            await conn.execute(
                "UPDATE schedules SET last_saga_id = $2, fired_count = fired_count + $3, "
                "last_fired_at = coalesce($4, last_fired_at) WHERE id = $1",
                schedule_id, f.last_saga_id, f.counts["fired"], f.last_fired_at)
        audit.info("schedule backfill id=%s from=%s to=%s by=%s runs=%d", schedule_id,
                   start.isoformat(), end.isoformat(), actor, sum(report.outcomes.values()))
        return report
