"""One saga's independent steps run concurrently at a participant, bounded by ``saga_lanes``,
while the phases of one step keep their order (try before cancel), on real Kafka and the
barrier in Postgres."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from participant_sdk import (
    CommandEnvelope,
    HandlerContext,
    Participant,
    ParticipantRunner,
    ParticipantSettings,
    Phase,
    ReplyEnvelope,
    command_topic,
    on_action,
    on_cancel,
    on_confirm,
    on_try,
    reply_topic,
)
from participant_sdk.protocol import encode, envelope_headers
from participant_sdk.runner import lane_of
from tests.integration.test_participant_behaviour import create_topics

pytestmark = pytest.mark.integration

NAME = "desk"
SAGA_LANES = 4
#: Long enough that two handlers of one saga running at once surely overlap.
HOLD_S = 0.4


class Desk(Participant):
    """Counts how many of its handlers run at once, and logs the phases of ``hold``."""

    name = NAME

    def __init__(self) -> None:
        self.running = self.most = 0
        self.log: list[str] = []

    async def _busy(self) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(HOLD_S)
        finally:
            self.running -= 1

    @on_action("work")
    async def work(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._busy()

    @on_try("hold")
    async def hold(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._busy()
        self.log.append("tried")

    @on_confirm("hold")
    async def keep(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        self.log.append("confirmed")

    @on_cancel("hold")
    async def release(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        self.log.append("cancelled")


def _command(saga: uuid.UUID, step: str, phase: Phase, action: str, prefix: str
             ) -> CommandEnvelope:
    return CommandEnvelope(message_id=uuid.uuid4(), saga_id=saga, saga_type="order",
                           step=step, phase=phase, attempt=1, participant=NAME, action=action,
                           payload={}, reply_to=reply_topic(prefix))


def test_a_sagas_steps_spread_over_at_most_saga_lanes_lanes() -> None:
    key = str(uuid.uuid4()).encode()
    lanes = {lane_of(key, f"lines[{i}].work", 16, SAGA_LANES) for i in range(100)}
    assert 1 < len(lanes) <= SAGA_LANES
    assert {lane_of(key, f"lines[{i}].work", 16, 1) for i in range(100)} == {
        lane_of(key, None, 16, 1)}  # one lane per saga, as before
    assert len({lane_of(key, "hold", 16, SAGA_LANES) for _ in range(3)}) == 1


async def test_independent_steps_of_one_saga_run_at_once_and_a_steps_phases_in_order(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    await create_topics(kafka_bootstrap, [command_topic(NAME, topic_prefix),
                                          reply_topic(topic_prefix)])
    saga = uuid.uuid4()
    commands = [_command(saga, "hold", Phase.TRY, "hold", topic_prefix),
                _command(saga, "hold", Phase.CANCEL, "hold", topic_prefix)]
    commands += [_command(saga, f"lines[{i}].work", Phase.ACTION, "work", topic_prefix)
                 for i in range(8)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    replies_in = AIOKafkaConsumer(reply_topic(topic_prefix), bootstrap_servers=kafka_bootstrap,
                                  auto_offset_reset="earliest")
    await producer.start()
    await replies_in.start()
    desk = Desk()
    settings = ParticipantSettings(dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                   topic_prefix=topic_prefix, lanes=16, pool_size=8,
                                   saga_lanes=SAGA_LANES,
                                   commit_interval=timedelta(milliseconds=100))
    replies: dict[uuid.UUID, ReplyEnvelope] = {}
    try:
        for c in commands:  # a backlog: fetched together
            await producer.send(command_topic(NAME, topic_prefix), encode(c),
                                key=str(saga).encode(), headers=envelope_headers(c))
        await producer.flush()
        async with ParticipantRunner(desk, settings):
            async with asyncio.timeout(60):
                while len(replies) < len(commands):
                    for msgs in (await replies_in.getmany(timeout_ms=500)).values():
                        for m in msgs:
                            r = ReplyEnvelope.model_validate_json(m.value)
                            replies[r.in_reply_to] = r
    finally:
        await replies_in.stop()
        await producer.stop()
    assert all(r.outcome.value == "ok" for r in replies.values()), replies
    assert 1 < desk.most <= SAGA_LANES  # at once, bounded
    assert desk.log == ["tried", "cancelled"]  # the cancel waited for its try: not a null one
    conn = await asyncpg.connect(fresh_db)
    try:
        rows = await conn.fetch("SELECT step, phase FROM sagaflow_barrier "
                                "WHERE saga_id = $1", saga)
    finally:
        await conn.close()
    assert {(r["step"], r["phase"]) for r in rows} >= {("hold", "try"), ("hold", "cancel")}
