"""Saga-end hints, so a client waiting for a result hears of it at once instead of polling.

A process that ends sagas (a worker applying their last replies, the API repairing one) sends
their ids on :data:`CHANNEL` after its commit, in a transaction of its own
(:class:`SagaEndHints`: the ids of commits that land while one hint is in flight share the next
one; a NOTIFY inside the writer's transaction would make every such commit take Postgres's
cluster-wide notify lock, see ``outbox_relay.waker``). The API LISTENs on one connection of its
own (:class:`SagaEndWaiters`) and wakes the long polls of ``GET /sagas/{id}/result`` waiting
on those ids. Hints are best effort: a long poll still re-reads its saga by itself, backing off
to once a second, so a lost hint only makes it answer later.

Hints cost CPU (bench/README.md, "Stop 33"), so they flow only while someone waits: the API
keeps its LISTEN connection only while it has long polls (and :data:`LISTENER_IDLE` after the
last), and a sender hints only while such a connection exists (a look at
``pg_stat_activity`` for :data:`LISTENER_APP_NAME` at most every :data:`LOOK_EVERY` seconds,
only when it has ends to report). The first long polls after a quiet spell may wait for the
sender's next look and answer on their own re-reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Final
from uuid import UUID

import asyncpg

from coordinator.engine import Status
from coordinator.runtime.hints.listener import HintListener
from outbox_relay import RelayWaker

if TYPE_CHECKING:
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.store import SagaStore
    from coordinator.store._writes import Change

__all__ = ["CHANNEL", "LISTENER_APP_NAME", "SagaEndHints", "SagaEndWaiters", "ended",
           "start_saga_end_hints"]

log = logging.getLogger(__name__)

CHANNEL: Final = "sagaflow_saga_ended"
#: One round trip, one implicit transaction that needs no durability (so no WAL flush wait):
#: ``set_config(..., true)`` is local to it. The payload is space-separated saga ids.
_HINT: Final = ("SELECT set_config('synchronous_commit', 'off', true),"
                " pg_notify('sagaflow_saga_ended', $1)")
#: Ids per notification: 36 characters and a space each, under Postgres's 8,000-byte payload.
_IDS_PER_HINT: Final = 200
#: A listener's ``application_name`` matches this (``LIKE``): ``sagaflow-<name>-result-hints``.
LISTENER_APP_NAME: Final = "sagaflow-%-result-hints"
_ANYONE_LISTENING: Final = """
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
               WHERE datname = current_database() AND application_name LIKE $1)
"""
#: Seconds a sender trusts its last look for listeners.
LOOK_EVERY: Final = 5.0
#: Seconds the API keeps listening after its last long poll ended.
LISTENER_IDLE: Final = 30.0


def ended(status: Status) -> bool:
    """Whether a result waiter stops at ``status``: finished, or dead (waiting for an
    operator)."""
    return status.is_terminal or status is Status.DEAD


class SagaEndHints(RelayWaker):
    """Collects the sagas this store's commits ended and NOTIFYs their ids, one hint in
    flight at a time (a :class:`~outbox_relay.RelayWaker` whose hint carries the ids).
    Register :meth:`on_changes` as the store's change listener."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self._ids: dict[str, None] = {}
        self._listened = False
        self._look_after = 0.0
        #: Ids left unsent because nobody listened (for tests and logs).
        self.dropped = 0

    def on_changes(self, changes: Sequence[Change]) -> None:
        """After a commit: remember the sagas it ended (no I/O)."""
        for change in changes:
            if ended(change.decision.state.status):
                self._ids[str(change.saga.saga_id)] = None
                self.wake()

    async def send_pending(self) -> None:
        """Send what was collected now, for a caller without the background task (a
        function instance, which may be frozen once it returns). Best effort."""
        if not self._ids:
            return
        try:
            await self._send()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.debug("saga-end hint not sent: %r", exc)

    async def _send(self) -> None:
        ids, self._ids = list(self._ids), {}
        now = time.monotonic()
        if now < self._look_after and not self._listened:  # nobody listens: no I/O at all
            self.dropped += len(ids)
            return
        async with self._pool.acquire() as conn:
            if now >= self._look_after:
                self._listened = bool(await conn.fetchval(_ANYONE_LISTENING, LISTENER_APP_NAME))
                self._look_after = now + LOOK_EVERY
            if not self._listened:
                self.dropped += len(ids)
                return
            for at in range(0, len(ids), _IDS_PER_HINT):
                await conn.execute(_HINT, " ".join(ids[at:at + _IDS_PER_HINT]))
                self.sent += 1


async def start_saga_end_hints(store: SagaStore, settings: CoordinatorSettings
                               ) -> SagaEndHints | None:
    """Running hints for the sagas ``store``'s commits end; None when ``settings.result_hints``
    is off. The caller stops them."""
    if not settings.result_hints:
        return None
    hints = SagaEndHints(store.pool)
    store.add_change_listener(hints.on_changes)
    await hints.start()
    return hints


class SagaEndWaiters:
    """Wakes whoever waits on a saga when its end is hinted, over one LISTEN connection of
    its own to ``dsn``, open while anyone waits and ``idle`` seconds (default
    :data:`LISTENER_IDLE`) after. After a (re)connect every waiter is woken, since a hint
    may have been missed meanwhile."""

    def __init__(self, dsn: str, *, name: str = "api", idle: float | None = None) -> None:
        self._waiting: dict[UUID, set[asyncio.Event]] = {}
        self._idle = LISTENER_IDLE if idle is None else idle
        self._idle_stop: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._listener = HintListener(
            lambda: asyncpg.connect(dsn, server_settings={
                "application_name": LISTENER_APP_NAME.replace("%", name)}),
            CHANNEL, self._on_hint, name=name)

    @property
    def listening(self) -> bool:
        return self._listener.listening

    async def stop(self) -> None:
        if self._idle_stop is not None:
            self._idle_stop.cancel()
            self._idle_stop = None
        await self._listener.stop()
        await asyncio.gather(*self._closing, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def watching(self, saga_id: UUID) -> AsyncIterator[asyncio.Event]:
        """An event set when ``saga_id``'s end is hinted; clear it before each read of the
        saga, so a hint that comes between the read and the wait is not lost."""
        if self._idle_stop is not None:
            self._idle_stop.cancel()
            self._idle_stop = None
        await self._listener.start()
        event = asyncio.Event()
        self._waiting.setdefault(saga_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiting.get(saga_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[saga_id]
            if not self._waiting and self._idle_stop is None:
                self._idle_stop = asyncio.get_running_loop().call_later(
                    self._idle, self._stop_idle)

    def _stop_idle(self) -> None:
        """Nobody waited for ``idle`` seconds: close the connection (senders stop hinting
        at their next look)."""
        self._idle_stop = None
        task = self._listener.stop_soon()
        if task is not None:
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _on_hint(self, payload: str | None) -> None:
        if payload is None:
            for events in self._waiting.values():
                for event in events:
                    event.set()
            return
        for text in payload.split():
            try:
                saga_id = UUID(text)
            except ValueError:  # not ours: the channel is open to anyone who can NOTIFY
                continue
            for event in self._waiting.get(saga_id, ()):
                event.set()
