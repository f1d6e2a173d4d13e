"""``python -m bench.ui_pages``: how fast the web UI's pages load with many sagas stored.

Creates a throw-away database, starts one real order saga through the store (its rows are
the template), copies it into ``--sagas`` rows (100,000) with one ``INSERT … SELECT
generate_series`` (ids, statuses and creation times varied: 90 % completed, 5 % compensated,
3 % running, 2 % dead, spread over 30 days), runs ``ANALYZE``, starts the API with the UI as
its own process, signs in and times each page ``--repeat`` times after a warm-up. Figures are
client-side wall time per page over HTTP on the same machine (the server render included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.stack import dsn_for
from bench.standalone import RESULTS, fresh_database
from coordinator.migrations import migrate
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore

SAGA = "examples.order_saga:OrderSaga"
TOKEN = "bench-operator-token"

_COPY = """
INSERT INTO sagas (id, saga_type, saga_version, status, snapshot, input, input_hash,
                   trace_context,
                   history_seq, created_at, updated_at, last_progress_at, stage, active_steps,
                   busiest_step, busiest_phase, busiest_attempt)
SELECT g.id, t.saga_type, t.saga_version, g.status,
       jsonb_set(jsonb_set(jsonb_set(t.snapshot::jsonb, '{saga_id}', to_jsonb(g.id::text)),
                           '{status}', to_jsonb(g.status)),
                 '{dead_step}', CASE WHEN g.status = 'dead' THEN '"reserve_funds"'::jsonb
                                     ELSE 'null'::jsonb END)::json,
       t.input, t.input_hash, t.trace_context, t.history_seq, g.at, g.at, g.at,
       CASE WHEN g.status IN ('running', 'compensating', 'dead') THEN t.stage ELSE 'done' END,
       t.active_steps, t.busiest_step, t.busiest_phase, t.busiest_attempt
FROM sagas t,
     LATERAL (SELECT gen_random_uuid() AS id,
                     now() - (i * (interval '30 days' / $2)) AS at,
                     CASE WHEN i % 100 < 90 THEN 'completed' WHEN i % 100 < 95 THEN 'compensated'
                          WHEN i % 100 < 98 THEN 'running' ELSE 'dead' END AS status
              FROM generate_series(1, $2) AS i) g
WHERE t.id = $1
"""

#: Every copy gets the template's node rows.
_COPY_NODES = """
INSERT INTO saga_nodes (saga_id, key, ordinal, state)
SELECT s.id, n.key, n.ordinal, n.state FROM sagas s, saga_nodes n
WHERE n.saga_id = $1 AND s.id <> $1
"""


async def seed(dsn: str, count: int) -> str:
    """``count`` saga rows beside one real saga; returns the real one's id."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    registry = build_registry([SAGA], topic_prefix="bench")
    async with await SagaStore.open(dsn, registry, max_size=2) as store:
        started = await store.start_saga("order", {
            "order_id": "bench-1", "customer_id": "alice", "amount_cents": 100, "sku": "BOOK-1",
            "quantity": 1, "address": "1 Main St"}, actor="bench")
        template = started.record.saga_id
        t0 = time.perf_counter()
        async with store.pool.acquire() as conn:
            await conn.execute(_COPY, template, count)
            await conn.execute(_COPY_NODES, template)
            await conn.execute("ANALYZE sagas")
        print(f"inserted {count:,} sagas in {time.perf_counter() - t0:.1f} s")
    return str(template)


def _api(dsn: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SAGAFLOW_API_TOKENS": f"bench:operator:{TOKEN}",
           "SAGAFLOW_UI_SESSION_SECRET": "bench-secret", "SAGAFLOW_API_RUN_JOBS": "false",
           "SAGAFLOW_WAKE_RELAYS": "false"}
    env.pop("SAGAFLOW_JAEGER_QUERY", None)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator", "api", "--dsn", dsn, "--saga", SAGA,
             "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT)


def _signed_in(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    deadline = time.monotonic() + 30
    while True:
        try:
            login = client.get("/ui/login")
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text)
    assert csrf is not None
    answer = client.post("/ui/login", data={"csrf_token": csrf.group(1), "token": TOKEN})
    assert answer.status_code == 303, answer.text
    return client


def pages(client: httpx.Client, template: str) -> dict[str, str]:
    first = client.get("/ui/sagas").text
    cursor = re.search(r'id="next-page" href="([^"]+)"', first)
    assert cursor is not None, "no second page"
    return {
        "overview": "/ui/",
        "sagas (first page)": "/ui/sagas",
        "sagas (page 2, keyset)": cursor.group(1).replace("&amp;", "&"),
        "sagas?status=running": "/ui/sagas?status=running",
        "sagas?type=order&status=dead": "/ui/sagas?type=order&status=dead",
        "sagas?stuck=yes": "/ui/sagas?stuck=yes",
        "sagas?q=<4-hex prefix>": f"/ui/sagas?q={template[:4]}",
        "saga detail": f"/ui/sagas/{template}",
        "dead sagas": "/ui/dead",
        "saga types": "/ui/types",
        "repair jobs": "/ui/jobs",
        "dead letters": "/ui/dead-letters",
    }


def measure(client: httpx.Client, path: str, repeat: int) -> dict[str, float]:
    for _ in range(2):
        assert client.get(path).status_code == 200, path
    times = []
    size = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert answer.status_code == 200, path
        size = len(answer.content)
    times.sort()
    return {"p50_ms": statistics.median(times),
            "p95_ms": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
            "max_ms": times[-1], "kb": size / 1024}


@asynccontextmanager
async def seeded(args: argparse.Namespace) -> AsyncIterator[tuple[str, str]]:
    """A fresh seeded database, or ``--keep NAME``: seeded once, kept for the next run."""
    if args.keep is None:
        async with fresh_database(args.postgres) as dsn:
            yield dsn, await seed(dsn, args.sagas)
        return
    dsn = dsn_for(args.postgres, args.keep)
    admin = await asyncpg.connect(args.postgres)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", args.keep):
            await admin.execute(f'CREATE DATABASE "{args.keep}"')
            await admin.close()
            yield dsn, await seed(dsn, args.sagas)
            return
    finally:
        if not admin.is_closed():
            await admin.close()
    conn = await asyncpg.connect(dsn)
    try:
        template = await conn.fetchval("SELECT id FROM sagas ORDER BY history_seq DESC, "
                                       "created_at DESC LIMIT 1")
    finally:
        await conn.close()
    yield dsn, str(template)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with seeded(args) as (dsn, template):
        args.out.mkdir(parents=True, exist_ok=True)
        port = args.port
        proc = _api(dsn, port, args.out / "ui_pages-api.log")
        try:
            client = await asyncio.to_thread(_signed_in, f"http://127.0.0.1:{port}")
            found = {name: await asyncio.to_thread(measure, client, path, args.repeat)
                     for name, path in pages(client, template).items()}
            client.close()
        finally:
            proc.terminate()
            proc.wait(10)
    return {"sagas": args.sagas, "repeat": args.repeat, "pages": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--sagas", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--port", type=int, default=18481)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", metavar="DATABASE",
                        help="seed this database once and keep it for later runs")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print(f"\n{'page':<32}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'KB':>8}")
    for name, m in result["pages"].items():
        print(f"{name:<32}{m['p50_ms']:>9.1f}{m['p95_ms']:>9.1f}{m['max_ms']:>9.1f}"
              f"{m['kb']:>8.1f}")
    path = args.out / f"ui_pages-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
