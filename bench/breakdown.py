"""Where a saga's latency goes, hop by hop, from timestamps the stack already records.

A hop is one command and its reply: coordinator transaction -> relay -> Kafka -> participant
transaction -> Kafka -> coordinator transaction. For every command of the sagas given it is
split at four instants the stack stores anyway:

* ``c0``: the coordinator's history ``recorded_at`` of the change that wrote the command (the
  store's clock, read after the saga rows are locked, before the writes and the COMMIT);
* ``r``: the command's Kafka timestamp (CreateTime: when the relay called ``send()``);
* ``b``: the participant's barrier row ``created_at`` (``now()``: its transaction's start,
  after fetch, lane queue, pool acquisition and BEGIN);
* ``p``: the reply's Kafka timestamp (the participant's ``send()``, after its COMMIT);
* ``c1``: the ``recorded_at`` of the history row that applied the reply.

Segments: ``relay`` = r - c0 (the coordinator's writes and COMMIT, the hint, the relay's
claim); ``to participant`` = b - r (producer linger and produce, broker, the participant's
fetch wait, lane queue, pool acquisition, BEGIN); ``participant txn`` = p - b (barrier,
handler, COMMIT); ``to coordinator`` = c1 - p (reply produce, fetch wait, queueing behind the
batch in flight, BEGIN and the row lock). Kafka timestamps have millisecond resolution (they
are truncated, so ``relay`` reads up to 1 ms low and the next segment as much high); the
command is matched to the last change recorded before its timestamp plus that millisecond.
"""

from __future__ import annotations

import bisect
import json
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.load import percentile
from bench.stack import PARTITIONS, Stack
from participant_sdk.barrier import BARRIER_TABLE
from participant_sdk.protocol import reply_topic

SEGMENTS = ("relay", "to_participant", "participant_txn", "to_coordinator")
#: With ``track_commit_timestamp = on`` the commits split two legs further: relay =
#: coordinator txn (c0 -> its COMMIT) + pick up (COMMIT -> the relay's send: the hint, the
#: claim); participant txn = participant commit (b -> its COMMIT) + reply send (COMMIT -> send).
SUB_SEGMENTS = ("coordinator_txn", "pick_up", "participant_commit", "reply_send")


