"""Applying events (replies, timer firings, deliveries, operator repairs) to existing sagas:
one event locked and applied, or a batch, by one compare-and-set statement where the states
are known and by the locking transaction otherwise. Refused events become dead letters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final
from uuid import UUID

import asyncpg
from pydantic import ValidationError

from coordinator.engine import Decision, EngineError, Event, SagaState, advance
from coordinator.engine.decision import Delivery
from coordinator.store._base import log
from coordinator.store._transactions import (
    CONNECTION_ERRORS,
    TRANSIENT,
    TransactionsMixin,
    loaded_state,
)
from coordinator.store._writes import (
    LOCK_SAGAS,
    Change,
    LockedSaga,
    write_at_once,
    write_deliveries,
)
from coordinator.store.deferral import UNREGISTERED, deferred_delivery
from coordinator.store.errors import SagaNotFound, StoreError
from coordinator.store.nodes import KEPT_SIGNALS, state_from_rows
from coordinator.store.records import ApplyOutcome, ApplyResult, PendingEvent
from coordinator.store.search_attributes import search_changes
from participant_sdk.dead_letters import DeadLetter, record_dead_letter

__all__ = ["ApplyMixin"]


class ApplyMixin(TransactionsMixin):
    """Events applied to sagas that exist, and the dead letters of those refused."""

    async def apply(self, saga_id: UUID, event: Event, *, actor: str = "worker",
                    version: int | None = None) -> ApplyResult:
        """Apply one event to one saga in one transaction, by the definition of its version
        (or of ``version``: a ``Migrated`` event is applied by the version it moves to).

        Raises :class:`SagaNotFound`, or the engine's ``InvalidTransition`` when the core
        refuses the event (nothing is written then).
        """
        async def work(conn: asyncpg.Connection) -> tuple[ApplyResult, datetime | None]:
            row = await conn.fetchrow(LOCK_SAGAS, [saga_id])
            if row is None:
                raise SagaNotFound(saga_id)
            saga = LockedSaga.from_row(row)
            await self._load_bases(conn, [saga])
            now = self._clock()
            definition = (self._definition_of(saga) if version is None
                          else self.definition(saga.saga_type, version))
            decision = advance(definition, loaded_state(saga), event, now)
            change = Change(saga, saga.history_seq + 1, event, decision, now, actor)
            earliest = await self._write(conn, [change])
            return _result(change), earliest

        result, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return result  # type: ignore[no-any-return]

    async def apply_many(
        self, events: Sequence[PendingEvent], *, dead_letters: Sequence[DeadLetter] = ()
    ) -> list[ApplyResult]:
        """Apply events of many sagas; results follow ``events`` order.

        The events of sagas whose state this process wrote last are applied in ONE statement
        (see :meth:`_apply_cached`), the rest in ONE transaction that locks their sagas in id
        order (no deadlock between concurrent batches); all events of a saga go the same way,
        applied in the given order. An event the core refuses, or one for an
        unknown saga, does not fail the batch: it gets a ``rejected`` / ``not_found`` result
        and its ``dead_letter``, if any, is stored in the same transaction, as are the
        ``dead_letters`` given (records that never became events).
        """
        if not events and not dead_letters:
            return []
        # Each saga's events go through one statement written against its last known state
        # (cached, or read without a lock) where they can; the rest, and those of sagas moved
        # on meanwhile, the locking way, with the dead letters.
        done = await self._apply_cached(events)
        if done is None:
            return await self._apply_many_locked(events, dead_letters)
        rest = [i for i, r in enumerate(done) if r is None]
        if rest or dead_letters:
            late = await self._apply_many_locked([events[i] for i in rest], dead_letters)
            for index, result in zip(rest, late, strict=True):
                done[index] = result
        return done  # type: ignore[return-value]

    async def _apply_many_locked(self, events: Sequence[PendingEvent],
                                 dead_letters: Sequence[DeadLetter]) -> list[ApplyResult]:
        """:meth:`apply_many` the locking way: BEGIN, lock the rows, load what is not cached,
        decide, write, COMMIT."""

        async def work(
            conn: asyncpg.Connection,
        ) -> tuple[list[ApplyResult], datetime | None]:
            ids = sorted({e.saga_id for e in events})
            rows = await conn.fetch(LOCK_SAGAS, ids)
            locked = {row["id"]: LockedSaga.from_row(row) for row in rows}
            now = self._clock()
            outcome = await self._apply_locked(conn, locked, events, now)
            for letter in dead_letters:
                await record_dead_letter(conn, letter)
            return outcome

        results, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return results  # type: ignore[no-any-return]

    async def _apply_cached(self, events: Sequence[PendingEvent]
                            ) -> list[ApplyResult | None] | None:
        """Apply ``events`` without a lock: decide on each saga's last known state (the one
        this process wrote, cached; else read in one query, unlocked), then write every saga's
        changes in ONE autocommitted statement that writes a saga only if its row is still at
        the history seq that state was read at (compare and set, see ``WRITE_SAGAS``). One
        round trip (two for sagas not cached) instead of BEGIN, lock, load, write, COMMIT.

        Returns a result per event, ``None`` for the events of sagas not found or whose row
        had moved on (another replica changed them: nothing of theirs was written); or
        ``None`` when the batch is not for this path (an event refused, a decision that needs
        more than the one statement, a database error): the caller applies those the locking
        way.
        """
        locked: dict[UUID, LockedSaga] = {}
        missing: dict[UUID, None] = {}
        for pending in events:
            if pending.saga_id in locked or pending.saga_id in missing:
                continue
            entry = self._states.latest(pending.saga_id)
            if entry is None:
                missing[pending.saga_id] = None
                continue
            seq, state, trace_context = entry
            locked[pending.saga_id] = LockedSaga(
                saga_id=pending.saga_id, saga_type=state.saga_type, version=state.version,
                trace_context=dict(trace_context), history_seq=seq, base=state)
        try:
            async with self.pool.acquire() as conn:
                if missing:
                    for row in await conn.fetch(_READ_SAGAS, list(missing)):
                        saga = LockedSaga.from_row(row)
                        saga.base = state_from_rows(row["snapshot"], row["input"],
                                                    row["steps"], row["kept"])
                        locked[saga.saga_id] = saga
                mine = [i for i, e in enumerate(events) if e.saga_id in locked]
                if not mine:
                    return None
                now = self._clock()
                results, changes, letters, deferred = self._decide(
                    locked, [events[i] for i in mine], now)
                if (letters or deferred or len(changes) != len(mine)
                        or any(c.decision.children for c in changes)
                        or search_changes(changes, self.definition)):
                    return None
                outcome = await write_at_once(
                    conn, changes, lease=self._lease if self._publish else timedelta(0))
        except (*TRANSIENT, *CONNECTION_ERRORS) as exc:
            # Unknown whether it committed: the locking path reads the row and, if it did,
            # finds the events applied (duplicates, ignored).
            log.debug("one-statement apply failed (%s); locking instead", exc)
            return None
        if outcome is None:
            return None
        written, earliest, leased = outcome
        committed = [c for c in changes if c.saga.saga_id in written]
        for saga_id in locked.keys() - written:
            self._states.drop(saga_id)
        self._published(leased)
        self._remember(committed)
        self._notify_changes(committed)
        self._notify_timers(earliest)
        done: list[ApplyResult | None] = [None] * len(events)
        for index, result in zip(mine, results, strict=True):
            if result.saga_id in written:
                done[index] = result
        return done

    async def _apply_locked(
        self,
        conn: asyncpg.Connection,
        locked: dict[UUID, LockedSaga],
        events: Sequence[PendingEvent],
        now: datetime,
        fired: Sequence[str | None] | None = None,
    ) -> tuple[list[ApplyResult], datetime | None]:
        await self._load_bases(conn, locked.values())
        results, changes, letters, deferred = self._decide(locked, events, now, fired)
        earliest = await self._write(conn, changes)
        for letter in letters:
            await record_dead_letter(conn, letter)
        if deferred:
            log.warning("%d events deferred: their saga's version is not registered here",
                        len(deferred))
            await write_deliveries(conn, deferred)
        return results, earliest

    def _decide(
        self,
        locked: dict[UUID, LockedSaga],
        events: Sequence[PendingEvent],
        now: datetime,
        fired: Sequence[str | None] | None = None,
    ) -> tuple[list[ApplyResult], list[Change], list[DeadLetter],
               list[tuple[Delivery, datetime]]]:
        """Run the core on each event in order (no I/O): a result per event, the changes to
        write, the dead letters of refused events and the deliveries deferred."""
        states: dict[UUID, SagaState] = {}
        results: list[ApplyResult] = []
        changes: list[Change] = []
        letters: list[DeadLetter] = []
        deferred: list[tuple[Delivery, datetime]] = []
        for index, pending in enumerate(events):
            saga = locked.get(pending.saga_id)
            if saga is None:
                results.append(ApplyResult(pending.saga_id, ApplyOutcome.NOT_FOUND,
                                           reason=f"no saga with id {pending.saga_id}"))
                _letter(letters, pending, f"no saga with id {pending.saga_id}")
                continue
            try:
                state = states.get(saga.saga_id) or loaded_state(saga)
                decision = advance(self._definition_of(saga), state, pending.event, now)
            except UNREGISTERED as exc:
                # Kept for a process that registers the version (see store.deferral).
                results.append(ApplyResult(saga.saga_id, ApplyOutcome.DEFERRED,
                                           reason=f"deferred: {exc}", saga_type=saga.saga_type,
                                           version=saga.version))
                if fired is None:
                    deferred.append(deferred_delivery(saga.saga_id, pending.event, now))
                continue
            except (EngineError, StoreError, ValidationError, LookupError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                results.append(ApplyResult(saga.saga_id, ApplyOutcome.REJECTED, reason=reason))
                _letter(letters, pending, reason)
                continue
            except Exception as exc:  # a failing mapper or guard must not stop the batch
                log.exception("advance failed for saga %s", saga.saga_id)
                reason = f"advance failed: {type(exc).__name__}: {exc}"
                results.append(ApplyResult(saga.saga_id, ApplyOutcome.REJECTED, reason=reason))
                _letter(letters, pending, reason)
                continue
            saga.history_seq += 1
            states[saga.saga_id] = decision.state
            change = Change(
                saga, saga.history_seq, pending.event, decision, now, pending.actor,
                fired_timer=fired[index] if fired is not None else None,
                trace_context=pending.trace_context,
            )
            changes.append(change)
            results.append(_result(change))
        return results, changes, letters, deferred

    # -- dead letters ----------------------------------------------------------------------

    async def record_dead_letters(self, letters: Iterable[DeadLetter]) -> int:
        """Store dead letters (a redelivered record is stored once); return how many are new."""
        letters = list(letters)
        if not letters:
            return 0
        async with self.transaction() as conn:
            return sum([await record_dead_letter(conn, letter) for letter in letters])


#: What the locking path reads under its lock (``LOCK_SAGAS``, ``load_states``), in one
#: query and without a lock, for a write that checks the history seq itself.
_READ_SAGAS: Final = """
SELECT sagas.id, sagas.saga_type, sagas.saga_version, sagas.trace_context, sagas.history_seq,
       sagas.snapshot, sagas.input, coalesce((
    SELECT '{' || string_agg(to_json(n.key)::text || ':' || n.state::text, ',' ORDER BY n.ordinal)
           || '}'
    FROM saga_nodes n WHERE n.saga_id = sagas.id), '{}') AS steps, """ + KEPT_SIGNALS + """ AS kept
FROM sagas WHERE sagas.id = ANY($1::uuid[])
"""  # noqa: S608 - fixed fragments only


def _result(change: Change) -> ApplyResult:
    decision: Decision = change.decision
    outcome = ApplyOutcome.IGNORED if decision.ignored is not None else ApplyOutcome.APPLIED
    return ApplyResult(change.saga.saga_id, outcome, status=decision.state.status.value,
                       seq=change.seq, reason=decision.ignored,
                       saga_type=change.saga.saga_type, version=change.saga.version)


def _letter(letters: list[DeadLetter], pending: PendingEvent, reason: str) -> None:
    if pending.dead_letter is not None:
        letters.append(replace(pending.dead_letter, reason=reason))
