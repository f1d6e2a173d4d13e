"""Timer firing rate: N sagas asleep, all their timers due together, fired and applied by one
``fire_due_timers`` loop; and the database bytes a sleeping saga costs.

Each saga sleeps an hour, then sends a command. The loop fires with ``now`` an hour and a
minute ahead, so every timer is due at once; each fire is a real state change (row locked,
core run, history appended, node rows rewritten, the command enqueued in the outbox, the
timer deleted). The firing store is a fresh one (nothing cached: the coordinator that fires a
days-long sleep is rarely the one that started it), unless ``--warm``.

    python -m bench.timers --dsn postgresql://postgres@127.0.0.1:55432/postgres --sagas 20000

``--processes N`` fires from N processes at once (N coordinator replicas sharing the due
timers through ``SKIP LOCKED``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import BaseModel

from bench.stack import cpu_seconds
from coordinator.config.gc_tuning import WORKER_GC_THRESHOLDS, tune_gc
from coordinator.language.nodes import Sleep
from coordinator.language.saga import Saga, SagaStep
from coordinator.migrations import migrate
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore

#: The tables a sleeping saga has rows in (the outbox too: it must stay empty until it wakes).
SAGA_TABLES = ("sagas", "saga_history", "saga_nodes", "saga_snapshots", "timers",
               "sagaflow_outbox", "saga_signals")
NAP = timedelta(hours=1)


class NapInput(BaseModel):
    order_id: str


class Napper(Saga):
    """Sleep an hour, then ask the desk for something."""

    name = "napper"
    version = 1
    input_model = NapInput
    steps = (
        Sleep("nap", NAP),
        SagaStep("after", "desk", "book", compensable=False),
    )


def registry() -> SagaRegistry:
    return SagaRegistry(topic_prefix="bench", sagas=[Napper])


@asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """A new migrated database on the server of ``admin_dsn``, dropped on exit."""
    name = f"bench_timers_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = admin_dsn.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(url)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def database_bytes(dsn: str) -> int:
    """Total size (heap, indexes, TOAST) of the tables a saga has rows in, after a VACUUM
    (so dead rows left by the starts' own updates are not counted as live cost)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE)")
        total: int = await conn.fetchval(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "WHERE c.relname = ANY($1::text[]) AND c.relkind = 'r'", list(SAGA_TABLES))
        return total
    finally:
        await conn.close()


async def start_sleepers(store: SagaStore, count: int, *, concurrency: int = 8,
                         offset: int = 0) -> float:
    """Start ``count`` nappers (``concurrency`` starts at a time); the seconds it took."""
    next_index = iter(range(offset, offset + count))

    async def one() -> None:
        for i in next_index:
            await store.start_saga("napper", {"order_id": f"n{i}"}, actor="bench")

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return time.perf_counter() - began


@dataclass(frozen=True)
class Firing:
    fired: int
    seconds: float
    calls: int
    commands: int
    #: CPU seconds of the firing processes (user + system), when fired from child processes.
    cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.fired / self.seconds if self.seconds else 0.0


async def fire_all(store: SagaStore, *, limit: int) -> Firing:
    """Fire every due timer with one loop (as the worker's timer loop does when it wakes)."""
    now = datetime.now(UTC) + NAP + timedelta(minutes=1)
    fired = calls = 0
    began = time.perf_counter()
    while True:
        got = await store.fire_due_timers(now=now, limit=limit)
        calls += 1
        if got == 0:
            break
        fired += got
    seconds = time.perf_counter() - began
    async with store.pool.acquire() as conn:
        commands = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox")
    return Firing(fired, seconds, calls, commands)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


async def server_cpu(store: SagaStore) -> Callable[[], float]:
    """A function reading the CPU seconds used so far by every process of this store's
    Postgres server (the postmaster's children: backends, WAL writer, checkpointer)."""
    async with store.pool.acquire() as conn:
        postmaster = _parent(await conn.fetchval("SELECT pg_backend_pid()"))

    def read() -> float:
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
        return sum(cpu_seconds(p) for p in pids if _parent(p) == postmaster)
    return read


async def fire_in_processes(dsn: str, processes: int, *, limit: int) -> Firing:
    """Fire every due timer from ``processes`` separate processes at once, each with its own
    fresh store, as that many coordinator replicas do (``SKIP LOCKED`` shares the timers
    out); the rate runs from the first process's start to the last one's end."""
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.timers", "--fire", dsn, "--limit", str(limit),
        stdout=asyncio.subprocess.PIPE) for _ in range(processes)]
    outs = []
    for proc in procs:
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"firing process exited with {proc.returncode}")
        outs.append(json.loads(out))
    seconds = max(o["end"] for o in outs) - min(o["began"] for o in outs)
    conn = await asyncpg.connect(dsn)
    try:
        commands = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox")
    finally:
        await conn.close()
    return Firing(sum(o["fired"] for o in outs), seconds, sum(o["calls"] for o in outs),
                  commands, sum(o["cpu"] for o in outs))


async def _fire_child(dsn: str, limit: int) -> None:
    """One firing process of :func:`fire_in_processes`: wall-clock start, end and counts."""
    tune_gc()
    async with await SagaStore.open(dsn, registry(), max_size=2) as store:
        began = time.time()
        firing = await fire_all(store, limit=limit)
        print(json.dumps({"began": began, "end": time.time(), "fired": firing.fired,
                          "calls": firing.calls, "cpu": time.process_time()}))


