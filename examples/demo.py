"""The demo saga stack: coordinator worker, relay and three participants as separate processes.

``python -m examples.demo`` (run by ``make demo`` once the local services are up) creates
fresh databases, starts every process, runs an order that completes and one that is refused
by payments and rolls back, prints what happened, audits the participants' ledgers, checks
that every saga's history replays to its snapshot, and stops the processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from coordinator.engine import ReplyReceived, Status
from coordinator.migrations import migrate
from coordinator.store import SagaStore
from coordinator.worker import build_registry
from examples.stack import SAGA, SERVICES, fresh_database, processes, stack_commands

HOME = Path(os.environ.get("SAGAFLOW_DEVSTACK_HOME", Path(__file__).parents[1] / ".local"))

ORDERS = {
    "completes": {"order_id": "A-100", "customer_id": "alice", "amount_cents": 2500,
                  "sku": "BOOK-1", "quantity": 2, "address": "1 Main St"},
    "compensates": {"order_id": "B-200", "customer_id": "alice", "amount_cents": 4000,
                    "sku": "OOS-LAMP", "quantity": 1, "address": "1 Main St"},
}


async def _wait_terminal(store: SagaStore, saga_id: uuid.UUID) -> Any:
    async with asyncio.timeout(60):
        while True:
            record = await store.get_saga(saga_id)
            if record is not None and Status(record.status).is_terminal:
                return record
            await asyncio.sleep(0.1)


def _describe(entry: Any) -> str:
    event = entry.event
    if isinstance(event, ReplyReceived):
        reply = event.reply
        text = f"{reply.participant:<9} {reply.step}.{reply.phase.value} -> {reply.outcome.value}"
        if reply.error is not None:
            text += f" ({reply.error.message})"
    else:
        text = event.type
    return text + (f"   [ignored: {entry.ignored}]" if entry.ignored else "")


async def _report(store: SagaStore, label: str, saga_id: uuid.UUID) -> None:
    record = await _wait_terminal(store, saga_id)
    print(f"\n== order that {label}: saga {saga_id} -> {record.status}")
    for entry in await store.get_history(saga_id):
        print(f"   #{entry.seq:<2} {_describe(entry)}")
    verdict = await store.verify(saga_id)
    print(f"   replay of {verdict.replayed_events} events equals snapshot: {verdict.ok}")


async def _ledgers(dsns: dict[str, str]) -> None:
    print("\n== participants' ledgers")
    queries = {
        "payments": "SELECT kind, customer AS who, amount FROM payments_ledger ORDER BY id",
        "inventory": (
            "SELECT kind, sku AS who, quantity AS amount FROM inventory_ledger ORDER BY id"
        ),
        "shipping": "SELECT kind, step AS who, 1 AS amount FROM shipping_ledger ORDER BY id",
    }
    for name, query in queries.items():
        conn = await asyncpg.connect(dsns[name])
        try:
            rows = await conn.fetch(query)
        finally:
            await conn.close()
        entries = ", ".join(f"{r['kind']} {r['who']} {r['amount']}" for r in rows) or "nothing"
        print(f"   {name:<10} {entries}")


async def run(postgres: str, kafka: str) -> None:
    prefix = f"demo{uuid.uuid4().hex[:6]}"
    coordinator_dsn = await fresh_database(postgres, "sagaflow_demo")
    dsns = {name: await fresh_database(postgres, f"demo_{name}") for name in SERVICES}
    conn = await asyncpg.connect(coordinator_dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()

    commands = stack_commands(coordinator_dsn=coordinator_dsn, service_dsns=dsns, kafka=kafka,
                              topic_prefix=prefix)
    print(f"== starting the stack (topics {prefix}.*)")
    registry = build_registry([SAGA], topic_prefix=prefix)
    with processes(commands, HOME / "demo"):
        async with await SagaStore.open(coordinator_dsn, registry, max_size=2) as store:
            started = {
                label: (await store.start_saga("order", order, actor="demo")).record.saga_id
                for label, order in ORDERS.items()
            }
            for label, saga_id in started.items():
                await _report(store, label, saga_id)
        await _ledgers(dsns)
    print("\nDone. Logs are in", HOME / "demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    parser.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    args = parser.parse_args(argv)
    asyncio.run(run(args.postgres, args.kafka))
    return 0


if __name__ == "__main__":
    sys.exit(main())
