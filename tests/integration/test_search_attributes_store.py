"""Search attribute values in the store: written at the start, rewritten when a result they
read comes in or is undone, in the transaction of that change, by the locking and the
one-statement paths alike (issue 37)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import PendingEvent, SagaStore
from coordinator.store.search_attributes import attributes_of
from participant_sdk.protocol import CommandEnvelope, ErrorInfo, ErrorKind, Outcome, make_reply
from tests.integration.search_support import Shop
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "customer_id": "c-42", "amount_cents": 1250, "vip": True,
         "tags": ["gift", "eu", "gift"], "placed_at": "2026-05-01T12:00:00+02:00"}


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Shop])
    async with await SagaStore.open(fresh_db, registry, max_size=4, clock=ManualClock()) as s:
        yield s


def _ok(command: CommandEnvelope, result: dict[str, Any] | None = None) -> ReplyReceived:
    return ReplyReceived(reply=make_reply(command, Outcome.OK, result=result or {}))


def _rejected(command: CommandEnvelope) -> ReplyReceived:
    return ReplyReceived(reply=make_reply(command, Outcome.REJECTED, error=ErrorInfo(
        kind=ErrorKind.BUSINESS, message="no")))


async def _values(store: SagaStore, saga_id: UUID) -> dict[str, Any]:
    async with store.pool.acquire() as conn:
        return await attributes_of(conn, saga_id)


async def _same_transaction(store: SagaStore, saga_id: UUID, name: str) -> bool:
    """Whether the attribute's row was written by the transaction that last wrote the saga
    row (same xmin)."""
    async with store.pool.acquire() as conn:
        saga = await conn.fetchval("SELECT xmin::text FROM sagas WHERE id = $1", saga_id)
        rows = await conn.fetch("SELECT xmin::text AS x FROM saga_search_attributes "
                                "WHERE saga_id = $1 AND name = $2", saga_id, name)
    return bool(rows) and all(r["x"] == saga for r in rows)


async def test_values_are_written_at_the_start_then_when_a_result_they_read_changes(
    store: SagaStore,
) -> None:
    saga_id = (await store.start_saga("shop", INPUT)).record.saga_id
    assert await _values(store, saga_id) == {
        "customer_id": "c-42", "amount": 1250, "euros": 12.5, "vip": True,
        "tags": ["eu", "gift"],  # a set: sorted, each once
        "placed_at": datetime(2026, 5, 1, 10, tzinfo=UTC)}
    assert await _same_transaction(store, saga_id, "customer_id")
    (pay,) = await outbox_commands(store)
    await store.apply(saga_id, _ok(pay))  # no result read by an attribute: nothing written
    assert "carrier" not in await _values(store, saga_id)
    (ship,) = await outbox_commands(store)
    await store.apply(saga_id, _ok(ship, {"carrier": "ups"}))
    values = await _values(store, saga_id)
    assert values["carrier"] == "ups" and values["customer_id"] == "c-42"
    assert await _same_transaction(store, saga_id, "carrier")
    # The last step fails: the shipment is compensated, its result undone, the carrier gone.
    (notify,) = await outbox_commands(store)
    await store.apply(saga_id, _rejected(notify))
    while commands := await outbox_commands(store):
        for command in commands:
            await store.apply(saga_id, _ok(command))
    record = await store.get_saga(saga_id)
    assert record is not None and record.status == "compensated"
    assert "carrier" not in await _values(store, saga_id)
    assert (await _values(store, saga_id))["amount"] == 1250


async def test_the_one_statement_path_hands_a_change_of_values_to_the_locking_one(
    store: SagaStore,
) -> None:
    saga_id = (await store.start_saga("shop", INPUT)).record.saga_id
    (pay,) = await outbox_commands(store)
    [paid] = await store.apply_many([PendingEvent(saga_id, _ok(pay))])
    (ship,) = await outbox_commands(store)
    [shipped] = await store.apply_many([PendingEvent(saga_id, _ok(ship, {"carrier": "dhl"}))])
    assert paid.seq == 2 and shipped.seq == 3
    assert (await _values(store, saga_id))["carrier"] == "dhl"
    assert await _same_transaction(store, saga_id, "carrier")


async def test_a_failing_or_mistyped_attribute_is_left_unset_and_the_saga_goes_on(
    store: SagaStore,
) -> None:
    saga_id = (await store.start_saga("shop", {**INPUT, "tags": []})).record.saga_id
    values = await _values(store, saga_id)
    assert "tags" not in values and "carrier" not in values  # empty list; no result yet
    (pay,) = await outbox_commands(store)
    await store.apply(saga_id, _ok(pay))
    (ship,) = await outbox_commands(store)
    await store.apply(saga_id, _ok(ship, {"carrier": 7}))  # not a text: unset, logged
    assert "carrier" not in await _values(store, saga_id)
    record = await store.get_saga(saga_id)
    assert record is not None and record.state.steps["notify"].phase.value == "trying"
