"""Shared pieces of the store, worker and serverless tests: sagas, a registry, fixtures.

(Named ``test_store_*`` to sit inside the store's test files; it holds no tests itself.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from pydantic import BaseModel, Field

from coordinator.language.policies import RetryPolicy
from coordinator.language.saga import Saga, SagaStep, TccStep
from coordinator.migrations import migrate
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    decode_command,
    make_reply,
)

FAST = RetryPolicy(
    max_attempts=3,
    initial_backoff=timedelta(milliseconds=100),
    max_backoff=timedelta(milliseconds=200),
    jitter=0.0,
)
FAST_ROLLBACK = RetryPolicy(
    max_attempts=5,
    initial_backoff=timedelta(milliseconds=100),
    max_backoff=timedelta(milliseconds=200),
    jitter=0.0,
)
DEADLINE = timedelta(seconds=20)


class OrderInput(BaseModel):
    order_id: str = Field(min_length=1)
    amount: int = Field(ge=0)


def _tcc(name: str, participant: str) -> TccStep:
    return TccStep(
        name, participant=participant, action=name, retry=FAST, confirm_retry=FAST_ROLLBACK,
        cancel_retry=FAST_ROLLBACK, deadline=DEADLINE, rollback_deadline=DEADLINE,
    )


class TccOrder(Saga):
    """Two TCC steps: reserve funds, hold stock."""

    name = "tcc_order"
    version = 1
    input_model = OrderInput
    steps = (_tcc("reserve", "payments"), _tcc("hold", "inventory"))


class ShipOrder(Saga):
    """Saga steps with compensations: charge, then ship."""

    name = "ship_order"
    version = 1
    input_model = OrderInput
    steps = (
        SagaStep("charge", participant="payments", action="charge", compensable=True,
                 retry=FAST, compensation_retry=FAST_ROLLBACK, deadline=DEADLINE,
                 rollback_deadline=DEADLINE),
        SagaStep("ship", participant="shipping", action="ship", compensable=True,
                 retry=FAST, compensation_retry=FAST_ROLLBACK, deadline=DEADLINE,
                 rollback_deadline=DEADLINE),
    )


def make_registry(prefix: str) -> SagaRegistry:
    return SagaRegistry(topic_prefix=prefix, sagas=[TccOrder, ShipOrder])


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now


async def migrated(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str, clock: ManualClock) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = make_registry(topic_prefix)
    async with await SagaStore.open(fresh_db, registry, max_size=4, clock=clock) as s:
        yield s


async def outbox_commands(store: SagaStore, *, delete: bool = True) -> list[CommandEnvelope]:
    """Commands waiting in the outbox, oldest first (taken out of it with ``delete``)."""
    async with store.pool.acquire() as conn:
        sql = "SELECT id, payload, headers FROM sagaflow_outbox ORDER BY id"
        rows = await conn.fetch(sql)
        if delete and rows:
            await conn.execute("DELETE FROM sagaflow_outbox WHERE id = ANY($1::bigint[])",
                               [r["id"] for r in rows])
    return [decode_command(r["payload"]) for r in rows]


Script = Callable[[CommandEnvelope], Outcome | tuple[Outcome, ErrorKind]]


def reply_to(command: CommandEnvelope, outcome: Outcome | tuple[Outcome, ErrorKind]) -> Any:
    if isinstance(outcome, tuple):
        outcome, kind = outcome
    else:
        kind = ErrorKind.BUSINESS if outcome is Outcome.REJECTED else ErrorKind.TRANSIENT
    if outcome is Outcome.OK:
        return make_reply(command, outcome, result={"by": command.participant})
    return make_reply(command, outcome, error=ErrorInfo(kind=kind, message="scripted"))


async def verify_all(store: SagaStore, saga_ids: Iterable[UUID]) -> None:
    for saga_id in saga_ids:
        result = await store.verify(saga_id)
        assert result.ok, (saga_id, result.differences)
