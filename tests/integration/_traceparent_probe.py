"""Run in a subprocess by test_single_traceparent.py (tracing is configured process-wide).

Tracing on through ``telemetry.configure``: the relay publishes a command of a traced saga, an
SDK participant answers it, and the headers of both messages are read back from Kafka.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import propagate, trace

from outbox_relay import OutboxMessage, Relay, RelaySettings, enqueue, install
from participant_sdk import HandlerContext, Participant, on_action, on_compensate, telemetry
from participant_sdk.protocol import (
    HEADER_MESSAGE_KIND,
    KIND_COMMAND,
    CommandEnvelope,
    Phase,
    command_topic,
    encode,
    reply_topic,
)
from participant_sdk.runner import ParticipantRunner
from participant_sdk.settings import ParticipantSettings


class Probe(Participant):
    name = "probe"

    @on_action("act")
    async def act(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None

    @on_compensate("act")
    async def undo(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None


async def read_one(bootstrap: str, topic: str, within: float = 30) -> list[list[str]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                return [[k, v.decode()] for k, v in records[0].headers]
        raise TimeoutError(f"nothing on {topic}")
    finally:
        await consumer.stop()


async def main(dsn: str, bootstrap: str, prefix: str) -> dict[str, Any]:
    assert telemetry.configure("traceparent-probe") is not None, "tracing did not turn on"
    conn = await asyncpg.connect(dsn)
    try:
        await install(conn, shard_count=1)
        with trace.get_tracer("probe").start_as_current_span("saga start"):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        command = CommandEnvelope(
            message_id=uuid.uuid4(), saga_id=uuid.uuid4(), saga_type="probe", step="s",
            phase=Phase.ACTION, attempt=1, participant="probe", action="act",
            reply_to=reply_topic(prefix))
        topic = command_topic("probe", prefix)
        await enqueue(conn, [OutboxMessage(
            topic=topic, key=str(command.saga_id), payload=encode(command),
            message_id=command.message_id,
            headers={**carrier, HEADER_MESSAGE_KIND: KIND_COMMAND})])
    finally:
        await conn.close()
    settings = ParticipantSettings(dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix)
    async with Relay(RelaySettings(postgres_dsn=dsn, kafka_bootstrap=bootstrap)), \
            ParticipantRunner(Probe(), settings):
        command_headers = await read_one(bootstrap, topic)
        reply_headers = await read_one(bootstrap, reply_topic(prefix))
    return {"saga_traceparent": carrier["traceparent"], "command": command_headers,
            "reply": reply_headers}


if __name__ == "__main__":
    out = asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
    with open(sys.argv[4], "w") as f:  # stdout belongs to the console span exporter
        json.dump(out, f)
