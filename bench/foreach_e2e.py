"""A 100-item for-each against the linear 3-step TCC saga on the real stack (issue 15).

``python -m bench.foreach_e2e [--duration 30] [--rounds 2]`` starts one bench stack
(:class:`bench.stack.Stack`: coordinator worker, outbox relay and the three participants as
separate processes, fresh databases and topics on real Postgres and Kafka) and measures, in
turn (A B A B ...) on that same stack, closed loops of:

- ``bench.sagas:Tcc3``: payments ``charge``, inventory ``reserve``, shipping ``book``, all TCC
  (try, then confirm: two replies per step), ``--linear-concurrency`` sagas in flight;
- ``bench.foreach_sagas:ShipEach``: one for-each over ``--lines`` items (default 100), ten
  at a time, each item the shipping ``ship`` saga step (one reply per step),
  ``--foreach-concurrency`` sagas in flight.

The defaults put about 100 steps in flight in both. Every saga succeeds (no injected
failures, unlike ``python -m bench``), so steps per saga are exact. The cost of a window is
that of :func:`bench.measure._costs` (CPU of every process from /proc, Postgres backends of the
stack included; Kafka replies from end offsets), divided by the replies counted in the window
rather than by sagas, so sagas straddling the window's edges do not skew it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.foreach_sagas import ShipEach
from bench.load import Driver, Outcome, watcher_connection
from bench.measure import _costs, _guarded, _snapshot
from bench.runner import WARMUP_SAGAS
from bench.sagas import Tcc3
from bench.stack import Stack
from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.hints.relay import start_relay_waker
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore

SAGAS = ["bench.sagas:Tcc3", "bench.foreach_sagas:ShipEach"]


class SucceedingDriver(Driver):
    """The bench driver with inputs that never fail, ``lines`` items for the for-each."""

    def __init__(self, *args: Any, lines: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lines = lines
        self._n = 0

    async def start_one(self, due_wall: float) -> asyncio.Future[Outcome]:
        self._n += 1
        sid = uuid.uuid4()
        fut = self.watcher.watch(sid, due_wall)
        self.started_ids.append(sid)
        data: dict[str, Any] = {"customer_id": f"c{self.tag}-{self._n}", "amount_cents": 100,
                                "sku": f"SKU-{self.tag}-{self._n}", "quantity": 1,
                                "address": "1 Main St"}
        if self.saga_type == ShipEach.name:
            data["lines"] = self.lines
        await self.store.start_saga(self.saga_type, data, saga_id=sid, actor="bench",
                                    trace_context={})
        return fut


@contextlib.asynccontextmanager
async def _driver(stack: Stack, saga_type: str, lines: int) -> AsyncIterator[Driver]:
    registry = build_registry(stack.sagas, topic_prefix=stack.prefix)
    store = await SagaStore.open(stack.coordinator_dsn, registry, min_size=2, max_size=10)
    # Hint the relay after each start, as the API does (an idle relay waits for hints).
    waker = await start_relay_waker(store, CoordinatorSettings(dsn=stack.coordinator_dsn))
    conn = await watcher_connection(stack.coordinator_dsn)
    driver = SucceedingDriver(store, conn, saga_type, 0, tag=uuid.uuid4().hex[:6], lines=lines)
    try:
        yield driver
    finally:
        await driver.watcher.stop()
        await conn.close()
        if waker is not None:
            await waker.stop()
        await store.close()


async def closed_window(stack: Stack, saga_type: str, lines: int, concurrency: int,
                        warmup: float, duration: float, warm_sagas: int) -> dict[str, Any]:
    """One closed-loop window: rate, latency and the stack's costs per saga and per reply."""
    async with _driver(stack, saga_type, lines) as driver:
        await _guarded(stack, driver.warm_up(warm_sagas, limit_s=300))
        snaps: dict[str, dict[str, Any]] = {}

        async def mark(which: str) -> None:
            stack.check_alive()
            snaps[which] = await _snapshot(stack, driver)

        result = await _guarded(stack, driver.closed_loop(concurrency, warmup, duration, mark))
    costs = _costs(stack, snaps["start"], snaps["end"], result.in_window)
    replies = costs["kafka_per_saga"]["replies"] * max(result.in_window, 1)
    cpu_ms = {k: v * max(result.in_window, 1) for k, v in costs["cpu_ms_per_saga"].items()}
    return {"saga": saga_type, "concurrency": concurrency, "rate": result.rate,
            "sagas": result.in_window, "statuses": result.statuses,
            "latency_ms": result.latency_ms(), "replies_in_window": replies,
            "cpu_ms_in_window": cpu_ms, "costs": costs}


def _per_reply(window: dict[str, Any]) -> dict[str, float]:
    n = max(window["replies_in_window"], 1)
    return {k: v / n for k, v in window["cpu_ms_in_window"].items()}


