"""Scale of long-running sagas: many asleep, their timers due together, and signals.

1. ``--sagas`` sleeping sagas (``bench.timers:Napper``, an hour's sleep then a command). A few
   hundred are started for real (``start_saga``: their bytes per saga are the measured
   figure); the rest are SQL copies of one real one (every row of it: saga, history, nodes,
   timer, with the saga id rewritten in every column that holds it), so 100,000 take seconds
   instead of minutes. The firing below proves the copies real: each is fired, applied and
   sends its command, and a sample replays to its snapshot (``store.verify``).
2. Coordinator RSS: a real worker process (``python -m coordinator worker``) on that database,
   read from ``/proc/<pid>/status`` with no sagas and again with all of them asleep.
3. Firing: every timer due together, fired and applied by one ``fire_due_timers`` loop
   (``bench.timers.fire_all``, a fresh store: nothing cached) in each of ``--processes``
   processes, after a ``CHECKPOINT``: sagas that slept for days were flushed long ago, so
   the copies' dirty buffers are not left for the firing's backends to write out.
4. Signals: ``--signals`` sagas (``Waiter``: wait for ``go``, then a command) signalled
   through the HTTP API (a real ``python -m coordinator api`` process, 8 requests in flight)
   and as many through ``{prefix}.signals`` (applied by the worker). Rate = signals / time
   until the last one is applied; signal-to-next-command latency = the command's outbox
   ``created_at`` minus the moment the signal was sent (no relay runs, so the rows stay).

    python -m bench.long_running --postgres postgresql://postgres@127.0.0.1:55432/postgres \\
        --kafka 127.0.0.1:59092 --sagas 100000 --signals 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.pg_counters import describe, read_counters
from bench.timers import (
    NapInput,
    Napper,
    database_bytes,
    fire_in_processes,
    fresh_database,
    start_sleepers,
)
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.runtime.signal_wire import SignalEnvelope, encode_signal, signal_topic
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import command_topic, reply_topic

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-long-running-token"
SPECS = "bench.timers:Napper,bench.long_running:Waiter"
REAL_STARTS = 500


class Waiter(Saga):
    """Wait for ``go``, then ask the desk for something."""

    name = "waiter"
    version = 1
    input_model = NapInput
    steps = (
        WaitForSignal("gate", "go"),
        SagaStep("after", "desk", "book", compensable=False),
    )


#: Copies of one saga: every row of the template, column by column, the template's id
#: replaced by the copy's in every column that holds it (uuid columns equal to it; text and
#: JSON columns by text replacement). The column lists come from the catalog, quoted by
#: ``format('%I')``; the statement is built and run by Postgres.
_CLONE_FUNCTION = """
CREATE FUNCTION pg_temp.clone(tbl regclass, key text, template uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE cols text; vals text;
BEGIN
    SELECT string_agg(format('%I', attname), ', ' ORDER BY attnum),
           string_agg(CASE
               WHEN atttypid = 'uuid'::regtype THEN
                   format('CASE WHEN t.%1$I = %2$L THEN c.id ELSE t.%1$I END', attname, template)
               WHEN atttypid IN ('json'::regtype, 'jsonb'::regtype, 'text'::regtype) THEN
                   format('replace(t.%1$I::text, %2$L, c.id::text)::%3$s', attname, template,
                          format_type(atttypid, atttypmod))
               ELSE format('t.%I', attname) END, ', ' ORDER BY attnum)
    INTO cols, vals
    FROM pg_attribute WHERE attrelid = tbl AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM %s t, pg_temp.copies c WHERE t.%I = %L',
                   tbl, cols, vals, tbl, key, template);
END $$
"""
_CLONED: Final = (("sagas", "id"), ("saga_history", "saga_id"), ("saga_nodes", "saga_id"),
                  ("timers", "saga_id"))
_CHUNK: Final = 100_000


def registry(prefix: str) -> SagaRegistry:
    return SagaRegistry(topic_prefix=prefix, sagas=[Napper, Waiter])


async def copy_sagas(dsn: str, template: uuid.UUID, count: int) -> float:
    """``count`` copies of ``template`` (a transaction per 100,000); the seconds it took."""
    conn = await asyncpg.connect(dsn)
    began = time.perf_counter()
    try:
        await conn.execute(_CLONE_FUNCTION)
        for done in range(0, count, _CHUNK):
            async with conn.transaction():
                await conn.execute("CREATE TEMP TABLE copies (id uuid) ON COMMIT DROP")
                await conn.execute("INSERT INTO pg_temp.copies SELECT gen_random_uuid() "
                                   "FROM generate_series(1, $1)", min(_CHUNK, count - done))
                for table, key in _CLONED:
                    await conn.execute("SELECT pg_temp.clone($1::regclass, $2, $3)", table,
                                       key, template)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    return time.perf_counter() - began


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT,
                                env={**os.environ, **env}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _text(log: Path) -> str:
    return log.read_text(errors="replace")


async def wait_for_log(log: Path, mark: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while mark not in _text(log):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.name}: no {mark!r}:\n{_text(log)[-2000:]}")
        await asyncio.sleep(0.2)


async def create_topics(kafka: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1) for t in
                                   (reply_topic(prefix), signal_topic(prefix),
                                    command_topic("desk", prefix))])
    finally:
        await admin.close()


async def command_latencies(dsn: str, sent: dict[uuid.UUID, float], wall_of: float
                            ) -> tuple[list[float], float]:
    """Per signalled saga: its command's outbox ``created_at`` minus the send time (ms); and
    the moment (monotonic) the last one was there."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT key, extract(epoch FROM created_at) AS at FROM sagaflow_outbox "
            "WHERE key = ANY($1::text[])", [str(s) for s in sent])
    finally:
        await conn.close()
    at = {uuid.UUID(r["key"]): float(r["at"]) - wall_of for r in rows}
    return [(at[s] - sent[s]) * 1000 for s in sent if s in at], max(at.values(), default=0.0)


