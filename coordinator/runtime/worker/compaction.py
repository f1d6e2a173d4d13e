"""Scheduled compaction: checkpoint long saga histories so that replay and verify stay short
without a person running ``python -m coordinator compact``.

Every ``compact_interval`` the worker checkpoints up to ``compact_batch_size`` sagas with at
least ``compact_min_events`` events since their last checkpoint (``SagaStore.compact``: the
state is verified by replay before it is written; with ``compact_archive`` the history up to
the checkpoint moves to ``saga_history_archive``). A saga whose replay disagrees with its
snapshot is never checkpointed: it is logged as an error and the round goes on. One replica
at a time runs a round (a session advisory lock); the others skip theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Final, Self

from coordinator.config.settings import CoordinatorSettings
from coordinator.store import SagaStore, StoreError, TransientStoreError
from coordinator.store.queries import sagas_needing_checkpoint

__all__ = ["CompactionLoop", "CompactionRound"]

log = logging.getLogger(__name__)

#: Session advisory lock held during a round ("sagaflow" + 2; the migrations use + 1).
COMPACTION_LOCK_KEY: Final = 0x5A6A_F100_0000_0002


@dataclass(frozen=True, slots=True)
class CompactionRound:
    #: False when another replica held the round's lock.
    ran: bool
    compacted: int = 0
    #: Sagas left as they are because their replay disagrees with the snapshot.
    refused: int = 0


class CompactionLoop:
    """Runs :meth:`run_once` every ``settings.compact_interval`` until stopped."""

    def __init__(self, store: SagaStore, settings: CoordinatorSettings, *,
                 name: str = "worker") -> None:
        if settings.compact_interval.total_seconds() <= 0:
            raise ValueError("compaction is off (compact_interval is 0)")
        self.store = store
        self.settings = settings
        self.name = name
        self.rounds = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("CompactionLoop already started")
        self._task = asyncio.create_task(self._loop(), name=f"{self.name}-compaction")
        log.info("%s: compacting every %s sagas with %d+ new events", self.name,
                 self.settings.compact_interval, self.settings.compact_min_events)

    async def stop(self) -> None:
        """Stop now; a round cut short leaves every saga as it was or checkpointed."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _loop(self) -> None:
        interval = self.settings.compact_interval.total_seconds()
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
            if self._stopping.is_set():
                return
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: compaction round failed; next one in %s", self.name,
                              self.settings.compact_interval)

    async def run_once(self) -> CompactionRound:
        """One round: checkpoint what needs it, unless another replica is at it."""
        s = self.settings
        async with self.store.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", COMPACTION_LOCK_KEY):
                return CompactionRound(ran=False)
            try:
                ids = await sagas_needing_checkpoint(conn, s.compact_min_events,
                                                     s.compact_batch_size)
                compacted = refused = 0
                for saga_id in ids:
                    try:
                        await self.store.compact(saga_id, archive=s.compact_archive)
                        compacted += 1
                    except TransientStoreError:
                        raise
                    except StoreError as exc:
                        refused += 1
                        log.error("%s: saga %s not checkpointed: %s", self.name, saga_id, exc)
            finally:
                await conn.fetchval("SELECT pg_advisory_unlock($1)", COMPACTION_LOCK_KEY)
        self.rounds += 1
        if compacted or refused:
            log.info("%s: compaction checkpointed %d sagas (%d refused)", self.name,
                     compacted, refused)
        return CompactionRound(ran=True, compacted=compacted, refused=refused)