async def run(admin: str, kafka: str, lines: int, linear_concurrency: int,
              foreach_concurrency: int, warmup: float, duration: float, rounds: int,
              warm_sagas: int) -> dict[str, Any]:
    plan = [(Tcc3.name, linear_concurrency), (ShipEach.name, foreach_concurrency)]
    windows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in plan}
    async with Stack(admin, kafka, SAGAS, label="foreach") as stack:
        for r in range(rounds):
            order = plan if r % 2 == 0 else plan[::-1]
            for name, concurrency in order:
                windows[name].append(await closed_window(
                    stack, name, lines, concurrency, warmup, duration, warm_sagas))
                await asyncio.sleep(2)
    return {"lines": lines, "rounds": rounds, "duration_s": duration,
            "load_average": os.getloadavg(), "windows": windows,
            "summary": summarise(windows, lines, linear_concurrency, foreach_concurrency)}


def summarise(windows: dict[str, list[dict[str, Any]]], lines: int, linear_concurrency: int,
              foreach_concurrency: int) -> dict[str, Any]:
    """Medians over each saga's windows: throughput, wall time and CPU per step and reply."""
    plan = [(Tcc3.name, linear_concurrency, 2, 3), (ShipEach.name, foreach_concurrency, 1, lines)]
    summary: dict[str, Any] = {}
    for name, concurrency, replies_per_step, steps_per_saga in plan:
        runs = windows[name]
        per_reply = [_per_reply(w) for w in runs]
        total = [sum(p.values()) for p in per_reply]
        summary[name] = {
            "concurrency": concurrency, "steps_per_saga": steps_per_saga,
            "replies_per_step": replies_per_step,
            "sagas_per_s": statistics.median(w["rate"] for w in runs),
            # From the replies counted in the window: exact, whatever straddles its edges.
            "steps_per_s": statistics.median(
                w["replies_in_window"] / w["costs"]["window_s"] / replies_per_step
                for w in runs),
            "wall_ms_per_saga_p50": statistics.median(w["latency_ms"]["p50"] for w in runs),
            "replies_per_saga": statistics.median(
                w["costs"]["kafka_per_saga"]["replies"] for w in runs),
            "cpu_ms_per_reply_total": statistics.median(total),
            "cpu_ms_per_step_total": statistics.median(total) * replies_per_step,
            "cpu_ms_per_reply": {k: statistics.median(p[k] for p in per_reply)
                                 for k in per_reply[0]},
            "statuses": [w["statuses"] for w in runs],
        }
    return summary


def render(results: dict[str, Any]) -> str:
    lin, fe = results["summary"][Tcc3.name], results["summary"][ShipEach.name]
    lines = results["lines"]
    rows = [
        ("sagas in flight (closed loop)", lin["concurrency"], fe["concurrency"]),
        ("steps per saga", lin["steps_per_saga"], fe["steps_per_saga"]),
        ("replies per step", lin["replies_per_step"], fe["replies_per_step"]),
        ("replies per saga (measured)", lin["replies_per_saga"], fe["replies_per_saga"]),
        ("sagas/s", lin["sagas_per_s"], fe["sagas_per_s"]),
        ("steps/s (from replies in the window)", lin["steps_per_s"], fe["steps_per_s"]),
        ("wall ms per saga (p50)", lin["wall_ms_per_saga_p50"], fe["wall_ms_per_saga_p50"]),
        ("CPU ms per step, all processes", lin["cpu_ms_per_step_total"],
         fe["cpu_ms_per_step_total"]),
        ("CPU ms per reply, all processes", lin["cpu_ms_per_reply_total"],
         fe["cpu_ms_per_reply_total"]),
    ]
    rows += [(f"  CPU ms per reply: {k}", lin["cpu_ms_per_reply"][k], fe["cpu_ms_per_reply"][k])
             for k in lin["cpu_ms_per_reply"]]
    head = f"{'figure':<56}{'3-step TCC':>14}{f'for-each x{lines}':>16}{'ratio':>9}"
    out = [head, "-" * len(head)]
    for label, a, b in rows:
        ratio = f"{b / a:>8.2f}x" if isinstance(a, float) and a else ""
        out.append(f"{label:<56}{a:>14,.2f}{b:>16,.2f}{ratio:>9}")
    load = ", ".join(f"{v:.2f}" for v in results["load_average"])
    out.append(f"medians over {results['rounds']} window(s) of {results['duration_s']:.0f} s "
               f"each, alternating; load average at the end {load}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.foreach_e2e",
                                description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    p.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--lines", type=int, default=100, help="items of the for-each")
    p.add_argument("--linear-concurrency", type=int, default=100)
    p.add_argument("--foreach-concurrency", type=int, default=10)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--duration", type=float, default=30.0, help="window per run, seconds")
    p.add_argument("--rounds", type=int, default=2, help="windows per saga, alternating")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and windows (CI)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)
    if a.smoke:
        a.lines, a.linear_concurrency, a.foreach_concurrency = min(a.lines, 5), 4, 2
        a.warmup, a.duration, a.rounds = 1.0, 3.0, 1
    warm = 2 if a.smoke else WARMUP_SAGAS
    t0 = time.monotonic()
    results = asyncio.run(run(a.postgres, a.kafka, a.lines, a.linear_concurrency,
                              a.foreach_concurrency, a.warmup, a.duration, a.rounds, warm))
    results["elapsed_s"] = time.monotonic() - t0
    print(render(results))
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
