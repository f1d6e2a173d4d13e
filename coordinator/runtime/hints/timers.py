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

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import asyncpg

from coordinator.runtime.hints.listener import HintListener
from outbox_relay import RelayWaker

if TYPE_CHECKING:
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.store import SagaStore

__all__ = ["CHANNEL", "TIMER_HINT", "TimerHintListener", "start_timer_waker"]

CHANNEL: Final = "sagaflow_timers"
#: A constant statement (see ``outbox_relay.waker``): no durability needed, so no WAL flush wait.
TIMER_HINT: Final = "SET LOCAL synchronous_commit = off; SELECT pg_notify('sagaflow_timers', '')"


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


class TimerHintListener(HintListener):
    """LISTENs on :data:`CHANNEL` over a connection of its own and calls ``on_hint`` for each
    notification, and after every (re)connect, since hints may have been missed meanwhile.

    ``listening`` is false while the connection is down: the worker then polls at its
    non-listening interval.
    """

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]],
                 on_hint: Callable[[], None], *, name: str = "worker") -> None:
        super().__init__(connect, CHANNEL, lambda _payload: on_hint(), name=name)
