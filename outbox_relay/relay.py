"""The relay: claims committed outbox rows of the shards it owns, publishes, then deletes them.

Order and no-skip: every shard has one owner, rows are deleted only after Kafka acknowledged
them, and each claim reads the lowest ids still present in each owned shard. There is no id
cursor, so a transaction that commits late is simply picked up by the next claim. A row whose
``created_at`` lies ahead is leased to the writer that publishes it itself
(:class:`~outbox_relay.direct.DirectPublisher`); it is claimed once that time has passed.

Throughput: the owned shards are split into three lanes (shard modulo 3) that take turns. In
lane i's turn the rows lane i-1 claimed go to the producer while, in the background, lane i's
previous batch is settled and deleted and its next batch claimed. So Postgres work, Python work
and Kafka's acknowledgements overlap, and no claim ever sees rows in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self

import asyncpg
import tenacity
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)
from opentelemetry import propagate, trace
from prometheus_client import CollectorRegistry

from outbox_relay.errors import InvalidMessageError, RelayStateError
from outbox_relay.message import valid_topic
from outbox_relay.metrics import RelayMetrics
from outbox_relay.schema import NOTIFY_CHANNEL, install, installed_shard_count
from outbox_relay.settings import RelaySettings
from outbox_relay.shards import ShardOwnership
from participant_sdk.protocol import HEADER_MESSAGE_ID
from participant_sdk.startup import started

log = logging.getLogger(__name__)

#: Header naming the shard and ownership epoch that published a message: ``"<shard>.<epoch>"``.
HEADER_RELAY_EPOCH: Final = "sagaflow-relay-epoch"

_CLAIM: Final = """
SELECT o.id, o.shard, o.topic, o.key, o.payload, o.message_id, o.headers::text AS headers
FROM unnest($1::smallint[]) AS s(shard)
CROSS JOIN LATERAL (
    SELECT * FROM sagaflow_outbox o
    WHERE o.shard = s.shard
      AND o.created_at <= statement_timestamp()
      AND (NOT (SELECT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter))
           OR NOT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter d WHERE d.key = o.key))
    ORDER BY o.id
    LIMIT $2
) AS o
ORDER BY o.id
LIMIT $3
"""

#: Deletes acked and dead rows in one statement (one round trip, no BEGIN/COMMIT); the dead
#: ones are copied to the dead-letter table first (both read the statement's snapshot).
_SETTLE: Final = """
WITH dead AS (
    INSERT INTO sagaflow_outbox_dead_letter
        (id, shard, topic, key, payload, message_id, headers, created_at, error_class, reason)
    SELECT o.id, o.shard, o.topic, o.key, o.payload, o.message_id, o.headers, o.created_at,
           d.error_class, d.reason
    FROM unnest($3::smallint[], $4::bigint[], $5::text[], $6::text[])
        AS d(shard, id, error_class, reason)
    JOIN sagaflow_outbox o ON o.shard = d.shard AND o.id = d.id
    ON CONFLICT (id) DO UPDATE SET failed_at = clock_timestamp(),
        error_class = excluded.error_class, reason = excluded.reason
)
DELETE FROM sagaflow_outbox o
USING unnest($1::smallint[] || $3::smallint[], $2::bigint[] || $4::bigint[]) AS d(shard, id)
WHERE o.shard = d.shard AND o.id = d.id
"""

#: Rows handed to the producer between two yields to the event loop, so that the other lane's
#: Postgres round trips and the producer's sender make progress during a long send.
_YIELD_EVERY: Final = 64

_LAG: Final = """
SELECT count(*), extract(epoch FROM clock_timestamp() - min(created_at))::float8
FROM sagaflow_outbox WHERE shard = ANY($1::smallint[])
"""


#: A failed rebalance during an idle wait just ends the wait: the next round's own rebalance
#: runs under the retry policy (and reconnects when the connection is gone).
_IDLE_ERRORS: Final = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class _TransientPublishError(Exception):
    """Some rows of a batch were not acknowledged for a reason that may pass."""


class _ProducerFault(_TransientPublishError):
    """The producer's idempotence state broke: replace the producer, then re-send."""


