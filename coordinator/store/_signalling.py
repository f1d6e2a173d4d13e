"""Delivering signals to sagas, singly or in batches, optionally starting the saga first.
The signal rows themselves (validation, insert once) are ``signals``; this is the part that
locks the sagas and runs the core."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import asyncpg

from coordinator.engine import EngineError, SagaState, SignalReceived, advance
from coordinator.engine.signals import kept_over_bound
from coordinator.store._base import log
from coordinator.store._starts import StartsMixin
from coordinator.store._transactions import loaded_state
from coordinator.store._writes import LOCK_SAGAS, Change, LockedSaga
from coordinator.store.errors import SagaFinished, SagaNotFound, StoreError, TooManySignals
from coordinator.store.records import PendingSignal, SagaStart, SignalResult
from coordinator.store.signals import insert_signals, signal_payload, stored_signals
from participant_sdk.dead_letters import DeadLetter, record_dead_letter

__all__ = ["SignalsMixin"]


class SignalsMixin(StartsMixin):
    """Signals: one, many in one transaction, or one with the start of its saga."""

    async def signal(self, saga_id: UUID, name: str, payload: Any = None, *,
                     signal_id: str | None = None, actor: str = "api") -> SignalResult:
        """Deliver the signal ``name`` to a saga, once per ``signal_id`` (default: a new id).

        One transaction: the saga row locked, the signal row inserted (a duplicate id stops
        here), the signal applied by the core. Raises :class:`SagaNotFound`,
        :class:`UnknownSignal`, :class:`InvalidSignalPayload`, :class:`SagaFinished` or
        :class:`TooManySignals` (the saga keeps as many untaken signals as its class allows)."""
        request = PendingSignal(saga_id, name, signal_id or str(uuid4()), payload, actor)

        async def work(conn: asyncpg.Connection) -> tuple[SignalResult, datetime | None]:
            answers, earliest = await self._signals_in(conn, [request])
            return _accepted(answers[0]), earliest

        result, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return result  # type: ignore[no-any-return]

    async def signal_many(self, requests: Sequence[PendingSignal], *,
                          dead_letters: Sequence[DeadLetter] = ()
                          ) -> list[SignalResult | Exception]:
        """Deliver many signals in ONE transaction; answers follow ``requests`` order.

        Each answer is what :meth:`signal` would return or raise for that request alone
        (signals to one saga apply in the given order, a repeated id once). A refused signal
        writes nothing but its ``dead_letter``, if any, kept with the reason, as are the
        ``dead_letters`` given (records that never became signals)."""
        if not requests and not dead_letters:
            return []

        async def work(conn: asyncpg.Connection
                       ) -> tuple[list[SignalResult | Exception], datetime | None]:
            started, due = await self._starts_in(conn, requests)
            go = [i for i in range(len(requests)) if not isinstance(started.get(i), Exception)]
            delivered, earliest = await self._signals_in(conn, [requests[i] for i in go])
            by_index = dict(zip(go, delivered, strict=True))
            answers: list[SignalResult | Exception] = []
            for i in range(len(requests)):
                outcome = started.get(i)
                answer = outcome if isinstance(outcome, Exception) else by_index[i]
                if outcome is True and isinstance(answer, SignalResult):
                    answer = replace(answer, started=True)
                answers.append(answer)
            refused = [replace(r.dead_letter, reason=str(a))
                       for r, a in zip(requests, answers, strict=True)
                       if r.dead_letter is not None and not isinstance(a, SignalResult)]
            for letter in [*dead_letters, *refused]:
                await record_dead_letter(conn, letter)
            return answers, min((d for d in (earliest, due) if d is not None), default=None)

        answers, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return answers  # type: ignore[no-any-return]

    async def signal_with_start(self, saga_type: str, input: Any, saga_id: UUID, name: str,
                                payload: Any = None, *, signal_id: str | None = None,
                                version: int | None = None, actor: str = "api"
                                ) -> SignalResult:
        """Start the saga if it does not exist (idempotently, as :meth:`start_saga`), then
        deliver the signal: both in one transaction, so no signal is lost to a race with
        the start and no saga starts without its signal."""
        request = PendingSignal(saga_id, name, signal_id or str(uuid4()), payload, actor,
                                start=SagaStart(saga_type, input, version))

        async def work(conn: asyncpg.Connection) -> tuple[SignalResult, datetime | None]:
            started, first = await self._starts_in(conn, [request])
            created = started[0]
            if isinstance(created, Exception):
                raise created
            answers, earliest = await self._signals_in(conn, [request])
            result = _accepted(answers[0])  # a refusal raises here: the start is undone too
            due = [d for d in (first, earliest) if d is not None]
            return replace(result, started=created), min(due) if due else None

        result, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return result  # type: ignore[no-any-return]

    async def _starts_in(self, conn: asyncpg.Connection, requests: Sequence[PendingSignal]
                         ) -> tuple[dict[int, bool | Exception], datetime | None]:
        """Start the sagas the requests with ``start`` name, in id order (no deadlock with a
        concurrent batch); by request index: whether it created its saga, or why its start
        was refused; and the earliest timer the starts set."""
        out: dict[int, bool | Exception] = {}
        due: list[datetime] = []
        for index in sorted((i for i, r in enumerate(requests) if r.start),
                            key=lambda i: requests[i].saga_id):
            request = requests[index]
            assert request.start is not None
            try:
                definition, event, digest = self._start_event(
                    request.start.saga_type, request.start.input, request.saga_id,
                    request.start.version, None)
                async with conn.transaction():  # a savepoint: undone if its signal is refused
                    _, created, first = await self._start_in(conn, definition, event, digest,
                                                             request.actor)
                    if created:  # a saga that exists checks the signal by its own version
                        signal_payload(definition, request.name, request.payload)
            except StoreError as exc:
                out[index] = exc
                continue
            out[index] = created
            due += [first] if first is not None else []
        return out, min(due, default=None)

    async def _signals_in(self, conn: asyncpg.Connection, requests: Sequence[PendingSignal]
                          ) -> tuple[list[SignalResult | Exception], datetime | None]:
        """Lock the sagas (id order), skip the ids already stored, apply the rest in order;
        one statement inserts the new signal rows, one write the changes."""
        rows = await conn.fetch(LOCK_SAGAS, sorted({r.saga_id for r in requests}))
        locked = {row["id"]: LockedSaga.from_row(row) for row in rows}
        await self._load_bases(conn, locked.values())
        stored = await stored_signals(conn, [(r.saga_id, r.signal_id) for r in requests])
        now = self._clock()
        states: dict[UUID, SagaState] = {}
        answers: list[SignalResult | Exception] = []
        inserts: list[tuple[UUID, str, str, dict[str, Any], str]] = []
        changes: list[Change] = []
        for request in requests:
            saga_id, signal_id, name = request.saga_id, request.signal_id, request.name
            saga = locked.get(saga_id)
            try:
                if saga is None:
                    raise SagaNotFound(saga_id)
                definition = self._definition_of(saga)
                data = signal_payload(definition, name, request.payload)
                if (saga_id, signal_id) in stored:  # a resend: same answer, even late
                    answers.append(SignalResult(saga_id, signal_id, name, duplicate=True))
                    continue
                state = states.get(saga_id) or loaded_state(saga)
                if state.status.is_terminal:
                    raise SagaFinished(saga_id, state.status.value)
                event = SignalReceived(signal_id=signal_id, name=name, payload=data,
                                       sender=request.actor)
                decision = advance(definition, state, event, now)
                why = kept_over_bound(definition, decision.state, name)
                if why is not None:
                    raise TooManySignals(saga_id, why)
            except (StoreError, EngineError) as exc:
                answers.append(exc)
                continue
            except Exception as exc:  # a failing mapper or guard must not stop the batch
                log.exception("advance failed for saga %s", saga_id)
                answers.append(exc)
                continue
            stored.add((saga_id, signal_id))
            inserts.append((saga_id, signal_id, name, data, request.actor))
            saga.history_seq += 1
            states[saga_id] = decision.state
            changes.append(Change(saga, saga.history_seq, event, decision, now, request.actor))
            answers.append(SignalResult(saga_id, signal_id, name, duplicate=False))
        await insert_signals(conn, inserts, now)
        return answers, await self._write(conn, changes)


def _accepted(answer: SignalResult | Exception) -> SignalResult:
    """A single signal's answer, raised when it is a refusal (the transaction then ends)."""
    if isinstance(answer, SignalResult):
        return answer
    raise answer
