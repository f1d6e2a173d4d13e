"""A scripted participant for the worker tests: consumes commands, replies per script.

(Named ``test_worker_*`` to sit inside the worker's test files; it holds no tests itself.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from participant_sdk.protocol import (
    CommandEnvelope,
    Outcome,
    ReplyEnvelope,
    decode_command,
    encode,
    envelope_headers,
)
from tests.integration.test_store_support import reply_to

#: Given a command, the replies to send (none: the reply is lost; bytes: sent as they are).
Script = Callable[[CommandEnvelope], list[ReplyEnvelope] | list[ReplyEnvelope | bytes]]


async def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()]
        )
    finally:
        await admin.close()


class ScriptedParticipant:
    """Consumes command topics (no group: assigned partitions) and replies as scripted."""

    def __init__(self, bootstrap: str, topics: list[str], script: Script) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.script = script
        self.received: list[CommandEnvelope] = []
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await self.producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await self._consumer.start()
        parts = [TopicPartition(t, p) for t in self.topics
                 for p in (self._consumer.partitions_for_topic(t) or {0})]
        self._consumer.assign(parts)
        await self._consumer.seek_to_beginning(*parts)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    command = decode_command(record.value)
                    self.received.append(command)
                    for reply in self.script(command):
                        await self.send(reply, command.reply_to)

    async def send(self, reply: ReplyEnvelope | bytes, topic: str) -> None:
        assert self.producer is not None
        if isinstance(reply, bytes):  # a deliberately malformed body, keyed like a reply
            key = str(json.loads(reply)["saga_id"]).encode()
            await self.producer.send_and_wait(topic, reply, key=key)
            return
        await self.producer.send_and_wait(
            topic,
            encode(reply), key=str(reply.saga_id).encode(), headers=envelope_headers(reply),
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()
        if self.producer is not None:
            await self.producer.stop()


def ok(command: CommandEnvelope) -> list[ReplyEnvelope]:
    return [reply_to(command, Outcome.OK)]


def by_order(command: CommandEnvelope) -> Any:
    return str(command.payload.get("order_id", ""))
