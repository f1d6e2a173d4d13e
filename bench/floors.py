"""Floors of each leg of a hop, measured with bare clients in the same run as the sagas.

The per-hop split (``bench/breakdown.py``) cuts a hop into four legs at timestamps the stack
records. Each leg's floor is what the same cut would read if the stack did nothing but the
unavoidable work, with the clients and settings the stack uses:

* ``kafka_one_way``: a producer with the relay's settings (``producer_config``: idempotent,
  ``acks=all``, ``linger_ms``) sends one message at a time; a consumer **in another process**
  with the participant's settings (a group, manual commits, ``max_poll_records``, the default
  fetch settings, ``getmany`` as its fetch loop) reports when it has it. One-way = the
  consumer's receive time minus the moment ``send()`` was called (the Kafka CreateTime the
  split uses, at full clock resolution; both processes read the same wall clock).
* ``postgres``: bare transactions on a pooled connection, as the stack's code runs them:
  ``BEGIN``, one-row statements (an ``INSERT`` of ~400 bytes into an indexed table, as a
  barrier or history row), ``COMMIT``; each round trip timed, and every other ``COMMIT``
  with ``synchronous_commit = off`` (its cost without the WAL flush, where the commit is
  stamped). And ``notify``: ``pg_notify`` on one connection until the ``LISTEN`` callback
  runs on another (the relay's hint).

Leg floors (p50s summed), with the statement counts of each side (``LEG_STATEMENTS``):

* relay = the coordinator's writes after its row lock + COMMIT, the hint, the relay's claim;
* to participant = Kafka one way + the participant's BEGIN;
* participant txn = barrier insert, the handler's statements, barrier settle + COMMIT;
* to coordinator = Kafka one way + BEGIN + the row lock.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from bench.limits import scratch_pool, scratch_topic
from bench.load import percentile
from bench.stack import broker_pid, cpu_seconds, main_thread_cpu_seconds

#: Statements each side runs inside a leg (round trips besides BEGIN/COMMIT), as the code
#: stood when the floors were introduced (kept, so floors compare across runs): the
#: coordinator's apply after its lock: its write statement and the outbox insert (since issue
#: 17's stop 28 one statement, ``WRITE_SAGAS``, often without BEGIN or lock); the relay's
#: claim (one statement, all lanes; the worker now publishes its own commands); the
#: participant's barrier insert, the handler's (the examples' TCC try: 3; confirm: 2) and the
#: barrier settle.
LEG_STATEMENTS = {"coordinator_after_lock": 2, "relay_claim": 1, "participant": 5,
                  "coordinator_lock": 1}


def _p50(values: list[float]) -> float:
    return percentile(values, 50)


async def postgres_floor(admin_dsn: str, *, samples: int = 200, statements: int = 5
                         ) -> dict[str, Any]:
    """Round trips of bare transactions: BEGIN, ``statements`` one-row INSERTs, COMMIT."""
    async with scratch_pool(admin_dsn, "floor", 2) as pool:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE rows (id uuid PRIMARY KEY, saga_id uuid,"
                               " body text, at timestamptz DEFAULT now())")
        body = "x" * 400
        begin: list[float] = []
        stmt: list[float] = []
        commit: list[float] = []
        whole: list[float] = []
        unflushed: list[float] = []
        backends = await _pool_backends(pool)
        cpu_before = sum(main_thread_cpu_seconds(pid) for pid in backends)
        client_before = time.thread_time()
        for i in range(samples):
            t0 = time.perf_counter()
            async with pool.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                t1 = time.perf_counter()
                begin.append((t1 - t0) * 1000)
                if i % 2:
                    # Every other sample: COMMIT without waiting for the WAL flush, so
                    # commit = its work (where Postgres stamps the commit time) + flush.
                    await conn.execute("SET LOCAL synchronous_commit = off")
                for _ in range(statements):
                    t = time.perf_counter()
                    await conn.execute("INSERT INTO rows (id, saga_id, body)"
                                       " VALUES ($1, $2, $3)", uuid.uuid4(), uuid.uuid4(),
                                       body)
                    stmt.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await tx.commit()
                (unflushed if i % 2 else commit).append((time.perf_counter() - t) * 1000)
            whole.append((time.perf_counter() - t0) * 1000)
        # Backend CPU per round trip of these bare transactions: BEGIN, the INSERTs,
        # COMMIT, and every other one the SET LOCAL.
        round_trips = samples * (statements + 2) + samples // 2
        spent = sum(main_thread_cpu_seconds(pid) for pid in backends) - cpu_before
        backend_us = spent * 1e6 / round_trips
        # The client's side of them: asyncpg and the event loop, one round trip at a time.
        client_us = (time.thread_time() - client_before) * 1e6 / round_trips
        notify = await _notify_latency(pool, samples=min(samples, 100))
    return {"begin_ms": _p50(begin), "statement_ms": _p50(stmt), "commit_ms": _p50(commit),
            "commit_unflushed_ms": _p50(unflushed),
            "statement_p95_ms": percentile(stmt, 95), "commit_p95_ms": percentile(commit, 95),
            "txn_ms": _p50(whole), "statements_per_txn": statements, "notify_ms": notify,
            "backend_cpu_us_per_round_trip": backend_us,
            "client_cpu_us_per_round_trip": client_us, "samples": samples}


async def _pool_backends(pool: asyncpg.Pool) -> list[int]:
    """The server pids of every connection of ``pool`` (acquired together, so all of them)."""
    conns = [await pool.acquire() for _ in range(pool.get_size())]
    try:
        return [conn.get_server_pid() for conn in conns]
    finally:
        for conn in conns:
            await pool.release(conn)


async def _notify_latency(pool: asyncpg.Pool, *, samples: int) -> float:
    """p50 ms from ``pg_notify`` (its own autocommit statement, as the relay waker sends it)
    to the LISTEN callback on another connection."""
    got: asyncio.Queue[float] = asyncio.Queue()

    def heard(*_: Any) -> None:
        got.put_nowait(time.perf_counter())

    async with pool.acquire() as listener, pool.acquire() as sender:
        await listener.add_listener("bench_floor", heard)
        out: list[float] = []
        for _ in range(samples):
            t = time.perf_counter()
            await sender.execute("SELECT pg_notify('bench_floor', '')")
            out.append((await asyncio.wait_for(got.get(), 5) - t) * 1000)
        await listener.remove_listener("bench_floor", heard)
    return _p50(out)


async def _consume(bootstrap: str, topic: str, count: int) -> None:
    """The consumer process: the participant's consumer settings and fetch loop; prints
    ``ready`` once it owns its partitions, then one line per message: its seq and when it
    arrived."""
    from participant_sdk.settings import ParticipantSettings

    max_in_flight = ParticipantSettings.model_fields["max_in_flight"].default
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_poll_records=max_in_flight)
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=50)
        print("ready", flush=True)
        seen = 0
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000)
            now = time.time()
            for records in batches.values():
                for r in records:
                    seen += 1
                    print(f"{r.value.decode()} {now:.6f}", flush=True)
    finally:
        await consumer.stop()


async def kafka_one_way(bootstrap: str, *, pings: int = 200) -> dict[str, Any]:
    """One-way ms, relay-configured producer -> participant-configured consumer process."""
    from outbox_relay.relay import producer_config
    from outbox_relay.settings import RelaySettings

    topic = await scratch_topic(bootstrap, "floor")
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.floors", bootstrap, topic, str(pings),
        stdout=asyncio.subprocess.PIPE, env={**os.environ})
    assert child.stdout is not None
    config = producer_config(RelaySettings(kafka_bootstrap=bootstrap))
    producer = AIOKafkaProducer(**config)
    await producer.start()
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"floor consumer: {line!r}")
        one_way: list[float] = []
        acked: list[float] = []
        broker = broker_pid(bootstrap)
        background = await _idle_cpu_rate(broker) if broker else 0.0
        warm_up = min(_WARM_UP_PINGS, pings // 2)
        for i in range(pings):
            if i == warm_up:
                broker_before, window_start = (cpu_seconds(broker) if broker else 0.0,
                                               time.monotonic())
                producer_before = time.thread_time()
                consumer_before = main_thread_cpu_seconds(child.pid)
            sent = time.time()
            fut = await producer.send(topic, str(i).encode(), key=uuid.uuid4().bytes)
            await fut
            acked.append((time.time() - sent) * 1000)
            seq, at = (await asyncio.wait_for(child.stdout.readline(), 10)).split()
            assert int(seq) == i
            one_way.append((float(at) - sent) * 1000)
        # Broker CPU per message produced and fetched once, past the warm-up pings and less
        # its idle background work over the same time; None when the broker is not local.
        counted = pings - warm_up
        # The clients' side, one message at a time: aiokafka and the event loop (the
        # consumer's figure includes printing each arrival).
        producer_us = (time.thread_time() - producer_before) * 1e6 / counted
        consumer_us = (main_thread_cpu_seconds(child.pid) - consumer_before) * 1e6 / counted
        broker_us = None
        if broker:
            spent = (cpu_seconds(broker) - broker_before
                     - background * (time.monotonic() - window_start))
            broker_us = max(spent, 0.0) * 1e6 / counted
    finally:
        await producer.stop()
        if child.returncode is None:
            child.kill()
        await child.wait()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
    return {"one_way_ms": _p50(one_way), "one_way_p95_ms": percentile(one_way, 95),
            "ack_ms": _p50(acked), "pings": pings, "broker_cpu_us_per_message": broker_us,
            "producer_cpu_us_per_message": producer_us,
            "consumer_cpu_us_per_message": consumer_us,
            "producer": {k: v for k, v in config.items() if k != "bootstrap_servers"}}


#: Pings before the broker's CPU is counted (its JIT and caches warm up on the first ones).
_WARM_UP_PINGS = 20


async def _idle_cpu_rate(pid: int, seconds: float = 1.0) -> float:
    """CPU seconds per second ``pid`` spends with nothing sent to it (the broker's background
    threads), to take out of a window of work."""
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def leg_floors(pg: dict[str, Any], kafka: dict[str, Any]) -> dict[str, float]:
    """p50 floor ms of each leg of the per-hop split, from the bare measurements."""
    n = LEG_STATEMENTS
    stmt, begin, commit = pg["statement_ms"], pg["begin_ms"], pg["commit_ms"]
    one_way = kafka["one_way_ms"]
    legs = {
        "relay": n["coordinator_after_lock"] * stmt + commit + pg["notify_ms"]
        + n["relay_claim"] * stmt,
        "to_participant": one_way + begin,
        "participant_txn": n["participant"] * stmt + commit,
        "to_coordinator": one_way + begin + n["coordinator_lock"] * stmt,
    }
    legs["hop"] = sum(legs.values())
    # The legs split at the commit timestamps (track_commit_timestamp): Postgres stamps a
    # commit before it waits for the WAL flush, so the flush falls after the stamp.
    unflushed = min(pg.get("commit_unflushed_ms", commit), commit)
    flush = commit - unflushed
    legs["coordinator_txn"] = n["coordinator_after_lock"] * stmt + unflushed
    legs["pick_up"] = flush + pg["notify_ms"] + n["relay_claim"] * stmt
    legs["participant_commit"] = n["participant"] * stmt + unflushed
    legs["reply_send"] = flush
    return legs


async def measure_floors(admin_dsn: str, bootstrap: str, *, samples: int = 200
                         ) -> dict[str, Any]:
    pg = await postgres_floor(admin_dsn, samples=samples)
    kafka = await kafka_one_way(bootstrap, pings=samples)
    return {"postgres": pg, "kafka": kafka, "legs_ms": leg_floors(pg, kafka),
            "statements": dict(LEG_STATEMENTS), "load_average": os.getloadavg()}


def _main(argv: list[str]) -> None:
    bootstrap, topic, count = argv
    asyncio.run(_consume(bootstrap, topic, int(count)))


if __name__ == "__main__":
    _main(sys.argv[1:])


__all__ = ["LEG_STATEMENTS", "kafka_one_way", "leg_floors", "measure_floors", "postgres_floor"]