async def _read_all(bootstrap: str, topics: list[str], limit_s: float = 60.0) -> list[Any]:
    """Every record of ``topics`` up to their end offsets now.

    The consumer resets to the earliest offset: with aiokafka's default (latest), the reset
    that ``assign()`` starts could land after ``seek_to_beginning`` and leave every position
    at the end, so nothing was read (the ``nan (0 hops)`` of the low-load figures). Progress
    is counted from the offsets received.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, 0)  # the topics are the stack's own, never truncated
        seen = {tp: 0 for tp in parts}
        out: list[Any] = []
        deadline = time.monotonic() + limit_s
        while any(seen[tp] < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(out)} of {sum(ends.values())} records")
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for tp, records in batch.items():
                out.extend(r for r in records if r.offset < ends[tp])
                seen[tp] = max(seen[tp], records[-1].offset + 1)
        return out
    finally:
        await consumer.stop()


def stats(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95),
            "mean": sum(values) / len(values) if values else float("nan"),
            "count": float(len(values))}


async def _commit_times(conn: asyncpg.Connection) -> str:
    """The select-list expression of a row's commit time: ``pg_xact_commit_timestamp(xmin)``
    when the server tracks commit timestamps (``track_commit_timestamp = on``), else NULL."""
    on = await conn.fetchval("SHOW track_commit_timestamp")
    return "pg_xact_commit_timestamp(xmin)" if on == "on" else "NULL::timestamptz"


async def _barrier_starts(stack: Stack, saga_ids: list[uuid.UUID]
                          ) -> dict[tuple[str, str, str], tuple[float, float | None]]:
    """(saga id, step, phase) -> the participant transaction's start and (when the server
    tracks them) its commit, from every participant."""
    out: dict[tuple[str, str, str], tuple[float, float | None]] = {}
    for dsn in stack.participant_dsns.values():
        conn = await asyncpg.connect(dsn)
        try:
            committed = await _commit_times(conn)
            rows = await conn.fetch(
                f"SELECT saga_id, step, phase, created_at, {committed} AS committed_at"  # noqa: S608
                f" FROM {BARRIER_TABLE}"
                " WHERE saga_id = ANY($1::uuid[]) AND reason <> 'blocked'", saga_ids)
        finally:
            await conn.close()
        for r in rows:
            out[(str(r["saga_id"]), r["step"], r["phase"])] = (
                r["created_at"].timestamp(), _ts(r["committed_at"]))
    return out


def _ts(at: Any) -> float | None:
    return None if at is None else float(at.timestamp())


async def hop_breakdown(stack: Stack, saga_ids: list[uuid.UUID]) -> dict[str, Any]:
    """Per-hop segment statistics (ms) over every command of ``saga_ids`` that got a reply."""
    wanted = {str(s) for s in saga_ids}
    replies_topic = reply_topic(stack.prefix)
    records = await _read_all(stack.kafka, stack.topics)
    commands: dict[str, tuple[str, str, str, float]] = {}
    replies: dict[str, tuple[str, float]] = {}
    for r in records:
        body = json.loads(r.value)
        if body["saga_id"] not in wanted:
            continue
        if r.topic == replies_topic:
            replies[body["in_reply_to"]] = (body["message_id"], r.timestamp / 1000)
        else:
            commands[body["message_id"]] = (body["saga_id"], body["step"], body["phase"],
                                            r.timestamp / 1000)
    conn = await asyncpg.connect(stack.coordinator_dsn)
    try:
        committed = await _commit_times(conn)
        rows = await conn.fetch(
            "SELECT saga_id, recorded_at, event::jsonb #>> '{reply,message_id}' AS reply_id,"  # noqa: S608
            f" {committed} AS committed_at"
            " FROM saga_history WHERE saga_id = ANY($1::uuid[]) ORDER BY saga_id, seq",
            saga_ids)
    finally:
        await conn.close()
    begun = await _barrier_starts(stack, saga_ids)
    applied: dict[str, float] = {}
    history: dict[str, list[float]] = {}
    commits: dict[tuple[str, float], float | None] = {}
    for row in rows:
        at = row["recorded_at"].timestamp()
        history.setdefault(str(row["saga_id"]), []).append(at)
        commits[(str(row["saga_id"]), at)] = _ts(row["committed_at"])
        if row["reply_id"]:
            applied[row["reply_id"]] = at
    seg: dict[str, list[float]] = {name: [] for name in (*SEGMENTS, "hop")}
    marks: dict[str, list[tuple[float, str, str, float, float | None, float, float]]] = {}
    sub: dict[str, list[float]] = {name: [] for name in SUB_SEGMENTS}
    for command_id, (saga_id, step, phase, sent) in commands.items():
        times = sorted(history.get(saga_id, []))
        i = bisect.bisect_right(times, sent + 0.001)
        reply = replies.get(command_id)
        if not i or reply is None or reply[0] not in applied:
            continue
        c0, (_, answered), c1 = times[i - 1], reply, applied[reply[0]]
        b, q = begun.get((saga_id, step, phase), (None, None))
        k = commits.get((saga_id, c0))
        if k is not None:
            sub["coordinator_txn"].append((k - c0) * 1000)
            sub["pick_up"].append((sent - k) * 1000)
        if b is not None and q is not None:
            sub["participant_commit"].append((q - b) * 1000)
            sub["reply_send"].append((answered - q) * 1000)
        seg["relay"].append((sent - c0) * 1000)
        seg["to_coordinator"].append((c1 - answered) * 1000)
        seg["hop"].append((c1 - c0) * 1000)
        if b is not None:
            seg["to_participant"].append((b - sent) * 1000)
            seg["participant_txn"].append((answered - b) * 1000)
        marks.setdefault(saga_id, []).append((c0, step, phase, sent, b, answered, c1))
    return {
        "timeline": timeline(marks, history),
        "commands_per_saga": len(commands) / max(len(wanted), 1),
        "hops_measured": len(seg["hop"]),
        "commit_split_ms": {name: stats(values) for name, values in sub.items() if values},
        **{f"{name}_ms": stats(values) for name, values in seg.items()},
    }


def timeline(marks: dict[str, list[tuple[float, str, str, float, float | None, float, float]]],
             history: dict[str, list[float]]) -> str:
    """One saga's hops as instants (ms from its first history row) at each process: the
    coordinator's change (``c``), the relay's send (``r``), the participant's transaction
    start (``b``) and reply send (``p``), the coordinator's apply (``a``). The saga shown is
    the one with the median number of hops measured and, among those, the median span."""
    if not marks:
        return "-"
    most = max(len(v) for v in marks.values())
    full = sorted((max(m[6] for m in v) - min(history[k]), k)
                  for k, v in marks.items() if len(v) == most)
    saga_id = full[len(full) // 2][1]
    t0 = min(history[saga_id])

    def ms(at: float | None) -> str:
        return "-" if at is None else f"{(at - t0) * 1000:.1f}"

    return " | ".join(
        f"{step}.{phase}: c {ms(c0)} r {ms(r)} b {ms(b)} p {ms(p)} a {ms(a)}"
        for c0, step, phase, r, b, p, a in sorted(marks[saga_id]))
