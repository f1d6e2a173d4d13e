"""Wake-up hints for the workers' timer and schedule loops, so an idle worker need not poll.

A worker wakes itself for the timers its own commits write. Timers and schedules written by
another process (the API's delayed starts, signals and repairs; schedule changes) reach it
through a NOTIFY on :data:`CHANNEL`, sent after the writer's commit by a coalescing
:class:`~outbox_relay.RelayWaker` (:func:`start_timer_waker`), and only for a timer due
sooner than the worker's longest sleep, so deadline timers minutes away cost nothing. The
worker LISTENs on one dedicated connection (:class:`TimerHintListener`). Hints are best
effort: without them a worker still finds every timer within ``timer_max_idle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import asyncpg

from outbox_relay import RelayWaker

if TYPE_CHECKING:
    from coordinator.settings import CoordinatorSettings
    from coordinator.store import SagaStore

__all__ = ["CHANNEL", "TIMER_HINT", "TimerHintListener", "start_timer_waker"]

log = logging.getLogger(__name__)

CHANNEL: Final = "sagaflow_timers"
#: A constant statement (see ``outbox_relay.waker``): no durability needed, so no WAL flush wait.
TIMER_HINT: Final = "SET LOCAL synchronous_commit = off; SELECT pg_notify('sagaflow_timers', '')"

_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
_RECONNECT_MAX = 5.0


async def start_timer_waker(store: SagaStore, settings: CoordinatorSettings) -> RelayWaker | None:
    """A running waker that hints the workers after this store's commits wrote a timer due
    within ``timer_max_idle``; call its ``wake()`` after changing a schedule. None when
    ``settings.timer_hints`` is off. The caller stops it."""
    if not settings.timer_hints:
        return None
    waker = RelayWaker(store.pool, statement=TIMER_HINT)
    horizon = settings.timer_max_idle

    def on_timer(due_at: datetime) -> None:
        if due_at - datetime.now(UTC) < horizon:
            waker.wake()

    store.add_timer_listener(on_timer)
    await waker.start()
    return waker


class TimerHintListener:
    """LISTENs on :data:`CHANNEL` over a connection of its own and calls ``on_hint`` for each
    notification, and after every (re)connect, since hints may have been missed meanwhile.

    ``listening`` is false while the connection is down: the worker then polls at its
    non-listening interval.
    """

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]],
                 on_hint: Callable[[], None], *, name: str = "worker") -> None:
        self._connect = connect
        self._on_hint = on_hint
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self.listening = False
        #: Notifications received (for tests).
        self.received = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self._name}-timer-hints")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _notified(self, *_: Any) -> None:
        self.received += 1
        self._on_hint()

    async def _run(self) -> None:
        delay = 0.1
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect()
                self._lost.clear()
                conn.add_termination_listener(lambda _c: self._lost.set())
                await conn.add_listener(CHANNEL, self._notified)
                self.listening, delay = True, 0.1
                self._on_hint()
                await self._lost.wait()
                log.warning("%s: the timer hint connection was lost; reconnecting", self._name)
            except _ERRORS as exc:
                log.debug("%s: timer hints unavailable: %r", self._name, exc)
            finally:
                self.listening = False
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RECONNECT_MAX)
