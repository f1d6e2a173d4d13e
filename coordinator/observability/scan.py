"""The worker's observability companion: the probe port and the periodic scan.

The probe port (``SAGAFLOW_METRICS_PORT``) serves ``/metrics``, ``/healthz`` and ``/readyz``
(:mod:`participant_sdk.probes`); the worker tells it what alive and ready mean.

Every ``observe_interval`` one scan refreshes the in-flight / dead / stuck / dead-letter /
outbox / human-task gauges from cheap queries and logs a WARNING once per saga that became
stuck (and an INFO when it moves again). Each worker replica scans and logs on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter as Tally
from typing import TYPE_CHECKING, Final
from uuid import UUID

import asyncpg

from coordinator.observability.metrics import CoordinatorMetrics
from coordinator.observability.settings import ObservabilitySettings
from coordinator.observability.stuck import StuckSaga, list_stuck
from participant_sdk.dead_letters import DEAD_LETTER_TABLE
from participant_sdk.logging_config import saga_context
from participant_sdk.probes import LiveCheck, ProbeServer, ReadyCheck, database_answers

if TYPE_CHECKING:
    from coordinator.store import SagaStore

__all__ = ["WorkerObservability"]

log = logging.getLogger(__name__)

_IN_FLIGHT: Final = """
SELECT saga_type, status, count(*) AS n FROM sagas
WHERE status IN ('scheduled', 'running', 'compensating', 'dead')
GROUP BY saga_type, status
"""
_DEAD_LETTERS: Final = (
    f"SELECT source, count(*) AS n FROM {DEAD_LETTER_TABLE} GROUP BY source"  # noqa: S608
)
_OUTBOX: Final = """
SELECT count(*) AS n, coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8
       AS lag
FROM sagaflow_outbox
"""

#: Open and overdue tasks per candidate group: one pass over the open tasks (partial indexes).
_TASKS: Final = """
SELECT coalesce(g, '') AS grp, count(*) AS open,
       count(*) FILTER (WHERE t.due_at < $1) AS overdue
FROM human_tasks t LEFT JOIN LATERAL unnest(t.candidate_groups) AS g ON true
WHERE t.state = 'open'
GROUP BY 1
"""


class WorkerObservability:
    """Metrics (change listener + optional probe server) and the periodic scan."""

    def __init__(
        self,
        store: SagaStore,
        settings: ObservabilitySettings | None = None,
        *,
        metrics: CoordinatorMetrics | None = None,
        name: str = "worker",
        live: LiveCheck | None = None,
        ready: ReadyCheck | None = None,
    ) -> None:
        self.store = store
        self.settings = settings if settings is not None else ObservabilitySettings()
        self.metrics = metrics if metrics is not None else CoordinatorMetrics()
        self.policy = self.settings.stuck_policy()
        self.name = name
        #: Sagas flagged stuck at the last scan.
        self.stuck: dict[UUID, StuckSaga] = {}
        self._task: asyncio.Task[None] | None = None
        self._live: LiveCheck = live if live is not None else (lambda: None)
        self._ready: ReadyCheck = ready if ready is not None else self._database_answers
        self._server: ProbeServer | None = None
        self._started = False

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("WorkerObservability.start() called twice")
        self._started = True
        self.store.add_change_listener(self.metrics.observe_changes)
        s = self.settings
        if s.metrics_port is not None:
            self._server = ProbeServer(registry=self.metrics.registry, live=self._live,
                                       ready=self._ready, name=self.name)
            await self._server.start(s.metrics_port, s.metrics_addr)
        self._task = asyncio.create_task(self._loop(), name=f"{self.name}-observability")

    async def stop(self) -> None:
        """Stop the scan and the probe server (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        server, self._server = self._server, None
        if server is not None:
            await server.stop()

    @property
    def probe_port(self) -> int | None:
        """The probe server's bound port (None when it is off)."""
        return self._server.port if self._server is not None else None

    async def _database_answers(self) -> str | None:
        return await database_answers(self.store.pool)

    async def _loop(self) -> None:
        interval = self.settings.observe_interval.total_seconds()
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.metrics.scan_errors.inc()
                log.exception("%s: observability scan failed", self.name)
            await asyncio.sleep(interval)

    async def scan(self, *, log_changes: bool = True) -> list[StuckSaga]:
        """Refresh every gauge; log and return the sagas that became stuck since last scan."""
        m = self.metrics
        async with self.store.pool.acquire() as conn:
            m.set_in_flight([(r["saga_type"], r["status"], r["n"])
                             for r in await conn.fetch(_IN_FLIGHT)])
            with contextlib.suppress(asyncpg.UndefinedTableError):
                m.set_dead_letters([(r["source"], r["n"])
                                    for r in await conn.fetch(_DEAD_LETTERS)])
            with contextlib.suppress(asyncpg.UndefinedTableError):
                row = await conn.fetchrow(_OUTBOX)
                if row is not None:
                    m.outbox_backlog.set(row["n"])
                    m.outbox_lag.set(row["lag"])
            with contextlib.suppress(asyncpg.UndefinedTableError):
                m.set_tasks([(r["grp"], r["open"], r["overdue"])
                             for r in await conn.fetch(_TASKS, self.store._clock())])
            found = await list_stuck(conn, self.policy, now=self.store._clock(),
                                     limit=self.settings.stuck_scan_limit)
        tally: Tally[tuple[str, str]] = Tally()
        for saga in found:
            for reason in saga.reasons:
                tally[(saga.saga_type, reason)] += 1
        m.set_stuck(tally)
        current = {s.saga_id: s for s in found}
        new = [s for s in found if s.saga_id not in self.stuck]
        self.stuck, previous = current, self.stuck
        if not log_changes:
            return new
        for saga in new:
            with saga_context(saga.saga_id):
                log.warning(
                    "saga %s (%s v%d, %s) is stuck: %s; step %s %s attempt %d, "
                    "no progress for %.0fs (threshold %.0fs)",
                    saga.saga_id, saga.saga_type, saga.version, saga.status,
                    "+".join(saga.reasons), saga.step or "-", saga.step_phase or "-",
                    saga.attempt, saga.idle.total_seconds(), saga.threshold.total_seconds(),
                    extra={"stuck_reasons": ",".join(saga.reasons), "saga_type": saga.saga_type,
                           "step": saga.step or ""},
                )
        for saga_id in previous.keys() - current.keys():
            with saga_context(saga_id):
                log.info("saga %s is no longer stuck", saga_id)
        return new
