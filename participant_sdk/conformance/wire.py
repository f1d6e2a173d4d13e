"""The kit's Kafka side: send commands to a participant, collect its replies.

Replies go to a private topic created for the run (``{prefix}.conformance-<id>.replies``,
named in every command's ``reply_to``) and deleted afterwards, so a coordinator sharing the
cluster never sees them and the kit never sees the coordinator's traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from participant_sdk.protocol import (
    HEADER_MESSAGE_KIND,
    KIND_COMMAND,
    CommandEnvelope,
    ProtocolError,
    ReplyEnvelope,
    command_topic,
    decode_reply,
    encode,
    envelope_headers,
)

__all__ = ["KitWire", "Received"]


@dataclass(frozen=True, slots=True)
class Received:
    """One record from the private reply topic, decoded if it could be."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    reply: ReplyEnvelope | None
    #: Why ``value`` is not a reply (None when it is one).
    undecodable: str | None

    def header_values(self, name: str) -> list[str]:
        return [bytes(v).decode("utf-8", "replace") for k, v in self.headers
                if k == name and v is not None]


class KitWire:
    """Producer to the participant's command topic, consumer of the private reply topic."""

    def __init__(
        self, bootstrap: str, prefix: str, participant: str, reply_topic: str | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.command_topic = command_topic(participant, prefix)
        #: A topic given by the caller exists already and is kept; else one is made for the run.
        self._own_topic = reply_topic is None
        self.reply_topic = reply_topic or f"{prefix}.conformance-{uuid.uuid4().hex[:12]}.replies"
        self.received: list[Received] = []
        self._arrived = asyncio.Condition()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        if self._own_topic:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics(
                    [NewTopic(self.reply_topic, num_partitions=1, replication_factor=1)])
            finally:
                await admin.close()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True)
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False,
            auto_offset_reset="earliest")
        await self._consumer.start()
        parts = [TopicPartition(self.reply_topic, p)
                 for p in sorted(await self._producer.partitions_for(self.reply_topic))]
        self._consumer.assign(parts)
        # A given topic may hold older traffic: only what arrives from now on is ours.
        await (self._consumer.seek_to_beginning(*parts) if self._own_topic
               else self._consumer.seek_to_end(*parts))
        self._reader = asyncio.create_task(self._read(), name="conformance-replies")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await self._producer.stop()
        if not self._own_topic:
            return
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        with contextlib.suppress(Exception):  # best effort: a leftover topic harms nothing
            await admin.start()
            await admin.delete_topics([self.reply_topic])
        with contextlib.suppress(Exception):
            await admin.close()

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            if not batch:
                continue
            for records in batch.values():
                for r in records:
                    reply, why = None, None
                    try:
                        if r.value is None:
                            raise ProtocolError("record has no value")
                        reply = decode_reply(r.value)
                    except ProtocolError as exc:
                        why = str(exc)
                    self.received.append(Received(
                        r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers or ()),
                        reply, why))
            async with self._arrived:
                self._arrived.notify_all()

    async def send(
        self, command: CommandEnvelope, *, extra_headers: list[tuple[str, bytes]] | None = None,
        body: bytes | None = None,
    ) -> None:
        """Publish ``command`` as the relay would (or ``body`` instead, keyed by its saga)."""
        assert self._producer is not None
        headers = envelope_headers(command) if body is None else [
            (HEADER_MESSAGE_KIND, KIND_COMMAND.encode())]
        await self._producer.send_and_wait(
            self.command_topic, encode(command) if body is None else body,
            key=str(command.saga_id).encode(), headers=headers + (extra_headers or []))

    def replies_to(self, message_id: uuid.UUID) -> list[Received]:
        return [r for r in self.received
                if r.reply is not None and r.reply.in_reply_to == message_id]

    def for_saga(self, saga_id: uuid.UUID) -> list[Received]:
        """Every record keyed by ``saga_id`` or decoding to it (replies and garbage alike)."""
        key = str(saga_id).encode()
        return [r for r in self.received
                if r.key == key or (r.reply is not None and r.reply.saga_id == saga_id)]

    async def reply(self, message_id: uuid.UUID, within: float, *, seen: int = 0) -> Received:
        """The first reply to ``message_id`` after the ``seen`` ones already received.

        Raises TimeoutError after ``within`` seconds.
        """
        deadline = time.monotonic() + within
        async with self._arrived:
            while len(found := self.replies_to(message_id)) <= seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply to {message_id} within {within:g}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), left)
        return found[seen]
