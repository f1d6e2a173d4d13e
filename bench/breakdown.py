"""Where a saga's latency goes, hop by hop, from timestamps the stack already records.

For every command of the sagas given: ``relay`` = the command's Kafka timestamp (set when the
relay sends it) minus the coordinator's latest history ``recorded_at`` before it (the
transaction that wrote the outbox row); ``participant`` = the reply's Kafka timestamp (sent
after the participant's commit) minus the command's; ``coordinator`` = the ``recorded_at`` of
the history row that applied the reply minus the reply's timestamp (delivery, fetch and
queueing behind the batch in flight). Kafka timestamps have millisecond resolution.
"""

from __future__ import annotations

import bisect
import json
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.load import percentile
from bench.stack import PARTITIONS, Stack
from participant_sdk.protocol import reply_topic


async def _read_all(bootstrap: str, topics: list[str]) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        await consumer.seek_to_beginning(*parts)
        out: list[Any] = []
        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in parts])

        while await behind():
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for records in batch.values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()


async def hop_breakdown(stack: Stack, saga_ids: list[uuid.UUID]) -> dict[str, Any]:
    wanted = {str(s) for s in saga_ids}
    replies_topic = reply_topic(stack.prefix)
    records = await _read_all(stack.kafka, stack.topics)
    commands: dict[str, tuple[str, float]] = {}
    replies: dict[str, tuple[str, float]] = {}
    for r in records:
        body = json.loads(r.value)
        if body["saga_id"] not in wanted:
            continue
        if r.topic == replies_topic:
            replies[body["message_id"]] = (body["in_reply_to"], r.timestamp / 1000)
        else:
            commands[body["message_id"]] = (body["saga_id"], r.timestamp / 1000)
    conn = await asyncpg.connect(stack.coordinator_dsn)
    try:
        rows = await conn.fetch(
            "SELECT saga_id, recorded_at, event::jsonb #>> '{reply,message_id}' AS reply_id"
            " FROM saga_history WHERE saga_id = ANY($1::uuid[]) ORDER BY saga_id, seq",
            saga_ids)
    finally:
        await conn.close()
    applied: dict[str, float] = {}
    history: dict[str, list[float]] = {}
    for row in rows:
        at = row["recorded_at"].timestamp()
        history.setdefault(str(row["saga_id"]), []).append(at)
        if row["reply_id"]:
            applied[row["reply_id"]] = at
    relay, participant, coordinator = [], [], []
    for saga_id, sent in commands.values():
        times = sorted(history.get(saga_id, []))
        i = bisect.bisect_right(times, sent)
        if i:
            relay.append((sent - times[i - 1]) * 1000)
    for reply_id, (command_id, sent) in replies.items():
        if command_id in commands:
            participant.append((sent - commands[command_id][1]) * 1000)
        if reply_id in applied:
            coordinator.append((applied[reply_id] - sent) * 1000)

    def stats(values: list[float]) -> dict[str, float]:
        return {"p50": percentile(values, 50), "p95": percentile(values, 95),
                "mean": sum(values) / len(values) if values else float("nan"),
                "count": float(len(values))}

    return {
        "hops_per_saga": len(replies) / max(len(wanted), 1),
        "relay_ms": stats(relay),
        "participant_ms": stats(participant),
        "coordinator_ms": stats(coordinator),
    }
