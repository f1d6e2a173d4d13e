"""Sagas end to end with no long-running process: every component invoked as a function by
the test's triggers, in the event shapes the real triggers send, on real Postgres and Kafka."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from coordinator.runtime.hints.results import CHANNEL, LISTENER_APP_NAME
from coordinator.store import SagaStore
from examples.order_saga import OrderSaga
from participant_sdk import command_topic
from tests.integration.functions_support import FunctionStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@dataclass
class Rec:
    """A consumer record, as the test's trigger builds Lambda events from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int = 0


def order(i: int, customer: str = "alice") -> dict[str, object]:
    return {"order_id": f"o{i}", "customer_id": customer, "amount_cents": 500, "sku": "sku-1",
            "quantity": 1, "address": "1 Main St"}


async def run_until_settled(stack: FunctionStack, store: SagaStore, ids: list[object],
                            rounds: int = 60) -> dict[object, str]:
    statuses: dict[object, str] = {}
    for _ in range(rounds):
        await stack.round()
        statuses = {i: str((await store.get_saga(i)).status) for i in ids}  # type: ignore[union-attr, arg-type]
        if all(s in ("completed", "compensated", "dead") for s in statuses.values()):
            return statuses
        await asyncio.sleep(0.05)
    return statuses


@contextlib.asynccontextmanager
async def order_stack(fresh_db: str, kafka_bootstrap: str, topic_prefix: str, *,
                      structured: bool = False) -> AsyncIterator[tuple[FunctionStack, SagaStore]]:
    """The order saga's function stack, set up, and a store to start and read sagas."""
    stack = FunctionStack(fresh_db, kafka_bootstrap, topic_prefix, [OrderSaga],
                          structured=structured)
    await stack.setup()
    store = await SagaStore.open(fresh_db, stack.registry, min_size=1, max_size=2)
    try:
        yield stack, store
    finally:
        await store.close()
        await stack.close()


