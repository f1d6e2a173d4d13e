"""A participant as a function: a batch of command records in, the replies published, a report out.

:class:`CommandBatchHandler` answers each record with the loop's own
:class:`~participant_sdk.commands.CommandProcessor` (the barrier unchanged), keeping the commands
of one saga (one key) in order and running different sagas side by side. The replies are sent
with the idempotent producer and awaited, so once :meth:`~CommandBatchHandler.handle` returns,
every record not listed in ``failed`` is finished and its offset may be committed.

A record that cannot be finished now (its database or Kafka is unreachable) is reported in
``failed`` together with the later records of the same key, which were not run: the trigger
redelivers them and the barrier answers a command that did commit with the same reply again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from participant_sdk.barrier import install_barrier
from participant_sdk.commands import CommandProcessor, OutgoingReply
from participant_sdk.dead_letters import install_dead_letters
from participant_sdk.executor import LocalRetry
from participant_sdk.handlers import Participant
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.partitioning import KeyHashPartitioner
from participant_sdk.pools import create_pool
from participant_sdk.records import KafkaRecord
from participant_sdk.settings import ParticipantSettings
from participant_sdk.startup import started

__all__ = ["CommandBatchHandler", "CommandBatchResult"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommandBatchResult:
    """What became of a batch: replies published, records kept as dead letters, and the
    indexes (into the batch) of records to redeliver."""

    replies: list[OutgoingReply] = field(default_factory=list)
    dead_lettered: int = 0
    failed: list[int] = field(default_factory=list)


class CommandBatchHandler:
    """One participant's command entry point for a function runtime.

    Build it once per instance (module level), then ``await handler.handle(records)`` per
    invocation: the pool (``settings.pool_size`` connections at most) and the producer are
    opened on first use and reused while the instance stays warm. ``publish=False`` returns
    the replies without sending them, for a runtime that publishes them itself.
    """

    def __init__(
        self,
        participant: Participant,
        settings: ParticipantSettings,
        *,
        metrics: ParticipantMetrics | None = None,
        publish: bool = True,
    ) -> None:
        self.participant = participant
        self.settings = settings
        self.metrics = metrics
        self.publish = publish
        self.handlers = participant.validate()
        self._pool: Any = None
        self._producer: AIOKafkaProducer | None = None
        self._processor: CommandProcessor | None = None
        self._lock = asyncio.Lock()

    async def handle(self, records: Sequence[KafkaRecord]) -> CommandBatchResult:
        """Answer ``records`` (per key in order), publish the replies, report."""
        processor = await self._ready()
        by_key: dict[bytes | None, list[int]] = {}
        for index, record in enumerate(records):
            by_key.setdefault(record.key, []).append(index)
        replies: dict[int, OutgoingReply] = {}
        failed: set[int] = set()
        dead = 0
        slots = asyncio.Semaphore(max(1, self.settings.pool_size))

        async def run_key(indexes: list[int]) -> None:
            nonlocal dead
            for n, index in enumerate(indexes):
                try:
                    async with slots:
                        reply = await processor.process(records[index])
                except Exception as exc:
                    log.warning("participant %s: command %s@%d failed (%r); redeliver",
                                self.participant.name, records[index].topic,
                                records[index].offset, exc)
                    failed.update(indexes[n:])  # later commands of this saga wait for it
                    return
                if reply is None:
                    dead += 1
                else:
                    replies[index] = reply

        await asyncio.gather(*(run_key(ix) for ix in by_key.values()))
        if self.publish and replies:
            failed.update(await self._send(replies, by_key))
        published = [replies[i] for i in sorted(replies) if i not in failed]
        return CommandBatchResult(replies=published, dead_lettered=dead, failed=sorted(failed))

    async def close(self) -> None:
        """Stop the producer and close the pool (idempotent)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()
        pool, self._pool, self._processor = self._pool, None, None
        if pool is not None:
            await pool.close()

    async def _send(
        self, replies: dict[int, OutgoingReply], by_key: dict[bytes | None, list[int]]
    ) -> set[int]:
        """Send every reply and wait for the acknowledgements; return the records whose reply
        was not acknowledged, with the later records of their key."""
        assert self._producer is not None
        futures: dict[int, asyncio.Future[Any]] = {}
        for index in sorted(replies):
            reply = replies[index]
            try:
                futures[index] = await self._producer.send(
                    reply.topic, reply.value, key=reply.key, headers=reply.headers)
            except Exception as exc:
                broken: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                broken.set_exception(exc)
                futures[index] = broken
        await asyncio.gather(*futures.values(), return_exceptions=True)
        unsent = {i for i, f in futures.items() if f.exception() is not None}
        for index in unsent:
            log.warning("participant %s: reply for record %d not acknowledged: %r",
                        self.participant.name, index, futures[index].exception())
        failed: set[int] = set()
        for indexes in by_key.values():
            for n, index in enumerate(indexes):
                if index in unsent:
                    failed.update(indexes[n:])
                    break
        return failed

    async def _ready(self) -> CommandProcessor:
        async with self._lock:
            s = self.settings
            if self._pool is None:
                self._pool = await create_pool(
                    s.dsn, min_size=0, max_size=s.pool_size,
                    statement_cache_size=s.statement_cache_size)
                if s.install_schema:
                    async with self._pool.acquire() as conn:
                        await install_barrier(conn)
                        await install_dead_letters(conn)
            if self.publish and self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=s.kafka_bootstrap,
                    enable_idempotence=True,
                    partitioner=KeyHashPartitioner(),
                    acks="all",
                    client_id=f"sagaflow-participant-{self.participant.name}",
                    **s.kafka_security.client_kwargs(),
                )
                self._producer = await started(producer)
            if self._processor is None:
                self._processor = CommandProcessor(
                    self.participant.name,
                    self.handlers,
                    self._pool,
                    retry=LocalRetry(attempts=s.retry_attempts, initial=s.retry_initial,
                                     maximum=s.retry_max),
                    group_id=s.group_id or self.participant.name,
                    metrics=self.metrics,
                )
            return self._processor
