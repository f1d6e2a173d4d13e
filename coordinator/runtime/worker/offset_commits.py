"""Reply offsets committed in the background, so the reply loop never waits for them.

The worker may commit a batch's offsets only after the database transaction that applied it
committed (then a crash redelivers at most what was not yet committed, and the core ignores
duplicates). It need not wait for the OffsetCommit round trip before fetching the next batch:
:meth:`OffsetCommitter.submit` records the offsets and returns, and one task commits the
latest offset of every partition, coalescing whatever was submitted meanwhile. With an
``interval`` it waits that long after each commit, so that busy partitions cost one
OffsetCommit round trip per interval instead of one per batch (a crash then redelivers up to an
interval's replies more, which the core ignores as duplicates); ``max_pending`` replies
submitted meanwhile end the wait early, bounding what a crash of a busy worker redelivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata

__all__ = ["OffsetCommitter"]

log = logging.getLogger(__name__)


class OffsetCommitter:
    """One background committer per consumer: ``start()``, ``submit()`` …, ``stop()``."""

    def __init__(self, consumer: Any, *, name: str = "worker", interval: float = 0.0,
                 max_pending: int = 0) -> None:
        self._consumer = consumer
        self._name = name
        self._interval = interval
        self._max_pending = max_pending
        self._pending_count = 0
        self._stopping = asyncio.Event()
        self._full = asyncio.Event()
        self._pending: dict[TopicPartition, OffsetAndMetadata] = {}
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        #: OffsetCommit requests sent (for tests and logs).
        self.commits = 0

    def submit(self, offsets: dict[TopicPartition, OffsetAndMetadata], count: int = 1) -> None:
        """Commit ``offsets`` soon (a later offset of a partition replaces an earlier one);
        ``count``: the messages they cover (for ``max_pending``)."""
        self._pending_count += count
        if self._max_pending and self._pending_count >= self._max_pending:
            self._full.set()
        for tp, offset in offsets.items():
            current = self._pending.get(tp)
            if current is None or offset.offset > current.offset:
                self._pending[tp] = offset
        if self._pending:
            self._idle.clear()
            self._ready.set()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("OffsetCommitter.start() called twice")
        self._task = asyncio.create_task(self._run(), name=f"{self._name}-offset-commits")

    async def flush(self) -> None:
        """Wait until everything submitted so far was committed (or failed and was logged)."""
        await self._idle.wait()

    async def stop(self, grace: float = 5.0) -> None:
        """Commit what is pending (bounded by ``grace`` seconds), then end the task. Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()  # what is pending goes out now, not after the interval
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), grace)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            offsets, self._pending = self._pending, {}
            self._pending_count = 0
            self._full.clear()
            try:
                await self._consumer.commit(offsets)
                self.commits += 1
            except (CommitFailedError, IllegalStateError, KafkaError) as exc:
                # Rebalanced meanwhile: the new owner re-reads these replies; the core ignores
                # them as duplicates, so this loses nothing.
                log.warning("%s: offset commit failed (%s); replies will be redelivered",
                            self._name, exc)
            if not self._pending:
                self._idle.set()
            if self._interval and not self._stopping.is_set():
                await self._wait_interval()

    async def _wait_interval(self) -> None:
        """Sleep ``interval``, or less once stopping or ``max_pending`` messages are pending."""
        waits = [asyncio.ensure_future(self._stopping.wait()),
                 asyncio.ensure_future(self._full.wait())]
        try:
            await asyncio.wait(waits, timeout=self._interval,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