#: Errors about the producer's sequence/epoch state, not about a row. Dead-lettering the row
#: would stop a healthy key, so the producer is replaced (new producer id) and the rows re-sent.
_PRODUCER_FAULTS: Final = (
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
    InvalidProducerEpoch,
)

ProducerFactory = Callable[[RelaySettings], AIOKafkaProducer]


def producer_config(settings: RelaySettings) -> dict[str, Any]:
    """The relay's aiokafka producer arguments: idempotent, ``acks=all``."""
    return {
        "bootstrap_servers": settings.kafka_bootstrap,
        "enable_idempotence": True,
        "acks": "all",
        "linger_ms": settings.linger_ms,
        "max_batch_size": settings.producer_batch_bytes,
        "max_request_size": settings.max_request_size,
        "client_id": settings.relay_id,
        **settings.kafka_security.client_kwargs(),
    }


def traced_headers(
    tracer: trace.Tracer, topic: str, headers: list[tuple[str, bytes]], *,
    message_id: Any, key: str, shard: int, row_id: int,
) -> list[tuple[str, bytes]]:
    """``headers`` with the trace context of a new PRODUCER span ``send <topic>`` that
    continues the stored one (their ``traceparent``): how a relay or a writer that publishes
    its own rows continues the saga's trace. Call it only when tracing is configured."""
    carrier = {k: v.decode() for k, v in headers if k in ("traceparent", "tracestate")}
    parent = propagate.extract(carrier)
    with tracer.start_as_current_span(
        f"send {topic}",
        context=parent,
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.message.id": str(message_id),
            "messaging.kafka.message.key": key,
            "sagaflow.outbox.id": row_id,
            "sagaflow.outbox.shard": shard,
        },
    ):
        fresh: dict[str, str] = {}
        propagate.inject(fresh)
    kept = [(k, v) for k, v in headers if k not in fresh]
    return kept + [(k, v.encode()) for k, v in fresh.items()]


def _new_producer(settings: RelaySettings) -> AIOKafkaProducer:
    return AIOKafkaProducer(**producer_config(settings))


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _PRODUCER_FAULTS):
        return True
    if isinstance(exc, KafkaError):
        return bool(exc.retriable) or isinstance(exc, _KAFKA_CONNECTION_ERRORS)
    return isinstance(
        exc,
        (
            _TransientPublishError,
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.InterfaceError,
            # A connection left mid-operation by a server that died while answering; the
            # loop closes it and connects again.
            asyncpg.InternalClientError,
            # A multi-host DSN whose servers all answer but none takes writes yet (failover).
            asyncpg.exceptions.TargetServerAttributeNotMatched,
            asyncpg.exceptions.OperatorInterventionError,
            asyncpg.exceptions.SerializationError,
            asyncpg.exceptions.DeadlockDetectedError,
            asyncpg.exceptions.InsufficientResourcesError,
        ),
    )


def _kafka_connection_errors() -> tuple[type[BaseException], ...]:
    from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

    return (KafkaConnectionError, NodeNotReadyError)


_KAFKA_CONNECTION_ERRORS: Final = _kafka_connection_errors()


