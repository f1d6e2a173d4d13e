"""Sending a claimed batch to Kafka and sorting its rows by Kafka's answer.

Acked rows are deleted, rows Kafka can never take are dead-lettered (their key stops there),
and rows that met a failure that may pass stay in the table for a retry. The relay loop and
the relay tick (:mod:`outbox_relay.tick`) share this path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)
from opentelemetry import propagate, trace

from outbox_relay.dead_letters import SETTLE
from outbox_relay.errors import InvalidMessageError
from outbox_relay.message import valid_topic
from outbox_relay.metrics import RelayMetrics
from outbox_relay.settings import RelaySettings
from participant_sdk.protocol import HEADER_MESSAGE_ID

#: The relay's log lines keep the logger name they had when the relay was one module.
log = logging.getLogger("outbox_relay.relay")

#: Header naming the shard and ownership epoch that published a message: ``"<shard>.<epoch>"``.
HEADER_RELAY_EPOCH: Final = "sagaflow-relay-epoch"

#: Rows handed to the producer between two yields to the event loop, so that the other lane's
#: Postgres round trips and the producer's sender make progress during a long send.
_YIELD_EVERY: Final = 64


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
    message_id: Any, key: str, shard: int, row_id: int, system: str = "kafka",
) -> list[tuple[str, bytes]]:
    """``headers`` with the trace context of a new PRODUCER span ``send <topic>`` that
    continues the stored one (their ``traceparent``): how a relay or a writer that publishes
    its own rows continues the saga's trace. Call it only when tracing is configured.
    ``system``: ``sagaflow.direct`` for a row handed to the direct lane."""
    carrier = {k: v.decode() for k, v in headers if k in ("traceparent", "tracestate")}
    parent = propagate.extract(carrier)
    with tracer.start_as_current_span(
        f"send {topic}",
        context=parent,
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": system,
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


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class _Publishing:
    """The relay's send, settle and delete of a batch (a base of
    :class:`~outbox_relay.loop.Relay`, which sets the attributes declared here)."""

    settings: RelaySettings
    metrics: RelayMetrics
    _conn: asyncpg.Connection | None
    _producer: AIOKafkaProducer | None
    _tracer: trace.Tracer
    _valid_topics: dict[str, bool]

    @property
    def name(self) -> str:
        return self.settings.relay_id

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
                SETTLE,
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
