"""Starting a seeded mix of orders and waiting until every saga settled."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncpg

from coordinator.store import SagaStore, TransientStoreError
from coordinator.store.store import CONNECTION_ERRORS
from coordinator.worker import build_registry
from tests.chaos.support.stack import SAGAS

#: Statuses after which nothing happens without an operator.
SETTLED = ("completed", "compensated", "cancelled", "dead")
CUSTOMERS = [f"cust-{i}" for i in range(6)]
SKUS = [f"SKU-{i}" for i in range(8)]


@dataclass(frozen=True)
class Order:
    saga_id: uuid.UUID
    #: ``ok`` (should complete), ``broke`` (payment refused), ``oos`` (stock refused).
    kind: str
    input: dict[str, Any]
    #: ``order``, ``order_parallel`` or ``order_nested`` (in turn: the same effects, run in
    #: sequence, in parallel, or with stock and shipment in a child saga).
    saga_type: str = "order"


def plan_orders(
    seed: int, count: int, *, customers: int = len(CUSTOMERS), skus: int = len(SKUS)
) -> list[Order]:
    """``count`` orders: ~70% that complete, ~15% refused by payments, ~15% out of stock.

    A few customers and SKUs (the default) make orders contend for the same rows; thousands
    of orders want more of both, or balances and stock run out and lock waits pile up.
    """
    rng = random.Random(seed)
    customer_ids = [f"cust-{i}" for i in range(customers)]
    sku_ids = [f"SKU-{i}" for i in range(skus)]
    orders: list[Order] = []
    for i in range(count):
        roll = rng.random()
        kind = "ok" if roll < 0.70 else "broke" if roll < 0.85 else "oos"
        customer = "broke" if kind == "broke" else rng.choice(customer_ids)
        sku = f"OOS-{rng.randrange(3)}" if kind == "oos" else rng.choice(sku_ids)
        orders.append(Order(
            saga_id=uuid.UUID(int=rng.getrandbits(128), version=4),
            kind=kind,
            input={
                "order_id": f"O-{seed}-{i}",
                "customer_id": customer,
                "amount_cents": rng.randrange(100, 900),
                "sku": sku,
                "quantity": rng.randrange(1, 3),
                "address": f"{i} Chaos Street",
            },
            saga_type=("order", "order_parallel", "order_nested")[i % 3],
        ))
    return orders


async def start_orders(
    dsn: str, prefix: str, orders: list[Order], *, pace: float, attempts_for: float = 60.0
) -> int:
    """Start every order (idempotently by saga id), ``pace`` seconds apart; return retries.

    Database trouble (a restart, a cut connection) is retried with the same saga id.
    """
    registry = build_registry(list(SAGAS), topic_prefix=prefix)
    retries = 0
    store: SagaStore | None = None
    try:
        for order in orders:
            deadline = time.monotonic() + attempts_for
            while True:
                try:
                    if store is None:
                        store = await SagaStore.open(dsn, registry, min_size=1, max_size=2)
                    await store.start_saga(order.saga_type, order.input, saga_id=order.saga_id,
                                           actor="chaos")
                    break
                except (TransientStoreError, *CONNECTION_ERRORS):
                    retries += 1
                    if time.monotonic() > deadline:
                        raise
                    if store is not None:
                        await _close_quietly(store)
                        store = None
                    await asyncio.sleep(0.5)
            await asyncio.sleep(pace)
    finally:
        if store is not None:
            await _close_quietly(store)
    return retries


async def _close_quietly(store: SagaStore) -> None:
    try:
        await asyncio.wait_for(store.close(), 5)
    except Exception:
        store.pool.terminate()


async def statuses(dsn: str) -> Counter[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM sagas GROUP BY status")
    finally:
        await conn.close()
    return Counter({r["status"]: r["n"] for r in rows})


async def wait_settled(dsn: str, expected: int, timeout: float) -> Counter[str]:  # noqa: ASYNC109
    """Wait until ``expected`` sagas exist, all settled, and the outbox is empty (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            counts = await statuses(dsn)
            conn = await asyncpg.connect(dsn)
            try:
                outbox = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox")
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            counts, outbox = Counter(), -1
        settled = sum(counts[s] for s in SETTLED)
        if settled == expected == sum(counts.values()) and outbox == 0:
            return counts
        if time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.5)


def start_concurrently(
    dsn: str, prefix: str, orders: list[Order], *, drivers: int = 8
) -> asyncio.Task[int]:
    """Start ``orders`` as fast as ``drivers`` parallel starters go; the task returns retries."""
    async def run() -> int:
        parts = await asyncio.gather(
            *(start_orders(dsn, prefix, orders[i::drivers], pace=0.0) for i in range(drivers)))
        return sum(parts)

    return asyncio.create_task(run())