@dataclass(slots=True)
class _BatchOutcome:
    """What became of a batch: rows to delete (acked or dead-lettered) and rows kept."""

    acked_shards: list[int] = field(default_factory=list)
    acked_ids: list[int] = field(default_factory=list)
    dead_shards: list[int] = field(default_factory=list)
    dead_ids: list[int] = field(default_factory=list)
    dead_classes: list[str] = field(default_factory=list)
    dead_reasons: list[str] = field(default_factory=list)
    transient: BaseException | None = None
    #: The transient failure was the producer's state (see ``_PRODUCER_FAULTS``).
    producer_fault: bool = False
    #: Keys with a row that failed; their later rows stay in the table for a later batch.
    stopped: set[str] = field(default_factory=set)

    def acked(self, row: asyncpg.Record) -> None:
        self.acked_shards.append(row["shard"])
        self.acked_ids.append(row["id"])

    def failed(self, row: asyncpg.Record, exc: BaseException) -> None:
        """A row Kafka did not take: kept for a retry if ``exc`` may pass, else dead-lettered."""
        self.stopped.add(row["key"])
        if _is_transient(exc):
            self.transient = exc
            self.producer_fault = self.producer_fault or isinstance(exc, _PRODUCER_FAULTS)
        else:
            self.dead(row, exc)

    def dead(self, row: asyncpg.Record, exc: BaseException) -> None:
        self.dead_shards.append(row["shard"])
        self.dead_ids.append(row["id"])
        self.dead_classes.append(type(exc).__name__)
        self.dead_reasons.append(str(exc) or type(exc).__name__)


@dataclass(slots=True)
class _Inflight:
    """A batch handed to the producer whose acknowledgements are pending."""

    started: float
    pending: list[tuple[asyncpg.Record, asyncio.Future[Any]]] = field(default_factory=list)
    outcome: _BatchOutcome = field(default_factory=_BatchOutcome)


@dataclass(slots=True)
class _Lane:
    """The owned shards with one remainder modulo ``_LANES``.

    Lanes take turns: in lane i's turn the rows lane i-1 claimed in the previous turn go to the
    producer while lane i's batch in flight is settled and deleted and its next batch claimed.
    A lane claims only after its previous batch was settled and deleted, so a claim never sees
    rows in flight; a batch is settled two turns after it was sent, so its acknowledgements
    have normally arrived.
    """

    shards: list[int] = field(default_factory=list)
    claimed: list[asyncpg.Record] = field(default_factory=list)
    inflight: _Inflight | None = None


#: Number of lanes: claim, send and acknowledgement of three batches overlap.
_LANES: Final = 3


def _new_lanes() -> tuple[_Lane, ...]:
    return tuple(_Lane() for _ in range(_LANES))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _forget(lanes: Sequence[_Lane]) -> None:
    """Drop what lanes claimed or have in flight (the rows stay in the table). Their futures'
    errors are retrieved when they finish, so asyncio does not log them as lost."""
    for lane in lanes:
        if lane.inflight is not None:
            for _, fut in lane.inflight.pending:
                fut.add_done_callback(_retrieve)
        lane.claimed, lane.inflight = [], None


