"""The long-lived coordinator worker: a Kafka reply consumer and a timer loop.

Both loops hold nothing that matters in memory. The reply loop commits Kafka offsets only after
the database transaction that applied the batch committed; the timer loop claims due timers
with ``SKIP LOCKED``. So any number of replicas can run, and any can be killed at any moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from coordinator.config.settings import CoordinatorSettings
from coordinator.migrations import migrate
from coordinator.observability.scan import WorkerObservability
from coordinator.runtime.functions.handlers import (
    fire_due_schedules,
    fire_due_timers,
    handle_reply_batch,
)
from coordinator.runtime.hints.results import SagaEndHints, start_saga_end_hints
from coordinator.runtime.hints.timers import TimerHintListener
from coordinator.runtime.late_ok import LateOkResumer
from coordinator.runtime.publishing import CommandPublishing, start_command_publishing
from coordinator.runtime.signal_batch import handle_signal_batch
from coordinator.runtime.signal_wire import signal_topic
from coordinator.runtime.worker.compaction import CompactionLoop
from coordinator.runtime.worker.definitions import DefinitionsLoop
from coordinator.runtime.worker.offset_commits import OffsetCommitter
from coordinator.runtime.worker.versions import check_live_versions
from coordinator.schedules import ScheduleFirer, ScheduleMetrics, sync_declared
from coordinator.store import SagaStore
from coordinator.store.definitions import register_uploaded
from participant_sdk.probes import database_answers, tasks_alive
from participant_sdk.protocol import reply_topic
from participant_sdk.startup import open_with_retry
from participant_sdk.stopping import StopSignals, until_stopped

__all__ = ["Worker", "WorkerStateError"]

log = logging.getLogger(__name__)

_MIN_SLEEP = 0.05
_ERROR_BACKOFF = 1.0
#: Longest sleep of the timer and schedule loops while timer hints are not being received.
_UNHINTED_MAX_IDLE = 1.0


class WorkerStateError(RuntimeError):
    """start() called twice, or after stop()."""


class Worker:
    """Runs the reply consumer and the timer loop until :meth:`stop` (or SIGTERM)."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        registry: Any,
        *,
        store: SagaStore | None = None,
        name: str = "worker",
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.name = name
        self._store = store
        self._owns_store = store is None
        self._consumer: AIOKafkaConsumer | None = None
        self._offsets: OffsetCommitter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._schedules_changed = asyncio.Event()
        self._hints: TimerHintListener | None = None
        self._end_hints: SagaEndHints | None = None
        self._sleep_until: datetime | None = None
        self._started = False
        self._stopped = False
        self._publishing: CommandPublishing | None = None
        self._late_ok: LateOkResumer | None = None
        #: Metrics and the periodic in-flight/stuck scan (created by start()).
        self.observability: WorkerObservability | None = None
        #: Scheduled checkpoints of long histories (None while ``compact_interval`` is 0).
        self.compaction: CompactionLoop | None = None
        self.definitions: DefinitionsLoop | None = None
        #: Fires the due schedules (created by start()).
        self.schedules: ScheduleFirer | None = None
        #: Counters for tests and logs.
        self.batches = 0
        self.timers_fired = 0

    @property
    def store(self) -> SagaStore:
        if self._store is None:
            raise WorkerStateError("worker not started")
        return self._store

    def assignment(self) -> set[TopicPartition]:
        """Reply partitions this replica currently owns."""
        return set(self._consumer.assignment()) if self._consumer is not None else set()

    async def start(self) -> None:
        if self._started:
            raise WorkerStateError("worker already started")
        self._started = True
        s = self.settings
        if self._store is None:
            self._store = await open_with_retry(
                lambda: SagaStore.open(
                    s.dsn, self.registry, min_size=s.pool_min_size, max_size=s.pool_max_size
                ),
                what="Postgres",
            )
        if s.migrate_on_start:
            async with self.store.pool.acquire() as conn:
                await migrate(conn)
        try:
            await register_uploaded(self.store.pool, self.registry)
            async with self.store.pool.acquire() as conn:
                await check_live_versions(conn, self.registry,
                                          allow=s.allow_unregistered_versions)
        except BaseException:
            self._stopped = True  # nothing else was started yet
            if self._owns_store:
                await self.store.close()
            raise
        self.store.add_timer_listener(self._on_timer_scheduled)
        if s.resume_on_late_ok:
            self._late_ok = LateOkResumer(self.store)
            self._late_ok.start()
        if s.timer_hints:
            self._hints = TimerHintListener(
                lambda: asyncpg.connect(s.dsn, server_settings={
                    "application_name": f"sagaflow-{self.name}-timer-hints"}),
                self._on_hint, name=self.name)
            await self._hints.start()
        self.observability = WorkerObservability(self.store, name=self.name,
                                                 live=self._live, ready=self._ready)
        self._publishing = await start_command_publishing(
            self.store, s, name=self.name, registry=self.observability.metrics.registry)
        self._end_hints = await start_saga_end_hints(self.store, s)
        await self.observability.start()
        mappers = await sync_declared(self.store, self.registry, now=datetime.now(UTC))
        self.schedules = ScheduleFirer(
            self.store, metrics=ScheduleMetrics(self.observability.metrics.registry),
            mappers=mappers, actor=self.name)
        if s.compact_interval.total_seconds() > 0:
            self.compaction = CompactionLoop(self.store, s, name=self.name)
            await self.compaction.start()
        self.definitions = DefinitionsLoop(self.store, self.registry, name=self.name)
        await self.definitions.start()
        consumer = AIOKafkaConsumer(
            reply_topic(s.topic_prefix),
            signal_topic(s.topic_prefix),
            bootstrap_servers=s.kafka_bootstrap,
            group_id=s.group_id,
            client_id=f"sagaflow-{self.name}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=s.reply_batch_size,
            fetch_max_wait_ms=int(s.reply_fetch_max_wait.total_seconds() * 1000),
            **s.kafka_security.client_kwargs(),
        )
        self._consumer = consumer  # stop() closes it should start-up be cancelled
        await open_with_retry(consumer.start, what="Kafka")
        self._offsets = OffsetCommitter(
            consumer, name=self.name, interval=s.reply_commit_interval.total_seconds(),
            max_pending=s.reply_commit_max_pending)
        await self._offsets.start()
        self._tasks = [
            asyncio.create_task(self._reply_loop(), name=f"{self.name}-replies"),
            asyncio.create_task(self._timer_loop(), name=f"{self.name}-timers"),
            asyncio.create_task(self._schedule_loop(), name=f"{self.name}-schedules"),
        ]
        # Which saga types this worker runs, and from where (classes or definition files).
        log.info("%s started (group %s; sagas: %s%s)", self.name, s.group_id,
                 ", ".join(f"{c.name} v{c.version}" for c in self.registry.types()),
                 f" from {', '.join(s.sagas)}" if s.sagas else "")

    def _live(self) -> str | None:
        """Liveness: every loop still runs (``run`` exits when one crashes; this catches an
        embedding that does not)."""
        return tasks_alive(self._tasks)

    async def _ready(self) -> str | None:
        """Readiness: started, not stopping, and the database answers."""
        if not self._tasks:
            return "starting"
        if self._stopping.is_set():
            return "stopping"
        return self._live() or await database_answers(self.store.pool)

    async def stop(self) -> None:
        """Let the batch in flight finish (bounded), leave the group, close (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._wake.set()
        self._schedules_changed.set()
        if self._tasks:
            _, pending = await asyncio.wait(
                self._tasks, timeout=self.settings.shutdown_grace.total_seconds()
            )
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._late_ok is not None:
            await self._late_ok.stop()
        if self._publishing is not None:
            await self._publishing.stop()
        if self._offsets is not None:
            await self._offsets.stop()
        if self._consumer is not None:
            await self._consumer.stop()
        if self._hints is not None:
            await self._hints.stop()
        if self._end_hints is not None:
            await self._end_hints.stop()
        if self.compaction is not None:
            await self.compaction.stop()
        if self.definitions is not None:
            await self.definitions.stop()
        if self.observability is not None:
            await self.observability.stop()
        if self._owns_store and self._store is not None:
            await self._store.close()
        log.info("%s stopped", self.name)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def run(self) -> None:
        """Start, run until SIGTERM/SIGINT or a loop crash, then stop (see
        :mod:`participant_sdk.stopping` for the bounds: a signal during start-up ends it at
        once, and the whole stop takes under two seconds)."""
        with StopSignals(self._stopping.set):
            try:
                began, _ = await until_stopped(self.start(), self._stopping)
                if not began:
                    log.info("%s: stopped while starting", self.name)
                    return
                stop_wait = asyncio.create_task(self._stopping.wait())
                done, _ = await asyncio.wait(
                    [stop_wait, *self._tasks], return_when=asyncio.FIRST_COMPLETED
                )
                stop_wait.cancel()
                for task in done:
                    if task is not stop_wait and not task.cancelled() and task.exception():
                        log.error("%s: %s crashed", self.name, task.get_name(),
                                  exc_info=task.exception())
            finally:
                await self.stop()

    # -- reply loop -------------------------------------------------------------------------

    async def _reply_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        timeout_ms = int(self.settings.reply_fetch_timeout.total_seconds() * 1000)
        while not self._stopping.is_set():
            try:  # an idle fetch is no work in flight: a stop ends it at once
                fetched, batch = await until_stopped(consumer.getmany(
                    timeout_ms=timeout_ms, max_records=self.settings.reply_batch_size
                ), self._stopping)
            except KafkaError:
                log.exception("%s: fetching replies failed", self.name)
                await self._pause(_ERROR_BACKOFF)
                continue
            if not fetched:
                break
            if not batch:
                continue
            records = [r for part in batch.values() for r in part]
            signals_in = signal_topic(self.settings.topic_prefix)
            signals = [r for r in records if r.topic == signals_in]
            records = [r for r in records if r.topic != signals_in]
            try:
                result = await handle_reply_batch(self.store, records)
                if signals:
                    taken = await handle_signal_batch(self.store, signals)
                    if taken.dead_lettered:
                        log.warning("%s: %d signal records dead-lettered", self.name,
                                    taken.dead_lettered)
            except Exception:
                # Nothing was committed: rewind so the batch is fetched again.
                log.exception("%s: applying %d replies failed; will retry", self.name,
                              len(records))
                for tp, part in batch.items():
                    with contextlib.suppress(IllegalStateError):
                        consumer.seek(tp, part[0].offset)
                await self._pause(_ERROR_BACKOFF)
                continue
            self.batches += 1
            if result.dead_lettered:
                log.warning("%s: %d reply records dead-lettered", self.name,
                            result.dead_lettered)
            await self._commit(consumer, batch)

    async def _commit(self, consumer: AIOKafkaConsumer, batch: dict[TopicPartition, Any]) -> None:
        """Hand the batch's offsets to the background committer (the batch is in the database
        already); the next fetch does not wait for the OffsetCommit round trip."""
        offsets = {tp: OffsetAndMetadata(part[-1].offset + 1, "") for tp, part in batch.items()}
        assert self._offsets is not None
        self._offsets.submit(offsets, count=sum(len(part) for part in batch.values()))

    # -- timer loop -------------------------------------------------------------------------

    def _on_timer_scheduled(self, due_at: datetime) -> None:
        if self._sleep_until is None or due_at < self._sleep_until:
            self._wake.set()

    def _on_hint(self) -> None:
        """Another process wrote a timer due soon or changed a schedule (or hints were
        missed while reconnecting): both loops look again."""
        self._wake.set()
        self._schedules_changed.set()

    def _max_idle(self) -> float:
        """How long the loops may sleep: ``timer_max_idle`` while hints arrive, else 1 s."""
        longest = self.settings.timer_max_idle.total_seconds()
        if self._hints is None or not self._hints.listening:
            return min(longest, _UNHINTED_MAX_IDLE)
        return longest

    async def _timer_loop(self) -> None:
        """Fire due timers; idle, one ``min(due_at)`` query per wake-up and nothing else.

        The loop sleeps until the earliest timer is due (at most :meth:`_max_idle`: timers
        written by other processes are found within that), or until this process's own store
        schedules an earlier one or another process hints. It claims timers only when one is
        due.
        """
        limit = self.settings.timer_batch_size
        due = True  # at start, timers may be overdue
        while not self._stopping.is_set():
            fired = 0
            self._wake.clear()  # before the query: a wake-up during it is not lost
            try:
                if due:
                    fired = await fire_due_timers(self.store, limit=limit)
                    self.timers_fired += fired
                    if fired >= limit:
                        continue
                next_due = await self.store.next_timer_due()
            except Exception:
                log.exception("%s: firing timers failed", self.name)
                await self._pause(_ERROR_BACKOFF)
                continue
            now = datetime.now(UTC)
            max_idle = self._max_idle()
            if next_due is None:
                due, delay = False, max_idle
            elif next_due <= now:
                # Still due after a round that fired nothing: its saga is busy; back off a bit.
                due, delay = True, (_MIN_SLEEP if due and not fired else 0.0)
            else:
                wait = (next_due - now).total_seconds()
                due, delay = wait <= max_idle, min(wait, max_idle)
            if delay:
                await self._sleep(delay)

    # -- schedule loop ----------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        firer = self.schedules
        assert firer is not None
        limit = self.settings.timer_batch_size
        while not self._stopping.is_set():
            self._schedules_changed.clear()  # before the query: a hint during it is not lost
            try:
                report = await fire_due_schedules(firer, limit=limit)
                if report.schedules >= limit:
                    continue
                next_due = await firer.next_due()
            except Exception:
                log.exception("%s: firing schedules failed", self.name)
                await self._pause(_ERROR_BACKOFF)
                continue
            delay = self._max_idle()
            if next_due is not None:
                wait = (next_due - datetime.now(UTC)).total_seconds()
                delay = min(max(wait, _MIN_SLEEP), delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._schedules_changed.wait(), delay)

    async def _sleep(self, seconds: float) -> None:
        self._sleep_until = datetime.fromtimestamp(datetime.now(UTC).timestamp() + seconds, UTC)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        self._sleep_until = None

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
