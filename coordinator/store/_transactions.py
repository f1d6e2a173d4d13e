"""One transaction of the store, whatever it changes: retried on transient errors, ending in
the write of its changes (and of the child sagas they start), then the after-commit hooks.
Shared by every mixin that changes sagas, so retry, caching and notifying work alike."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import EngineError, SagaStarted, SagaState, advance
from coordinator.engine.decision import ChildStart, Delivery
from coordinator.engine.nested import refuse_child
from coordinator.language.nodes import MAX_CHILD_DEPTH
from coordinator.store._base import StoreBase, log
from coordinator.store._writes import Change, LockedSaga, write_changes
from coordinator.store.business_keys import start_key
from coordinator.store.errors import StoreError, TransientStoreError
from coordinator.store.nodes import dumps, load_states, spine_json
from coordinator.store.search_attributes import write_search_attributes
from outbox_relay.message import LeasedRow

__all__ = [
    "CONNECTION_ERRORS",
    "INSERT_SAGA",
    "TRANSIENT",
    "TransactionsMixin",
    "input_hash",
    "loaded_state",
]

#: Changes written by the transaction attempt running in this task (see ``_retrying``).
_WRITTEN: contextvars.ContextVar[list[Change] | None] = contextvars.ContextVar(
    "sagaflow_written_changes", default=None
)
#: Outbox rows leased to this store's publisher by the attempt running in this task.
_LEASED: contextvars.ContextVar[list[LeasedRow] | None] = contextvars.ContextVar(
    "sagaflow_leased_rows", default=None
)

#: Serialization failures, deadlocks and lock timeouts: the whole transaction is tried again.
TRANSIENT: Final = (
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


class TransactionsMixin(StoreBase):
    """Transactions, the write that ends them, and what happens after their commit."""

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
            except (*TRANSIENT, *CONNECTION_ERRORS) as exc:
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

    # -- writing ---------------------------------------------------------------------------

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
        earliest = await write_changes(conn, changes, refused, leased=_LEASED.get(),
                                       lease=self._lease)
        await write_search_attributes(conn, changes, self.definition)
        return earliest

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
            key, _ = start_key(definition, decision.state.input)
        except (EngineError, StoreError) as exc:
            return refuse_child(start, str(exc))
        inserted = await conn.fetchval(
            INSERT_SAGA, start.saga_id, definition.name, definition.version,
            decision.state.status.value, spine_json(decision.state),
            dumps(decision.state.input), input_hash(decision.state.input),
            json.dumps(start.trace_context), now, start.parent.saga_id, key,
        )
        if not inserted:
            return None
        locked = LockedSaga(saga_id=start.saga_id, saga_type=definition.name,
                            version=definition.version,
                            trace_context=dict(start.trace_context), history_seq=0)
        return Change(locked, 1, event, decision, now, f"parent:{start.parent.saga_id}")


INSERT_SAGA: Final = """
INSERT INTO sagas (id, saga_type, saga_version, status, snapshot, input, input_hash,
                   trace_context, history_seq, created_at, updated_at, last_progress_at,
                   parent_id, business_key)
VALUES ($1, $2, $3, $4, $5::json, $6::json, $7, $8::jsonb, 0, $9, $9, $9, $10, $11)
ON CONFLICT (id) DO NOTHING RETURNING true
"""


def input_hash(data: dict[str, Any]) -> bytes:
    """sha256 of the canonical validated input: the same id with another input conflicts."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
                          ).digest()


def loaded_state(saga: LockedSaga) -> SagaState:
    """The stored state :meth:`TransactionsMixin._load_bases` gave ``saga``."""
    assert saga.base is not None, f"saga {saga.saga_id}: stored state not loaded"
    return saga.base
