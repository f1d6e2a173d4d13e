"""The coordinator as deployed functions: what one warm instance keeps, and its entry points.

:class:`CoordinatorFunctions` opens, on first use, a small pool (``pool_max_size``), the
schedule firer and a relay tick, and reuses them while the instance stays warm. Its entry
points wrap :mod:`coordinator.runtime.functions.handlers` (the code the long-running worker runs):

* :meth:`~CoordinatorFunctions.replies`: the reply batch, for a Kafka trigger (AWS Lambda's
  Kafka event source or Knative's KafkaSource, see :mod:`participant_sdk.functions`);
* :meth:`~CoordinatorFunctions.signals`: the signal batch, for a trigger on ``{prefix}.signals``
  (another service's outbox signalling a saga);
* :meth:`~CoordinatorFunctions.tick`: a scheduled trigger's tick: due schedules, due timers,
  then the relay tick, which publishes the commands they just wrote.

Nothing here imports the API framework or an exporter, so a cold start pays for neither; with
:class:`FunctionSettings` (instead of ``CoordinatorSettings``) it skips pydantic-settings too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.config.functions import FunctionSettings
from coordinator.runtime.functions.handlers import (
    fire_due_schedules,
    fire_due_timers,
    handle_reply_batch,
)
from coordinator.store import SagaStore, TransientStoreError
from coordinator.store.codecs import prime_array_codecs
from coordinator.store.store import CONNECTION_ERRORS
from participant_sdk.functions import FunctionLoop, RecordBatch, lambda_handler
from participant_sdk.pools import create_pool
from participant_sdk.records import InboundRecord
from participant_sdk.startup_errors import SettingsError

if TYPE_CHECKING:  # annotations, or imported by the tick: a reply handler's cold start skips them
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.runtime.hints.results import SagaEndHints
    from coordinator.schedules import FireReport, ScheduleFirer
    from outbox_relay import RelaySettings, RelayTick, TickReport

__all__ = ["CoordinatorFunctions", "FunctionSettings", "TickOutcome"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TickOutcome:
    """What one scheduled tick did."""

    schedules: FireReport | None
    timers: int
    relay: TickReport | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedules_started": self.schedules.started if self.schedules is not None else 0,
            "timers_fired": self.timers,
            "published": self.relay.published if self.relay is not None else 0,
        }


class CoordinatorFunctions:
    """The coordinator's entry points for one function instance (build it at module level).

    ``settings`` is a :class:`~coordinator.config.settings.CoordinatorSettings` or, for a
    faster cold start, a :class:`FunctionSettings` (``FunctionSettings.from_env()``: the
    same variables).
    ``relay`` settings make :meth:`tick` also publish the outbox (leave them out when a relay
    runs elsewhere). ``statement_cache_size=0`` is for pgbouncer in transaction mode.
    """

    def __init__(
        self,
        settings: CoordinatorSettings | FunctionSettings,
        registry: Any,
        *,
        relay: RelaySettings | None = None,
        relay_max_shards: int | None = None,
        statement_cache_size: int = 100,
        tick_budget: dt.timedelta = dt.timedelta(seconds=10),
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.statement_cache_size = statement_cache_size
        self.tick_budget = tick_budget
        self.relay: RelayTick | None = None
        if relay is not None:
            from outbox_relay import RelayTick

            self.relay = RelayTick(relay, max_shards=relay_max_shards, budget=tick_budget)
        self._store: SagaStore | None = None
        self._end_hints: SagaEndHints | None = None
        self._firer: ScheduleFirer | None = None
        self._lock = asyncio.Lock()

    async def store(self) -> SagaStore:
        """The instance's store, opened on first use."""
        async with self._lock:
            if self._store is None:
                s = self.settings
                if not s.dsn:
                    raise SettingsError("SAGAFLOW_DSN is not set: the coordinator's Postgres "
                                        "database")
                pool = await create_pool(
                    s.dsn,
                    min_size=0,
                    max_size=max(2, s.pool_max_size),
                    statement_cache_size=self.statement_cache_size,
                    server_settings={"application_name": "sagaflow-coordinator-fn"},
                    init=prime_array_codecs,
                )
                self._store = SagaStore(pool, self.registry, owns_pool=True)
                if s.result_hints:
                    from coordinator.runtime.hints.results import SagaEndHints

                    self._end_hints = SagaEndHints(pool)
                    self._store.add_change_listener(self._end_hints.on_changes)
            return self._store

    async def handle_replies(self, records: Sequence[InboundRecord]) -> list[int]:
        """Apply a batch of reply records; return the indexes to redeliver (all of them when
        the database failed: the batch is one transaction and nothing was committed)."""
        return await self._batch("reply", handle_reply_batch, records)

    def replies(self) -> RecordBatch:
        """The reply batch as a :data:`~participant_sdk.functions.RecordBatch`."""
        return self.handle_replies

    async def handle_signals(self, records: Sequence[InboundRecord]) -> list[int]:
        """Deliver a batch of signal records (what the worker's signal loop does); return the
        indexes to redeliver: all of them when the database failed, which is safe because
        each signal id is applied once per saga."""
        from coordinator.runtime.signal_batch import (
            handle_signal_batch,  # not on a reply's cold start
        )

        return await self._batch("signal", handle_signal_batch, records)

    async def _batch(self, what: str,
                     handle: Callable[[SagaStore, Sequence[InboundRecord]], Awaitable[Any]],
                     records: Sequence[InboundRecord]) -> list[int]:
        store = await self.store()
        try:
            result = await handle(store, records)
        except (TransientStoreError, *CONNECTION_ERRORS) as exc:
            log.warning("%s batch of %d not applied (%r); redeliver", what, len(records), exc)
            return list(range(len(records)))
        log.debug("%s batch: %s", what, result)
        await self._hint_ends()
        return []

    async def _hint_ends(self) -> None:
        """Tell result waiters of the sagas this invocation ended, before it returns (the
        instance may be frozen afterwards: no background task)."""
        if self._end_hints is not None:
            await self._end_hints.send_pending()

    def signals(self) -> RecordBatch:
        """The signal batch as a :data:`~participant_sdk.functions.RecordBatch`."""
        return self.handle_signals

    async def tick(self, now: dt.datetime | None = None) -> TickOutcome:
        """Fire due schedules and timers (in batches, within the budget), then run the relay
        tick. Safe to overlap: schedules are claimed with SKIP LOCKED, timers by their own
        locks, relay shards by transaction locks."""
        store = await self.store()
        firer = await self._schedules(store)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.tick_budget.total_seconds()
        schedules = await fire_due_schedules(firer, now=now)
        limit = self.settings.timer_batch_size
        timers = 0
        while True:
            fired = await fire_due_timers(store, now=now, limit=limit)
            timers += fired
            if fired < limit or loop.time() >= deadline:
                break
        await self._hint_ends()
        report = await self.relay() if self.relay is not None else None
        return TickOutcome(schedules, timers, report)

    def lambda_replies(self, loop: FunctionLoop | None = None
                       ) -> Callable[[Mapping[str, Any], Any], dict[str, Any]]:
        """A Lambda handler for the replies topic's Kafka event source."""
        return lambda_handler(self.replies, loop=loop)

    def lambda_signals(self, loop: FunctionLoop | None = None
                       ) -> Callable[[Mapping[str, Any], Any], dict[str, Any]]:
        """A Lambda handler for the signals topic's Kafka event source."""
        return lambda_handler(self.signals, loop=loop)

    def lambda_tick(self, loop: FunctionLoop | None = None
                    ) -> Callable[[Mapping[str, Any], Any], dict[str, Any]]:
        """A Lambda handler for a schedule (EventBridge) trigger; the event's content is not
        used, the store's clock decides what is due."""
        runner = loop or FunctionLoop()

        def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
            return runner.run(self.tick()).as_dict()

        return handler

    async def close(self) -> None:
        """Close the relay tick and the store (idempotent)."""
        if self.relay is not None:
            await self.relay.close()
        store, self._store, self._firer, self._end_hints = self._store, None, None, None
        if store is not None:
            await store.close()

    async def _schedules(self, store: SagaStore) -> ScheduleFirer:
        from coordinator.schedules import ScheduleFirer, sync_declared

        async with self._lock:
            if self._firer is None:
                mappers = await sync_declared(store, self.registry,
                                              now=dt.datetime.now(dt.UTC))
                self._firer = ScheduleFirer(store, mappers=mappers, actor="tick-function")
            return self._firer
