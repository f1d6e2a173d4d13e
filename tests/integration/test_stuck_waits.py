"""Stuck detection knows deliberate waits (real Postgres): a sleeping saga is not stuck until
its timer is overdue; a saga waiting for a signal is stuck only past its declared timeout, or
past ``StuckPolicy.signal_wait`` when it declares none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID

import pytest
from pydantic import BaseModel

from coordinator.engine import ReplyReceived
from coordinator.language.nodes import Sleep, WaitForSignal
from coordinator.language.saga import Saga
from coordinator.observability.settings import StuckPolicy
from coordinator.observability.stuck import list_stuck, stuck_ids
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_signals_api import AwaitPayment
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands, reply_to

pytestmark = pytest.mark.integration

POLICY = StuckPolicy(default=timedelta(minutes=5), signal_wait=timedelta(days=2))


class Nothing(BaseModel):
    pass


class Nap(Saga):
    name = "nap"
    input_model = Nothing
    steps = (Sleep("nap", timedelta(days=30)),)


class Forever(Saga):
    name = "forever"
    input_model = Nothing
    steps = (WaitForSignal("w", "go"),)


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[SagaStore, ManualClock]]:
    await migrated(fresh_db)
    clock = ManualClock()
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Nap, Forever, AwaitPayment])
    async with await SagaStore.open(fresh_db, registry, max_size=2, clock=clock) as s:
        yield s, clock


async def _stuck(store: SagaStore, clock: ManualClock) -> set[UUID]:
    listed = {s.saga_id for s in await list_stuck(store.pool, POLICY, now=clock.now)}
    assert await stuck_ids(store.pool, POLICY, now=clock.now) == listed  # both paths agree
    return listed


async def test_sleeping_and_waiting_sagas_are_stuck_only_past_their_due_time(
    store: tuple[SagaStore, ManualClock],
) -> None:
    s, clock = store
    nap = (await s.start_saga("nap", {})).record.saga_id
    forever = (await s.start_saga("forever", {})).record.saga_id
    paying = (await s.start_saga("await_payment", {"order_id": "o"})).record.saga_id
    [reserve] = await outbox_commands(s)
    await s.apply(paying, ReplyReceived(reply=reply_to(reserve, Outcome.OK)))  # waits 3 days
    clock.advance(timedelta(days=1))
    assert await _stuck(s, clock) == set()  # everyone waits on purpose
    clock.advance(timedelta(days=1, hours=1))  # > signal_wait for the wait with no timeout
    assert await _stuck(s, clock) == {forever}
    [why] = await list_stuck(s.pool, POLICY, now=clock.now)
    assert why.reasons == ("wait_overdue",)
    clock.advance(timedelta(days=1))  # the 3-day timeout passed 5 minutes ago + ...
    assert paying in await _stuck(s, clock)  # ... its timer did not fire: overdue
    assert nap not in await _stuck(s, clock)
    clock.advance(timedelta(days=27, minutes=10))  # the 30-day sleep is overdue too
    assert nap in await _stuck(s, clock)


async def test_a_scheduled_saga_is_stuck_only_once_its_start_is_overdue(
    store: tuple[SagaStore, ManualClock],
) -> None:
    s, clock = store
    later = (await s.start_saga("nap", {}, start_at=clock.now + timedelta(days=3))
             ).record.saga_id
    clock.advance(timedelta(days=2))
    assert await _stuck(s, clock) == set()  # scheduled, on purpose
    clock.advance(timedelta(days=1, minutes=10))  # its start timer did not fire
    assert await _stuck(s, clock) == {later}
    [why] = await list_stuck(s.pool, POLICY, now=clock.now)
    assert why.reasons == ("wait_overdue",)
