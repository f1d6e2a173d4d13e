"""Cost per reply of a for-each as its item count grows: Postgres and coordinator (issue 15).

``python -m bench.foreach_cost [--sizes 10,100,1000] [--replies 1000] [--rounds 3]`` measures,
for a saga of one for-each over N items (``bench.foreach_sagas:ShipEach``: ten in flight, the
body one compensable saga step) on a fresh, migrated database of the real Postgres (no Kafka):

- **store**: sagas started through ``SagaStore.start_saga``; every command taken from the
  outbox and answered OK through ``SagaStore.apply_many``, the worker's reply-apply path (one
  reply per transaction unless ``--batch``). Per reply: WAL bytes (``pg_current_wal_lsn()``
  around the applies only, the bench's own outbox reads excluded), the stored state's size
  (spine, input and node rows, ``octet_length``, averaged over samples taken as the saga
  runs), CPU of this process
  (``time.process_time``), CPU of the Postgres backend serving it (``/proc``) and wall time;
- **engine**: the same sagas driven in memory through ``advance``
  (``coordinator.engine.simulate.Simulator``), CPU per reply of ``advance`` alone and of the
  encoding the store adds: the spine and the nodes that changed (``coordinator.store.nodes``).

- **paths** (issue 37): the pure core's CPU per event on every path of a for-each of TCC
  items, forward, confirm, rollback and repair (``bench.foreach_paths``), and the most
  commands one decision sent (the bound: ``max_concurrency``).

Sizes are measured in turn within each round (same machine load); each figure is the median
over rounds, and every ratio is to the 10-item figure of the same run. ``--json PATH`` writes
the raw figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import asyncpg

from bench.foreach_paths import measure_paths, render_paths
from bench.foreach_sagas import MAX_LINES, ShipEach
from bench.stack import cpu_seconds, dsn_for
from coordinator.engine import ReplyReceived, compile_saga
from coordinator.engine.simulate import Simulator
from coordinator.migrations import migrate
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import PendingEvent, SagaStore
from coordinator.store.nodes import NodeWrites, spine_json
from participant_sdk.protocol import Outcome, decode_command, make_reply

DEFAULT_DSN = os.environ.get("SAGAFLOW_TEST_POSTGRES_URL",
                             "postgresql://postgres@127.0.0.1:55432/postgres")
#: How often (in replies) the stored state's size is sampled.
_STATE_BYTES: Final = """
SELECT avg(octet_length(s.snapshot::text) + octet_length(s.input::text)
           + coalesce((SELECT sum(octet_length(n.state::text)) FROM saga_nodes n
                       WHERE n.saga_id = s.id), 0))
