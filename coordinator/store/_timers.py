"""Firing due timers: claim them without waiting on locks, apply them as events, and answer
deliveries addressed to sagas that do not exist. Also the timer reads the sleeper needs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

import asyncpg

from coordinator.engine import TimerFired, TimerKind
from coordinator.engine.decision import Delivery
from coordinator.engine.events import ParentRequest, event_from_json
from coordinator.engine.nested import answer_unknown_child
from coordinator.store import queries
from coordinator.store._apply import ApplyMixin
from coordinator.store._base import log
from coordinator.store._writes import LOCK_SAGAS_SKIP_LOCKED, LockedSaga, write_changes
from coordinator.store.deferral import postpone_timers
from coordinator.store.records import ApplyOutcome, PendingEvent, TimerRecord
from participant_sdk.dead_letters import DeadLetter, record_dead_letter
from participant_sdk.protocol import Phase

__all__ = ["TimersMixin"]


@dataclass(frozen=True, slots=True)
class _Timer:
    timer_id: str
    saga_id: UUID
    due_at: datetime
    step: str
    phase: str | None
    attempt: int
    kind: str
    #: A delivery's event (JSON text); ``None`` for a real timer.
    event: str | None = None

    def pending(self) -> PendingEvent:
        """The event this row fires: its ``TimerFired``, or the delivered event (kept as a
        dead letter if the core refuses it)."""
        if self.event is None:
            return PendingEvent(self.saga_id, TimerFired(
                timer_id=self.timer_id, step=self.step,
                phase=Phase(self.phase) if self.phase is not None else None,
                attempt=self.attempt, kind=TimerKind(self.kind)), actor="timer")
        letter = DeadLetter(source="coordinator:deliveries", reason="",
                            payload=self.event.encode(), key=str(self.saga_id).encode())
        return PendingEvent(self.saga_id, event_from_json(json.loads(self.event)),
                            actor="delivery", dead_letter=letter)


class TimersMixin(ApplyMixin):
    """Due timers fired as events, in batches."""

    async def fire_due_timers(self, *, now: datetime | None = None, limit: int = 100) -> int:
        """Claim up to ``limit`` due timers and apply their ``TimerFired`` events.

        One transaction: claim with ``FOR UPDATE SKIP LOCKED``, lock their sagas with
        ``SKIP LOCKED`` too (a saga busy with another change keeps its timer for the next tick,
        so a timer claim never waits while holding locks), apply, delete the fired timers.
        Returns how many timers fired (a delivery to a saga that does not exist counts:
        it was handled).
        """

        async def work(conn: asyncpg.Connection) -> tuple[int, datetime | None]:
            at = now or self._clock()
            rows = await conn.fetch(
                """
                SELECT id, saga_id, due_at, step, phase, attempt, kind, event FROM timers
                WHERE due_at <= $1 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED
                """,
                at,
                limit,
            )
            if not rows:
                return 0, None
            timers = [_Timer(r["id"], r["saga_id"], r["due_at"], r["step"], r["phase"],
                             r["attempt"], r["kind"], r["event"]) for r in rows]
            ids = sorted({t.saga_id for t in timers})
            locked = {
                r["id"]: LockedSaga.from_row(r)
                for r in await conn.fetch(LOCK_SAGAS_SKIP_LOCKED, ids)
            }
            missing = [i for i in ids if i not in locked]
            answered = 0
            if missing:
                existing = {
                    r["id"] for r in await conn.fetch(
                        "SELECT id FROM sagas WHERE id = ANY($1::uuid[])", missing)
                }
                orphans = [t for t in timers if t.saga_id in set(missing) - existing]
                if orphans:
                    await conn.execute("DELETE FROM timers WHERE id = ANY($1::text[])",
                                       [t.timer_id for t in orphans])
                    undelivered = [t for t in orphans if t.event]
                    await self._undeliverable(conn, undelivered, at)
                    answered = len(undelivered)
            due = sorted((t for t in timers if t.saga_id in locked),
                         key=lambda t: (t.saga_id, t.due_at, t.timer_id))
            pending = [t.pending() for t in due]
            results, earliest = await self._apply_locked(
                conn, locked, pending, at, fired=[t.timer_id for t in due]
            )
            rejected = [t.timer_id for t, r in zip(due, results, strict=True)
                        if r.outcome is ApplyOutcome.REJECTED]
            if rejected:
                # The core refused it; firing again would fail the same way. Keep the reason.
                log.error("timers refused by the core and dropped: %s (%s)", rejected,
                          [r.reason for r in results if r.outcome is ApplyOutcome.REJECTED])
                await conn.execute("DELETE FROM timers WHERE id = ANY($1::text[])", rejected)
            deferred = [t.timer_id for t, r in zip(due, results, strict=True)
                        if r.outcome is ApplyOutcome.DEFERRED]
            if deferred:
                await postpone_timers(conn, deferred, at)
            return len(due) + answered, earliest

        fired, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return fired  # type: ignore[no-any-return]

    async def _undeliverable(self, conn: asyncpg.Connection, rows: Sequence[_Timer],
                             now: datetime) -> None:
        """Deliveries to a saga that does not exist: a parent's request to a child that was
        never started gets its answer; anything else is kept as a dead letter."""
        answers: list[tuple[Delivery, datetime]] = []
        for row in rows:
            assert row.event is not None
            event = event_from_json(json.loads(row.event))
            if isinstance(event, ParentRequest):
                answers.append((answer_unknown_child(row.saga_id, event), now))
            else:
                letter = row.pending().dead_letter
                assert letter is not None
                await record_dead_letter(conn, replace(
                    letter, reason=f"delivery to unknown saga {row.saga_id}"))
        if answers:
            await write_changes(conn, [], answers)

    async def next_timer_due(self) -> datetime | None:
        """When the earliest timer is due (None when there is none)."""
        async with self.pool.acquire() as conn:
            value: datetime | None = await conn.fetchval("SELECT min(due_at) FROM timers")
            return value

    async def list_timers(self, saga_id: UUID) -> list[TimerRecord]:
        async with self.pool.acquire() as conn:
            return await queries.list_timers(conn, saga_id)