class Relay:
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
        producer = self._producer_factory(self.settings)
        async for attempt in self._retrying():
            with attempt:
                await producer.start()
        self._producer = producer
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

    @property
    def name(self) -> str:
        return self.settings.relay_id

    @property
    def owned_shards(self) -> dict[int, int]:
        """Shards owned now, mapped to the ownership epoch."""
        return dict(self._shards.owned) if self._shards is not None else {}

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

    async def _connect_pg(self) -> None:
        conn = await asyncpg.connect(
            self.settings.postgres_dsn,
            statement_cache_size=self.settings.statement_cache_size,
            server_settings={"application_name": f"sagaflow-relay:{self.name}"},
        )
        try:
            if self.settings.install_schema:
                await install(conn, shard_count=self.settings.shard_count)
            shard_count = await installed_shard_count(conn)
            if shard_count != self.settings.shard_count:
                log.warning(
                    "relay %s: outbox installed with %d shards, settings say %d; using %d",
                    self.name,
                    shard_count,
                    self.settings.shard_count,
                    shard_count,
                )
            shards = ShardOwnership(conn, shard_count, self.name)
            await shards.join()
            if self.settings.listen:
                await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        self._shards = shards
        self._set_owned_gauges()

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

    def _on_notify(self, *_args: Any) -> None:
        self._wake.set()

    async def _close_pg(self, *, release: bool) -> None:
        """Let the connection go: with ``release``, the shards first and a clean close (a
        stop); without, after an error, at once (it may be mid-operation, waiting on a server
        that is gone; Postgres frees the session's shard locks when it sees it go)."""
        conn, self._conn = self._conn, None
        shards, self._shards = self._shards, None
        # Rows claimed or in flight stay in the table; a later owner (re-)sends them.
        _forget(self._lanes)
        self._lanes = _new_lanes()
        if shards is not None:
            for shard in shards.owned:
                self.metrics.shard_owned.labels(str(shard)).set(0)
        self.metrics.owned_shards.set(0)
        if conn is None or conn.is_closed():
            return
        if not release:
            conn.terminate()
            return
        if shards is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(shards.release_all(), 5)
        try:
            await asyncio.wait_for(conn.close(), 5)
        except Exception:
            conn.terminate()

    async def _rebalance(self) -> None:
        assert self._shards is not None
        # Shards are released only once nothing of theirs is claimed or in flight.
        acquired, released = await self._shards.rebalance(before_release=self._drain)
        if acquired or released:
            for lane in self._lanes:
                lane.shards.clear()
            for shard in sorted(self._shards.owned):
                self._lanes[shard % _LANES].shards.append(shard)
        for shard in released:
            self.metrics.shard_owned.labels(str(shard)).set(0)
        self.metrics.live_relays.set(self._shards.live_relays)
        self._set_owned_gauges()
        if acquired:
            self._wake.set()

    def _set_owned_gauges(self) -> None:
        owned = self._shards.owned if self._shards is not None else {}
        self.metrics.owned_shards.set(len(owned))
        for shard in owned:
            self.metrics.shard_owned.labels(str(shard)).set(1)

    async def _refresh_lag(self) -> None:
        assert self._conn is not None and self._shards is not None
        owned = sorted(self._shards.owned)
        count, age = await self._conn.fetchrow(_LAG, owned)
        self.metrics.outbox_backlog.set(count or 0)
        self.metrics.outbox_lag.set(max(age or 0.0, 0.0))
        dead = await self._conn.fetchval("SELECT count(*) FROM sagaflow_outbox_dead_letter")
        self.metrics.dead_letters.set(dead or 0)

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
        per_shard = min(batch, max(64, 2 * -(-batch // len(owned))))
        rows = list(await self._conn.fetch(_CLAIM, owned, per_shard, batch))
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
        assert self._conn is not None
        batch = self.settings.batch_size
        per_shard = min(batch, max(64, 2 * -(-batch // len(shards))))
        return list(await self._conn.fetch(_CLAIM, shards, per_shard, batch))

    async def _drain(self) -> None:
        """Settle and commit every batch in flight; forget claimed rows (they stay in the table)."""
        for lane in self._lanes:
            lane.claimed = []
            inflight, lane.inflight = lane.inflight, None
            if inflight is not None:
                await self._commit(await self._settle(inflight))

    async def publish_claimed(
        self,
        conn: asyncpg.Connection,
        producer: AIOKafkaProducer,
        rows: Sequence[asyncpg.Record],
        owned: dict[int, int],
    ) -> tuple[int, int]:
        """Send rows claimed by someone else (a relay tick), wait for their acknowledgements and
        delete the acked and dead ones on ``conn``: the loop's own send/settle/delete path.

        Returns (rows published, rows dead-lettered); raises like the loop's settle when some
        rows met a transient failure (the acked ones are deleted first).
        """
        outcome = await self._settle(await self._send(rows, owned, producer))
        await self._commit(outcome, conn)
        return len(outcome.acked_ids), len(outcome.dead_ids)

    async def _commit(
        self, outcome: _BatchOutcome, conn: asyncpg.Connection | None = None
    ) -> None:
        conn = conn if conn is not None else self._conn
        assert conn is not None
        if outcome.acked_ids or outcome.dead_ids:
            await conn.execute(
                _SETTLE,
                outcome.acked_shards,
                outcome.acked_ids,
                outcome.dead_shards,
                outcome.dead_ids,
                outcome.dead_classes,
                outcome.dead_reasons,
            )
            self.metrics.rows_published.inc(len(outcome.acked_ids))
            for cls, row_id, reason in zip(
                outcome.dead_classes, outcome.dead_ids, outcome.dead_reasons, strict=True
            ):
                self.metrics.rows_dead_lettered.labels(cls).inc()
                log.error("relay %s: outbox row %d dead-lettered: %s", self.name, row_id, reason)
        if outcome.transient is not None:
            error = _ProducerFault if outcome.producer_fault else _TransientPublishError
            raise error(repr(outcome.transient)) from outcome.transient

    @staticmethod
    def _headers(row: asyncpg.Record, epoch: bytes | None) -> list[tuple[str, bytes]]:
        try:
            # Only a JSON object has .items() and only text has .encode(): no isinstance per value.
            stored = json.loads(row["headers"])
            headers = [(name, value.encode()) for name, value in stored.items()]
        except AttributeError:
            raise InvalidMessageError("stored headers must be a JSON object of texts") from None
        headers.append((HEADER_MESSAGE_ID, str(row["message_id"]).encode()))
        if epoch is not None:
            headers.append((HEADER_RELAY_EPOCH, epoch))
        return headers

    def _traced(
        self, topic: str, headers: list[tuple[str, bytes]], row: asyncpg.Record
    ) -> list[tuple[str, bytes]]:
        """Continue the stored trace with a producer span (only when tracing is configured)."""
        return traced_headers(self._tracer, topic, headers, message_id=row["message_id"],
                              key=row["key"], shard=row["shard"], row_id=row["id"])

    async def _send(
        self,
        rows: Sequence[asyncpg.Record],
        owned: dict[int, int],
        producer: AIOKafkaProducer | None = None,
    ) -> _Inflight:
        """Hand a batch to the producer; stop a key at its first row that cannot be sent."""
        producer = producer if producer is not None else self._producer
        assert producer is not None
        inflight = _Inflight(started=time.perf_counter())
        outcome = inflight.outcome
        tracing = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        epochs = (
            {shard: f"{shard}.{epoch}".encode() for shard, epoch in owned.items()}
            if self.settings.epoch_header
            else {}
        )
        topics_ok = self._valid_topics
        pending = inflight.pending
        for n, row in enumerate(rows, 1):
            if n % _YIELD_EVERY == 0:
                # Let the producer's sender and the other lane's Postgres round trip progress.
                await asyncio.sleep(0)
            key: str = row["key"]
            if key in outcome.stopped:
                continue
            try:
                topic: str = row["topic"]
                ok = topics_ok.get(topic)
                if ok is None:
                    ok = topics_ok[topic] = valid_topic(topic)
                if not ok:
                    raise InvalidMessageError(f"invalid Kafka topic name {topic!r}")
                headers = self._headers(row, epochs.get(row["shard"]))
                if tracing:
                    headers = self._traced(topic, headers, row)
                fut = await producer.send(topic, row["payload"], key=key.encode(), headers=headers)
            except (InvalidMessageError, KafkaError, ValueError, UnicodeError) as exc:
                outcome.failed(row, exc)
                continue
            pending.append((row, fut))
        return inflight

    async def _settle(self, inflight: _Inflight) -> _BatchOutcome:
        """Wait (bounded) for Kafka's acknowledgements and sort rows into acked, dead, kept."""
        outcome = inflight.outcome
        stopped = outcome.stopped
        if inflight.pending:
            # Most acks are in by now: wait only on the rest (a wait per future is not free).
            waiting = [f for _, f in inflight.pending if not f.done()]
            if waiting:
                await asyncio.wait(waiting, timeout=self.settings.publish_timeout.total_seconds())
            self.metrics.publish_latency.observe(time.perf_counter() - inflight.started)
        for row, fut in inflight.pending:
            key = row["key"]
            if key in stopped:
                # An earlier row of this key failed: keep this one so it is re-sent after it.
                fut.add_done_callback(_retrieve)
                continue
            if not fut.done():
                outcome.failed(row, TimeoutError("Kafka did not acknowledge in time"))
                continue
            error = fut.exception()
            if error is None:
                outcome.acked(row)
            else:
                outcome.failed(row, error)
        return outcome
