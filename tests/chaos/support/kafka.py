"""Kafka tools of the scenarios: a tap that copies real messages back (duplicated, out of
order), poison messages for every topic, and a duplicate counter."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from participant_sdk.protocol import (
    HEADER_MESSAGE_ID,
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    ReplyEnvelope,
    command_topic,
    encode,
    envelope_headers,
    header_value,
    reply_topic,
)
from tests.chaos.support.audit import Poison
from tests.chaos.support.stack import PARTITIONS, SERVICES

#: An action each example participant handles, for forged commands.
_ACTIONS = {
    "payments": ("charge", Phase.CANCEL, {"customer": "ghost", "amount": 1}),
    "inventory": ("reserve", Phase.CANCEL, {"sku": "GHOST", "quantity": 1}),
    "shipping": ("ship", Phase.COMPENSATE, {"address": "ghost"}),
}


async def _assigned_consumer(bootstrap: str, topics: list[str]) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    consumer.assign(parts)
    await consumer.seek_to_beginning(*parts)
    return consumer


async def count_duplicates(bootstrap: str, topics: list[str], seconds: float = 5.0) -> int:
    """How many messages on ``topics`` repeat an earlier message id (re-sent copies)."""
    consumer = await _assigned_consumer(bootstrap, topics)
    ids: Counter[str] = Counter()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                break
            for records in batch.values():
                for r in records:
                    ids[header_value(r.headers, HEADER_MESSAGE_ID) or "?"] += 1
    finally:
        await consumer.stop()
    return sum(n - 1 for n in ids.values() if n > 1)


@dataclass
class Replayer:
    """Reads every real message of the stack's topics and produces copies of some of them:
    right away (a duplicate), or held back and sent later in reverse order (out of order)."""

    bootstrap: str
    topics: list[str]
    seed: int
    duplicate_share: float = 0.3
    holdback_share: float = 0.2
    duplicates: int = 0
    reordered: int = 0
    _held: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = field(
        default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        rng = random.Random(self.seed)
        consumer = await _assigned_consumer(self.bootstrap, self.topics)
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        seen: set[str] = set()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        mid = header_value(r.headers, HEADER_MESSAGE_ID)
                        if mid is None or mid in seen:
                            continue  # forged or already a copy
                        seen.add(mid)
                        copy = (r.topic, r.key, r.value, list(r.headers))
                        roll = rng.random()
                        if roll < self.duplicate_share:
                            await producer.send_and_wait(copy[0], copy[2], key=copy[1],
                                                         headers=copy[3])
                            self.duplicates += 1
                        elif roll < self.duplicate_share + self.holdback_share:
                            self._held.append(copy)
                if len(self._held) >= 8 or (self._stop.is_set() and self._held):
                    await self._flush(producer)
            await self._flush(producer)
        finally:
            await producer.stop()
            await consumer.stop()

    async def _flush(self, producer: AIOKafkaProducer) -> None:
        held, self._held = self._held[::-1], []
        for topic, key, value, headers in held:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
            self.reordered += 1


def _wrong_schema() -> bytes:
    return json.dumps({"hello": "world", "saga_id": 42, "phase": ["try"]}).encode()


def poison_messages(prefix: str, known_saga: uuid.UUID) -> tuple[
    list[tuple[str, bytes | None, bytes | None]], list[Poison], set[uuid.UUID], set[uuid.UUID]
]:
    """(topic, key, value) to produce, the dead letters they must become, the forged saga ids,
    and those of them used in forged commands (their replies must be coordinator dead letters).
    """
    out: list[tuple[str, bytes | None, bytes | None]] = []
    expected: list[Poison] = []
    forged: set[uuid.UUID] = set()
    commanded: set[uuid.UUID] = set()

    def add(role: str, topic: str, value: bytes | None, label: str, dead: bool = True) -> None:
        key = str(uuid.uuid4()).encode()
        out.append((topic, key, value))
        if dead:
            expected.append(Poison(role, topic, value if value is not None else b"", label))

    for service in SERVICES:
        topic = command_topic(service, prefix)
        add(service, topic, b"\x00\xff garbage \xfe" * 7, "garbage")
        add(service, topic, _wrong_schema(), "wrong-schema")
        add(service, topic, None, "tombstone")
        add(service, topic, b'{"protocol": 99, "truncated', "truncated-json")
        action, phase, payload = _ACTIONS[service]
        unknown = uuid.uuid4()
        forged.add(unknown)
        commanded.add(unknown)
        command = CommandEnvelope(
            message_id=uuid.uuid4(), saga_id=unknown, saga_type="order", step="nope",
            phase=phase, attempt=1, participant=service, action=action, payload=payload,
            reply_to=reply_topic(prefix))
        # A well-formed command for a saga nobody started: the participant cannot know; its
        # reply must end as a dead letter at the coordinator.
        add(service, topic, encode(command), "unknown-saga-command", dead=False)
    replies = reply_topic(prefix)
    add("coordinator", replies, b"\x89PNG\r\n\x1a\n not json", "garbage")
    add("coordinator", replies, _wrong_schema(), "wrong-schema")
    add("coordinator", replies, None, "tombstone")
    add("coordinator", replies, b"x" * 300_000, "oversized-garbage")
    unknown = uuid.uuid4()
    forged.add(unknown)
    add("coordinator", replies, encode(_reply(unknown, "reserve_funds")), "unknown-saga-reply")
    future = json.loads(encode(_reply(known_saga, "reserve_funds")))
    future["protocol"] = 99
    add("coordinator", replies, json.dumps(future).encode(), "future-protocol")
    # Well-formed replies for a real saga that match nothing it sent: ignored by the core
    # (kept in its history as ignored events), never applied, never a crash.
    add("coordinator", replies, encode(_reply(known_saga, "no_such_step")), "unknown-step",
        dead=False)
    add("coordinator", replies, encode(_reply(known_saga, "reserve_funds", attempt=77)),
        "stale-attempt", dead=False)
    return out, expected, forged, commanded


def _reply(saga_id: uuid.UUID, step: str, attempt: int = 1) -> ReplyEnvelope:
    return ReplyEnvelope(
        message_id=uuid.uuid4(), in_reply_to=uuid.uuid4(), saga_id=saga_id, step=step,
        phase=Phase.TRY, attempt=attempt, participant="payments", outcome=Outcome.FAILED,
        error=ErrorInfo(kind=ErrorKind.UNEXPECTED, message="forged"),
    )


async def produce(bootstrap: str, messages: list[tuple[str, bytes | None, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                max_request_size=2_000_000)
    await producer.start()
    try:
        for topic, key, value in messages:
            headers = [] if value is None or not value.startswith(b"{") else _headers(value)
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


def _headers(value: bytes) -> list[tuple[str, bytes]]:
    try:
        return envelope_headers(ReplyEnvelope.model_validate_json(value))
    except ValueError:
        try:
            return envelope_headers(CommandEnvelope.model_validate_json(value))
        except ValueError:
            return []
