"""LISTEN on one channel over a connection of its own, surviving lost connections.

Hints are best effort: whoever listens also looks by itself now and then. So after every
(re)connect the callback gets ``None`` ("hints may have been missed"), and a payload for each
notification otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncpg

__all__ = ["HintListener"]

log = logging.getLogger(__name__)

_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
_RECONNECT_MAX = 5.0


class HintListener:
    """Calls ``on_hint(payload)`` for each notification on ``channel`` and ``on_hint(None)``
    after each (re)connect, on the connections ``connect`` opens.

    ``listening`` is false while the connection is down.
    """

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], channel: str,
                 on_hint: Callable[[str | None], None], *, name: str) -> None:
        self._connect = connect
        self._channel = channel
        self._on_hint = on_hint
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self.listening = False
        #: Notifications received (for tests).
        self.received = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self._name}-{self._channel}")

    async def stop(self) -> None:
        task = self.stop_soon()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def stop_soon(self) -> asyncio.Task[None] | None:
        """Cancel the listening task now (a later :meth:`start` begins a new one); returns it,
        to be awaited if the caller needs it finished."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.received += 1
        self._on_hint(payload)

    async def _run(self) -> None:
        delay = 0.1
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect()
                self._lost.clear()
                conn.add_termination_listener(lambda _c: self._lost.set())
                await conn.add_listener(self._channel, self._notified)
                self.listening, delay = True, 0.1
                self._on_hint(None)
                await self._lost.wait()
                log.warning("%s: the %s connection was lost; reconnecting", self._name,
                            self._channel)
            except _ERRORS as exc:
                log.debug("%s: %s hints unavailable: %r", self._name, self._channel, exc)
            finally:
                self.listening = False
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RECONNECT_MAX)
