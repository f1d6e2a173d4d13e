"""An update on the whole stack (real Postgres and Kafka, a running worker, the relay and an
SDK participant): a client updates a saga waiting on a signal and gets the result back
synchronously, the worker then carries the saga on with the updated data, a rejection and a
busy saga's timeout reach the client as their own errors, and the answer is fetched by id."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest
from pydantic import BaseModel

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.client import SagaApiError, SagaClient, UpdateRejected, UpdateTimedOut
from coordinator.language import Update
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import RetryPolicy, Saga, SagaStep
from participant_sdk import HandlerContext, Participant, on_action, on_compensate
from tests.integration.inprocess_stack import inprocess_stack
from tests.integration.test_api_support import OPERATOR, TOKENS

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=3, initial_backoff=timedelta(milliseconds=50))


class Order(BaseModel):
    order_id: str
    address: str


class AddressChange(BaseModel):
    address: str


class Moved(BaseModel):
    address: str
    previous: str


class Approval(BaseModel):
    by: str


def _address(ctx: Any) -> str:
    latest = ctx.updates.get("change_address")
    return str(latest["address"] if latest else ctx.input.address)


class ShipOrder(Saga):
    name = "stack_ship_order"
    input_model = Order
    steps = (
        SagaStep("pack", "warehouse", "pack", compensable=True, retry=QUICK),
        WaitForSignal("approve", "approved", payload=Approval, timeout=timedelta(minutes=5)),
        SagaStep("ship", "warehouse", "ship", compensable=True, retry=QUICK,
                 payload=lambda ctx: {"address": _address(ctx)}),
    )
    updates = (
        Update("change_address", model=AddressChange,
               validate=lambda ctx, u: ("ship" not in ctx.results and bool(u.address.strip()))
               or "the address cannot change now",
               apply=lambda ctx, u: Moved(address=u.address, previous=_address(ctx))),
        Update("approve", model=Approval, signal="approved",
               validate=lambda ctx, u: u.by != "mallory" or "mallory may not approve",
               apply=lambda ctx, u: {"by": u.by}),
    )


class Warehouse(Participant):
    name = "warehouse"

    @on_action("pack")
    async def pack(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "packed", "")

    @on_compensate("pack")
    async def unpack(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "unpacked", "")

    @on_action("ship")
    async def ship(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "shipped", body["address"])

    @on_compensate("ship")
    async def unship(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "unshipped", "")

    @staticmethod
    async def _effect(ctx: HandlerContext, kind: str, detail: str) -> None:
        await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                               ctx.saga_id, ctx.step, f"{kind}:{detail}" if detail else kind)


@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaClient, asyncpg.Connection]]:
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix,
                               sagas=[ShipOrder], participants=[Warehouse()]) as (store, ledger):
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        async with app.router.lifespan_context(app), SagaClient(
                "http://api", token=OPERATOR, transport=httpx.ASGITransport(app=app)) as client:
            yield client, ledger


async def _waiting(client: SagaClient, saga_id: UUID) -> None:
    deadline = time.monotonic() + 30
    while True:
        steps = {s["key"]: s["phase"] for s in (await client.get(saga_id))["steps"]}
        if steps.get("approve") == "waiting":
            return
        assert time.monotonic() < deadline, steps
        await asyncio.sleep(0.05)


async def test_a_client_updates_a_waiting_saga_and_gets_the_result_synchronously(
    stack: tuple[SagaClient, asyncpg.Connection],
) -> None:
    client, ledger = stack
    saga_id = await client.start(ShipOrder, Order(order_id="o-1", address="1 Old Road"))
    await _waiting(client, saga_id)  # the worker applied pack's reply from Kafka

    moved = await client.update(saga_id, "change_address", AddressChange(address="2 New St"),
                                update_id="addr-1", model=Moved)
    assert moved == Moved(address="2 New St", previous="1 Old Road")
    again = await client.update(saga_id, "change_address", {"address": "ignored"},
                                update_id="addr-1")
    assert again == {"address": "2 New St", "previous": "1 Old Road"}  # stored, not re-applied
    with pytest.raises(UpdateRejected) as rejected:
        await client.update(saga_id, "approve", Approval(by="mallory"), update_id="ap-0")
    assert rejected.value.reason == "mallory may not approve"
    with pytest.raises(SagaApiError) as bad:
        await client.update(saga_id, "approve", {"by": 7})
    assert (bad.value.status, bad.value.code) == (422, "invalid_update_payload")

    assert await client.update(saga_id, "approve", Approval(by="ada"), update_id="ap-1") == {
        "by": "ada"}
    outcome = await client.result(saga_id, wait=timedelta(seconds=30))
    assert outcome["status"] == "completed"
    assert outcome["results"]["approve"] == {"by": "ada"}
    rows = await ledger.fetch("SELECT step, kind FROM effects WHERE saga_id = $1 ORDER BY id",
                              saga_id)
    assert [(r["step"], r["kind"]) for r in rows] == [("pack", "packed"),
                                                      ("ship", "shipped:2 New St")]
    answer = await client.update_answer(saga_id, "change_address", "addr-1")
    assert (answer["outcome"], answer["result"]["address"]) == ("accepted", "2 New St")
    history = (await client._call("GET", f"/sagas/{saga_id}/history"))["entries"]
    assert [e["event"]["update_id"] for e in history
            if e["event"]["type"] == "update_applied"] == ["addr-1", "ap-1"]


async def test_a_busy_saga_times_the_client_out_and_the_same_id_applies_later(
    stack: tuple[SagaClient, asyncpg.Connection], fresh_db: str,
) -> None:
    client, _ = stack
    saga_id = await client.start(ShipOrder, Order(order_id="o-2", address="1 Old Road"))
    await _waiting(client, saga_id)
    holder = await asyncpg.connect(fresh_db)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM sagas WHERE id = $1 FOR UPDATE", saga_id)
            with pytest.raises(UpdateTimedOut) as late:
                await client.update(saga_id, "change_address", {"address": "9 Late Lane"},
                                    wait=timedelta(milliseconds=300))
    finally:
        await holder.close()
    assert (late.value.status, late.value.code) == (504, "update_timed_out")
    with pytest.raises(SagaApiError) as missing:
        await client.update_answer(saga_id, "change_address", late.value.update_id)
    assert missing.value.code == "update_not_found"  # nothing was applied
    moved = await client.update(saga_id, "change_address", {"address": "9 Late Lane"},
                                update_id=late.value.update_id)
    assert moved["address"] == "9 Late Lane"
