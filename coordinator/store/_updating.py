"""Applying updates (``language.updates``) on the signals' path: the saga row locked, the
validator run, an accepted update applied by the core and its answer stored, all in one
transaction; the caller is answered only after COMMIT, so an answer is always durable."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import EngineError, advance
from coordinator.engine.events import UpdateApplied
from coordinator.engine.signals import kept_over_bound
from coordinator.engine.updates import (
    UpdateFailed,
    check_update,
    declared_updates,
    update_signal_id,
    update_signal_payload,
)
from coordinator.store._transactions import TransactionsMixin, loaded_state
from coordinator.store._writes import LOCK_SAGAS, Change, LockedSaga
from coordinator.store.errors import SagaNotFound, TooManySignals
from coordinator.store.signals import insert_signals
from coordinator.store.update_errors import (
    SagaFinishedForUpdates,
    UpdateBroken,
    UpdateIdConflict,
    UpdateNotFound,
    UpdateTimedOut,
)
from coordinator.store.updates import UpdateAnswer, fetch_answer, insert_answer, update_payload

__all__ = ["DEFAULT_UPDATE_WAIT_S", "MAX_UPDATE_WAIT_S", "UpdatesMixin"]

#: How long an update waits for its saga's row by default, and at most (seconds).
DEFAULT_UPDATE_WAIT_S: Final = 10.0
MAX_UPDATE_WAIT_S: Final = 300.0
_SET_LOCK_TIMEOUT: Final = "SELECT set_config('lock_timeout', $1, true)"


class UpdatesMixin(TransactionsMixin):
    """Updates: sent and answered in one transaction; answers fetched by id."""

    async def update(self, saga_id: UUID, name: str, payload: Any = None, *,
                     update_id: str, actor: str = "api",
                     wait_s: float = DEFAULT_UPDATE_WAIT_S) -> UpdateAnswer:
        """Send update ``name`` and return its answer once committed: accepted with the
        handler's result, or rejected with the validator's reason (nothing applied).

        The same ``update_id`` is answered once: a resend returns the stored answer. Raises
        :class:`SagaNotFound`, :class:`UnknownUpdate`, :class:`InvalidUpdatePayload`,
        :class:`SagaFinished` (as for signals), :class:`UpdateIdConflict`,
        :class:`UpdateBroken`, :class:`TooManySignals`, or :class:`UpdateTimedOut` when the
        saga's row stays locked longer than ``wait_s``: then NOTHING was written, and a
        resend of the same id is safe."""
        if not isinstance(update_id, str) or not 1 <= len(update_id) <= 200:
            raise ValueError("update_id must be a string of 1 to 200 characters")
        if not 0 < wait_s <= MAX_UPDATE_WAIT_S:
            raise ValueError(f"wait_s must be in (0, {MAX_UPDATE_WAIT_S:g}]")

        async def work(conn: asyncpg.Connection) -> tuple[UpdateAnswer, datetime | None]:
            saga = await _lock(conn, saga_id, update_id, wait_s)
            stored = await fetch_answer(conn, saga_id, update_id)
            if stored is not None:  # a resend: the same answer, even after the saga ended
                if stored.name != name:
                    raise UpdateIdConflict(saga_id, update_id, stored.name)
                return _resent(stored), None
            definition = self._definition_of(saga)
            data = update_payload(definition, name, payload)
            await self._load_bases(conn, [saga])
            state = loaded_state(saga)
            if state.status.is_terminal:
                raise SagaFinishedForUpdates(saga_id, state.status.value)
            now = self._clock()
            try:
                reason = check_update(definition, state, name, data, now)
            except UpdateFailed as exc:
                raise UpdateBroken(str(exc)) from exc
            if reason is not None:
                answer = UpdateAnswer(saga_id, update_id, name, "rejected", None, reason, now)
                await insert_answer(conn, answer, data, actor)
                return answer, None
            event = UpdateApplied(update_id=update_id, name=name, payload=data, sender=actor)
            try:
                decision = advance(definition, state, event, now)
            except UpdateFailed as exc:
                raise UpdateBroken(str(exc)) from exc
            if decision.ignored is not None:
                raise UpdateBroken(f"update {name!r} not applied: {decision.ignored}")
            result = dict(decision.state.updates[name].result)
            update = declared_updates(definition)[name]
            if update.signal is not None:
                why = kept_over_bound(definition, decision.state, update.signal)
                if why is not None:
                    raise TooManySignals(saga_id, why)
                signal = update_signal_payload(definition, update, result)
                await insert_signals(conn, [(saga_id, update_signal_id(update_id),
                                             update.signal, signal, actor)], now)
            saga.history_seq += 1
            earliest = await self._write(
                conn, [Change(saga, saga.history_seq, event, decision, now, actor)])
            answer = UpdateAnswer(saga_id, update_id, name, "accepted", result, None, now)
            await insert_answer(conn, answer, data, actor)
            return answer, earliest

        try:
            answer, earliest = await self._retrying(work)
        except EngineError as exc:  # a mapper or guard the update's signal woke broke
            raise UpdateBroken(f"update {name!r} not applied: {exc}") from exc
        self._notify_timers(earliest)
        return answer  # type: ignore[no-any-return]

    async def update_answer(self, saga_id: UUID, update_id: str) -> UpdateAnswer:
        """The stored answer of ``update_id`` (a plain read, no lock); raises
        :class:`UpdateNotFound` when none is stored (never sent, or it timed out)."""
        answer = await fetch_answer(self.pool, saga_id, update_id)
        if answer is None:
            raise UpdateNotFound(saga_id, update_id)
        return _resent(answer)


async def _lock(conn: asyncpg.Connection, saga_id: UUID, update_id: str, wait_s: float
                ) -> LockedSaga:
    """Lock the saga row, waiting at most ``wait_s`` (then :class:`UpdateTimedOut`, and the
    transaction, which wrote nothing yet, rolls back); later statements wait as usual."""
    before = await conn.fetchval("SELECT current_setting('lock_timeout')")
    await conn.execute(_SET_LOCK_TIMEOUT, f"{max(1, round(wait_s * 1000))}ms")
    try:
        rows = await conn.fetch(LOCK_SAGAS, [saga_id])
    except asyncpg.LockNotAvailableError as exc:
        raise UpdateTimedOut(saga_id, update_id, wait_s) from exc
    await conn.execute(_SET_LOCK_TIMEOUT, before)
    if not rows:
        raise SagaNotFound(saga_id)
    return LockedSaga.from_row(rows[0])


def _resent(answer: UpdateAnswer) -> UpdateAnswer:
    return replace(answer, duplicate=True)
