"""The real loop under load: 200 sagas at once, each effect once (a saga's independent steps
may run at once: ``saga_lanes``; the order of one step's phases is covered by
``test_participant_saga_lanes``)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import timedelta

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from participant_sdk import (
    CommandEnvelope,
    Outcome,
    ParticipantRunner,
    ParticipantSettings,
    Phase,
    ReplyEnvelope,
    command_topic,
    reply_topic,
)
from participant_sdk.protocol import encode, envelope_headers
from tests.integration.test_participant_behaviour import NAME, PgSink, Wallet, create_topics

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

SAGAS = 200
STEPS = 5


async def test_200_sagas_in_parallel_each_effect_once(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    conn = await asyncpg.connect(fresh_db)
    await conn.execute(
        "CREATE TABLE effects (id bigserial PRIMARY KEY, saga_id uuid, step text,"
        " kind text, amount int)"
    )
    await create_topics(kafka_bootstrap, [command_topic(NAME, topic_prefix),
                                          reply_topic(topic_prefix)])
    sagas = [uuid.uuid4() for _ in range(SAGAS)]
    commands = [
        CommandEnvelope(
            message_id=uuid.uuid4(), saga_id=saga, saga_type="order", step=f"note-{i}",
            phase=Phase.ACTION, attempt=1, participant=NAME, action="note",
            payload={"amount": 1, "seq": i}, reply_to=reply_topic(topic_prefix),
        )
        for i in range(STEPS)
        for saga in sagas
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    replies_in = AIOKafkaConsumer(reply_topic(topic_prefix), bootstrap_servers=kafka_bootstrap,
                                  auto_offset_reset="earliest")
    await producer.start()
    await replies_in.start()
    for c in commands:  # published before the participant starts: a backlog
        await producer.send(command_topic(NAME, topic_prefix), encode(c),
                            key=str(c.saga_id).encode(), headers=envelope_headers(c))
    await producer.flush()
    settings = ParticipantSettings(dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                   topic_prefix=topic_prefix, lanes=16, pool_size=10,
                                   commit_interval=timedelta(milliseconds=100))
    replies: dict[uuid.UUID, ReplyEnvelope] = {}
    started = time.perf_counter()
    try:
        async with ParticipantRunner(Wallet(PgSink()), settings):
            async with asyncio.timeout(45):
                while len(replies) < len(commands):
                    batch = await replies_in.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        for m in msgs:
                            r = ReplyEnvelope.model_validate_json(m.value)
                            replies[r.in_reply_to] = r
            elapsed = time.perf_counter() - started
        rate = len(commands) / elapsed
        log.warning("participant loop: %d commands for %d sagas in %.2fs = %.0f commands/s",
                    len(commands), SAGAS, elapsed, rate)
        print(f"\nFIGURE participant loop: {len(commands)} commands, {SAGAS} sagas, "
              f"{elapsed:.2f}s, {rate:.0f} commands/s")
        assert all(r.outcome is Outcome.OK for r in replies.values())
        rows = await conn.fetch("SELECT saga_id, kind FROM effects ORDER BY id")
        assert len(rows) == len(commands)
        per_saga: dict[uuid.UUID, list[str]] = {}
        for row in rows:
            per_saga.setdefault(row["saga_id"], []).append(row["kind"])
        assert all(sorted(kinds) == [f"note-{i}" for i in range(STEPS)]
                   for kinds in per_saga.values())
        # Offsets were committed after the replies: a new member of the group starts at the end.
        group = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=NAME,
                                 enable_auto_commit=False)
        await group.start()
        try:
            parts = range(4)  # create_topics made 4 partitions
            tps = [TopicPartition(command_topic(NAME, topic_prefix), p) for p in parts]
            ends = await group.end_offsets(tps)
            committed = {tp: await group.committed(tp) for tp in tps}
            assert committed == ends
        finally:
            await group.stop()
    finally:
        await replies_in.stop()
        await producer.stop()
        await conn.close()
