"""The latency phase: one saga at a time, 16 at a time, open loop, and the idle stack.

For each saga kind (``Tcc3``: three TCC steps, 4 sequential hops; ``Steps3``: three saga
steps, 3 hops) on one stack: a closed loop with 1 saga in flight (latency, the per-hop
breakdown, commits per saga), a closed loop with 16 in flight (rate, CPU and commits per
saga), and open loops at the given rates (latency and breakdown). Then the stack sits idle
and every process's database transactions, CPU and wake-ups are counted over a window.

Each latency is also given as a multiple of the floor measured in the same run (the limits
phase): hops x (Kafka one-message round trip + one commit on each side).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bench.breakdown import hop_breakdown
from bench.floors import measure_floors
from bench.load import percentile
from bench.measure import _costs, _guarded, _load_json, _snapshot
from bench.stack import KAFKA_BROKER, Stack

#: Sequential hops of the success path: TCC = 3 tries + the confirms together; saga steps = 3.
HOPS = {"bench_tcc3": 4, "bench_steps3": 3}
KINDS = (("bench_tcc3", 3), ("bench_steps3", 3))

#: The watcher's poll interval for the one-in-flight loop: the next saga starts when the
#: watcher sees the last one end, so a slow poll would stretch the time per saga.
_FAST_POLL = 0.002


@dataclass
class LatencyConfig:
    one_s: float = 15.0
    sixteen_s: float = 15.0
    open_s: float = 10.0
    rates: list[float] = field(default_factory=lambda: [50.0, 100.0])
    idle_s: float = 60.0
    idle_settle_s: float = 12.0
    #: Pause before a measurement on the stack that ran the one just before (the interleaving
    #: reverses the order, so the last variant of one measurement is the first of the next):
    #: that stack's open loop right after its 16-in-flight loop read up to several times
    #: slower, whichever variant it was (bench/README.md, issue 17, stop 28). Every stack's
    #: databases are also vacuumed before each of its measurements.
    back_to_back_pause_s: float = 5.0
    warmup: float = 2.0
    #: Samples of each bare measurement of the leg floors (``bench/floors.py``).
    floor_samples: int = 200


def _stack_cpu(costs: dict[str, Any]) -> float:
    """CPU ms per saga of the stack's processes and backends (not the bench driver, nor the
    Kafka broker: reported apart, the earlier figures did not hold it)."""
    return sum(v for k, v in costs["cpu_ms_per_saga"].items()
               if not k.startswith("bench driver") and k != KAFKA_BROKER)


async def _closed(stack: Stack, driver_for: Any, saga: str, steps: int, concurrency: int,
                  warmup: float, duration: float, *, breakdown: bool) -> dict[str, Any]:
    poll = _FAST_POLL if concurrency == 1 else 0.01
    async with driver_for(stack, saga, steps, poll) as driver:
        await _guarded(stack, driver.warm_up(5, limit_s=120))
        del driver.started_ids[:]
        snaps: dict[str, dict[str, Any]] = {}

        async def mark(which: str) -> None:
            stack.check_alive()
            snaps[which] = await _snapshot(stack, driver)

        result = await _guarded(stack, driver.closed_loop(concurrency, warmup, duration, mark))
        out = _load_json(result)
        out["concurrency"] = concurrency
        out["costs"] = _costs(stack, snaps["start"], snaps["end"], result.in_window)
        out["stack_cpu_ms_per_saga"] = _stack_cpu(out["costs"])
        out["load_average"] = os.getloadavg()
        if breakdown:
            out["hop_breakdown"] = await hop_breakdown(stack, driver.started_ids)
        return out


async def _open(stack: Stack, driver_for: Any, saga: str, steps: int, rate: float,
                duration: float) -> dict[str, Any]:
    async with driver_for(stack, saga, steps, 0.005) as driver:
        await _guarded(stack, driver.warm_up(5, limit_s=120))
        del driver.started_ids[:]
        result = await _guarded(stack, driver.open_loop(rate, duration))
        out = _load_json(result)
        out["target_rate"] = rate
        out["load_average"] = os.getloadavg()
        out["hop_breakdown"] = await hop_breakdown(stack, driver.started_ids)
        return out


async def idle_stack(stack: Stack, seconds: float, settle: float = 12.0) -> dict[str, Any]:
    """Per second of an idle window: database transactions per database, CPU and wake-ups
    (context switches) per process. ``settle`` first lets Postgres flush the pending
    statistics of the work before (an idle backend flushes within 10 s)."""
    await asyncio.sleep(settle)

    async def snap() -> dict[str, Any]:
        return {"t": time.monotonic(), "xacts": await stack.transactions(),
                "round_trips": await stack.round_trips(),
                "cpu": stack.cpu(), "wakeups": stack.wakeups(),
                "backends": await stack.backend_cpu()}

    a = await snap()
    await asyncio.sleep(seconds)
    b = await snap()
    dt = b["t"] - a["t"]
    xacts = {k: (b["xacts"][k] - a["xacts"][k]) / dt for k in a["xacts"]}
    trips = None
    if a["round_trips"] is not None and b["round_trips"] is not None:
        trips = {k: (b["round_trips"][k] - a["round_trips"][k]) / dt for k in a["round_trips"]}
    return {
        "window_s": dt,
        "db_transactions_per_s": xacts,
        "db_transactions_per_s_total": sum(xacts.values()),
        # Every statement, BEGIN and COMMIT included (None without pg_stat_statements).
        "db_round_trips_per_s": trips,
        "db_round_trips_per_s_total": None if trips is None else sum(trips.values()),
        "cpu_ms_per_s": {k: (b["cpu"][k] - a["cpu"].get(k, 0.0)) * 1000 / dt for k in b["cpu"]},
        "postgres_backends_cpu_ms_per_s": sum(
            v - a["backends"].get(pid, 0.0) for pid, v in b["backends"].items()) * 1000 / dt,
        "wakeups_per_s": {k: (b["wakeups"][k] - a["wakeups"].get(k, 0)) / dt
                          for k in b["wakeups"]},
        "load_average": os.getloadavg(),
    }


async def codec_costs(stack: Stack, samples: int = 200, rounds: int = 20) -> dict[str, Any]:
    """CPU µs of the JSON work per reply the stack does, stdlib ``json`` against ``orjson``
    (and ``msgspec`` when installed), on real snapshots and envelopes of this run.

    Per reply the coordinator parses the locked row's snapshot and re-serialises the new one
    (``coordinator/store/_writes.py``); envelopes are pydantic models (``model_validate_json``
    / ``model_dump_json``), already compiled JSON in pydantic-core, measured for comparison.
    """
    from participant_sdk.protocol import ReplyEnvelope

    conn = await asyncpg.connect(stack.coordinator_dsn)
    try:
        snapshots = [r["snapshot"] for r in await conn.fetch(
            "SELECT snapshot FROM sagas ORDER BY updated_at DESC LIMIT $1", samples)]
        events = [r["event"] for r in await conn.fetch(
            "SELECT event FROM saga_history WHERE event::jsonb ? 'reply'"
            " ORDER BY recorded_at DESC LIMIT $1", samples)]
    finally:
        await conn.close()
    replies = [json.dumps(json.loads(e)["reply"]).encode() for e in events]
    if not snapshots or not replies:
        return {}
    parsed = [json.loads(s) for s in snapshots]
    models = [ReplyEnvelope.model_validate_json(r) for r in replies]

    def per_item(fn: Any, items: list[Any]) -> float:
        best = float("inf")
        for _ in range(rounds):
            t = time.process_time()
            for item in items:
                fn(item)
            best = min(best, time.process_time() - t)
        return best * 1e6 / len(items)

    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    out: dict[str, Any] = {
        "snapshot_bytes_mean": sum(len(s) for s in snapshots) / len(snapshots),
        "json": {"snapshot_loads_us": per_item(json.loads, snapshots),
                 "snapshot_dumps_us": per_item(dumps, parsed)},
        "pydantic": {"reply_validate_json_us": per_item(ReplyEnvelope.model_validate_json,
                                                        replies),
                     "reply_dump_json_us": per_item(lambda m: m.model_dump_json(), models)},
    }
    with contextlib.suppress(ImportError):
        import orjson

        out["orjson"] = {"snapshot_loads_us": per_item(orjson.loads, snapshots),
                         "snapshot_dumps_us": per_item(orjson.dumps, parsed)}
    with contextlib.suppress(ImportError):
        import msgspec

        decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()
        out["msgspec"] = {"snapshot_loads_us": per_item(decoder.decode, snapshots),
                          "snapshot_dumps_us": per_item(encoder.encode, parsed)}
    return out


async def latency_phase(stacks: dict[str, Stack], config: LatencyConfig, driver_for: Any,
                        kinds: tuple[tuple[str, int], ...] = KINDS) -> dict[str, Any]:
    """Every measurement on every stack (variant), interleaved: each measurement runs on
    each variant in turn, the order reversed from one measurement to the next, so a change
    in the machine's load hits the variants alike. Then each stack's idle window in turn."""
    out: dict[str, dict[str, Any]] = {name: {"sagas": {}} for name in stacks}
    order = list(stacks)
    last: str | None = None
    for saga, steps in kinds:
        for name in order:
            out[name]["sagas"][saga] = {"hops": HOPS[saga]}
        plan: list[tuple[str, Any]] = [
            ("one", lambda st, s=saga, n=steps: _closed(
                st, driver_for, s, n, 1, config.warmup, config.one_s, breakdown=True)),
            ("sixteen", lambda st, s=saga, n=steps: _closed(
                st, driver_for, s, n, 16, config.warmup, config.sixteen_s, breakdown=False)),
            *((f"open_{rate:g}", lambda st, s=saga, n=steps, r=rate: _open(
                st, driver_for, s, n, r, config.open_s)) for rate in config.rates),
        ]
        for key, measure in plan:
            for name in order:
                await stacks[name].vacuum()
                if name == last and len(order) > 1:
                    await asyncio.sleep(config.back_to_back_pause_s)
                out[name]["sagas"][saga][key] = await measure(stacks[name])
                last = name
            order.reverse()
            if key == "one":
                # Each leg's floor, with bare clients, right after the sagas it bounds.
                first = stacks[order[0]]
                floors = await measure_floors(first.admin_dsn, first.kafka,
                                              samples=config.floor_samples)
                for name in order:
                    out[name]["sagas"][saga]["leg_floors"] = floors
    for name, stack in stacks.items():
        out[name]["codec"] = await codec_costs(stack)
        out[name]["idle"] = await idle_stack(stack, config.idle_s, settle=config.idle_settle_s)
    return out


def floor_ms(limits: dict[str, Any] | None, hops: int) -> float:
    """hops x (Kafka one-message round trip p50 + 2 x one commit p50), from the limits."""
    if not limits:
        return float("nan")
    kafka = limits["kafka"]["round_trip_ms"]["p50"]
    commit = limits["postgres"].get("commit_ms", {}).get("p50", float("nan"))
    return hops * (kafka + 2 * commit)


def latency_targets(run: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets for the 3-step TCC saga, from one variant's latency phase."""
    tcc = run["sagas"].get("bench_tcc3")
    if not tcc:
        return {}
    one = tcc["one"]["latency_ms"]
    out = {"one_p50_le_15ms": one["p50"] <= 15, "one_p99_le_30ms": one["p99"] <= 30,
           "sixteen_ge_200_per_s": tcc["sixteen"]["rate"] >= 200,
           # "across all processes": the broker too.
           "cpu_per_saga_le_6ms": tcc["sixteen"]["stack_cpu_ms_per_saga"]
           + tcc["sixteen"]["costs"]["cpu_ms_per_saga"].get(KAFKA_BROKER, 0.0) <= 6,
           "idle_lt_5_db_txn_per_s": run["idle"]["db_transactions_per_s_total"] < 5}
    trips = run["idle"].get("db_round_trips_per_s_total")
    if trips is not None:
        out["idle_lt_5_db_round_trips_per_s"] = trips < 5
    if "open_50" in tcc:
        lat = tcc["open_50"]["latency_ms"]
        out["open50_p50_le_25ms"] = lat["p50"] <= 25
        out["open50_p99_le_80ms"] = lat["p99"] <= 80
    if "open_100" in tcc:
        out["open100_p99_le_150ms"] = tcc["open_100"]["latency_ms"]["p99"] <= 150
    return out


__all__ = ["LatencyConfig", "floor_ms", "idle_stack", "latency_phase", "latency_targets",
           "percentile"]
