"""Human tasks at scale: the inbox query over 100,000 open tasks, claims per second through
the real path, and how late reminders fire when many fall due together.

1. **Inbox.** ``--open`` (100,000) open task rows are loaded with COPY in the shape the store
   writes (200 groups, each task offered to one or two of them, one in five also to named
   users, one in ten held by someone, due times spread over two weeks, priorities 0-100).
   Then the inbox of a person in 10 groups (``list_tasks``, scope ``inbox``, first page of
   50) and their counts are timed for ``--people`` random people: p50 and p95.
2. **Claims.** ``--sagas`` expense-like sagas are started through the store (each opens one
   task), then claimed, ``--concurrency`` at a time, through ``SagaStore.act_on_task`` (the
   saga row locked, the engine deciding, the task row and its notification written).
3. **Reminders.** The same sagas' reminders all fall due together; one ``fire_due_timers``
   loop fires them (as a worker's timer loop does) and each firing's lateness (fired minus
   due) is recorded: p50, p99, max, and reminders per second.

    python -m bench.tasks --dsn postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from pydantic import BaseModel

from coordinator.language import Saga
from coordinator.language.tasks import HumanTask
from coordinator.migrations import migrate
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from coordinator.store.task_queries import TaskFilter

GROUPS = [f"g{i}" for i in range(200)]
PEOPLE = [f"u{i}" for i in range(10_000)]
REMIND = timedelta(minutes=10)


class Ask(BaseModel):
    who: str


class Asking(Saga):
    """One task for a person and a group, reminded after ten minutes."""

    name = "asking"
    input_model = Ask
    steps = (HumanTask("decide", title=lambda ctx: f"Decide for {ctx.input.who}",
                       users=lambda ctx: [ctx.input.who], groups=("g0",),
                       remind_after=REMIND, max_reminders=1),)


def _rows(n: int, now: datetime, rng: random.Random) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(n):
        groups = rng.sample(GROUPS, rng.choice((1, 1, 2)))
        users = rng.sample(PEOPLE, 2) if rng.random() < 0.2 else []
        held = rng.choice(PEOPLE) if rng.random() < 0.1 else None
        due = now + timedelta(hours=rng.uniform(-7 * 24, 7 * 24))
        rows.append((f"t-{i}", uuid.uuid4(), "bench", "decide", "open", f"Task {i}", "",
                     users, groups, [], held, None, None, None, rng.randint(0, 100), due, 0,
                     0, None, None, None, None, None, "[]", now, None, now, None))
    return rows


async def inbox(dsn: str, n: int, people: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    conn = await asyncpg.connect(dsn)
    try:
        now = datetime.now(UTC)
        columns = [a["name"] for a in await conn.fetch(
            "SELECT attname AS name FROM pg_attribute WHERE attrelid = 'human_tasks'::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum")]
        started = time.perf_counter()
        await conn.copy_records_to_table("human_tasks", records=_rows(n, now, rng),
                                         columns=columns)
        await conn.execute("ANALYZE human_tasks")
        load_s = time.perf_counter() - started
    finally:
        await conn.close()
    store = await SagaStore.open(dsn, SagaRegistry(sagas=[Asking]), max_size=2)
    try:
        lists, counts, sizes = [], [], []
        for _ in range(people):
            f = TaskFilter(user=rng.choice(PEOPLE), groups=rng.sample(GROUPS, 10), now=now)
            t0 = time.perf_counter()
            page = await store.list_tasks(f, limit=50)
            t1 = time.perf_counter()
            await store.count_tasks(f)
            t2 = time.perf_counter()
            lists.append((t1 - t0) * 1000)
            counts.append((t2 - t1) * 1000)
            sizes.append(len(page))
    finally:
        await store.close()
    return {"open_tasks": n, "load_s": round(load_s, 1), "people": people,
            "inbox_ms": _dist(lists), "counts_ms": _dist(counts),
            "page_size_mean": round(statistics.fmean(sizes), 1)}


async def claims_and_reminders(dsn: str, sagas: int, concurrency: int) -> dict[str, Any]:
    clock_now = [datetime.now(UTC)]
    store = await SagaStore.open(dsn, SagaRegistry(sagas=[Asking]), max_size=concurrency,
                                 clock=lambda: clock_now[0])
    try:
        ids = [(await store.start_saga("asking", {"who": f"u{i}"})).record.saga_id
               for i in range(sagas)]
        tasks = [t["id"] for s in ids for t in await store.saga_tasks(s)]
        gate = asyncio.Semaphore(concurrency)

        async def claim(i: int, task_id: str) -> None:
            async with gate:
                await store.act_on_task(task_id, "claim", f"u{i}")

        started = time.perf_counter()
        await asyncio.gather(*(claim(i, t) for i, t in enumerate(tasks)))
        claim_s = time.perf_counter() - started
        due = clock_now[0] + REMIND
        fired_at: list[float] = []
        started = time.perf_counter()
        while len(fired_at) < len(tasks):
            clock_now[0] = due + timedelta(seconds=time.perf_counter() - started)
            fired = await store.fire_due_timers(limit=50)
            if not fired:
                break
            fired_at += [time.perf_counter() - started] * fired
        fire_s = time.perf_counter() - started
    finally:
        await store.close()
    return {"sagas": sagas, "concurrency": concurrency,
            "claims_per_s": round(len(tasks) / claim_s, 1),
            "reminders": len(fired_at), "reminders_per_s": round(len(fired_at) / fire_s, 1),
            "reminder_lateness_ms": _dist([s * 1000 for s in fired_at])}


def _dist(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": round(ordered[-1], 2)}


async def fresh(dsn: str) -> str:
    name = f"bench_tasks_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = dsn.rsplit("/", 1)[0] + "/" + name
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return url


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out = {"inbox": await inbox(await fresh(args.dsn), args.open, args.people, args.seed)}
    out["claims"] = await claims_and_reminders(await fresh(args.dsn), args.sagas,
                                               args.concurrency)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks", description=__doc__)
    parser.add_argument("--dsn", required=True, help="a Postgres server's postgres database")
    parser.add_argument("--open", type=int, default=100_000)
    parser.add_argument("--people", type=int, default=200)
    parser.add_argument("--sagas", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
