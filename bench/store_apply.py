"""State changes per second through the store: ``apply`` (one transaction per event) against
``apply_many`` (one transaction per batch of events from many sagas).

Each state change is a real one: lock the saga row, run the core, append history, rewrite the
snapshot, enqueue the next command in the outbox, insert and cancel timers.

    python bench/store_apply.py --dsn postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence

import asyncpg
from pydantic import BaseModel

from coordinator.engine import ReplyReceived
from coordinator.language.saga import Saga, TccStep
from coordinator.migrations import migrate
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import PendingEvent, SagaStore
from participant_sdk.protocol import CommandEnvelope, Outcome, decode_command, make_reply


class BenchInput(BaseModel):
    order_id: str
    amount: int


class BenchOrder(Saga):
    name = "tcc_order"
    version = 1
    input_model = BenchInput
    steps = (
        TccStep("reserve", participant="payments", action="reserve"),
        TccStep("hold", participant="inventory", action="hold"),
    )


async def _first_commands(store: SagaStore, count: int) -> list[CommandEnvelope]:
    for i in range(count):
        await store.start_saga("tcc_order", {"order_id": f"b{i}", "amount": 1})
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("DELETE FROM sagaflow_outbox RETURNING payload")
    return [decode_command(r["payload"]) for r in rows]


def _events(commands: Sequence[CommandEnvelope]) -> list[PendingEvent]:
    return [
        PendingEvent(c.saga_id, ReplyReceived(reply=make_reply(c, Outcome.OK, result={})))
        for c in commands
    ]


async def _run_apply(store: SagaStore, events: list[PendingEvent], concurrency: int) -> float:
    queue = list(events)

    async def one() -> None:
        while queue:
            e = queue.pop()
            await store.apply(e.saga_id, e.event)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return time.perf_counter() - start


async def _run_many(
    store: SagaStore, events: list[PendingEvent], batch: int, concurrency: int
) -> float:
    batches = [events[i : i + batch] for i in range(0, len(events), batch)]

    async def one() -> None:
        while batches:
            await store.apply_many(batches.pop())

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return time.perf_counter() - start


async def main(dsn: str, sagas: int, batch: int, concurrency: int) -> None:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = dsn.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(url)
        await migrate(conn)
        await conn.close()
        registry = SagaRegistry(topic_prefix="bench", sagas=[BenchOrder])
        store = await SagaStore.open(url, registry, max_size=concurrency + 1)
        try:
            single = _events(await _first_commands(store, sagas))
            many = _events(await _first_commands(store, sagas))
            t_single = await _run_apply(store, single, concurrency)
            t_many = await _run_many(store, many, batch, max(1, concurrency // 2))
            async with store.pool.acquire() as conn:
                await asyncio.sleep(0.7)  # statistics are flushed asynchronously
                hot = await conn.fetchrow(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relname = 'sagas'"
                )
        finally:
            await store.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    n_batches = -(-sagas // batch)
    print(f"apply      : {sagas} changes in {t_single:.2f}s = {sagas / t_single:,.0f} changes/s "
          f"({sagas / t_single:,.0f} tx/s, {concurrency} concurrent)")
    print(f"apply_many : {sagas} changes in {t_many:.2f}s = {sagas / t_many:,.0f} changes/s "
          f"({n_batches / t_many:,.0f} tx/s, batch {batch}, {max(1, concurrency // 2)} "
          "concurrent)")
    if hot is not None and hot["n_tup_upd"]:
        print(f"saga row updates that were HOT: {hot['n_tup_hot_upd']}/{hot['n_tup_upd']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:55432/postgres")
    parser.add_argument("--sagas", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    a = parser.parse_args()
    asyncio.run(main(a.dsn, a.sagas, a.batch, a.concurrency))
