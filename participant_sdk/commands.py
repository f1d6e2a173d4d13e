"""One command record in, one reply out: what the Kafka loop and the function entry point share.

:class:`CommandProcessor` decodes a record, runs its handler behind the barrier in one local
transaction (:func:`~participant_sdk.executor.execute`), keeps an undecodable or unanswerable
record as a dead letter, and returns the reply to publish. Publishing is left to the caller:
the loop sends at once, a function batch sends all its replies together.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from participant_sdk.barrier import PgBarrierStore
from participant_sdk.dead_letters import DeadLetter, record_dead_letter
from participant_sdk.executor import CommandTransaction, LocalRetry, execute
from participant_sdk.handlers import Handler
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.protocol import (
    CommandEnvelope,
    ProtocolError,
    decode_command,
    encode,
    envelope_headers,
)
from participant_sdk.records import KafkaRecord
from participant_sdk.tracing import consumer_span, inject_headers, record_reply

__all__ = ["CommandProcessor", "OutgoingReply", "PgCommandTransaction"]

log = logging.getLogger(__name__)


#: How the loop insists on a write (retrying until it lands); a function just raises instead.
Persist = Callable[[Callable[[], Awaitable[None]], str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OutgoingReply:
    """A reply ready for the producer: topic, key (the saga id), encoded value, headers."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class PgCommandTransaction:
    """A :class:`~participant_sdk.executor.CommandTransaction` on an asyncpg connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._barrier = PgBarrierStore(conn)

    @property
    def conn(self) -> Any:
        return self._conn

    @property
    def barrier(self) -> PgBarrierStore:
        return self._barrier


class CommandProcessor:
    """Answers command records for one participant on a connection pool."""

    def __init__(
        self,
        name: str,
        handlers: dict[tuple[str, Any], Handler],
        pool: Any,
        *,
        retry: LocalRetry,
        group_id: str,
        metrics: ParticipantMetrics | None = None,
        after_commit: Callable[[CommandEnvelope], Awaitable[None] | None] | None = None,
        persist: Persist | None = None,
    ) -> None:
        self.name = name
        self._persist = persist
        self.handlers = handlers
        self.pool = pool
        self.retry = retry
        self.group_id = group_id
        self.metrics = metrics
        self.after_commit = after_commit

    async def process(self, record: KafkaRecord, command: CommandEnvelope | None = None, *,
                      via: str = "kafka") -> OutgoingReply | None:
        """The reply to publish for ``record`` (``command``: the record already decoded, by
        the loop choosing its lane; ``via``: how it came, for its span), or None when it
        became a dead letter.

        Raises only for database trouble (nothing was committed then, or the barrier makes a
        redelivery answer the same).
        """
        try:
            if record.value is None:
                raise ProtocolError("empty message (no value)")
            command = command or decode_command(record.value)
        except ProtocolError as exc:
            log.error("participant %s: dead letter at %s[%d]@%d: %s", self.name, record.topic,
                      record.partition, record.offset, exc)
            await self.dead_letter(record, str(exc))
            return None
        with consumer_span(
            command,
            record.headers,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            group=self.group_id,
            system=via,
        ) as span:
            execution = await execute(
                command,
                participant=self.name,
                handlers=self.handlers,
                begin=self._begin,
                retry=self.retry,
                metrics=self.metrics,
                after_commit=self.after_commit,
            )
            if execution.dead_letter_reason is not None:
                await self.dead_letter(record, execution.dead_letter_reason)
            record_reply(span, execution.reply)
            headers = envelope_headers(execution.reply) + inject_headers()
        reply = execution.reply
        return OutgoingReply(command.reply_to, str(reply.saga_id).encode(), encode(reply), headers)

    async def dead_letter(self, record: KafkaRecord, reason: str) -> None:
        """Keep ``record`` with ``reason`` in the participant's dead-letter table."""
        letter = DeadLetter(
            source=f"participant:{self.name}",
            reason=reason[:8192],
            payload=record.value,
            key=record.key,
            headers=[(k, bytes(v)) for k, v in record.headers or () if v is not None],
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
        )
        async def write() -> None:
            async with self.pool.acquire() as conn:
                await record_dead_letter(conn, letter)

        if self._persist is not None:
            await self._persist(write, f"dead letter {record.topic}@{record.partition}:"
                                       f"{record.offset}")
        else:
            await write()
        if self.metrics is not None:
            self.metrics.dead_letters.labels(self.name).inc()

    @contextlib.asynccontextmanager
    async def _begin(self) -> AsyncIterator[CommandTransaction]:
        async with self.pool.acquire() as conn, conn.transaction():
            yield PgCommandTransaction(conn)
