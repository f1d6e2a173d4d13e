"""The Postgres saga store: every state change is one transaction.

A change locks the saga row (``SELECT ... FOR NO KEY UPDATE``), calls the pure core with a
``now`` read once here, appends the history row, rewrites the spine and the nodes that changed
(``nodes``), and writes the commands to the outbox and the timers, then commits. Nothing here
talks to Kafka. The states this process committed are cached (``nodes.StateCache``): a reply
to a large tree neither reads nor decodes the whole tree again.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, Self
from uuid import UUID, uuid4

import asyncpg
from opentelemetry import propagate
from pydantic import ValidationError

from coordinator.engine import (
    CompiledSaga,
    Decision,
    EngineError,
    Event,
    SagaStarted,
    SagaState,
    SignalReceived,
    TimerFired,
    TimerKind,
    advance,
)
from coordinator.engine import InvalidInput as EngineInvalidInput
from coordinator.engine.decision import ChildStart, Delivery
from coordinator.engine.events import ParentRequest, event_from_json
from coordinator.engine.nested import answer_unknown_child, refuse_child
from coordinator.language.nodes import MAX_CHILD_DEPTH
from coordinator.observability.tracing import traced_start
from coordinator.store import queries
from coordinator.store._writes import (
    LOCK_SAGAS,
    LOCK_SAGAS_SKIP_LOCKED,
    Change,
    LockedSaga,
    write_at_once,
    write_changes,
    write_deliveries,
)
from coordinator.store.deferral import UNREGISTERED, deferred_delivery, postpone_timers
from coordinator.store.errors import (
    InvalidInput,
    SagaConflict,
    SagaFinished,
    SagaNotFound,
    StoreError,
    TransientStoreError,
    UnknownSagaType,
    UnknownSagaVersion,
)
from coordinator.store.nodes import (
    StateCache,
    dumps,
    load_states,
    spine_json,
    state_from_rows,
)
from coordinator.store.records import (
    ApplyOutcome,
    ApplyResult,
    HistoryRecord,
    PendingEvent,
    PendingSignal,
    SagaPage,
    SagaRecord,
    SagaStart,
    SignalResult,
    StartResult,
    TimerRecord,
    VerifyResult,
)
from coordinator.store.signals import insert_signals, signal_payload, stored_signals
from outbox_relay.message import LeasedRow
from participant_sdk.dead_letters import DeadLetter, record_dead_letter
from participant_sdk.pools import create_pool
from participant_sdk.protocol import Phase

__all__ = ["RegistryLike", "SagaStore"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: Listener called after a commit that inserted timers, with the earliest due time.
TimerListener = Callable[[datetime], None]
#: Listener called after a commit with the changes it wrote (metrics, in order).
ChangeListener = Callable[[Sequence[Change]], None]

#: Changes written by the transaction attempt running in this task (see ``_retrying``).
_WRITTEN: contextvars.ContextVar[list[Change] | None] = contextvars.ContextVar(
    "sagaflow_written_changes", default=None
)
#: Outbox rows leased to this store's publisher by the attempt running in this task.
_LEASED: contextvars.ContextVar[list[LeasedRow] | None] = contextvars.ContextVar(
    "sagaflow_leased_rows", default=None
)
#: Called after a commit with the outbox rows it leased to this store (see
#: :meth:`SagaStore.publish_own_rows`).
Publish = Callable[[Sequence[LeasedRow]], None]

_TRANSIENT: Final = (
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.LockNotAvailableError,
)
#: Lost or refused connections (SQLSTATE class 08 and socket errors), and a multi-host DSN
#: whose servers all answer but none is writable yet (mid-failover): retry, then report.
CONNECTION_ERRORS: Final = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    OSError,
)
_ATTEMPTS: Final = 5
#: Nodes (of all sagas) whose latest states each store keeps in memory by default: about
#: 100-200 MB at most, 10,000 ten-node sagas or 100 thousand-item for-eaches.
STATE_CACHE_NODES: Final = 100_000


def _accepted(answer: SignalResult | Exception) -> SignalResult:
    """A single signal's answer, raised when it is a refusal (the transaction then ends)."""
    if isinstance(answer, SignalResult):
        return answer
    raise answer


