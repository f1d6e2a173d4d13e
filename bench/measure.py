"""What the runner's and the latency phase's loops measure with: stack snapshots, per-saga
costs between two of them, a load result as JSON, and a guarded await. A module of their own
so that neither phase imports the other.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench.load import Driver, LoadResult
from bench.stack import KAFKA_BROKER, Stack, cpu_seconds
from participant_sdk.protocol import reply_topic


async def _snapshot(stack: Stack, driver: Driver) -> dict[str, Any]:
    return {
        "t": time.monotonic(),
        "xacts": await stack.xacts(),
        "round_trips": await stack.round_trips(),
        "kafka": await stack.kafka_messages(),
        "cpu": stack.cpu(),
        "broker_cpu": stack.broker_cpu(),
        "run_delay": stack.run_delay(),
        "backends": await stack.backend_cpu(exclude={driver.watcher.conn.get_server_pid()}),
        "driver_cpu": cpu_seconds(os.getpid()),
        "watcher_polls": driver.watcher.polls,
        "kafka_requests": stack.kafka_requests(),
    }


def _costs(stack: Stack, a: dict[str, Any], b: dict[str, Any], sagas: int) -> dict[str, Any]:
    """What the stack spent per saga between snapshots ``a`` and ``b``."""
    n = max(sagas, 1)
    seconds = b["t"] - a["t"]
    xacts = {role: b["xacts"][role] - a["xacts"][role] for role in a["xacts"]}
    polls = b["watcher_polls"] - a["watcher_polls"]
    # The bench's own completion polls run on the coordinator database; they are not the stack's.
    xacts["coordinator"] -= polls
    replies = reply_topic(stack.prefix)
    msgs = {t: b["kafka"].get(t, 0) - a["kafka"].get(t, 0) for t in b["kafka"]}
    commands = sum(v for t, v in msgs.items() if t != replies)
    cpu = {name: b["cpu"][name] - a["cpu"].get(name, 0.0) for name in b["cpu"]}
    # Backends of the stack and of the driver's start_saga pool; the completion poll's excluded.
    cpu["postgres (stack backends)"] = sum(
        v - a["backends"].get(pid, 0.0) for pid, v in b["backends"].items())
    cpu["bench driver (API + polls)"] = b["driver_cpu"] - a["driver_cpu"]
    if b["broker_cpu"] is not None and a["broker_cpu"] is not None:
        cpu[KAFKA_BROKER] = b["broker_cpu"] - a["broker_cpu"]
    round_trips: dict[str, float] = {}
    if a["round_trips"] is not None and b["round_trips"] is not None:
        round_trips = {role: b["round_trips"][role] - a["round_trips"][role]
                       for role in a["round_trips"]}
        round_trips["coordinator"] -= polls  # one statement each
    requests = _request_deltas(a.get("kafka_requests"), b.get("kafka_requests"))
    waits = {k: b["run_delay"][k] - a["run_delay"].get(k, 0.0) for k in b["run_delay"]}
    return {
        "window_s": seconds,
        "sagas": sagas,
        # Share of the window each process was runnable but waiting for a CPU (scheduler).
        "runqueue_wait_fraction": {k: v / seconds for k, v in waits.items()},
        "pg_xacts_per_saga": {k: v / n for k, v in xacts.items()},
        "pg_xacts_per_saga_total": sum(xacts.values()) / n,
        "bench_poll_xacts_excluded": polls,
        # Statements (each a round trip; BEGIN and COMMIT count), from pg_stat_statements.
        "pg_round_trips_per_saga": {k: v / n for k, v in round_trips.items()},
        "kafka_per_saga": {"commands": commands / n, "replies": msgs.get(replies, 0) / n,
                           "total": (commands + msgs.get(replies, 0)) / n},
        "cpu_ms_per_saga": {k: v * 1000 / n for k, v in cpu.items()},
        "cpu_cores": {k: v / seconds for k, v in cpu.items()},
        **({} if requests is None else kafka_request_costs(
            requests, commands + msgs.get(replies, 0), n, seconds)),
    }


def _request_deltas(a: dict[str, dict[str, int]] | None, b: dict[str, dict[str, int]] | None
                    ) -> dict[str, dict[str, int]] | None:
    """Kafka requests by process and type between two snapshots (None when not counted)."""
    if a is None or b is None:
        return None
    return {proc: {kind: n - a.get(proc, {}).get(kind, 0) for kind, n in counts.items()}
            for proc, counts in b.items()}


def kafka_request_costs(requests: dict[str, dict[str, int]], messages: int, sagas: int,
                        seconds: float) -> dict[str, Any]:
    """Requests the stack's clients sent to the broker, per saga message by type (and per
    process), and per second: what each message costs the broker in requests."""
    by_type: dict[str, int] = {}
    for counts in requests.values():
        for kind, count in counts.items():
            by_type[kind] = by_type.get(kind, 0) + count
    m = max(messages, 1)
    sent = sum(v for k, v in by_type.items() if k != "FetchEmpty")  # a subset of Fetch
    return {"kafka_requests": {
        "messages": messages,
        "per_message": {k: v / m for k, v in sorted(by_type.items())},
        "per_message_total": sent / m,
        "per_saga_total": sent / max(sagas, 1),
        "per_s_total": sent / seconds if seconds > 0 else float("nan"),
        "per_message_by_process": {proc: sum(v for k, v in c.items() if k != "FetchEmpty") / m
                                   for proc, c in sorted(requests.items())},
        "per_message_by_process_type": {proc: {k: v / m for k, v in sorted(c.items()) if v}
                                        for proc, c in sorted(requests.items())},
    }}


def _load_json(result: LoadResult) -> dict[str, Any]:
    return {"rate": result.rate, "sagas": result.in_window, "window_s": result.window_s,
            "started": result.started, "finished": result.finished,
            "statuses": result.statuses, "latency_ms": result.latency_ms(),
            "noticed_ms": result.noticed_ms()}


async def _guarded(stack: Stack, coro: Any) -> Any:
    """Await ``coro`` but fail fast, with the log tail, if a stack process dies meanwhile."""
    task = asyncio.ensure_future(coro)
    try:
        while not task.done():
            stack.check_alive()
            await asyncio.wait({task}, timeout=1.0)
        return task.result()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
