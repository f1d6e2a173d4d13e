"""SIGKILL the coordinator while long-running orders sleep and their signals arrive.

Every order naps (1-3 s), waits for an ``approved`` signal, reserves funds, naps again and
ships. Signals come through the store (as the API sends them) and through the
``{prefix}.signals`` Kafka topic; most are sent before their wait is reached, some are sent
twice (the same id through both ways in). The coordinator is killed again and again. Then
the common auditor (effects once, outbox drained, replay verifies) and a signal and timer
audit: each signal stored and applied once, taken by the wait, each sleep fired once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from coordinator.runtime.signal_wire import SignalEnvelope, encode_signal, signal_topic
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from tests.chaos.conftest import MakeStack
from tests.chaos.support.driver import Order, plan_orders, start_orders
from tests.chaos.support.long_sagas import APPROVAL
from tests.chaos.support.scenario import finish
from tests.chaos.support.stack import PARTITIONS, SAGAS, ChaosStack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

SEED = 1616
SAGA_COUNT = 30
KILLS = 6


@dataclasses.dataclass(frozen=True)
class Send:
    """One signal delivery: which saga, through which way in, after how long."""

    saga_id: uuid.UUID
    signal_id: str
    via: str  # "store" or "kafka"
    after: float  # seconds after the orders were started


def plan(rng: random.Random) -> tuple[list[Order], list[Send]]:
    orders = [dataclasses.replace(o, saga_type="order_long",
                                  input={**o.input, "nap_s": rng.uniform(1.0, 3.0)})
              for o in plan_orders(SEED, SAGA_COUNT)]
    sends: list[Send] = []
    for i, order in enumerate(orders):
        sid = f"approve-{order.saga_id}"
        via = ("store", "kafka")[i % 2]
        # Two in three before the nap ends (kept until the wait takes it); the rest later.
        first = rng.uniform(0.0, 0.5) if i % 3 != 2 else rng.uniform(4.0, 9.0)
        sends.append(Send(order.saga_id, sid, via, first))
        if i % 4 == 0:  # sent again, the same id, the other way in
            other = "kafka" if via == "store" else "store"
            sends.append(Send(order.saga_id, sid, other, first + rng.uniform(0.2, 5.0)))
    return orders, sorted(sends, key=lambda s: s.after)


async def send_signals(stack: ChaosStack, sends: list[Send]) -> int:
    """Deliver every planned signal at its time; returns how many were sent."""
    registry = build_registry(list(SAGAS), topic_prefix=stack.prefix)
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_admin, acks="all")
    await producer.start()
    began = time.monotonic()
    try:
        async with await SagaStore.open(stack.dsn("coordinator"), registry,
                                        min_size=1, max_size=2) as store:
            for send in sends:
                await asyncio.sleep(max(0.0, began + send.after - time.monotonic()))
                payload = {"approver": f"chaos-{send.via}"}
                if send.via == "store":
                    await store.signal(send.saga_id, APPROVAL, payload,
                                       signal_id=send.signal_id, actor="api:chaos")
                else:
                    envelope = SignalEnvelope(saga_id=send.saga_id, name=APPROVAL,
                                              signal_id=send.signal_id, payload=payload,
                                              sender="chaos")
                    await producer.send_and_wait(signal_topic(stack.prefix),
                                                 encode_signal(envelope),
                                                 key=str(send.saga_id).encode())
    finally:
        await producer.stop()
    return len(sends)


async def audit_signals_and_timers(dsn: str, orders: list[Order]) -> list[str]:
    """Each order: one signal row, taken by its wait, one applied ``signal_received``; each
    sleep fired (not ignored) exactly once."""
    conn = await asyncpg.connect(dsn)
    try:
        signals = await conn.fetch(
            "SELECT saga_id, signal_id, consumed_by FROM saga_signals")
        applied = await conn.fetch(
            "SELECT saga_id, event->>'signal_id' AS signal_id, count(*) AS n FROM saga_history"
            " WHERE event->>'type' = 'signal_received' AND ignored IS NULL"
            " GROUP BY 1, 2")
        fired = await conn.fetch(
            "SELECT saga_id, event->>'step' AS step, count(*) AS n FROM saga_history"
            " WHERE event->>'type' = 'timer_fired' AND event->>'kind' = 'sleep'"
            " AND ignored IS NULL GROUP BY 1, 2")
        statuses = {r["id"]: r["status"] for r in await conn.fetch(
            "SELECT id, status FROM sagas")}
    finally:
        await conn.close()
    problems: list[str] = []
    rows = {(r["saga_id"], r["signal_id"]): r["consumed_by"] for r in signals}
    counts = {(r["saga_id"], r["signal_id"]): r["n"] for r in applied}
    naps = {(r["saga_id"], r["step"]): r["n"] for r in fired}
    for order in orders:
        key = (order.saga_id, f"approve-{order.saga_id}")
        if [k for k in rows if k[0] == order.saga_id] != [key]:
            problems.append(f"saga {order.saga_id}: signal rows "
                            f"{[k[1] for k in rows if k[0] == order.saga_id]}")
        elif rows[key] is None:
            problems.append(f"saga {order.saga_id}: its signal was never consumed")
        if counts.get(key) != 1:
            problems.append(f"saga {order.saga_id}: signal applied {counts.get(key)} times")
        if naps.get((order.saga_id, "nap")) != 1:
            problems.append(f"saga {order.saga_id}: nap fired "
                            f"{naps.get((order.saga_id, 'nap'))} times")
        if statuses.get(order.saga_id) == "completed" and naps.get(
                (order.saga_id, "cool_off")) != 1:
            problems.append(f"saga {order.saga_id}: cool_off fired "
                            f"{naps.get((order.saga_id, 'cool_off'))} times")
    return problems


async def test_coordinator_sigkill_during_sleeps_and_signals(make_stack: MakeStack) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    stack = await make_stack()
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_admin)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(signal_topic(stack.prefix),
                                            num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        await admin.close()
    stack.start_default()
    await stack.wait_ready()
    orders, sends = plan(rng)
    await start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.05)
    signalling = asyncio.create_task(send_signals(stack, sends))
    kills = 0
    for _ in range(KILLS):
        await asyncio.sleep(rng.uniform(0.8, 2.0))
        kills += stack.kill("coordinator-1")
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        stack.start("coordinator-1")
    sent = await signalling
    result = await finish("long-running-sigkill", stack, orders,
                          {"coordinator_sigkill": kills}, started,
                          extra={"signals_sent": sent}, at_least={"coordinator_sigkill": KILLS})
    result.violations += await audit_signals_and_timers(stack.dsn("coordinator"), orders)
    assert result.violations == [], result.violations
    assert sent > SAGA_COUNT  # some signals really were sent twice
    assert time.monotonic() - started < 90, "the scenario must stay under 90 s"