def utcnow() -> datetime:
    return datetime.now(UTC)


class RegistryLike(Protocol):
    """What the store needs from ``coordinator.sagas.registry.SagaRegistry``."""

    def get(self, name: str, version: int) -> CompiledSaga: ...

    def latest(self, name: str) -> CompiledSaga: ...


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


class SagaStore:
    """Saga state in Postgres. Build it on a pool, or let :meth:`open` own one."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        registry: RegistryLike,
        *,
        clock: Clock = utcnow,
        owns_pool: bool = False,
        state_cache: int = STATE_CACHE_NODES,
        dsn: str | None = None,
    ) -> None:
        self.pool = pool
        #: Where the pool connects, when known: for connections of their own (LISTEN).
        self.dsn = dsn
        self.registry = registry
        self._clock = clock
        self._states = StateCache(state_cache)
        self._owns_pool = owns_pool
        self._timer_listeners: list[TimerListener] = []
        self._change_listeners: list[ChangeListener] = []
        self._closed = False
        self._publish: Publish | None = None
        self._lease = timedelta(0)

    @classmethod
    async def open(
        cls,
        dsn: str,
        registry: RegistryLike,
        *,
        min_size: int = 1,
        max_size: int = 10,
        clock: Clock = utcnow,
        state_cache: int = STATE_CACHE_NODES,
        statement_cache_size: int = 100,
        server_settings: Mapping[str, str] | None = None,
    ) -> Self:
        """Open a pool and a store on it. Behind a transaction pooler (PgBouncer) pass
        ``statement_cache_size=0`` and ``server_settings`` without
        ``idle_in_transaction_session_timeout``, a startup parameter PgBouncer refuses (set
        it on the role instead)."""
        pool = await create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            statement_cache_size=statement_cache_size,
            # A forgotten open transaction would pin the xmin horizon and bloat the queues.
            server_settings=dict(server_settings) if server_settings is not None else {
                "application_name": "sagaflow-coordinator",
                "idle_in_transaction_session_timeout": "60000",
            },
        )
        return cls(pool, registry, clock=clock, owns_pool=True, state_cache=state_cache, dsn=dsn)

    async def close(self) -> None:
        """Close the pool if this store opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def add_timer_listener(self, listener: TimerListener) -> None:
        """Be told (after commit) when this store inserted a timer, so a sleeper can wake."""
        self._timer_listeners.append(listener)

    def add_change_listener(self, listener: ChangeListener) -> None:
        """Be told (after commit, once per committed transaction) of the changes written."""
        self._change_listeners.append(listener)

    def publish_own_rows(self, publish: Publish, lease: timedelta) -> None:
        """Lease the outbox rows of the commands this store writes to ``publish``, which is
        called right after each commit with them (``outbox_relay.direct``): relays leave
        them alone for ``lease``, and send what was not published and deleted by then."""
        if lease <= timedelta(0):
            raise ValueError("the lease must be positive")
        self._publish, self._lease = publish, lease

    # -- definitions ------------------------------------------------------------------------

    def definition(self, saga_type: str, version: int | None = None) -> CompiledSaga:
        """The compiled definition, or :class:`UnknownSagaType` / :class:`UnknownSagaVersion`."""
        try:
            if version is None:
                return self.registry.latest(saga_type)
            return self.registry.get(saga_type, version)
        except (KeyError, LookupError, ValueError) as exc:
            known = _known_types(self.registry)  # only for the error: lookups are on every apply
            if known is not None and saga_type not in known:
                raise UnknownSagaType(saga_type, known) from exc
            if version is None:
                raise UnknownSagaType(saga_type, known or ()) from exc
            raise UnknownSagaVersion(
                saga_type, version, _known_versions(self.registry, saga_type)
            ) from exc

    # -- transactions ----------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection in a transaction: commit on a clean exit, roll back on an exception."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def _retrying(self, work: Callable[[asyncpg.Connection], Any]) -> Any:
        delay = 0.01
        for attempt in range(1, _ATTEMPTS + 1):
            written: list[Change] = []
            leased: list[LeasedRow] | None = [] if self._publish is not None else None
            token = _WRITTEN.set(written)
            leased_token = _LEASED.set(leased)
            try:
                async with self.transaction() as conn:
                    value = await work(conn)
            except (*_TRANSIENT, *CONNECTION_ERRORS) as exc:
                if attempt == _ATTEMPTS:
                    raise TransientStoreError(str(exc)) from exc
                log.debug("transient database error (attempt %d): %s", attempt, exc)
                await asyncio.sleep(delay)
                delay *= 2
                continue
            finally:
                _WRITTEN.reset(token)
                _LEASED.reset(leased_token)
            self._published(leased)
            self._remember(written)
            self._notify_changes(written)
            return value
        raise AssertionError("unreachable")

    def _published(self, rows: Sequence[LeasedRow] | None) -> None:
        """Hand the committed rows leased to this store to its publisher (first: the next
        hop of every saga in them waits for it)."""
        if rows and self._publish is not None:
            try:
                self._publish(rows)
            except Exception:  # the commit stands: a relay sends them after their lease
                log.exception("publishing %d committed outbox rows failed", len(rows))

    def _remember(self, changes: Sequence[Change]) -> None:
        """Cache the committed states (only after the commit: a rolled-back attempt's state
        never existed); a finished saga needs no cache entry."""
        for change in changes:
            state = change.decision.state
            if state.status.is_terminal:
                self._states.drop(change.saga.saga_id)
            else:
                self._states.put(change.saga.saga_id, change.seq, state,
                                 change.saga.trace_context)

    async def _load_bases(self, conn: asyncpg.Connection, locked: Iterable[LockedSaga]
                          ) -> None:
        """Give each locked saga its stored state: the cached one if it is still the row's
        (same history seq), else read from the spine and node rows (one batch)."""
        missing: dict[UUID, LockedSaga] = {}
        for saga in locked:
            saga.base = self._states.get(saga.saga_id, saga.history_seq)
            if saga.base is None:
                missing[saga.saga_id] = saga
        if missing:
            for saga_id, state in (await load_states(conn, list(missing))).items():
                missing[saga_id].base = state

    def _notify_changes(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        for listener in self._change_listeners:
            try:
                listener(changes)
            except Exception:  # a listener must not undo a committed change
                log.exception("change listener failed")

    def _notify_timers(self, earliest: datetime | None) -> None:
        if earliest is None:
            return
        for listener in self._timer_listeners:
            try:
                listener(earliest)
            except Exception:  # a listener must not undo a committed change
                log.exception("timer listener failed")

    # -- start -----------------------------------------------------------------------------

    @traced_start
    async def start_saga(
        self,
        saga_type: str,
        input: Any,
        *,
        saga_id: UUID | None = None,
        version: int | None = None,
        actor: str = "api",
        trace_context: dict[str, str] | None = None,
        start_at: datetime | None = None,
    ) -> StartResult:
        """Start a saga, idempotently by id; with a later ``start_at`` it is ``scheduled``
        until then (its first command goes out at that time).

        The same id with the same type and input returns the existing saga
        (``created=False``); the same id with another type or input raises
        :class:`SagaConflict`. ``trace_context`` defaults to the current OpenTelemetry context.
        """
        definition, event, digest = self._start_event(saga_type, input, saga_id, version,
                                                      trace_context, start_at)

        async def work(conn: asyncpg.Connection) -> tuple[SagaRecord, bool, datetime | None]:
            return await self._start_in(conn, definition, event, digest, actor)

        record, created, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return StartResult(record=record, created=created)

    def _start_event(self, saga_type: str, input: Any, saga_id: UUID | None,
                     version: int | None, trace_context: dict[str, str] | None,
                     start_at: datetime | None = None,
                     ) -> tuple[CompiledSaga, SagaStarted, bytes]:
        """The definition, start event and input digest of a start (raises on bad input)."""
        definition = self.definition(saga_type, version)
        try:
            model = definition.input_model.model_validate(input)
        except ValidationError as exc:
            raise InvalidInput(saga_type, exc.errors(include_url=False)) from exc
        data = model.model_dump(mode="json")
        if trace_context is None:
            trace_context = {}
            propagate.inject(trace_context)
        event = SagaStarted(
            saga_id=saga_id or uuid4(),
            saga_type=definition.name,
            version=definition.version,
            input=data,
            trace_context=trace_context,
            start_at=start_at,
        )
        return definition, event, _input_hash(data)

    # -- signals ---------------------------------------------------------------------------

    async def signal(self, saga_id: UUID, name: str, payload: Any = None, *,
                     signal_id: str | None = None, actor: str = "api") -> SignalResult:
        """Deliver the signal ``name`` to a saga, once per ``signal_id`` (default: a new id).

        One transaction: the saga row locked, the signal row inserted (a duplicate id stops
        here), the signal applied by the core. Raises :class:`SagaNotFound`,
        :class:`UnknownSignal`, :class:`InvalidSignalPayload` or :class:`SagaFinished`."""
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
                state = states.get(saga_id) or _state(saga)
                if state.status.is_terminal:
                    raise SagaFinished(saga_id, state.status.value)
                event = SignalReceived(signal_id=signal_id, name=name, payload=data,
                                       sender=request.actor)
                decision = advance(definition, state, event, now)
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

    async def _start_in(self, conn: asyncpg.Connection, definition: CompiledSaga,
                        event: SagaStarted, digest: bytes, actor: str
                        ) -> tuple[SagaRecord, bool, datetime | None]:
        """Insert the saga and its first decision in ``conn``'s transaction (or find the
        same start already there); (record, created, earliest timer due)."""
        sid, saga_type, trace_context = event.saga_id, event.saga_type, event.trace_context
        now = self._clock()
        try:
            decision = advance(definition, None, event, now)
        except EngineInvalidInput as exc:
            raise InvalidInput(saga_type, [{"loc": (), "msg": str(exc)}]) from exc
        inserted = await conn.fetchval(
            _INSERT_SAGA, sid, definition.name, definition.version,
            decision.state.status.value, spine_json(decision.state),
            dumps(decision.state.input), digest, json.dumps(trace_context), now, None,
        )
        if not inserted:
            row = await conn.fetchrow(
                f"SELECT {queries.SAGA_COLUMNS}, input_hash FROM sagas WHERE id = $1",  # noqa: S608
                sid,
            )
            assert row is not None
            if row["saga_type"] != definition.name:
                raise SagaConflict(sid, f"with type {row['saga_type']!r}")
            if bytes(row["input_hash"]) != digest:
                raise SagaConflict(sid, "with a different input")
            return (await queries.saga_records(conn, [row]))[0], False, None
        locked = LockedSaga(
            saga_id=sid,
            saga_type=definition.name,
            version=definition.version,
            trace_context=trace_context,
            history_seq=0,
        )
        earliest = await self._write(
            conn, [Change(locked, 1, event, decision, now, actor)]
        )
        # The row as written (INSERT, then the snapshot update of history seq 1): no read back.
        record = SagaRecord(
            saga_id=sid,
            saga_type=definition.name,
            version=definition.version,
            status=decision.state.status.value,
            state=decision.state,
            trace_context=trace_context,
            history_seq=1,
            created_at=now,
            updated_at=now,
            last_progress_at=now,
        )
        return record, True, earliest

    # -- apply -----------------------------------------------------------------------------

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
            decision = advance(definition, _state(saga), event, now)
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
                                                    row["steps"])
                        locked[saga.saga_id] = saga
                mine = [i for i, e in enumerate(events) if e.saga_id in locked]
                if not mine:
                    return None
                now = self._clock()
                results, changes, letters, deferred = self._decide(
                    locked, [events[i] for i in mine], now)
                if (letters or deferred or len(changes) != len(mine)
                        or any(c.decision.children for c in changes)):
                    return None
                outcome = await write_at_once(
                    conn, changes, lease=self._lease if self._publish else timedelta(0))
        except (*_TRANSIENT, *CONNECTION_ERRORS) as exc:
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
                state = states.get(saga.saga_id) or _state(saga)
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

    def _definition_of(self, saga: LockedSaga) -> CompiledSaga:
        return self.definition(saga.saga_type, saga.version)

    async def _write(self, conn: asyncpg.Connection, changes: Sequence[Change]
                     ) -> datetime | None:
        """Write ``changes`` and start the child sagas they ask for, in this transaction
        (a child's own first decision may start grandchildren: each is a new row)."""
        changes = list(changes)
        refused: list[tuple[Delivery, datetime]] = []
        index = 0
        while index < len(changes):
            change = changes[index]
            index += 1
            for start in change.decision.children:
                child = await self._start_child(conn, start, change.now)
                if isinstance(child, Delivery):
                    refused.append((child, change.now))
                elif child is not None:
                    changes.append(child)
        written = _WRITTEN.get()
        if written is not None:
            written.extend(changes)
        return await write_changes(conn, changes, refused, leased=_LEASED.get(),
                                   lease=self._lease)

    async def _start_child(self, conn: asyncpg.Connection, start: ChildStart, now: datetime
                           ) -> Change | Delivery | None:
        """Insert a child saga's row and first decision; a child that cannot start is a
        refusal delivered to its parent. ``None``: it exists already."""
        if start.parent.depth > MAX_CHILD_DEPTH:
            return refuse_child(start, f"child sagas may nest {MAX_CHILD_DEPTH} deep; "
                                       f"this one would be at depth {start.parent.depth}")
        try:
            definition = self.definition(start.saga_type, start.version)
        except StoreError as exc:
            return refuse_child(start, str(exc))
        event = SagaStarted(saga_id=start.saga_id, saga_type=definition.name,
                            version=definition.version, input=start.input,
                            trace_context=start.trace_context, parent=start.parent)
        try:
            decision = advance(definition, None, event, now)
        except EngineError as exc:
            return refuse_child(start, str(exc))
        inserted = await conn.fetchval(
            _INSERT_SAGA, start.saga_id, definition.name, definition.version,
            decision.state.status.value, spine_json(decision.state),
            dumps(decision.state.input), _input_hash(decision.state.input),
            json.dumps(start.trace_context), now, start.parent.saga_id,
        )
        if not inserted:
            return None
        locked = LockedSaga(saga_id=start.saga_id, saga_type=definition.name,
                            version=definition.version,
                            trace_context=dict(start.trace_context), history_seq=0)
        return Change(locked, 1, event, decision, now, f"parent:{start.parent.saga_id}")

    # -- timers ----------------------------------------------------------------------------

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

    # -- dead letters ----------------------------------------------------------------------

    async def record_dead_letters(self, letters: Iterable[DeadLetter]) -> int:
        """Store dead letters (a redelivered record is stored once); return how many are new."""
        letters = list(letters)
        if not letters:
            return 0
        async with self.transaction() as conn:
            return sum([await record_dead_letter(conn, letter) for letter in letters])

    # -- queries ---------------------------------------------------------------------------

    async def get_saga(self, saga_id: UUID) -> SagaRecord | None:
        async with self.pool.acquire() as conn:
            return await queries.get_saga(conn, saga_id)

    async def get_history(self, saga_id: UUID) -> list[HistoryRecord]:
        async with self.pool.acquire() as conn:
            return await queries.get_history(conn, saga_id)

    async def list_sagas(
        self,
        *,
        saga_type: str | None = None,
        version: int | None = None,
        status: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SagaPage:
        """Sagas newest first, filtered; pass ``next_cursor`` back for the next page."""
        async with self.pool.acquire() as conn:
            return await queries.list_sagas(
                conn, saga_type=saga_type, version=version, status=status,
                created_after=created_after, created_before=created_before,
                limit=limit, cursor=cursor,
            )

    async def verify(self, saga_id: UUID) -> VerifyResult:
        """Replay the history (from the latest checkpoint) and compare with the snapshot."""
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            return await queries.verify(conn, saga_id, self._definition_for)

    async def compact(self, saga_id: UUID, *, archive: bool = False) -> int:
        """Checkpoint the saga's verified state at its current seq; return that seq.

        With ``archive=True`` the history rows up to the checkpoint move to
        ``saga_history_archive`` (never modified); without it nothing in history changes.
        """
        async with self.transaction() as conn:
            return await queries.compact(conn, saga_id, self._definition_for, archive=archive)

    async def compact_many(self, *, min_new_events: int = 100, limit: int = 1000,
                           archive: bool = False) -> int:
        """Checkpoint every saga with ``min_new_events`` events since its last checkpoint."""
        async with self.pool.acquire() as conn:
            ids = await queries.sagas_needing_checkpoint(conn, min_new_events, limit)
        for saga_id in ids:
            await self.compact(saga_id, archive=archive)
        return len(ids)

    def _definition_for(self, saga_type: str, version: int) -> CompiledSaga:
        return self.definition(saga_type, version)


#: What the locking path reads under its lock (``LOCK_SAGAS``, ``load_states``), in one
#: query and without a lock, for a write that checks the history seq itself.
_READ_SAGAS: Final = """
SELECT s.id, s.saga_type, s.saga_version, s.trace_context, s.history_seq, s.snapshot, s.input,
       coalesce((
    SELECT '{' || string_agg(to_json(n.key)::text || ':' || n.state::text, ',' ORDER BY n.ordinal)
           || '}'
    FROM saga_nodes n WHERE n.saga_id = s.id), '{}') AS steps
FROM sagas s WHERE s.id = ANY($1::uuid[])
"""

_INSERT_SAGA: Final = """
INSERT INTO sagas (id, saga_type, saga_version, status, snapshot, input, input_hash,
                   trace_context, history_seq, created_at, updated_at, last_progress_at,
                   parent_id)
VALUES ($1, $2, $3, $4, $5::json, $6::json, $7, $8::jsonb, 0, $9, $9, $9, $10)
ON CONFLICT (id) DO NOTHING RETURNING true
"""


def _input_hash(data: dict[str, Any]) -> bytes:
    """sha256 of the canonical validated input: the same id with another input conflicts."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
                          ).digest()


def _state(saga: LockedSaga) -> SagaState:
    assert saga.base is not None, f"saga {saga.saga_id}: stored state not loaded"
    return saga.base


def _result(change: Change) -> ApplyResult:
    decision: Decision = change.decision
    outcome = ApplyOutcome.IGNORED if decision.ignored is not None else ApplyOutcome.APPLIED
    return ApplyResult(change.saga.saga_id, outcome, status=decision.state.status.value,
                       seq=change.seq, reason=decision.ignored,
                       saga_type=change.saga.saga_type, version=change.saga.version)


def _letter(letters: list[DeadLetter], pending: PendingEvent, reason: str) -> None:
    if pending.dead_letter is not None:
        letters.append(replace(pending.dead_letter, reason=reason))


def _known_types(registry: Any) -> list[str] | None:
    names = getattr(registry, "names", None)
    return sorted(str(n) for n in names()) if callable(names) else None


def _known_versions(registry: Any, saga_type: str) -> list[int]:
    types = getattr(registry, "types", None)  # SagaRegistry.types(): compiled definitions
    if callable(types):
        return sorted(d.version for d in types() if d.name == saga_type)
    return []
