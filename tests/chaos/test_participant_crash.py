"""A participant process killed (SIGKILL) after its commit and before its reply, then restarted.

The restarted process gets the command again (its offset was never committed), the barrier
answers it from the stored row without running the handler, and the same reply (same
deterministic message id) goes out: the effect is applied once. Also: SIGTERM stops gracefully.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from participant_sdk import CommandEnvelope, Outcome, Phase, ReplyEnvelope, command_topic
from participant_sdk.protocol import encode, envelope_headers, reply_message_id, reply_topic
from tests.integration.test_participant_behaviour import create_topics

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(dsn: str, bootstrap: str, prefix: str, flag: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "SAGAFLOW_PARTICIPANT_DSN": dsn,
        "SAGAFLOW_KAFKA_BOOTSTRAP": bootstrap,
        "SAGAFLOW_TOPIC_PREFIX": prefix,
        "SAGAFLOW_PARTICIPANT_CRASH_AFTER_COMMIT_FLAG": str(flag),
        "SAGAFLOW_PARTICIPANT_DRAIN_TIMEOUT": "5",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.services.payments", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )


@pytest.fixture
async def replies(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[AIOKafkaConsumer]:
    await create_topics(kafka_bootstrap, [command_topic("payments", topic_prefix),
                                          reply_topic(topic_prefix)])
    consumer = AIOKafkaConsumer(reply_topic(topic_prefix), bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest")
    await consumer.start()
    yield consumer
    await consumer.stop()


async def _read(consumer: AIOKafkaConsumer, seconds: float) -> list[ReplyEnvelope]:
    out: list[ReplyEnvelope] = []
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        batch = await consumer.getmany(timeout_ms=300)
        out += [ReplyEnvelope.model_validate_json(m.value) for ms in batch.values() for m in ms]
        if out:
            return out
    return out


async def test_sigkill_after_commit_before_reply(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
    replies: AIOKafkaConsumer,
) -> None:
    flag = tmp_path / "crashed"
    saga = uuid.uuid4()
    command = CommandEnvelope(
        message_id=uuid.uuid4(), saga_id=saga, saga_type="order", step="pay",
        phase=Phase.TRY, attempt=1, participant="payments", action="charge",
        payload={"customer": "alice", "amount": 2500}, reply_to=reply_topic(topic_prefix),
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    await producer.send_and_wait(command_topic("payments", topic_prefix), encode(command),
                                 key=str(saga).encode(), headers=envelope_headers(command))
    await producer.stop()

    first = await _spawn(fresh_db, kafka_bootstrap, topic_prefix, flag)
    assert await asyncio.wait_for(first.wait(), 40) == -signal.SIGKILL
    assert flag.exists()
    conn = await asyncpg.connect(fresh_db)
    try:
        ledger = await conn.fetch("SELECT kind, amount FROM payments_ledger WHERE saga_id = $1",
                                  saga)
        assert [(r["kind"], r["amount"]) for r in ledger] == [("reserved", 2500)]
        assert await _read(replies, 1.0) == []  # it died before replying

        second = await _spawn(fresh_db, kafka_bootstrap, topic_prefix, flag)
        try:
            got = await _read(replies, 40)
            assert len(got) == 1
            reply = got[0]
            assert reply.outcome is Outcome.OK and reply.result == {"held": 2500,
                                                                     "balance": 97500}
            assert reply.message_id == reply_message_id(command.message_id)
            ledger = await conn.fetch("SELECT kind FROM payments_ledger WHERE saga_id = $1", saga)
            assert [r["kind"] for r in ledger] == ["reserved"]
            assert await conn.fetchval(
                "SELECT balance FROM payments_accounts WHERE customer = 'alice'") == 97500
        finally:
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0  # graceful stop
    finally:
        await conn.close()
