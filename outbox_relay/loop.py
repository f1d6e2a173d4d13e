"""The relay's run loop and lifecycle: start, stop, retries, idle waits, lanes taking turns.

Throughput: the owned shards are split into three lanes (shard modulo 3) that take turns. In
lane i's turn the rows lane i-1 claimed go to the producer while, in the background, lane i's
previous batch is settled and deleted and its next batch claimed. So Postgres work, Python work
and Kafka's acknowledgements overlap, and no claim ever sees rows in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import TracebackType
from typing import Final, Self

import asyncpg
import tenacity
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from outbox_relay.errors import RelayStateError
from outbox_relay.leasing import _LANES, _forget, _Leasing, _new_lanes
from outbox_relay.metrics import RelayMetrics
from outbox_relay.publishing import (
    ProducerFactory,
    _Inflight,
    _is_transient,
    _new_producer,
    _ProducerFault,
    _TransientPublishError,
)
from outbox_relay.settings import RelaySettings
from outbox_relay.shards import ShardOwnership
from participant_sdk.startup import open_with_retry, started

#: The relay's log lines keep the logger name they had when the relay was one module.
log = logging.getLogger("outbox_relay.relay")

#: A failed rebalance during an idle wait just ends the wait: the next round's own rebalance
#: runs under the retry policy (and reconnects when the connection is gone).
_IDLE_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class Relay(_Leasing):
    """One relay process's worth of work: shard ownership, claim, publish, delete.

    Use ``async with Relay(settings):`` or ``start()``/``stop()``; ``wait()`` returns when the
    run loop ends (after ``stop()``) and re-raises its error if it crashed.
    """

    def __init__(
        self,
        settings: RelaySettings,
        *,
        registry: CollectorRegistry | None = None,
        producer_factory: ProducerFactory = _new_producer,
    ) -> None:
        self.settings = settings
        self._producer_factory = producer_factory
        self._producer_broken = False
        self.metrics = RelayMetrics(registry if registry is not None else CollectorRegistry())
        self._conn: asyncpg.Connection | None = None
        self._shards: ShardOwnership | None = None
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._tracer = trace.get_tracer("sagaflow.outbox_relay")
        self._lanes = _new_lanes()
        self._turn = 0
        self._valid_topics: dict[str, bool] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to Postgres and Kafka and start the run loop."""
        if self._started:
            raise RelayStateError("relay already started")
        self._started = True
        # A fresh producer per attempt: a failed start leaves aiokafka's client unusable.
        self._producer = await open_with_retry(
            lambda: started(self._producer_factory(self.settings)), what="Kafka")
        self._task = asyncio.create_task(self._run(), name=f"outbox-relay-{self.settings.relay_id}")

    async def stop(self) -> None:
        """Finish the batch in flight (bounded), release the shards, close connections."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        self._stopping.set()
        self._wake.set()
        task = self._task
        if task is not None and not task.done():
            timeout = self.settings.shutdown_timeout.total_seconds()
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                log.warning("relay %s: batch did not finish in %.1fs", self.name, timeout)
                task.cancel()
            except Exception:
                log.debug("relay %s: run loop ended with an error", self.name)
        await self._close_pg(release=True)
        if self._producer is not None:
            await self._producer.stop()
        if task is not None and task.done() and not task.cancelled():
            exc = task.exception()
            if exc is not None:
                raise exc

    async def wait(self) -> None:
        """Block until the run loop ends."""
        if self._task is None:
            raise RelayStateError("relay not started")
        await asyncio.shield(self._task)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ---- run loop --------------------------------------------------------------------------

    def _retrying(self) -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_is_transient),
            wait=tenacity.wait_exponential(multiplier=0.1, max=5.0) + tenacity.wait_random(0, 0.1),
            stop=tenacity.stop_never,
            sleep=self._backoff,
            before_sleep=self._before_retry,
            reraise=True,
        )

    def _before_retry(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        system = "kafka" if isinstance(exc, (KafkaError, _TransientPublishError)) else "postgres"
        self.metrics.transient_failures.labels(system).inc()
        log.warning("relay %s: transient %s failure, retrying: %r", self.name, system, exc)

    async def _backoff(self, seconds: float) -> None:
        """Sleep before a retry, waking early only on stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _idle(self, seconds: float) -> None:
        """Sleep between polls, waking early on stop or on a hint that arrived since the round
        began (the flag is cleared when a round starts, not here, so none is lost)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _wait_for_work(self, seconds: float, next_rebalance: float) -> float:
        """The idle wait of a LISTENing relay: sleep until a hint, stop or ``seconds``, with no
        query meanwhile except the shard rebalance when it is due (so a standby still takes
        over a dead owner's shards within ``rebalance_interval``). Returns the next rebalance
        time; a rebalance that acquired shards ends the wait (it sets the wake flag)."""
        deadline = time.monotonic() + seconds
        interval = self.settings.rebalance_interval.total_seconds()
        while not self._wake.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_rebalance:
                await self._rebalance()
                next_rebalance = now + interval
                continue
            await self._idle(min(deadline, next_rebalance) - now)
        return next_rebalance

    async def _run(self) -> None:
        next_rebalance = 0.0
        next_lag = 0.0
        idle = self.settings.min_poll_interval.total_seconds()
        max_idle = self.settings.poll_interval.total_seconds()
        moved = False  # rows sent or claimed in the current round of lane turns
        burst = False  # the round after an idle wait claims every lane at once
        while not self._stopping.is_set():
            sent = claimed = 0
            async for attempt in self._retrying():
                with attempt:
                    if self._stopping.is_set():
                        break
                    try:
                        now = time.monotonic()
                        if self._producer_broken:
                            await self._replace_producer()
                        if self._conn is None or self._conn.is_closed():
                            await self._connect_pg()
                            next_rebalance = 0.0
                        if now >= next_rebalance:
                            await self._rebalance()
                            next_rebalance = now + self.settings.rebalance_interval.total_seconds()
                        if now >= next_lag:
                            await self._refresh_lag()
                            next_lag = now + self.settings.lag_interval.total_seconds()
                        if self._turn == 0:
                            self._wake.clear()  # this round's claims see what was hinted so far
                        if burst and self._turn == 0 and not self._busy():
                            sent, claimed = await self._burst()
                        else:
                            sent, claimed = await self._cycle()
                        burst = False
                    except BaseException as exc:
                        if isinstance(exc, _ProducerFault):
                            self._producer_broken = True
                        elif not isinstance(exc, (KafkaError, _TransientPublishError)):
                            await self._close_pg(release=False)
                        raise
            moved = moved or bool(sent or claimed)
            if claimed or self._turn:
                # Claimed rows go out in the next turn; a round polls every lane before sleeping.
                continue
            if self._busy():
                # Batches in flight: settle them soon (a hint still wakes the relay earlier).
                idle = self.settings.min_poll_interval.total_seconds()
            elif self.settings.listen and self._conn is not None:
                # Nothing claimed or in flight: wait for a hint, polling only every
                # poll_interval for rows of writers that send none.
                moved = False
                with contextlib.suppress(*_IDLE_ERRORS):
                    next_rebalance = await self._wait_for_work(max_idle, next_rebalance)
                burst = True
                continue
            elif moved:
                idle = self.settings.min_poll_interval.total_seconds()
            else:
                idle = min(max_idle, max(idle * 2, self.settings.min_poll_interval.total_seconds()))
            moved = False
            await self._idle(idle)
        if self._busy() and self._conn is not None:
            try:
                await self._drain()
            except Exception as exc:
                log.warning(
                    "relay %s: last batch not settled (%r); it will be re-sent", self.name, exc
                )
        log.info("relay %s: run loop stopped", self.name)

    async def _replace_producer(self) -> None:
        """Swap a producer whose idempotence state broke for a new one (new producer id).

        What was claimed or in flight is forgotten: those rows are still in the table and the
        next claims send them again in id order (duplicates carry the same message id).
        """
        _forget(self._lanes)
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), self.settings.shutdown_timeout.total_seconds())
        self._producer = await started(self._producer_factory(self.settings))
        self._producer_broken = False
        log.warning("relay %s: Kafka producer replaced after a producer state error", self.name)

    def _busy(self) -> bool:
        return any(lane.claimed or lane.inflight is not None for lane in self._lanes)

    async def _cycle(self) -> tuple[int, int]:
        """One lane's turn: the rows the previous lane claimed go to the producer while, in the
        background, this lane's batch in flight is settled, deleted, and its next batch claimed.
        (Sending first means a claimed row never waits for another lane's acknowledgements.)

        Returns (rows sent, rows claimed). Each lane's batches are strictly sequential (claimed
        only after the previous one is settled and deleted) and a key always maps to the same
        shard and so the same lane: per-key order needs nothing more. A key that failed in the
        settled batch is dead-lettered (the claim skips keys with a dead letter) or, for a
        transient failure, re-sent after the backoff from its failed row on.
        """
        shards = self._shards
        assert shards is not None
        index, self._turn = self._turn, (self._turn + 1) % _LANES
        lane, other = self._lanes[index], self._lanes[index - 1]
        inflight, lane.inflight = lane.inflight, None
        background = asyncio.ensure_future(self._settle_and_claim(inflight, lane.shards))
        rows, other.claimed = other.claimed, []
        try:
            await asyncio.sleep(0)  # lets the background start before the CPU-bound send
            if rows:
                self.metrics.batch_size.observe(len(rows))
                other.inflight = await self._send(rows, shards.owned)
            lane.claimed = await background
        except BaseException:
            if not background.done():
                background.cancel()
            await asyncio.wait([background])
            if not background.cancelled():
                background.exception()  # retrieved: the error that matters is being raised
            raise
        return len(rows), len(lane.claimed)

    async def _burst(self) -> tuple[int, int]:
        """The first turn after an idle wait, when nothing is claimed or in flight: claim the
        rows of every lane in one query and send them at once (a lane-by-lane round takes up
        to three claims before it reaches the row's lane).

        A burst that is not a full batch is settled and deleted right away (one claim and one
        delete per pick-up at low load) and returns no claimed rows, so the loop goes back to
        its idle wait, or bursts again at once if a hint came meanwhile. A full batch means a
        backlog: each lane's part becomes its batch in flight and the lanes take turns as
        usual. Either way a key's rows are claimed again only after they were deleted, as in
        :meth:`_cycle`, so per-key order holds.
        """
        shards = self._shards
        assert shards is not None and self._conn is not None
        owned = sorted(shards.owned)
        if not owned:
            return 0, 0
        batch = self.settings.batch_size
        rows = await self._claim(owned)
        if not rows:
            return 0, 0
        if len(rows) < batch:
            self.metrics.batch_size.observe(len(rows))
            await self._commit(await self._settle(await self._send(rows, shards.owned)))
            return len(rows), 0
        parts: dict[int, list[asyncpg.Record]] = {}
        for row in rows:
            parts.setdefault(row["shard"] % _LANES, []).append(row)
        for index, part in parts.items():
            self.metrics.batch_size.observe(len(part))
            self._lanes[index].inflight = await self._send(part, shards.owned)
        return len(rows), len(rows)

    async def _settle_and_claim(
        self, inflight: _Inflight | None, shards: list[int]
    ) -> list[asyncpg.Record]:
        if inflight is not None:
            await self._commit(await self._settle(inflight))
        if not shards:
            return []
        return await self._claim(shards)

