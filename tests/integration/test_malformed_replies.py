"""Malformed but addressed replies, through Kafka and the worker: the attempt fails at once.

A reply with ``result`` a bare number must not vanish into a dead letter while the step waits
for its 20 s deadline; an over-long ``error.message`` must be truncated and retried, not
refused. Relay, worker, Kafka and Postgres are real; the participant is scripted.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from coordinator.store import SagaStore
from outbox_relay import Relay, RelaySettings
from participant_sdk.dead_letters import list_dead_letters
from participant_sdk.protocol import (
    MAX_ERROR_MESSAGE_LENGTH,
    TRUNCATION_MARK,
    CommandEnvelope,
    ErrorKind,
    Outcome,
    ReplyEnvelope,
    command_topic,
    make_reply,
    reply_topic,
)
from tests.integration.test_store_support import DEADLINE, make_registry, migrated, reply_to
from tests.integration.test_worker_support import ScriptedParticipant, by_order, create_topics

pytestmark = pytest.mark.integration

PARTICIPANTS = ("payments", "inventory")


def raw_reply(command: CommandEnvelope, **changes: Any) -> bytes:
    """The JSON of a correct ok reply to ``command``, with fields overwritten."""
    body = json.loads(make_reply(command, Outcome.OK).model_dump_json())
    body.update(changes)
    return json.dumps(body).encode()


def script(command: CommandEnvelope) -> list[ReplyEnvelope | bytes]:
    """The first try of ``reserve`` gets a malformed reply; everything else is ok."""
    order = by_order(command)
    first_try = command.phase == "try" and command.step == "reserve" and command.attempt == 1
    if order == "bare-number" and first_try:
        return [raw_reply(command, result=42)]
    if order == "long-error" and first_try:
        return [raw_reply(command, outcome="failed", error={
            "kind": "unexpected", "message": "trace line\n" * 3000, "type": "E" * 1000})]
    return [reply_to(command, Outcome.OK)]


@pytest.fixture
async def stack(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[tuple[SagaStore, ScriptedParticipant]]:
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {
        reply_topic(topic_prefix): 2, **{command_topic(p, topic_prefix): 1 for p in PARTICIPANTS},
    })
    registry = make_registry(topic_prefix)
    settings = CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
        group_id=f"{topic_prefix}-coordinator", timer_max_idle=timedelta(milliseconds=300),
        pool_max_size=3, shutdown_grace=timedelta(seconds=5),
    )
    relay = Relay(RelaySettings(postgres_dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                poll_interval=timedelta(milliseconds=30), shard_count=2))
    participant = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in PARTICIPANTS], script)
    store = await SagaStore.open(fresh_db, registry, max_size=2)
    worker = Worker(settings, registry, name="w1")
    await relay.start()
    await participant.start()
    await worker.start()
    try:
        yield store, participant
    finally:
        await worker.stop()
        await participant.stop()
        await relay.stop()
        await store.close()


async def wait_status(store: SagaStore, saga_id: uuid.UUID, within: float) -> Any:
    deadline = time.monotonic() + within
    while True:
        record = await store.get_saga(saga_id)
        if record is not None and record.status not in ("running", "compensating"):
            return record
        assert time.monotonic() < deadline, record.status if record else None
        await asyncio.sleep(0.1)


async def test_addressed_malformed_replies_fail_the_attempt_at_once(
    stack: tuple[SagaStore, ScriptedParticipant],
) -> None:
    store, participant = stack
    bare = (await store.start_saga("tcc_order", {"order_id": "bare-number", "amount": 5}))
    long = (await store.start_saga("tcc_order", {"order_id": "long-error", "amount": 5}))
    started = time.monotonic()
    # Well within the step deadline: the malformed reply ended the try, no deadline wait.
    within = DEADLINE.total_seconds() / 2
    bare_done = await wait_status(store, bare.record.saga_id, within)
    long_done = await wait_status(store, long.record.saga_id, within)
    assert time.monotonic() - started < within

    # `result: 42` failed the try for good, with the reason on the saga; the try was cancelled.
    assert bare_done.status == "compensated"
    error = bare_done.state.steps["reserve"].last_error
    assert error.kind == ErrorKind.MALFORMED_REPLY.value and error.phase == "try"
    assert error.message == "malformed reply: result: Input should be an object"
    cancels = [c for c in participant.received
               if by_order(c) == "bare-number" and c.phase == "cancel"]
    assert {c.step for c in cancels} == {"reserve"}

    # The 33,000-character message was truncated, not refused: retried, then completed.
    assert long_done.status == "completed"
    error = long_done.state.steps["reserve"].last_error
    assert error.kind == ErrorKind.UNEXPECTED.value and error.attempt == 1
    assert len(error.message) == MAX_ERROR_MESSAGE_LENGTH
    assert error.message.endswith(TRUNCATION_MARK)
    assert long_done.state.steps["reserve"].attempts["try"] == 2

    # The malformed body is kept for whoever fixes the participant; the long one is not.
    async with store.pool.acquire() as conn:
        letters = await list_dead_letters(conn, source="coordinator:replies")
    assert len(letters) == 1, [letter.reason for letter in letters]
    assert json.loads(letters[0].payload or b"")["result"] == 42
    assert "applied as a failed attempt" in letters[0].reason
