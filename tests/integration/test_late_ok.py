# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""A late ``ok`` for a dead saga's dead step, on a real store: recorded in the history, and
with ``resume_on_late_ok`` the worker's resumer retries the step by itself (issue 42)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.engine import ReplyReceived, Status
from coordinator.runtime.late_ok import ACTOR, LateOkResumer
from coordinator.store import PendingEvent, SagaStore
from coordinator.store.queries import get_history
from participant_sdk.protocol import CommandEnvelope, Outcome, Phase
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
)

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "amount": 10}


async def _answer(store: SagaStore, command: CommandEnvelope, outcome: Outcome) -> None:
    await store.apply_many([PendingEvent(command.saga_id, ReplyReceived(
        reply=reply_to(command, outcome)))])


async def _dead_at_the_shipping_undo(store: SagaStore) -> CommandEnvelope:
    """ship_order: charged, shipping rejected, its undo rejected: dead at ``ship``."""
    saga = (await store.start_saga("ship_order", INPUT)).record
    (charge,) = await outbox_commands(store)
    await _answer(store, charge, Outcome.OK)
    (ship,) = await outbox_commands(store)
    await _answer(store, ship, Outcome.REJECTED)
    (refund,) = await outbox_commands(store)
    assert refund.phase is Phase.COMPENSATE
    await _answer(store, refund, Outcome.REJECTED)
    record = await store.get_saga(saga.saga_id)
    assert record is not None and record.state.status is Status.DEAD
    assert record.state.rollback_reason is not None and "ship" in record.state.rollback_reason
    return refund


async def test_a_late_ok_is_recorded_and_the_saga_waits_for_a_person(
    store: SagaStore, clock: ManualClock
) -> None:
    refund = await _dead_at_the_shipping_undo(store)
    await _answer(store, refund, Outcome.OK)
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.DEAD
    assert record.state.late_ok is not None and record.state.late_ok["step"] == "ship"
    async with store.pool.acquire() as conn:
        last = (await get_history(conn, refund.saga_id))[-1]
    assert last.ignored is None
    assert "a late ok for the dead step arrived" in " ".join(last.annotation)
    assert await outbox_commands(store) == []  # nothing sent by itself


async def test_with_the_setting_the_worker_retries_by_itself(
    store: SagaStore, clock: ManualClock
) -> None:
    resumer = LateOkResumer(store)
    resumer.start()
    refund = await _dead_at_the_shipping_undo(store)
    await asyncio.sleep(0)
    await resumer.stop()
    dead = await store.get_saga(refund.saga_id)
    assert dead is not None and dead.state.status is Status.DEAD  # only a late ok resumes it
    await _answer(store, refund, Outcome.OK)
    await asyncio.sleep(0)  # the listener's task
    await resumer.stop()
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.COMPENSATING
    assert record.state.repaired is not None and record.state.repaired["actor"] == ACTOR
    assert record.state.dead_reason is None and record.state.late_ok is None
    (again,) = await outbox_commands(store)
    assert (again.step, again.phase) == ("ship", Phase.COMPENSATE)
    await _answer(store, again, Outcome.OK)  # the barrier's stored answer
    (refund_charge,) = await outbox_commands(store)
    assert (refund_charge.step, refund_charge.phase) == ("charge", Phase.COMPENSATE)
    await _answer(store, refund_charge, Outcome.OK)
    record = await store.get_saga(refund.saga_id)
    assert record is not None and record.state.status is Status.COMPENSATED
    assert record.state.reason == record.state.rollback_reason
    assert (await store.verify(refund.saga_id)).ok
