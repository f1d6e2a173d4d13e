"""The bench phases: limits, end to end, scale, replicas and coordinator memory."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg

from bench.breakdown import hop_breakdown
from bench.latency import LatencyConfig, latency_phase, latency_targets
from bench.limits import kafka_round_trip, postgres_write_rate
from bench.load import Driver, watcher_connection
from bench.measure import _costs, _guarded, _load_json, _snapshot
from bench.profiles import summarise_profiles
from bench.sagas import ABSENT, Tcc3, Waiting, saga_for_steps
from bench.stack import RESULTS, Stack, proc_status_kb, wait_for
from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.hints.results import start_saga_end_hints
from coordinator.runtime.publishing import start_command_publishing
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from participant_sdk.protocol import command_topic

ALL_SAGAS = [f"bench.sagas:{name}" for name in ("Tcc1", "Tcc3", "Tcc6", "Steps3", "Waiting")]
WARMUP_SAGAS = 20


@dataclass
class BenchConfig:
    postgres: str
    kafka: str
    smoke: bool
    duration: float
    open_duration: float
    rate: float
    scale_duration: float
    warmup: float
    concurrency: int
    limit_duration: float
    pg_concurrency: int
    rss_sagas: int
    extra_rate: float = 0.0
    phases: list[str] = field(default_factory=list)
    profile: bool = False
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    #: Stacks the latency phase runs, one after the other: name -> Stack keyword arguments
    #: (``repo``, ``env``, ``direct``, ...). Default: this checkout as it is.
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"this": {}})

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("postgres")
        data.pop("kafka")
        data["variants"] = {k: {a: str(b) for a, b in v.items()} for k, v in self.variants.items()}
        return data


@contextlib.asynccontextmanager
async def _driver(stack: Stack, saga_name: str, steps: int, poll_interval: float = 0.02
                  ) -> AsyncIterator[Driver]:
    """Starts sagas as the API does: through the store, publishing each saga's first command
    itself after the commit (or, with ``stack.driver_publishes`` off, hinting the relays)."""
    registry = build_registry(stack.sagas, topic_prefix=stack.prefix)
    store = await SagaStore.open(stack.coordinator_dsn, registry, min_size=2, max_size=10)
    settings = CoordinatorSettings(dsn=stack.coordinator_dsn, kafka_bootstrap=stack.kafka,
                                   topic_prefix=stack.prefix,
                                   direct_endpoints=stack.direct_endpoints)
    publishing = await start_command_publishing(store, settings, name="bench-driver",
                                                direct=stack.driver_publishes)
    # As the API: with the direct lane the driver's own commits end sagas too.
    end_hints = await start_saga_end_hints(store, settings)
    conn = await watcher_connection(stack.coordinator_dsn)
    driver = Driver(store, conn, saga_name, steps, tag=uuid.uuid4().hex[:6],
                    poll_interval=poll_interval)
    try:
        yield driver
    finally:
        await driver.watcher.stop()
        await conn.close()
        await publishing.stop()
        if end_hints is not None:
            await end_hints.stop()
        await store.close()


async def _closed(stack: Stack, saga_name: str, steps: int, config: BenchConfig,
                  duration: float) -> dict[str, Any]:
    async with _driver(stack, saga_name, steps) as driver:
        await _guarded(stack, driver.warm_up(WARMUP_SAGAS, limit_s=180))
        await _guarded(stack, stack.coordinators_joined())
        snaps: dict[str, dict[str, Any]] = {}

        async def mark(which: str) -> None:
            stack.check_alive()
            snaps[which] = await _snapshot(stack, driver)

        result = await _guarded(stack, driver.closed_loop(
            config.concurrency, config.warmup, duration, mark))
        out = _load_json(result)
        out["concurrency"] = config.concurrency
        out["costs"] = _costs(stack, snaps["start"], snaps["end"], result.in_window)
        return out


async def _open(stack: Stack, saga_name: str, steps: int, config: BenchConfig, rate: float
                ) -> dict[str, Any]:
    async with _driver(stack, saga_name, steps) as driver:
        await _guarded(stack, driver.warm_up(WARMUP_SAGAS, limit_s=180))
        await _guarded(stack, stack.coordinators_joined())
        del driver.started_ids[:]
        result = await _guarded(stack, driver.open_loop(rate, config.open_duration))
        out = _load_json(result)
        out["target_rate"] = rate
        out["hop_breakdown"] = await hop_breakdown(stack, driver.started_ids)
        return out


# -- phases ----------------------------------------------------------------------------------


async def _limits(config: BenchConfig) -> dict[str, Any]:
    pg = await postgres_write_rate(config.postgres, concurrency=config.pg_concurrency,
                                   duration_s=config.limit_duration)
    kafka = await kafka_round_trip(config.kafka, duration_s=config.limit_duration,
                                   pings=20 if config.smoke else 300)
    return {"postgres": pg, "kafka": kafka}


async def _e2e(stack: Stack, config: BenchConfig) -> dict[str, Any]:
    closed = await _closed(stack, Tcc3.name, 3, config, config.duration)
    await asyncio.sleep(1 if config.smoke else 5)
    open_ = await _open(stack, Tcc3.name, 3, config, config.rate)
    out = {"saga": "bench.sagas:Tcc3 (three TCC steps: payments, inventory, shipping)",
           "closed_loop": closed, "open_loop": open_}
    if config.extra_rate:
        await asyncio.sleep(1 if config.smoke else 5)
        out["open_loop_extra"] = await _open(stack, Tcc3.name, 3, config, config.extra_rate)
    return out


async def _rss(stack: Stack, config: BenchConfig) -> dict[str, Any]:
    pid = stack.proc("coordinator1").pid
    async with _driver(stack, "bench_tcc1", 1) as warm:
        await _guarded(stack, warm.warm_up(WARMUP_SAGAS, limit_s=180))
    await asyncio.sleep(2)
    before = proc_status_kb(pid, "VmRSS")
    absent = command_topic(ABSENT, stack.prefix)
    base = (await stack.kafka_messages())[absent]
    count = config.rss_sagas
    peak = before
    async with _driver(stack, Waiting.name, 2) as driver:
        next_i = 0
        t0 = time.monotonic()

        async def starter() -> None:
            nonlocal next_i, peak
            while next_i < count:
                next_i += 1
                await driver.start_one(time.time())
                if next_i % 1000 == 0:
                    peak = max(peak, proc_status_kb(pid, "VmRSS"))

        await _guarded(stack, asyncio.gather(*(starter() for _ in range(16))))
        driver.watcher.pending.clear()
        insert_s = time.monotonic() - t0

        async def all_waiting() -> bool:
            nonlocal peak
            peak = max(peak, proc_status_kb(pid, "VmRSS"))
            return (await stack.kafka_messages())[absent] - base >= count

        await _guarded(stack, wait_for(all_waiting, limit_s=120 + count / 50,
                                       what=f"{count} sagas waiting on {ABSENT}", interval=1.0))
        reached_s = time.monotonic() - t0
    await asyncio.sleep(3)
    after = proc_status_kb(pid, "VmRSS")
    conn = await asyncpg.connect(stack.coordinator_dsn)
    try:
        running = await conn.fetchval(
            "SELECT count(*) FROM sagas WHERE saga_type = $1 AND status = 'running'",
            Waiting.name)
    finally:
        await conn.close()
    return {"sagas": count, "running_in_db": running, "rss_before_mb": before / 1024,
            "rss_after_mb": after / 1024, "rss_peak_mb": max(peak, after) / 1024,
            "vm_hwm_mb": proc_status_kb(pid, "VmHWM") / 1024,
            "start_seconds": insert_s, "all_waiting_seconds": reached_s}


async def run_bench(config: BenchConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    phases = set(config.phases)
    profile_dir = (RESULTS / "profiles" / time.strftime("%Y%m%dT%H%M%S")
                   if config.profile else None)
    if "limits" in phases:
        out["limits"] = await _limits(config)
    if "latency" in phases:
        async with contextlib.AsyncExitStack() as variants:
            stacks = {name: await variants.enter_async_context(Stack(
                config.postgres, config.kafka, ALL_SAGAS, label=f"latency-{name}", **options))
                for name, options in config.variants.items()}
            out["latency"] = await latency_phase(stacks, config.latency, _driver)
        for run in out["latency"].values():
            run["targets"] = latency_targets(run)
    async with contextlib.AsyncExitStack() as stacks:
        shared: Stack | None = None
        if config.smoke:
            shared = await stacks.enter_async_context(
                Stack(config.postgres, config.kafka, ALL_SAGAS, label="smoke"))

        if "e2e" in phases:
            async with contextlib.AsyncExitStack() as local:
                stack = shared if shared is not None else await local.enter_async_context(Stack(
                    config.postgres, config.kafka, ALL_SAGAS, label="e2e",
                    profile_dir=profile_dir))
                out["e2e"] = await _e2e(stack, config)
            if profile_dir is not None:
                out["e2e"]["profile"] = summarise_profiles(profile_dir)
        if "scale" in phases:
            points = {}
            for steps in (1, 3, 6):
                saga = saga_for_steps(steps)
                async with contextlib.AsyncExitStack() as local:
                    stack = shared if shared is not None else await local.enter_async_context(Stack(
                        config.postgres, config.kafka, ALL_SAGAS, label=f"steps{steps}"))
                    points[str(steps)] = await _closed(stack, saga.name, steps, config,
                                                       config.scale_duration)
            out["scale_steps"] = points
        if "replicas" in phases:
            async with contextlib.AsyncExitStack() as local:
                stack = await local.enter_async_context(Stack(
                    config.postgres, config.kafka, ALL_SAGAS, label="replicas",
                    coordinators=2, relays=2))
                out["replicas"] = {"coordinators": 2, "relays": 2, "steps": 3,
                                   **await _closed(stack, Tcc3.name, 3, config,
                                                   config.scale_duration)}
        if "rss" in phases:
            async with contextlib.AsyncExitStack() as local:
                stack = shared if shared is not None else await local.enter_async_context(Stack(
                    config.postgres, config.kafka, ALL_SAGAS, label="rss",
                    participants=("payments",)))
                out["coordinator_memory"] = await _rss(stack, config)
    out["ratios"] = _ratios(out)
    out["targets"] = _targets(out, config)
    return out


def _ratios(out: dict[str, Any]) -> dict[str, Any]:
    limits = out.get("limits")
    closed = out.get("e2e", {}).get("closed_loop")
    if not limits or not closed:
        return {}
    rate = closed["rate"]
    costs = closed["costs"]
    pg = limits["postgres"]["rate"]
    kafka = limits["kafka"]["stream_rate"]
    return {
        "saga_rate_over_pg_write_rate": rate / pg,
        "saga_rate_over_kafka_stream_rate": rate / kafka,
        "pg_xact_rate_of_stack_over_pg_write_rate":
            rate * costs["pg_xacts_per_saga_total"] / pg,
        "kafka_message_rate_of_stack_over_kafka_stream_rate":
            rate * costs["kafka_per_saga"]["total"] / kafka,
        "ceiling_by_pg_sagas_per_s": pg / max(costs["pg_xacts_per_saga_total"], 1e-9),
        "ceiling_by_kafka_sagas_per_s": kafka / max(costs["kafka_per_saga"]["total"], 1e-9),
    }


def _targets(out: dict[str, Any], config: BenchConfig) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    e2e = out.get("e2e")
    if e2e:
        lat = e2e["open_loop"]["latency_ms"]
        targets["sustained_ge_300_per_s"] = e2e["closed_loop"]["rate"] >= 300
        targets["p50_le_50_ms"] = lat["p50"] <= 50
        targets["p99_le_250_ms"] = lat["p99"] <= 250
    mem = out.get("coordinator_memory")
    if mem:
        targets["rss_lt_200_mb"] = mem["rss_peak_mb"] < 200
        targets["rss_measured_at_sagas"] = mem["sagas"]
    return targets


