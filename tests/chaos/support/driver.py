"""Starting a seeded mix of orders and waiting until every saga settled."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore, TransientStoreError
from coordinator.store.store import CONNECTION_ERRORS
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
    dsn: str, prefix: str, orders: list[Order], *, pace: float, attempts_for: float = 60.0,
    sagas: Sequence[str] = SAGAS,
) -> int:
    """Start every order (idempotently by saga id), ``pace`` seconds apart; return retries.

    Database trouble (a restart, a cut connection) is retried with the same saga id.
    ``sagas``: the stack's saga classes (import paths).
    """
    registry = build_registry(list(sagas), topic_prefix=prefix)
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


_PROGRESS = """
SELECT count(*) FILTER (WHERE parent_id IS NULL) AS top,
       count(*) FILTER (WHERE parent_id IS NULL AND status = ANY($1::text[])) AS top_settled,
       count(*) FILTER (WHERE status <> ALL($1::text[])) AS unsettled,
       (SELECT count(*) FROM sagaflow_outbox) AS outbox
FROM sagas
"""


async def settled_now(dsn: str, expected: int) -> bool:
    """Whether ``expected`` top-level sagas exist, every saga (child sagas too) has settled and
    the outbox is empty."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(_PROGRESS, list(SETTLED))
    finally:
        await conn.close()
    assert row is not None
    return (row["top"] == row["top_settled"] == expected and row["unsettled"] == 0
            and row["outbox"] == 0)


async def wait_settled(dsn: str, expected: int, timeout: float) -> bool:  # noqa: ASYNC109
    """Wait until :func:`settled_now` (bounded); whether it came.

    Child sagas are counted apart: comparing all sagas with ``expected`` orders never matched
    once a nested order had started a child, so every such scenario waited its whole bound.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await settled_now(dsn, expected):
                return True
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pass
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)


def start_concurrently(
    dsn: str, prefix: str, orders: list[Order], *, drivers: int = 8,
    sagas: Sequence[str] = SAGAS,
) -> asyncio.Task[int]:
    """Start ``orders`` as fast as ``drivers`` parallel starters go; the task returns retries."""
    async def run() -> int:
        parts = await asyncio.gather(
            *(start_orders(dsn, prefix, orders[i::drivers], pace=0.0, sagas=sagas)
              for i in range(drivers)))
        return sum(parts)

    return asyncio.create_task(run())