async def test_the_reply_function_hints_result_waiters_before_it_returns(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    heard: list[str] = []
    listener = await asyncpg.connect(fresh_db, server_settings={
        "application_name": LISTENER_APP_NAME.replace("%", "test")})
    await listener.add_listener(CHANNEL, lambda *args: heard.extend(args[3].split()))
    try:
        async with order_stack(fresh_db, kafka_bootstrap, topic_prefix) as (stack, store):
            ids = [(await store.start_saga("order", order(i))).record.saga_id
                   for i in range(2)]
            statuses = await run_until_settled(stack, store, ids)
        assert set(statuses.values()) == {"completed"}
        for _ in range(100):  # the notifications were sent before the functions returned
            if len(heard) >= len(ids):
                break
            await asyncio.sleep(0.02)
        assert sorted(heard) == sorted(str(i) for i in ids)
    finally:
        await listener.close()


@pytest.mark.parametrize("structured", [False, True], ids=["binary", "structured"])
async def test_sagas_run_end_to_end_as_functions(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, structured: bool
) -> None:
    async with order_stack(fresh_db, kafka_bootstrap, topic_prefix,
                           structured=structured) as (stack, store):
        ids = [(await store.start_saga("order", order(i))).record.saga_id for i in range(4)]
        broke = (await store.start_saga("order", order(9, "broke"))).record.saga_id
        statuses = await run_until_settled(stack, store, [*ids, broke])
        assert statuses == {**dict.fromkeys(ids, "completed"), broke: "compensated"}
        assert all(s < 300 for s in stack.replies.statuses)
        assert all(t.invocations for t in stack.lambdas.values())
        assert all(r == {"batchItemFailures": []} for t in stack.lambdas.values()
                   for r in t.responses)


async def test_a_poison_command_does_not_fail_its_lambda_batch(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        async with order_stack(fresh_db, kafka_bootstrap, topic_prefix) as (stack, store):
            saga = (await store.start_saga("order", order(1))).record.saga_id
            await stack.scheduled_tick()  # the relay publishes the first command
            # A poison record lands in the same partition as the saga's command.
            await producer.send_and_wait(command_topic("payments", topic_prefix),
                                         b"\x00poison", key=str(saga).encode())
            statuses = await run_until_settled(stack, store, [saga])
            assert statuses == {saga: "completed"}
            responses = stack.lambdas["payments"].responses
            assert responses and all(r == {"batchItemFailures": []} for r in responses)
            async with store.pool.acquire() as conn:
                kept = await conn.fetch(
                    "SELECT payload FROM sagaflow_dead_letters WHERE source = $1",
                    "participant:payments")
            assert [bytes(r["payload"]) for r in kept] == [b"\x00poison"]
    finally:
        await producer.stop()


async def test_a_database_outage_asks_the_trigger_to_redeliver_the_whole_batch(
    fresh_db: str, topic_prefix: str
) -> None:
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.runtime.functions import CoordinatorFunctions
    from coordinator.sagas.loading import build_registry
    from tests.integration.functions_support import lambda_event

    down = fresh_db.rsplit("@", 1)[0] + "@127.0.0.1:9/postgres"  # nothing listens on port 9
    fns = CoordinatorFunctions(CoordinatorSettings(dsn=down, topic_prefix=topic_prefix),
                               build_registry([OrderSaga], topic_prefix=topic_prefix))
    records = [Rec("r", p, o, b"k", b"{}", []) for p, o in ((0, 5), (0, 6), (1, 9))]
    handler = fns.lambda_replies()
    response = await asyncio.to_thread(handler, lambda_event(records, msk=True), None)
    assert response == {"batchItemFailures": [
        {"itemIdentifier": {"partition": "r-0", "offset": 5}},
        {"itemIdentifier": {"partition": "r-1", "offset": 9}},
    ]}


async def test_signals_arrive_through_a_lambda_kafka_event(
    fresh_db: str, topic_prefix: str
) -> None:
    """Another service's outbox signals a waiting saga; the signals topic triggers a function.
    A resend is applied once, a poison record is kept as a dead letter, the batch succeeds."""

    from coordinator.config.settings import CoordinatorSettings
    from coordinator.runtime.functions import CoordinatorFunctions
    from coordinator.runtime.signal_wire import SignalEnvelope, encode_signal, signal_topic
    from coordinator.sagas.registry import SagaRegistry
    from participant_sdk.functions import FunctionLoop
    from tests.integration.functions_support import lambda_event
    from tests.integration.test_signals_kafka import AwaitApproval
    from tests.integration.test_store_support import migrated

    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitApproval])
    fns = CoordinatorFunctions(CoordinatorSettings(dsn=fresh_db, topic_prefix=topic_prefix),
                               registry)
    loop = FunctionLoop()  # the function's own loop, as a warm instance keeps it
    store = await SagaStore.open(fresh_db, registry, max_size=2)
    try:
        saga_id = (await store.start_saga("await_approval", {})).record.saga_id
        good = encode_signal(SignalEnvelope(saga_id=saga_id, name="approved", signal_id="a-1",
                                            payload={"approver": "ada"}, sender="hr"))
        topic = signal_topic(topic_prefix)
        key = str(saga_id).encode()
        records = [Rec(topic, 0, 1, key, b"not json", []), Rec(topic, 0, 2, key, good, []),
                   Rec(topic, 0, 3, key, good, [])]
        response = await asyncio.to_thread(fns.lambda_signals(loop),
                                           lambda_event(records, msk=False), None)
        assert response == {"batchItemFailures": []}
        record = await store.get_saga(saga_id)
        assert record is not None and record.status == "completed"
        assert record.state.steps["approval"].result == {"approver": "ada"}
        history = await store.get_history(saga_id)
        assert [h.actor for h in history if h.event.type == "signal_received"] == ["kafka:hr"]
        async with store.pool.acquire() as conn:
            kept = await conn.fetch("SELECT reason FROM sagaflow_dead_letters "
                                    "WHERE source = 'coordinator:signals'")
        assert [r["reason"].split(":")[0] for r in kept] == ["undecodable SignalEnvelope"]
    finally:
        await store.close()
        await asyncio.to_thread(loop.close, fns.close())