def time_stages(store: SagaStore) -> defaultdict[str, float]:
    """Wrap the stages of a fire (load the stored states, run the core, write) to add up the
    seconds each takes; the rest of a call is the claim, the row locks and the commit."""
    from coordinator.store import _apply, _signalling, _starts, _transactions

    spent: defaultdict[str, float] = defaultdict(float)

    def timed_async(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapper(*args: Any, **kw: Any) -> Any:
            began = time.perf_counter()
            try:
                return await fn(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - began
        return wrapper

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kw: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent[name] += time.perf_counter() - began
        return wrapper

    store._load_bases = timed_async("load states", store._load_bases)  # type: ignore[method-assign]
    store._write = timed_async("write", store._write)  # type: ignore[method-assign]
    store.fire_due_timers = timed_async("total", store.fire_due_timers)  # type: ignore[method-assign]
    for module in (_apply, _signalling, _starts, _transactions):  # each module calling the core
        module.advance = timed("core (advance)", module.advance)  # type: ignore[attr-defined]
    return spent


async def main(dsn: str, sagas: int, limit: int, warm: bool, stages: bool,
               processes: int, gc_thresholds: tuple[int, int, int]) -> None:
    spent: defaultdict[str, float] = defaultdict(float)
    cpu: tuple[float, float] | None = None
    async with fresh_database(dsn) as url:
        empty = await database_bytes(url)
        async with await SagaStore.open(url, registry(), max_size=9) as store:
            setup = await start_sleepers(store, sagas)
            full = await database_bytes(url)
            if warm:
                spent = time_stages(store) if stages else spent
                firing = await fire_all(store, limit=limit)
        tune_gc(gc_thresholds)  # as ``coordinator worker`` does
        if processes > 1:
            firing = await fire_in_processes(url, processes, limit=limit)
        elif not warm:
            async with await SagaStore.open(url, registry(), max_size=2) as store:
                spent = time_stages(store) if stages else spent
                postgres = await server_cpu(store)
                before = (time.process_time(), postgres())
                firing = await fire_all(store, limit=limit)
                cpu = (time.process_time() - before[0], postgres() - before[1])
    per_saga = (full - empty) / sagas
    print(f"setup      : {sagas:,} sleeping sagas started in {setup:.1f}s "
          f"({sagas / setup:,.0f}/s, 8 concurrent)")
    print(f"storage    : {per_saga:,.0f} bytes per sleeping saga "
          f"({(full - empty) / 2**20:,.1f} MiB for {sagas:,}; tables {', '.join(SAGA_TABLES)})")
    print(f"firing     : {firing.fired:,} timers fired and applied in {firing.seconds:.2f}s = "
          f"{firing.rate:,.0f}/s (limit {limit}, {firing.calls} calls, {processes} "
          f"process(es), {'warm' if warm else 'cold'} cache, gc thresholds {gc_thresholds}); "
          f"{firing.commands:,} commands enqueued")
    if cpu is not None:
        python, server = (c / firing.fired * 1e6 for c in cpu)
        print(f"cpu        : {python + server:,.0f} us per timer = this process {python:,.0f} "
              f"+ the Postgres server {server:,.0f} (a ceiling of "
              f"{(os.cpu_count() or 1) / (python + server) * 1e6:,.0f}/s on "
              f"{os.cpu_count()} cores with nothing else running)")
    if spent:
        total = spent.pop("total")
        rest = total - sum(spent.values())
        parts = [f"{k} {v / firing.fired * 1e6:,.0f}" for k, v in spent.items()]
        print(f"per timer  : {total / firing.fired * 1e6:,.0f} us = {', '.join(parts)}, "
              f"claim+locks+commit {rest / firing.fired * 1e6:,.0f} (us)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--sagas", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=100, help="timers per fire_due_timers call")
    parser.add_argument("--warm", action="store_true",
                        help="fire with the store that started the sagas (states cached)")
    parser.add_argument("--stages", action="store_true",
                        help="also print where a timer's time goes (wraps the store's stages)")
    parser.add_argument("--processes", type=int, default=1,
                        help="fire from this many processes at once (as many replicas)")
    parser.add_argument("--gc-thresholds", default=",".join(map(str, WORKER_GC_THRESHOLDS)),
                        help="of the firing process (CPython's own: 700,10,10)")
    parser.add_argument("--fire", metavar="DSN", help=argparse.SUPPRESS)  # a firing child
    a = parser.parse_args()
    if a.processes < 1 or (a.processes > 1 and (a.warm or a.stages)):
        parser.error("--processes must be >= 1; --warm and --stages need one process")
    if a.fire:
        asyncio.run(_fire_child(a.fire, a.limit))
    else:
        thresholds = tuple(int(t) for t in a.gc_thresholds.split(","))
        if len(thresholds) != 3:
            parser.error("--gc-thresholds takes three numbers")
        asyncio.run(main(a.dsn, a.sagas, a.limit, a.warm, a.stages, a.processes,
                         thresholds))  # type: ignore[arg-type]
