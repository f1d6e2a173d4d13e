"""Wake-up hints for relays, sent after the writers' commits instead of inside them.

A NOTIFY inside a writer's transaction makes that commit take Postgres's cluster-wide notify
lock, so under load all such writers commit one at a time (``python -m bench.outbox_notify``
measures it). A :class:`RelayWaker` lives next to the writers: after a commit that wrote outbox
rows they call :meth:`RelayWaker.wake` (sets a flag, no I/O), and a background task sends one
NOTIFY in a transaction of its own. Wakes that arrive while a hint is being sent share the next
one, so there is at most one hint in flight and never a wait on an idle waker; ``min_interval``
(default 0) additionally spaces hints out. Relays then pick rows up within about a round trip
instead of at their next idle poll (up to ``SAGAFLOW_RELAY_POLL_INTERVAL``, 5 s).

Hints are best effort: a lost one only means the relay finds the rows at its next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Final

import asyncpg

log = logging.getLogger(__name__)

_RETRY_AFTER = 1.0
_STOP_TIMEOUT = 2.0
_SEND_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


#: One round trip, one implicit transaction: the hint needs no durability, so its commit does
#: not wait for a WAL flush. A constant (the simple query protocol allows two statements but
#: no parameters); the channel is ``NOTIFY_CHANNEL``, which the relay tests listen on.
HINT: Final = "SET LOCAL synchronous_commit = off; SELECT pg_notify('sagaflow_outbox', '')"


class RelayWaker:
    """Coalesces "rows were committed" into one NOTIFY in flight at a time (and at most one
    per ``min_interval`` when that is set).

    Sends through ``pool`` (the writers' own pool: a hint holds a connection for one round trip).
    ``statement`` is the hint, a constant like :data:`HINT` (another channel's, for other
    listeners: ``coordinator.runtime.hints.timers``); never built from input.
    """

    def __init__(
        self, pool: asyncpg.Pool, *, min_interval: timedelta = timedelta(0),
        statement: str | None = None,
    ) -> None:
        if min_interval < timedelta(0):
            raise ValueError("min_interval must not be negative")
        self._pool = pool
        self._statement = statement or HINT
        self._min_interval = min_interval.total_seconds()
        self._pending = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Hints sent (for tests and metrics).
        self.sent = 0

    def wake(self) -> None:
        """Ask for a hint; returns at once (safe to call from a commit listener)."""
        self._pending.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sagaflow-waker")

    async def stop(self) -> None:
        """Stop the task; a hint still pending is sent first (bounded, best effort)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self._pending.is_set():
            self._pending.clear()
            with contextlib.suppress(TimeoutError, *_SEND_ERRORS):
                await asyncio.wait_for(self._send(), _STOP_TIMEOUT)

    async def _send(self) -> None:
        async with self._pool.acquire() as conn:
            await conn.execute(self._statement)
        self.sent += 1

    async def _run(self) -> None:
        while True:
            await self._pending.wait()
            self._pending.clear()
            try:
                await self._send()
            except _SEND_ERRORS as exc:
                log.debug("wake-up hint not sent: %r", exc)
                await asyncio.sleep(_RETRY_AFTER)
                continue
            # Commits arriving meanwhile set the flag again and share the next hint.
            if self._min_interval:
                await asyncio.sleep(self._min_interval)
