# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""The serverless entry points against real Postgres: one call per batch, one per tick."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from coordinator.runtime.functions import CoordinatorFunctions, FunctionSettings
from coordinator.runtime.functions.handlers import fire_due_timers, handle_reply_batch
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import ApplyOutcome, SagaStore
from participant_sdk.dead_letters import list_dead_letters
from participant_sdk.protocol import ErrorKind, Outcome, encode
from participant_sdk.records import InboundRecord
from tests.integration.test_store_support import (
    ManualClock,
    ShipOrder,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
    verify_all,
)

pytestmark = pytest.mark.integration


@dataclass
class Record:
    value: bytes | None
    offset: int
    topic: str = "p.replies"
    partition: int = 0
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


async def test_a_batch_applies_replies_and_dead_letters_the_rest(store: SagaStore) -> None:
    ids = [(await store.start_saga("tcc_order", {"order_id": f"o{i}", "amount": 1}))
           .record.saga_id for i in range(3)]
    commands = await outbox_commands(store)
    replies = [encode(reply_to(c, Outcome.OK)) for c in commands]
    orphan = reply_to(commands[0], Outcome.OK).model_copy(
        update={"saga_id": commands[0].message_id})
    records = [Record(v, i) for i, v in enumerate(replies)]
    records += [
        Record(replies[0], 3),  # duplicate
        Record(b"{not json", 4, headers=[("x", b"\xff")]),
        Record(None, 5),
        Record(encode(orphan), 6),
    ]
    result = await handle_reply_batch(store, records)
    assert (result.applied, result.ignored, result.dead_lettered) == (3, 1, 3)
    assert result.results[-1].outcome is ApplyOutcome.NOT_FOUND
    # Redelivery of the same batch (crash before the offset commit) changes nothing new.
    again = await handle_reply_batch(store, records)
    assert (again.applied, again.ignored) == (0, 4)
    async with store.pool.acquire() as conn:
        letters = await list_dead_letters(conn, source="coordinator:replies")
    assert sorted(letter.offset for letter in letters) == [4, 5, 6]
    assert {c.step for c in await outbox_commands(store)} == {"hold"}
    await verify_all(store, ids)


async def test_a_function_introspects_no_types(
        store: SagaStore, fresh_db: str, introspected: list[set[int]]) -> None:
    """The function's pool is given every array codec the store binds when it connects, so
    its first reply batch (locks, node rows, history, outbox, timers) introspects nothing."""
    ids = [(await store.start_saga("tcc_order", {"order_id": f"o{i}", "amount": 1}))
           .record.saga_id for i in range(2)]
    commands = await outbox_commands(store)
    introspected.clear()  # the fixture's store connected first
    fns = CoordinatorFunctions(FunctionSettings(dsn=fresh_db, pool_max_size=1), store.registry)
    try:
        records = [InboundRecord("p.replies", 0, i, None, encode(reply_to(c, Outcome.OK)), [])
                   for i, c in enumerate(commands)]
        assert await fns.handle_replies(records) == []
    finally:
        await fns.close()
    assert introspected == []
    await verify_all(store, ids)
    assert len(await outbox_commands(store)) == len(commands)  # the replies' next commands


async def test_a_tick_fires_due_timers(store: SagaStore, clock: ManualClock) -> None:
    saga_id = (await store.start_saga("tcc_order", {"order_id": "t", "amount": 1})).record.saga_id
    (first,) = await outbox_commands(store)
    failed = reply_to(first, (Outcome.FAILED, ErrorKind.TRANSIENT))
    await handle_reply_batch(store, [Record(encode(failed), 0)])
    assert await fire_due_timers(store) == 0
    assert await fire_due_timers(store, now=clock.now + timedelta(seconds=1)) == 1
    (retry,) = await outbox_commands(store)
    assert (retry.step, retry.attempt) == ("reserve", 2)
    await verify_all(store, [saga_id])


async def test_a_poison_reply_is_isolated_and_dead_lettered(store: SagaStore) -> None:
    good = (await store.start_saga("tcc_order", {"order_id": "g", "amount": 1})).record.saga_id
    bad = (await store.start_saga("ship_order", {"order_id": "b", "amount": 1})).record.saga_id
    commands = {c.saga_id: c for c in await outbox_commands(store)}
    # The ship_order definition now names a topic Kafka would refuse: its next command cannot
    # be enqueued, so applying its reply fails for good.
    broken = SagaRegistry(topic_prefix="bad prefix!", sagas=[ShipOrder])

    class Mixed:
        def get(self, name: str, version: int) -> Any:
            source = broken if name == "ship_order" else store.registry
            return source.get(name, version)

        def latest(self, name: str) -> Any:
            return self.get(name, 1)

    mixed = SagaStore(store.pool, Mixed())
    records = [Record(encode(reply_to(commands[i], Outcome.OK)), n)
               for n, i in enumerate((good, bad))]
    result = await handle_reply_batch(mixed, records)
    assert [r.outcome for r in result.results] == [ApplyOutcome.APPLIED, ApplyOutcome.REJECTED]
    async with store.pool.acquire() as conn:
        (letter,) = await list_dead_letters(conn, source="coordinator:replies")
    assert letter.offset == 1 and "InvalidMessageError" in letter.reason
    assert [c.step for c in await outbox_commands(store)] == ["hold"]
