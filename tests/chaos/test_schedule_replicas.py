"""Schedules under fire: two coordinator replicas, one SIGKILLed again and again, schedules
due every second. The auditor checks that every nominal time of the window ran exactly once
(one saga with the derived id) or was recorded as skipped by the declared policy, and that
no other saga was started."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from coordinator.schedules import (
    IntervalSpec,
    Overlap,
    ScheduleDefinition,
    ScheduleSpec,
    run_saga_id,
)
from coordinator.schedules import repository as repo
from tests.chaos.conftest import MakeStack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

SEED = 2020
WINDOW = timedelta(seconds=20)
ORDER = {"order_id": "scheduled", "customer_id": "c1", "amount_cents": 100, "sku": "sku-1",
         "quantity": 1, "address": "1 Main St"}


async def test_schedules_fire_exactly_once_with_a_replica_killed(make_stack: MakeStack) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    stack = await make_stack()
    stack.start_default(coordinators=2)
    await stack.wait_ready()
    dsn = stack.dsn("coordinator")
    begin = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    end = begin + WINDOW
    every = ScheduleSpec(intervals=(IntervalSpec(every=timedelta(seconds=1)),),
                         start_at=begin, end_at=end)
    definitions = [
        ScheduleDefinition(id=f"chaos-{o.value}", saga_type="order", input=ORDER, spec=every,
                           overlap=o, catchup_window=timedelta(minutes=5))
        for o in (Overlap.ALLOW_ALL, Overlap.SKIP, Overlap.BUFFER_ONE)
    ]
    conn = await asyncpg.connect(dsn)
    try:
        for d in definitions:
            await repo.insert(conn, d, now=datetime.now(UTC), actor="chaos")
    finally:
        await conn.close()

    kills = 0
    deadline = time.monotonic() + (end - datetime.now(UTC)).total_seconds()
    while time.monotonic() < deadline:
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        kills += stack.kill("coordinator-1")
        await asyncio.sleep(rng.uniform(0.1, 1.0))
        stack.start("coordinator-1")

    conn = await asyncpg.connect(dsn)
    try:
        # Wait until every schedule handled its whole window (the last buffered run too).
        for _ in range(200):
            pending = await conn.fetchval(
                "SELECT count(*) FROM schedules WHERE next_fire_at IS NOT NULL "
                "OR buffered <> '[]'::jsonb")
            if pending == 0:
                break
            await asyncio.sleep(0.2)
        violations: list[str] = []
        lags: list[float] = []
        all_ids: set[object] = set()
        counts: dict[str, dict[str, int]] = {}
        for d in definitions:
            nominal = d.spec.between(begin, end, 1000)
            rows = await conn.fetch(
                "SELECT nominal_at, outcome, saga_id, started_at FROM schedule_runs "
                "WHERE schedule_id = $1 ORDER BY nominal_at", d.id)
            recorded = {r["nominal_at"]: r for r in rows}
            if sorted(recorded) != nominal:
                violations.append(f"{d.id}: recorded times differ from the nominal times: "
                                  f"missing {sorted(set(nominal) - set(recorded))}, extra "
                                  f"{sorted(set(recorded) - set(nominal))}")
            allowed = {"started", "skipped"} if d.overlap is not Overlap.ALLOW_ALL \
                else {"started"}
            for t, r in recorded.items():
                sid = run_saga_id(d.id, t)
                exists = await conn.fetchval("SELECT count(*) FROM sagas WHERE id = $1", sid)
                if r["outcome"] not in allowed:
                    violations.append(f"{d.id}@{t}: outcome {r['outcome']}")
                if (r["outcome"] == "started") != (exists == 1):
                    violations.append(f"{d.id}@{t}: {r['outcome']} but {exists} sagas")
                if r["outcome"] == "started":
                    all_ids.add(sid)
                    if d.overlap is Overlap.ALLOW_ALL:  # the others wait for their turn
                        lags.append((r["started_at"] - t).total_seconds())
                counts.setdefault(d.id, {}).setdefault(r["outcome"], 0)
                counts[d.id][r["outcome"]] += 1
            if counts.get(d.id, {}).get("started", 0) == 0:
                violations.append(f"{d.id}: nothing ran")
            # Each time was handled by one replica: the schedule's counters agree with its runs.
            state = repo.state_of(await repo.get(conn, d.id))
            mine = counts.get(d.id, {})
            if (state.fired_count, state.skipped_count) != (mine.get("started", 0),
                                                            mine.get("skipped", 0)):
                violations.append(f"{d.id}: counters {state.fired_count} fired, "
                                  f"{state.skipped_count} skipped disagree with {mine}")
        total = await conn.fetchval("SELECT count(*) FROM sagas")
        if total != len(all_ids):
            violations.append(f"{total} sagas exist, {len(all_ids)} runs were recorded")
        if kills < 8:
            violations.append(f"only {kills} kills")
    finally:
        await conn.close()
    lags.sort()
    print(f"\nschedule chaos: {kills} SIGKILLs of coordinator-1, outcomes {counts}, "
          f"allow_all fire lag p50 {statistics.median(lags):.3f} s, max {lags[-1]:.3f} s, "
          f"{time.monotonic() - started:.1f} s wall")
    crashed = [n for n in stack.dead_processes() if stack.procs[n].kills == 0]
    assert not crashed, [stack.log_tail(n) for n in crashed]
    assert not violations, violations
