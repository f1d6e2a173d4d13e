"""Every node kind end to end: worker, relay, Kafka and SDK participants with their barrier.

One saga class uses them all: a TCC hold, a for-each over order lines (2 at a time), a race
between two carriers (the loser's booking undone), a parallel pair of notifications and a
choice. Participants keep an effects ledger in their own database, so the test checks what
really happened, not what the coordinator believes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.language.nodes import ChildSaga, Choice, ForEach, Parallel, Race
from coordinator.language.saga import RetryPolicy, Saga, SagaStep, TccStep
from coordinator.store import SagaStore
from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
)
from tests.integration.inprocess_stack import inprocess_stack
from tests.integration.test_store_support import verify_all

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))


class Line(BaseModel):
    sku: str
    qty: int
    reject: bool = False


class OrderInput(BaseModel):
    lines: list[Line]
    gift: bool = False
    slow_carrier: str = "a"


def _book(ref: str) -> Any:
    return lambda ctx: {"ref": ref, "delay": 0.6 if ctx.input.slow_carrier == ref else 0.0}


class TreeOrder(Saga):
    name = "tree_order"
    input_model = OrderInput
    steps = (
        TccStep("hold", "ledger", "hold", retry=QUICK, payload=lambda ctx: {"amount": 10}),
        ForEach("lines", items=lambda ctx: ctx.input.lines, max_concurrency=2, max_items=10,
                body=(TccStep("reserve", "ledger", "hold", retry=QUICK,
                              payload=lambda ctx: {"amount": ctx.item["qty"],
                                                   "reject": ctx.item["reject"]}),)),
        Race("quote", (SagaStep("carrier_a", "carrier_a", "book", compensable=True,
                                retry=QUICK, payload=_book("a")),
                       SagaStep("carrier_b", "carrier_b", "book", compensable=True,
                                retry=QUICK, payload=_book("b")))),
        Parallel("notify", (SagaStep("email", "jobs", "book", compensable=True, retry=QUICK,
                                     payload=lambda ctx: {"ref": "email"}),
                            SagaStep("sms", "jobs", "book", compensable=True, retry=QUICK,
                                     payload=lambda ctx: {"ref": "sms"}))),
        Choice("gift", ((lambda ctx: ctx.input.gift,
                         SagaStep("wrap", "jobs", "book", compensable=True, retry=QUICK,
                                  payload=lambda ctx: {"ref": "wrap", "reject": True})),)),
    )


class ShipInput(BaseModel):
    ref: str
    reject: bool = False


class ShipChild(Saga):
    """Run by :class:`ChildOrder` as a child saga: a TCC hold and a booking of its own."""

    name = "ship_child"
    input_model = ShipInput
    steps = (
        TccStep("crate", "ledger", "hold", retry=QUICK, payload=lambda ctx: {"amount": 1}),
        SagaStep("truck", "jobs", "book", compensable=True, retry=QUICK,
                 payload=lambda ctx: {"ref": ctx.input.ref, "reject": ctx.input.reject}),
    )


class ChildInput(BaseModel):
    reject_child: bool = False
    reject_after: bool = False


class ChildOrder(Saga):
    name = "child_order"
    input_model = ChildInput
    steps = (
        TccStep("hold", "ledger", "hold", retry=QUICK, payload=lambda ctx: {"amount": 5}),
        ChildSaga("ship", ShipChild, deadline=timedelta(seconds=30),
                  input=lambda ctx: {"ref": "ship", "reject": ctx.input.reject_child}),
        SagaStep("invoice", "jobs", "book", compensable=True, retry=QUICK,
                 payload=lambda ctx: {"ref": "invoice", "reject": ctx.input.reject_after}),
    )


class Hold(BaseModel):
    amount: int
    reject: bool = False


class Book(BaseModel):
    ref: str
    delay: float = 0.0
    reject: bool = False


async def _effect(ctx: HandlerContext, kind: str) -> None:
    await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                           ctx.saga_id, ctx.step, kind)


class Ledger(Participant):
    name = "ledger"

    @on_try("hold")
    async def hold(self, ctx: HandlerContext, body: Hold) -> dict[str, int]:
        if body.reject:
            raise BusinessRejection("out of stock")
        await _effect(ctx, "held")
        return {"held": body.amount}

    @on_confirm("hold")
    async def confirm(self, ctx: HandlerContext, body: Hold) -> None:
        await _effect(ctx, "confirmed")

    @on_cancel("hold")
    async def cancel(self, ctx: HandlerContext, body: Hold) -> None:
        await _effect(ctx, "released")


class Jobs(Participant):
    name = "jobs"

    @on_action("book")
    async def book(self, ctx: HandlerContext, body: Book) -> dict[str, str]:
        await asyncio.sleep(body.delay)
        if body.reject:
            raise BusinessRejection(f"{body.ref} refused")
        await _effect(ctx, "booked")
        return {"booked": body.ref}

    @on_compensate("book")
    async def unbook(self, ctx: HandlerContext, body: Book) -> None:
        await _effect(ctx, "unbooked")


# Two carrier services: one saga's commands to one participant run in order, so a race is
# between participants (as between two real carriers).
class CarrierA(Jobs):
    name = "carrier_a"


class CarrierB(Jobs):
    name = "carrier_b"


@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    """The coordinator's database and, separately, the participants' own."""
    async with inprocess_stack(
            fresh_db, pg_url, kafka_bootstrap, topic_prefix,
            sagas=[TreeOrder, ChildOrder, ShipChild],
            participants=[Ledger(), Jobs(), CarrierA(), CarrierB()], partitions=2,
            lanes=4) as running:
        yield running

async def _finished(store: SagaStore, saga_id: uuid.UUID, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while True:
        record = await store.get_saga(saga_id)
        if record is not None and record.status not in ("running", "compensating"):
            return record.status
        assert time.monotonic() < deadline, record.status if record else None
        await asyncio.sleep(0.1)


async def _ledger(effects: asyncpg.Connection, saga_id: uuid.UUID) -> dict[str, list[str]]:
    rows = await effects.fetch("SELECT step, kind FROM effects WHERE saga_id = $1 ORDER BY id",
                               saga_id)
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(row["step"], []).append(row["kind"])
    return out


LINES = [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": 3}]


async def test_every_node_kind_runs_to_completion_and_the_race_loser_is_undone(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("tree_order", {"lines": LINES, "slow_carrier": "a"})
    saga_id = started.record.saga_id
    assert await _finished(store, saga_id) == "completed"
    # The saga may complete while the slow loser is still booking: wait out its delay, so a
    # booking that nobody undoes would be seen.
    await asyncio.sleep(1.0)
    ledger = await _ledger(effects, saga_id)
    for key in ("hold", "lines[0].reserve", "lines[1].reserve", "lines[2].reserve"):
        assert ledger[key] == ["held", "confirmed"], (key, ledger)
    assert ledger["carrier_b"] == ["booked"]
    # The slow carrier lost: its booking was refused by the barrier (its compensation came
    # first) or made and then undone; either way no booking stays.
    assert ledger.get("carrier_a", []) in ([], ["booked", "unbooked"]), ledger
    assert ledger["email"] == ["booked"] and ledger["sms"] == ["booked"]
    assert "wrap" not in ledger  # the choice took no branch
    record = await store.get_saga(saga_id)
    assert record is not None
    assert record.state.steps["quote"].winners == ["carrier_b"]
    assert record.state.steps["gift"].phase.value == "skipped"
    await verify_all(store, [saga_id])


async def test_a_failing_branch_rolls_back_every_node_kind(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, effects = stack
    started = await store.start_saga("tree_order", {"lines": LINES, "gift": True,
                                                    "slow_carrier": "b"})
    saga_id = started.record.saga_id
    assert await _finished(store, saga_id) == "compensated"  # wrap is refused
    ledger = await _ledger(effects, saga_id)
    for key in ("hold", "lines[0].reserve", "lines[1].reserve", "lines[2].reserve"):
        assert ledger[key] == ["held", "released"], (key, ledger)
    for key in ("carrier_a", "email", "sms"):
        assert ledger[key] == ["booked", "unbooked"], (key, ledger)
    assert ledger.get("carrier_b", []) in ([], ["booked", "unbooked"]), ledger
    assert "wrap" not in ledger
    await verify_all(store, [saga_id])
    # A line rejected inside the for-each rolls back the lines already held.
    bad = [*LINES[:2], {"sku": "x", "qty": 1, "reject": True}]
    started = await store.start_saga("tree_order", {"lines": bad})
    saga_id = started.record.saga_id
    assert await _finished(store, saga_id) == "compensated"
    ledger = await _ledger(effects, saga_id)
    assert ledger["hold"] == ["held", "released"]
    assert ledger["lines[0].reserve"] == ["held", "released"]
    assert ledger["lines[1].reserve"] == ["held", "released"]
    assert "lines[2].reserve" not in ledger and "carrier_a" not in ledger
    await verify_all(store, [saga_id])


async def _child_of(store: SagaStore, parent: uuid.UUID) -> uuid.UUID:
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id FROM sagas WHERE parent_id = $1", parent)
    assert len(rows) == 1, rows
    child: uuid.UUID = rows[0]["id"]
    return child


@pytest.mark.parametrize(("case", "parent_ends", "child_ends", "crate", "truck"), [
    ("ok", "completed", "completed", ["held", "confirmed"], ["booked"]),
    # the parent fails after the child prepared: the child runs its own rollback
    ("reject_after", "compensated", "compensated", ["held", "released"], ["booked", "unbooked"]),
    # the child fails: it rolls itself back, and its node fails the parent
    ("reject_child", "compensated", "compensated", ["held", "released"], []),
])
async def test_a_child_saga_confirms_or_rolls_back_with_its_parent(
    stack: tuple[SagaStore, asyncpg.Connection], case: str, parent_ends: str,
    child_ends: str, crate: list[str], truck: list[str],
) -> None:
    store, effects = stack
    started = await store.start_saga("child_order", {case: True} if case != "ok" else {})
    parent = started.record.saga_id
    assert await _finished(store, parent) == parent_ends
    child = await _child_of(store, parent)
    assert await _finished(store, child) == child_ends
    ledger = await _ledger(effects, child)
    assert ledger["crate"] == crate, ledger
    assert ledger.get("truck", []) == truck, ledger
    assert (await _ledger(effects, parent))["hold"] == (
        ["held", "confirmed"] if case == "ok" else ["held", "released"])
    await verify_all(store, [parent, child])
