"""One behaviour suite for long-running sagas, run through the time-skipping kit
(``coordinator.testing``) and through the real stack (worker, relay, Kafka, SDK participants
with their barrier in Postgres), so the two cannot drift apart. Each case checks the status
and the participants' own effects ledger."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Protocol

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.language.nodes import Choice, Sleep, WaitForSignal
from coordinator.language.saga import RetryPolicy, Saga, SagaStep
from coordinator.store import SagaStore
from coordinator.testing import SagaRun, SagaTestEnv
from participant_sdk import (
    HandlerContext,
    Participant,
    on_action,
    on_compensate,
)
from participant_sdk.testing import MemoryTransaction
from tests.integration.inprocess_stack import inprocess_stack

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))
SECOND = timedelta(seconds=1)


class Empty(BaseModel):
    pass


class Confirm(BaseModel):
    by: str


def _book(name: str) -> SagaStep:
    return SagaStep(name, "desk", "book", compensable=True, retry=QUICK)


class SleepThenSignal(Saga):
    name = "sleep_then_signal"
    input_model = Empty
    steps = (_book("open"), Sleep("grace", SECOND),
             WaitForSignal("confirm", "confirmed", payload=Confirm, timeout=timedelta(seconds=30)),
             _book("close"))


class TimeoutGoesOn(Saga):
    name = "timeout_goes_on"
    input_model = Empty
    steps = (WaitForSignal("confirm", "confirmed", timeout=SECOND, on_timeout="continue"),
             Choice("late", ((lambda ctx: ctx.results["confirm"] == {"timed_out": True},
                              _book("remind")),), otherwise=_book("ship")))


class TimeoutRollsBack(Saga):
    name = "timeout_rolls_back"
    input_model = Empty
    steps = (_book("open"), WaitForSignal("confirm", "confirmed", timeout=SECOND))


SAGAS: list[type[Saga]] = [SleepThenSignal, TimeoutGoesOn, TimeoutRollsBack]


async def _effect(ctx: HandlerContext, kind: str) -> None:
    if isinstance(ctx.conn, MemoryTransaction):  # the kit's harness
        await ctx.conn.insert("effects", {"saga_id": ctx.saga_id, "step": ctx.step,
                                          "kind": kind})
    else:
        await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                               ctx.saga_id, ctx.step, kind)


class Desk(Participant):
    name = "desk"

    @on_action("book")
    async def book(self, ctx: HandlerContext, body: Empty) -> dict[str, str]:
        await _effect(ctx, "booked")
        return {"booked": ctx.step}

    @on_compensate("book")
    async def unbook(self, ctx: HandlerContext, body: Empty) -> None:
        await _effect(ctx, "unbooked")


class Driver(Protocol):
    async def start(self, saga: type[Saga]) -> uuid.UUID: ...
    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any]) -> None: ...
    async def finish(self, saga_id: uuid.UUID) -> str: ...
    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]: ...


class KitDriver:
    def __init__(self) -> None:
        self.desk = Desk()
        self.runs: dict[uuid.UUID, SagaRun] = {}
        self.envs = {cls.name: SagaTestEnv(cls, [self.desk]) for cls in SAGAS}

    async def start(self, saga: type[Saga]) -> uuid.UUID:
        run = await self.envs[saga.name].start({})
        self.runs[run.state.saga_id] = run
        return run.state.saga_id

    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any]) -> None:
        await self.runs[saga_id].signal(name, payload)

    async def finish(self, saga_id: uuid.UUID) -> str:
        return await self.runs[saga_id].run_to_end()

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]:
        rows = [r for env in self.envs.values() for r in env.harnesses["desk"].tables.get(
            "effects", []) if r["saga_id"] == saga_id]
        return [(r["step"], r["kind"]) for r in rows]


class StackDriver:
    def __init__(self, store: SagaStore, ledger: asyncpg.Connection) -> None:
        self.store, self.ledger = store, ledger

    async def start(self, saga: type[Saga]) -> uuid.UUID:
        return (await self.store.start_saga(saga.name, {})).record.saga_id

    async def signal(self, saga_id: uuid.UUID, name: str, payload: dict[str, Any]) -> None:
        await self.store.signal(saga_id, name, payload)

    async def finish(self, saga_id: uuid.UUID) -> str:
        deadline = time.monotonic() + 30
        while True:
            record = await self.store.get_saga(saga_id)
            assert record is not None
            if record.status not in ("running", "compensating", "scheduled"):
                return record.status
            assert time.monotonic() < deadline, record.status
            await asyncio.sleep(0.05)

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, str]]:
        rows = await self.ledger.fetch("SELECT step, kind FROM effects WHERE saga_id = $1 "
                                       "ORDER BY id", saga_id)
        return [(r["step"], r["kind"]) for r in rows]


@pytest.fixture(params=["kit", "stack"])
async def driver(request: pytest.FixtureRequest, fresh_db: str, pg_url: str,
                 kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Driver]:
    if request.param == "kit":
        yield KitDriver()
        return
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix, sagas=SAGAS,
                               participants=[Desk()]) as (store, ledger):
        yield StackDriver(store, ledger)

async def test_a_signal_sent_during_the_sleep_is_kept_and_taken_after_it(driver: Driver
                                                                         ) -> None:
    saga_id = await driver.start(SleepThenSignal)
    await driver.signal(saga_id, "confirmed", {"by": "ada"})  # before the wait is reached
    assert await driver.finish(saga_id) == "completed"
    assert await driver.effects(saga_id) == [("open", "booked"), ("close", "booked")]


async def test_a_timeout_that_goes_on_takes_the_declared_path(driver: Driver) -> None:
    saga_id = await driver.start(TimeoutGoesOn)
    assert await driver.finish(saga_id) == "completed"
    assert await driver.effects(saga_id) == [("remind", "booked")]


async def test_a_timeout_that_fails_rolls_back(driver: Driver) -> None:
    saga_id = await driver.start(TimeoutRollsBack)
    assert await driver.finish(saga_id) == "compensated"
    assert await driver.effects(saga_id) == [("open", "booked"), ("open", "unbooked")]
