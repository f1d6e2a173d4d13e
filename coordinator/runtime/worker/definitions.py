"""New saga definitions uploaded over the API, registered by a running worker.

Every :data:`POLL` the worker reads which ``(name, version)`` rows ``saga_definitions`` has
that its registry lacks, and registers them. Until it has, an event of a saga on such a
version is kept and retried (``coordinator.store.deferral``), never lost; so the poll bounds
only the delay of a saga started on a version uploaded a moment before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from coordinator.store import SagaStore
from coordinator.store.definitions import register_uploaded

__all__ = ["POLL", "DefinitionsLoop"]

log = logging.getLogger(__name__)

#: How often a worker looks for definitions it has not registered yet, in seconds.
POLL: Final = 5.0


class DefinitionsLoop:
    """Polls for uploaded definitions until stopped; errors are logged, never raised."""

    def __init__(self, store: SagaStore, registry: Any, *, name: str,
                 poll: float = POLL) -> None:
        self.store, self.registry, self.name, self.poll = store, registry, name, poll
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("definitions loop already started")
        self._task = asyncio.create_task(self._run(), name=f"{self.name}-definitions")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.poll)
            if self._stopping.is_set():
                return
            try:
                await register_uploaded(self.store.pool, self.registry)
            except Exception:
                log.exception("%s: registering uploaded saga definitions failed", self.name)