async def wait_commands(dsn: str, sagas: list[uuid.UUID], timeout: float) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    conn = await asyncpg.connect(dsn)
    try:
        while await conn.fetchval("SELECT count(*) FROM sagaflow_outbox WHERE key = "
                                  "ANY($1::text[])", [str(s) for s in sagas]) < len(sagas):
            if time.monotonic() > deadline:
                raise RuntimeError("signalled sagas did not all send their command")
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def signal_api(base: str, sagas: list[uuid.UUID]) -> dict[uuid.UUID, float]:
    """POST a ``go`` to each saga, 8 in flight; the monotonic send time of each."""
    sent: dict[uuid.UUID, float] = {}
    queue = list(sagas)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        async def one() -> None:
            while queue:
                saga_id = queue.pop()
                sent[saga_id] = time.monotonic()
                answer = await client.post(f"/sagas/{saga_id}/signals/go",
                                           json={"signal_id": f"go-{saga_id}", "payload": {}})
                answer.raise_for_status()

        await asyncio.gather(*(one() for _ in range(8)))
    return sent


async def signal_kafka(kafka: str, prefix: str, sagas: list[uuid.UUID]
                       ) -> dict[uuid.UUID, float]:
    sent: dict[uuid.UUID, float] = {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", linger_ms=2)
    await producer.start()
    try:
        futures = []
        for saga_id in sagas:
            sent[saga_id] = time.monotonic()
            futures.append(await producer.send(signal_topic(prefix), encode_signal(
                SignalEnvelope(saga_id=saga_id, name="go", signal_id=f"go-{saga_id}",
                               sender="bench")), key=str(saga_id).encode()))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


async def start_waiters(store: SagaStore, count: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    queue = list(ids)

    async def one() -> None:
        while queue:
            await store.start_saga("waiter", {"order_id": "w"}, saga_id=queue.pop(),
                                   actor="bench")

    await asyncio.gather(*(one() for _ in range(8)))
    return ids


async def signal_phase(name: str, url: str, sagas: list[uuid.UUID], send: Any) -> str:
    wall_of = time.time() - time.monotonic()
    began = time.monotonic()
    sent = await send(sagas)
    await wait_commands(url, sagas, 300)
    latencies, last = await command_latencies(url, sent, wall_of)
    seconds = last - began
    return (f"signals {name:5}: {len(sagas):,} in {seconds:.2f}s = {len(sagas) / seconds:,.0f}/s"
            f"; signal -> next command p50 {percentile(latencies, 50):,.1f} ms, "
            f"p99 {percentile(latencies, 99):,.1f} ms")


async def main(postgres: str, kafka: str, sagas: int, due: int, signals: int, port: int,
               processes: int, limit: int) -> None:
    prefix = f"benchlr{uuid.uuid4().hex[:6]}"
    logs = ROOT / "bench" / "results" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    await create_topics(kafka, prefix)
    lines: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    async with fresh_database(postgres) as url:
        env = {"SAGAFLOW_DSN": url, "SAGAFLOW_KAFKA_BOOTSTRAP": kafka,
               "SAGAFLOW_TOPIC_PREFIX": prefix, "SAGAFLOW_SAGAS": SPECS,
               "SAGAFLOW_GROUP_ID": f"{prefix}-coordinator",
               # The next command is read from the outbox (its row's created_at is the
               # moment its change committed): the worker must leave the rows there, unleased.
               "SAGAFLOW_PUBLISH_COMMANDS": "false"}
        try:
            worker_log = logs / f"{prefix}-worker.log"
            worker = spawn(["-m", "coordinator", "worker"], env, worker_log)
            procs.append(worker)
            await wait_for_log(worker_log, "worker started", worker)
            await asyncio.sleep(3)
            rss_empty = rss_mib(worker.pid)
            empty = await database_bytes(url)
            async with await SagaStore.open(url, registry(prefix), max_size=9) as store:
                await start_sleepers(store, REAL_STARTS)
                real = await database_bytes(url)
                async with store.pool.acquire() as conn:
                    due_template, later_template = [r["id"] for r in await conn.fetch(
                        "SELECT id FROM sagas ORDER BY id LIMIT 2")]
                    if due < sagas:  # it and its copies sleep a day longer: not due with the rest
                        await conn.execute("UPDATE timers SET due_at = due_at + "
                                           "interval '1 day' WHERE saga_id = $1", later_template)
            later = sagas - due
            copied = await copy_sagas(url, due_template, due - REAL_STARTS + (1 if later else 0))
            if later:
                copied += await copy_sagas(url, later_template, later - 1)
            full = await database_bytes(url)
            await asyncio.sleep(5)  # the worker's timer loop sees them (and idles on)
            rss_full = rss_mib(worker.pid)
            lines.append(f"sleeping   : {sagas:,} sagas ({REAL_STARTS} started, the rest "
                         f"copied in {copied:.1f}s)")
            lines.append(f"bytes      : {(real - empty) / REAL_STARTS:,.0f} per saga started "
                         f"for real, {(full - empty) / sagas:,.0f} per saga over all "
                         f"{sagas:,} ({(full - empty) / 2**20:,.0f} MiB)")
            lines.append(f"worker RSS : {rss_empty:,.0f} MiB with no sagas, {rss_full:,.0f} MiB "
                         f"with {sagas:,} asleep")
            watcher = await asyncpg.connect(url)
            try:
                # Sagas asleep for days were flushed by many checkpoints since; the copies
                # (and database_bytes' VACUUM) left a gigabyte of dirty buffers that the
                # firing's backends would otherwise write out themselves.
                began = time.perf_counter()
                await watcher.execute("CHECKPOINT")
                lines.append(f"checkpoint : {time.perf_counter() - began:.1f}s before the "
                             "firing (days of sleep leave nothing dirty)")
                load = os.getloadavg()
                before = await read_counters(watcher)
                firing = await fire_in_processes(url, processes, limit=limit)
                after = await read_counters(watcher)
            finally:
                await watcher.close()
            async with await SagaStore.open(url, registry(prefix), max_size=2) as store:
                async with store.pool.acquire() as conn:
                    sample = [r["id"] for r in await conn.fetch(
                        "SELECT s.id FROM sagas s WHERE NOT EXISTS (SELECT 1 FROM timers t "
                        "WHERE t.saga_id = s.id AND t.kind = 'sleep') ORDER BY random() LIMIT 20")]
                    await conn.execute("DELETE FROM sagaflow_outbox")
                bad = [s for s in sample if not (await store.verify(s)).ok]
            lines.append(f"firing     : {firing.fired:,} of them due together, fired and applied "
                         f"in {firing.seconds:.1f}s = {firing.rate:,.0f}/s ({processes} "
                         f"process(es), limit {limit}); "
                         f"{firing.commands:,} commands; {len(sample) - len(bad)}/{len(sample)} "
                         "sampled sagas replay to their snapshot")
            lines.append(f"firing load: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
                         f"before; firing processes' CPU "
                         f"{firing.cpu / max(firing.fired, 1) * 1e6:,.0f} us per timer; "
                         + describe(before, after, firing.fired))
            api_log = logs / f"{prefix}-api.log"
            api = spawn(["-m", "coordinator", "api", "--dsn", url, "--saga", "bench.timers:Napper",
                         "--saga", "bench.long_running:Waiter", "--host", "127.0.0.1",
                         "--port", str(port)],
                        {"SAGAFLOW_API_TOKENS": f"bench:operator:{TOKEN}",
                         "SAGAFLOW_UI_SESSION_SECRET": "bench-secret",
                         "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false",
                         "SAGAFLOW_TOPIC_PREFIX": prefix}, api_log)
            procs.append(api)
            async with await SagaStore.open(url, registry(prefix), max_size=9) as store:
                by_api = await start_waiters(store, signals)
                by_kafka = await start_waiters(store, signals)
            await wait_for_log(api_log, "Uvicorn running", api)
            base = f"http://127.0.0.1:{port}"
            lines.append(await signal_phase("API", url, by_api, lambda s: signal_api(base, s)))
            lines.append(await signal_phase("Kafka", url, by_kafka,
                                            lambda s: signal_kafka(kafka, prefix, s)))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    parser.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:59092"))
    parser.add_argument("--sagas", type=int, default=100_000)
    parser.add_argument("--due", type=int, help="how many of them fall due together "
                        "(default: all; the others sleep a day longer)")
    parser.add_argument("--processes", type=int, default=1,
                        help="fire from this many processes at once (as many replicas)")
    parser.add_argument("--limit", type=int, default=100, help="timers per claim")
    parser.add_argument("--signals", type=int, default=2000)
    parser.add_argument("--port", type=int, default=18750)
    a = parser.parse_args()
    due = a.sagas if a.due is None else a.due
    if not REAL_STARTS <= due <= a.sagas or a.processes < 1:
        parser.error(f"need {REAL_STARTS} <= --due <= --sagas and --processes >= 1")
    asyncio.run(main(a.postgres, a.kafka, a.sagas, due, a.signals, a.port, a.processes,
                     a.limit))