FROM sagas s WHERE $1::uuid IS NULL OR s.id = $1
"""
SAMPLES_PER_SAGA = 20


def saga_input(lines: int, i: int = 0) -> dict[str, Any]:
    return {"customer_id": f"c-{i}", "amount_cents": 100, "sku": f"SKU-{i}", "quantity": 1,
            "address": "1 Main St", "lines": lines}


def sagas_for(size: int, replies: int) -> int:
    """Sagas of ``size`` items giving about ``replies`` replies (at least one saga)."""
    return max(1, replies // max(size, 1))


@dataclass
class StoreFigures:
    size: int
    sagas: int
    replies: int
    wal_bytes_per_reply: float
    state_bytes_mean: float
    state_bytes_final: float
    cpu_us_per_reply: float
    backend_cpu_us_per_reply: float
    wall_us_per_reply: float
    transactions: int


@dataclass
class EngineFigures:
    size: int
    replies: int
    advance_us_per_reply: float
    encode_us_per_reply: float


async def _take_commands(conn: asyncpg.Connection) -> list[Any]:
    rows = await conn.fetch("DELETE FROM sagaflow_outbox RETURNING id, payload")
    return [decode_command(r["payload"]) for r in sorted(rows, key=lambda r: r["id"])]


async def _lsn(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))


async def measure_store(dsn: str, size: int, sagas: int, batch: int) -> StoreFigures:
    """Start ``sagas`` sagas of ``size`` items and answer every command through the store."""
    registry = SagaRegistry(topic_prefix="bench", sagas=[ShipEach])
    # One connection: its backend's CPU is the store's share of Postgres.
    store = await SagaStore.open(dsn, registry, min_size=1, max_size=1)
    side = await asyncpg.connect(dsn)  # outbox reads, WAL positions and samples
    try:
        async with store.pool.acquire() as conn:
            backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        ids = [uuid.uuid4() for _ in range(sagas)]
        for i, sid in enumerate(ids):
            await store.start_saga(ShipEach.name, saga_input(size, i), saga_id=sid,
                                   actor="bench", trace_context={})
        wal = cpu = pg_cpu = wall = 0.0
        replies = transactions = 0
        sizes: list[int] = []
        every = max(1, size // SAMPLES_PER_SAGA)
        while commands := await _take_commands(side):
            events = [PendingEvent(c.saga_id, ReplyReceived(reply=make_reply(
                c, Outcome.OK, result={"shipment_id": str(c.message_id)}))) for c in commands]
            lsn0, pg0 = await _lsn(side), cpu_seconds(backend)
            t0, c0 = time.perf_counter(), time.process_time()
            for start in range(0, len(events), batch):
                results = await store.apply_many(events[start:start + batch])
                bad = [r for r in results if r.outcome.value != "applied"]
                if bad:
                    raise RuntimeError(f"reply not applied: {bad[0]}")
                transactions += 1
            cpu += time.process_time() - c0
            wall += time.perf_counter() - t0
            pg_cpu += cpu_seconds(backend) - pg0
            wal += await _lsn(side) - lsn0
            before = replies
            replies += len(events)
            if replies // every != before // every:
                sizes.append(int(await side.fetchval(_STATE_BYTES, ids[0])))
        statuses = await side.fetch("SELECT status, count(*) FROM sagas GROUP BY status")
        if {r["status"] for r in statuses} != {"completed"}:
            raise RuntimeError(f"sagas did not all complete: {[dict(r) for r in statuses]}")
        final = await side.fetchval(_STATE_BYTES, None)
    finally:
        await side.close()
        await store.close()
    n = max(replies, 1)
    return StoreFigures(
        size=size, sagas=sagas, replies=replies, wal_bytes_per_reply=wal / n,
        state_bytes_mean=statistics.fmean(sizes) if sizes else float(final),
        state_bytes_final=float(final), cpu_us_per_reply=cpu * 1e6 / n,
        backend_cpu_us_per_reply=pg_cpu * 1e6 / n, wall_us_per_reply=wall * 1e6 / n,
        transactions=transactions)


def measure_engine(size: int, sagas: int) -> EngineFigures:
    """The same sagas in memory: ``advance`` per reply, and encoding what it changed."""
    definition = compile_saga(ShipEach)
    t_advance = t_encode = 0.0
    replies = 0
    for i in range(sagas):
        sim = Simulator(definition, saga_id=uuid.UUID(int=i + 1), check_touched=False)
        sim.start(saga_input(size, i))
        while sim.pending:
            for command in list(sim.pending.values()):
                before = sim.current
                c0 = time.process_time()
                sim.reply_to(command, result={"shipment_id": str(command.message_id)})
                c1 = time.process_time()
                spine_json(sim.current)
                NodeWrites().add(sim.saga_id, before, sim.current, sim.decisions[-1].touched)
                t_encode += time.process_time() - c1
                t_advance += c1 - c0
                replies += 1
                sim.decisions.clear()  # kept states would grow the heap the GC walks
        if sim.current.status.value != "completed":
            raise RuntimeError(f"simulated saga ended {sim.current.status.value}")
    n = max(replies, 1)
    return EngineFigures(size=size, replies=replies, advance_us_per_reply=t_advance * 1e6 / n,
                         encode_us_per_reply=t_encode * 1e6 / n)


async def _fresh_database(admin_dsn: str) -> str:
    name = f"bench_foreach_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    conn = await asyncpg.connect(dsn_for(admin_dsn, name))
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return name


async def _drop_database(admin_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run(admin_dsn: str, sizes: Sequence[int], replies: int, rounds: int, batch: int
              ) -> dict[str, Any]:
    """Every size in turn, ``rounds`` times; a fresh database per measurement."""
    store_runs: dict[int, list[StoreFigures]] = {s: [] for s in sizes}
    engine_runs: dict[int, list[EngineFigures]] = {s: [] for s in sizes}
    measure_engine(10, 2)  # warm imports, pydantic's caches and asyncpg's statements
    name = await _fresh_database(admin_dsn)
    try:
        await measure_store(dsn_for(admin_dsn, name), 10, 2, batch)
    finally:
        await _drop_database(admin_dsn, name)
    for _ in range(rounds):
        for size in sizes:
            name = await _fresh_database(admin_dsn)
            try:
                store_runs[size].append(await measure_store(
                    dsn_for(admin_dsn, name), size, sagas_for(size, replies), batch))
            finally:
                await _drop_database(admin_dsn, name)
            engine_runs[size].append(measure_engine(size, sagas_for(size, replies)))
    return {
        "sizes": list(sizes), "rounds": rounds, "batch": batch, "replies_target": replies,
        "load_average": os.getloadavg(),
        "store": {s: _median(store_runs[s]) for s in sizes},
        "engine": {s: _median(engine_runs[s]) for s in sizes},
        "store_runs": {s: [asdict(f) for f in store_runs[s]] for s in sizes},
        "engine_runs": {s: [asdict(f) for f in engine_runs[s]] for s in sizes},
        "paths": measure_paths(sizes, replies, rounds),
    }


def _median(runs: Sequence[Any]) -> dict[str, float]:
    fields = asdict(runs[0])
    return {k: statistics.median(float(asdict(r)[k]) for r in runs) for k in fields}


ROWS = (
    ("store", "wal_bytes_per_reply", "Postgres WAL bytes per reply"),
    ("store", "state_bytes_mean", "stored state bytes (mean while running)"),
    ("store", "state_bytes_final", "stored state bytes (completed saga)"),
    ("store", "cpu_us_per_reply", "coordinator CPU µs per reply (store path)"),
    ("store", "backend_cpu_us_per_reply", "Postgres backend CPU µs per reply"),
    ("store", "wall_us_per_reply", "wall µs per reply (store path)"),
    ("engine", "advance_us_per_reply", "engine only: advance CPU µs per reply"),
    ("engine", "encode_us_per_reply", "engine only: encoding spine + changed nodes µs/reply"),
)


def render(results: dict[str, Any]) -> str:
    sizes = results["sizes"]
    base = sizes[0]
    head = f"{'figure':<52}" + "".join(f"{f'N={s}':>12}" for s in sizes)
    head += "".join(f"{f'{s}/{base}':>10}" for s in sizes[1:])
    lines = [head, "-" * len(head)]
    for part, key, label in ROWS:
        values = [results[part][s][key] for s in sizes]
        row = f"{label:<52}" + "".join(f"{v:>12,.1f}" for v in values)
        row += "".join(f"{(v / values[0] if values[0] else float('nan')):>9.1f}x"
                       for v in values[1:])
        lines.append(row)
    store = results["store"]
    shapes = [f"{int(store[s]['sagas'])}x{int(store[s]['replies'] / store[s]['sagas'])}"
              for s in sizes]
    lines.append(f"{'sagas x replies each, per measurement':<52}"
                 + "".join(f"{v:>12}" for v in shapes))
    load = ", ".join(f"{v:.2f}" for v in results["load_average"])
    lines.append(f"rounds {results['rounds']} (medians), replies per transaction "
                 f"{results['batch']}, load average at the end {load}")
    return "\n".join(lines) + "\n\n" + render_paths(results["paths"])


def _sizes(text: str) -> list[int]:
    sizes = [int(s) for s in text.split(",") if s.strip()]
    if not sizes or any(not 1 <= s <= MAX_LINES for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be 1..{MAX_LINES}, comma-separated")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.foreach_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_DSN,
                        help="admin DSN; a fresh database is created beside it per measurement")
    parser.add_argument("--sizes", type=_sizes, default=[10, 100, 1000],
                        help="comma-separated item counts; ratios are to the first")
    parser.add_argument("--replies", type=int, default=1000,
                        help="replies per measurement (sagas = replies / size, at least one)")
    parser.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    parser.add_argument("--batch", type=int, default=1,
                        help="replies per apply_many transaction (the worker batches)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.postgres, args.sizes, args.replies, args.rounds, args.batch))
    print(render(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
